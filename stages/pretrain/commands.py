"""The pretrain stage's commands: `europa plan` (will a layout fit, how fast, how long) and `europa launch
jupiter` (render the Slurm job for review, or submit it into the stage's job folder). Light at import:
the planner and launcher load in the handlers."""

from __future__ import annotations

import argparse

from pipeline.commands import add_run_options, resolve_run
from pipeline.errors import UsageError
from pipeline.rundir import RunDir

STAGE = "pretrain"


def add_commands(sub: argparse._SubParsersAction) -> None:
    la = sub.add_parser("launch", help="render (and submit) the pretraining job for JUPITER's Slurm",
                        description="Validate [pretrain] for JUPITER (layout, memory estimate), render the sbatch "
                        "script into <run>/pretrain-launch/ and optionally submit it. See docs/jupiter.md.")
    la.add_argument("target", choices=["jupiter"])
    add_run_options(la)
    g = la.add_mutually_exclusive_group()
    g.add_argument("--dry-run", action="store_true", help="print the script and the plan; write nothing")
    g.add_argument("--submit", action="store_true", help="also submit with sbatch (on a JUPITER login node)")
    la.set_defaults(handler=cmd_launch)

    pl = sub.add_parser("plan", help="estimate per-GPU memory, FLOPs per token, utilisation and days for [pretrain]")
    add_run_options(pl)
    pl.add_argument("--tokens-per-s", type=float, default=None, metavar="N",
                    help="throughput per GPU to plan with (default: EUROPA's 1,300 tokens/s on GH200)")
    pl.add_argument("--json", action="store_true", help="machine-readable output")
    pl.set_defaults(handler=cmd_plan)


def products(rd: RunDir) -> list[str]:
    manifest = rd.manifest(STAGE)
    if manifest is None:
        return []
    ckpt = manifest.statistics.get("checkpoint", {}).get("path")
    return [f"model: {rd.stage_dir(STAGE) / ckpt} (torchtitan DCP checkpoint; tokenizer in {rd.stage_dir('tokenizer')})"]


def cmd_plan(args) -> int:
    from stages.pretrain.planner.report import plan
    from stages.pretrain.planner.throughput import EUROPA_TOKENS_PER_S_PER_GPU

    _, config = resolve_run(args)
    tokenizer = config.stages.get("tokenizer")
    report = plan(config.section(STAGE), getattr(tokenizer, "vocab_size", None),
                  tokens_per_s_per_gpu=args.tokens_per_s or EUROPA_TOKENS_PER_S_PER_GPU)
    print(report.to_json() if args.json else report.text())
    return 0


def cmd_launch(args) -> int:
    """Validate and render into <run>/pretrain-launch/ (--dry-run: print only); --submit: sbatch it from the
    stage's job folder, where `europa stage pretrain` follows it. The run's run.toml is (re)written: the job
    reads it."""
    from pipeline.executor import build_context, statuses
    from pipeline.registry import DEPENDS_ON
    from pipeline.runconfig import save_run_config
    from stages.pretrain.launch.sbatch import render_job
    from stages.pretrain.launch.slurm import require_sbatch
    from stages.pretrain.launch.submit import LAUNCH_DIR, submit_training_job

    rd, config = resolve_run(args)
    run_dir = rd.path
    job = render_job(config, run_dir, run_dir / LAUNCH_DIR, require_account=args.submit)
    if args.dry_run:
        print(job.sbatch)
        print(job.report())
        return 0
    if args.submit:
        require_sbatch()  # before writing anything: --submit only makes sense on a login node
        not_fresh = [s for s in statuses(rd, config, upto=DEPENDS_ON[STAGE]) if s.state != "fresh"]
        if not_fresh:
            s = not_fresh[0]
            raise UsageError(f"stage {s.name} is {s.state} in {run_dir} ({s.reason}); the job trains on its output: run "
                             f"`europa run --run-dir {run_dir} --to shards` first")
    with rd.lock(f"europa launch jupiter{' --submit' if args.submit else ''}"):
        save_run_config(rd, config)
        if args.submit:
            job_id, job = submit_training_job(build_context(rd, config, STAGE), record_attempt=True)
            script = job.script_path
        else:
            script = job.write()
    print(job.report())
    print(f"europa: rendered {script} (plan: {job.job_dir / 'plan.txt'})")
    if not args.submit:
        print(f"europa: submit with `europa launch jupiter --run-dir {run_dir} --submit`")
        return 0
    print(f"europa: submitted Slurm job {job_id}; logs {job.job_dir}/slurm-{job_id}.out; "
          f"`europa stage pretrain --run-dir {run_dir}` follows it and publishes the result; "
          f"`europa eval-schedule --run-dir {run_dir}` evaluates its checkpoints as they appear")
    return 0
