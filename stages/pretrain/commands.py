"""The pretrain stage's commands: `europa plan` (will a layout fit, how fast, how long), `europa launch
jupiter|slurm` (render the Slurm job for review, or submit it into the stage's job folder), and the two through
which the model leaves the pipeline: `europa export hf` (a checkpoint as a Hugging Face model folder with its
model card) and `europa generate` (text from a checkpoint, through that export). Light at import: the
planner, launcher, torch and transformers load in the handlers."""

from __future__ import annotations

import argparse
import sys

from pathlib import Path

from pipeline.commands import add_run_options, resolve_run
from pipeline.errors import UsageError
from pipeline.rundir import RunDir

STAGE = "pretrain"


def add_commands(sub: argparse._SubParsersAction) -> None:
    la = sub.add_parser("launch", help="render (and submit) the pretraining job, or the calibration job, for Slurm",
                        description="Validate [pretrain] for its machine ([pretrain.machine]: JUPITER's Booster by "
                        "default; layout, memory estimate), render the sbatch script into <run>/pretrain-launch/ and "
                        "optionally submit it. `jupiter` and `slurm` are the same command. `calibrate`: the short job "
                        "that measures the machine's collectives and GEMM rate at the layout's sizes, for "
                        "[pretrain.machine] measured. See docs/jupiter.md.")
    la.add_argument("target", choices=["jupiter", "slurm", "calibrate"],
                    help="jupiter, or slurm for another cluster (the same: the machine is [pretrain.machine]); "
                         "calibrate: measure the machine for the planner")
    add_run_options(la)
    g = la.add_mutually_exclusive_group()
    g.add_argument("--dry-run", action="store_true", help="print the script and the plan; write nothing")
    g.add_argument("--submit", action="store_true", help="also submit with sbatch (on a login node of the cluster)")
    la.add_argument("--nodes", type=int, default=None, metavar="N",
                    help="calibrate: nodes of the job (default: enough for the layout's largest group, at most its nodes)")
    la.set_defaults(handler=cmd_launch)

    pl = sub.add_parser("plan", help="estimate per-GPU memory, FLOPs per token, utilisation and days for [pretrain]")
    add_run_options(pl)
    pl.add_argument("--tokens-per-s", type=float, default=None, metavar="N",
                    help="throughput per GPU to plan with (default: EUROPA's 1,300 tokens/s on GH200)")
    pl.add_argument("--json", action="store_true", help="machine-readable output")
    pl.add_argument("--search", action="store_true",
                    help="price every layout of the configured GPUs and global batch (HSDP/FSDP, EP, all-to-all, "
                         "node-limited routing, local batch, activation checkpointing, float8) and list the best")
    pl.add_argument("--top", type=int, default=5, metavar="N", help="--search: layouts listed (default 5)")
    pl.add_argument("--fragment", metavar="FILE", default=None,
                    help="--search: write the best layout as a TOML fragment of [pretrain] keys to FILE")
    pl.set_defaults(handler=cmd_plan)

    ex = sub.add_parser("export", help="export a checkpoint as a Hugging Face model folder (with its model card)",
                        description="Convert a complete checkpoint of the run (published, or of the training job "
                        "still running) into a transformers DeepseekV3ForCausalLM folder: sharded safetensors, "
                        "config, tokenizer, README.md model card from the run's records, SHA256SUMS. Streams one "
                        "tensor at a time (memory ~ the largest tensor).")
    ex.add_argument("target", choices=["hf"])
    add_run_options(ex, config=False)
    ex.add_argument("--checkpoint", metavar="step-N|latest", default="latest")
    ex.add_argument("--out", metavar="DIR", default=None, help="output folder (default: <run>/export/step-N-<dtype>)")
    ex.add_argument("--dtype", choices=["bf16", "fp32"], default="bf16",
                    help="weights as published (bf16; routers stay fp32) or exact (fp32)")
    ex.add_argument("--force", action="store_true", help="replace an existing output folder")
    ex.set_defaults(handler=cmd_export)

    ge = sub.add_parser("generate", help="continue a prompt with a checkpoint of the run (through the HF export)")
    add_run_options(ge, config=False)
    ge.add_argument("--prompt", required=True)
    ge.add_argument("--checkpoint", metavar="step-N|latest", default="latest")
    ge.add_argument("--max-new-tokens", type=int, default=64, metavar="N")
    ge.add_argument("--sampled", action="store_true", help="sample (default: greedy)")
    ge.add_argument("--seed", type=int, default=0, help="seed of the sampling (same seed, same text)")
    ge.add_argument("--temperature", type=float, default=1.0)
    ge.add_argument("--top-p", type=float, default=1.0)
    ge.set_defaults(handler=cmd_generate)


def products(rd: RunDir) -> list[str]:
    manifest = rd.manifest(STAGE)
    if manifest is None:
        return []
    ckpt = manifest.statistics.get("checkpoint", {}).get("path")
    return [f"model: {rd.stage_dir(STAGE) / ckpt} (torchtitan DCP checkpoint; tokenizer in {rd.stage_dir('tokenizer')}); "
            f"as a Hugging Face folder: europa export hf --run-dir {rd.path}"]


def cmd_plan(args) -> int:
    from stages.pretrain.planner.report import plan
    from stages.pretrain.planner.projection import EUROPA_TOKENS_PER_S_PER_GPU

    from stages.pretrain.launch.checks import planner_hardware

    _, config = resolve_run(args)
    tokenizer = config.stages.get("tokenizer")
    settings = config.section(STAGE)
    hardware, notes = planner_hardware(settings)  # the machine profile's view ([pretrain.machine])
    if args.search:
        return _search(args, settings, getattr(tokenizer, "vocab_size", None), hardware)
    if args.fragment:
        raise UsageError("europa plan: --fragment needs --search")
    report = plan(settings, getattr(tokenizer, "vocab_size", None), hardware=hardware,
                  tokens_per_s_per_gpu=args.tokens_per_s or EUROPA_TOKENS_PER_S_PER_GPU)
    report.warnings += [n for n in notes if n not in report.warnings]
    evaluation = _evaluation_memory(config, settings, getattr(tokenizer, "vocab_size", None), hardware)
    if args.json:
        import json
        from dataclasses import asdict

        d = report.to_dict()
        if evaluation is not None:
            d["evaluation_job"] = {**asdict(evaluation), "total_gib": evaluation.total_gib, "fits": evaluation.fits}
        print(json.dumps(d, indent=2))
    else:
        print(report.text() + (f"\n{evaluation.line()}" if evaluation is not None else ""))
    return 0


def _evaluation_memory(config, settings, vocab_size: int | None, hardware):
    """The [evaluate.job]'s memory per GPU when it is distributed (the planner's estimate), else None."""
    from stages.pretrain.planner.evaluation import evaluation_memory, job_ranks
    from stages.pretrain.planner.shape import model_shape

    ev = config.stages.get("evaluate")
    if ev is None or ev.job.launcher == "local":
        return None
    return evaluation_memory(model_shape(settings.flavor, vocab_size),
                             ranks=job_ranks(ev.job, settings.parallelism.processes_per_node),
                             expert_parallel=ev.job.expert_parallel, precision=ev.job.precision,
                             batch_size=ev.batch_size, seq_len=ev.seq_len or settings.seq_len, hardware=hardware)


def _search(args, settings, vocab_size: int | None, hardware) -> int:
    import json
    import textwrap

    from stages.pretrain.planner.report import _with_peak
    from stages.pretrain.planner.projection import EUROPA_TOKENS_PER_S_PER_GPU
    from stages.pretrain.planner.search import format_search, fragment, search, what_target_needs

    if args.top < 1:
        raise UsageError(f"europa plan: --top {args.top}: list at least 1 layout")
    hardware = _with_peak(hardware, settings)
    result = search(settings, vocab_size, hardware)
    if result.best is None:
        p = settings.parallelism
        raise UsageError(f"europa plan --search: none of {result.considered:,} layouts of {settings.flavor} fits "
                         f"{p.world_size} GPUs with global_batch_size {settings.global_batch}: raise "
                         "[pretrain.parallelism] nodes or change the global batch")
    if args.json:
        print(json.dumps({"estimate": True, "considered": result.considered, "feasible": len(result.ranked),
                          "tight": result.tight, "too_large": result.too_large,
                          "configured_rank": result.rank_of_configured(),
                          "layouts": [c.to_dict() for c in result.ranked[:args.top]],
                          "configured": result.configured.to_dict()}, indent=2))
    else:
        target = args.tokens_per_s or EUROPA_TOKENS_PER_S_PER_GPU
        print(format_search(result, args.top))
        print("\n" + textwrap.fill(what_target_needs(result, target, hardware), 116, initial_indent="  ",
                                   subsequent_indent="  "))
    if args.fragment:
        Path(args.fragment).write_text(fragment(result.best))
        if not args.json:
            print(f"\nwrote the best layout to {args.fragment}")
    return 0


def cmd_launch(args) -> int:
    """Validate and render into <run>/pretrain-launch/ (--dry-run: print only); --submit: sbatch it from the
    stage's job folder, where `europa stage pretrain` follows it. The run's run.toml is (re)written: the job
    reads it."""
    from pipeline.registry import DEPENDS_ON
    from pipeline.runconfig import save_run_config
    from pipeline.status import build_context, statuses
    from stages.cluster.slurm import require_sbatch
    from stages.pretrain.launch.sbatch import render_job
    from stages.pretrain.launch.submit import submit_training_job
    from stages.pretrain.stage import PretrainStage

    if args.target == "calibrate":
        return _calibrate(args)
    if args.nodes is not None:
        raise UsageError(f"europa launch {args.target}: --nodes is for `europa launch calibrate`; the training job's "
                         "nodes are [pretrain.parallelism] nodes")
    rd, config = resolve_run(args)
    run_dir = rd.path
    job = render_job(config, run_dir, rd.launch_dir(STAGE), require_account=args.submit)
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
    with rd.lock(f"europa launch {args.target}{' --submit' if args.submit else ''}"):
        save_run_config(rd, config)
        if args.submit:
            job_id, job = submit_training_job(build_context(rd, config, STAGE), PretrainStage(), record_attempt=True)
            script = job.script_path
        else:
            script = job.write()
    print(job.report())
    print(f"europa: rendered {script} (plan: {job.job_dir / 'plan.txt'})")
    if not args.submit:
        print(f"europa: submit with `europa launch {args.target} --run-dir {run_dir} --submit`")
        return 0
    print(f"europa: submitted Slurm job {job_id}; logs {job.job_dir}/slurm-{job_id}.out; "
          f"`europa stage pretrain --run-dir {run_dir}` follows it and publishes the result (cancel: `scancel {job_id}`); "
          f"`europa eval-schedule --run-dir {run_dir}` evaluates its checkpoints as they appear")
    return 0


def _calibrate(args) -> int:
    """`europa launch calibrate`: render into <run>/pretrain-launch/calibrate/ (--dry-run: print only); --submit:
    sbatch it. Its measured.json is what [pretrain.machine] measured points at."""
    from stages.cluster import slurm
    from stages.cluster.sbatch import render
    from stages.pretrain.measure.launch import render_calibration

    rd, config = resolve_run(args)
    job = render_calibration(config, rd.launch_dir(STAGE) / "calibrate", nodes=args.nodes)
    if args.dry_run:
        print(render(job.script))
        print(job.summary())
        return 0
    if args.submit:
        slurm.require_sbatch()
        settings = config.section(STAGE)
        if settings.machine.hardware().account_required and not settings.slurm.account:
            raise UsageError("[pretrain.slurm] account is not set: --submit on this machine needs the project to "
                             "charge; add account = \"<project>\" under [pretrain.slurm]")
    with rd.lock(f"europa launch calibrate{' --submit' if args.submit else ''}"):
        script = job.write()
        job_id = slurm.submit(script) if args.submit else None
        if job_id:
            slurm.record_submission(job.job_dir, job_id, script)
    print(job.summary())
    print(f"europa: rendered {script}")
    if job_id is None:
        print(f"europa: submit with `europa launch calibrate --run-dir {rd.path} --submit`")
        return 0
    print(f"europa: submitted Slurm job {job_id}; logs {job.job_dir}/slurm-{job_id}.out; when it has ended set "
          f"[pretrain.machine] measured = \"{job.output}\" and `europa plan` prices the layout with what it measured")
    return 0


def _checkpoint_and_model(args):
    """The run, its config, the checkpoint asked for and what it holds (flavor, vocabulary), or a UsageError."""
    from europa_model.checkpoints import JOB_INFO, model_info
    from pipeline.runconfig import resolve
    from stages.checkpoints import find_checkpoint, run_checkpoints

    rd, config = resolve(None, args.run_dir, existing=True)
    ckpt = find_checkpoint(run_checkpoints(rd), args.checkpoint)
    info = model_info(ckpt)
    if info is None:
        raise UsageError(f"checkpoint {ckpt.path}: no {JOB_INFO} beside its checkpoints folder, so which model it holds "
                         "is unknown; it was not written by the pretrain stage")
    return rd, config, ckpt, info


def _in_live_job(rd: RunDir, ckpt) -> bool:
    return not ckpt.path.is_relative_to(rd.stage_dir(STAGE))


def export_destination(rd: RunDir, out: str) -> Path:
    """--out, refused when it is inside the run directory (but for its export/ folder) or holds it: an export
    replaces its folder (--force) without the run's lock, so a published stage must never be one."""
    path, run = Path(out).resolve(), rd.path.resolve()
    exports = rd.export_dir("").resolve()
    inside = path == run or run in path.parents
    if (inside and exports not in path.parents) or path in run.parents:
        raise UsageError(f"export hf: --out {out} is {'inside' if inside else 'above'} the run directory {run}; "
                         f"choose a folder outside it, or one under {exports} (the default)")
    return path


def cmd_export(args) -> int:
    from stages.export import default_folder, export_run_checkpoint

    rd, config, ckpt, info = _checkpoint_and_model(args)
    out = default_folder(rd, ckpt.step, args.dtype) if args.out is None else export_destination(rd, args.out)
    live = _in_live_job(rd, ckpt)
    try:
        res = export_run_checkpoint(rd, config, ckpt, info, args.dtype, out, overwrite=args.force, live=live)
    except ValueError as e:  # ExportError and kin: one line naming the file and the fix
        hint = " (or pass --force to replace it)" if "already exists" in str(e) else ""
        raise UsageError(f"export hf: {e}{hint}") from None
    print(f"europa: exported {ckpt.name}{' (training still running)' if live else ''} of {rd.path} as {info.flavor}: "
          f"{res.parameters:,} parameters, {len(res.shards)} shard(s), {res.total_bytes / 1e6:,.1f} MB {args.dtype}")
    print(f"europa: {res.out_dir} (model card README.md; load with "
          f"AutoModelForCausalLM.from_pretrained({str(res.out_dir)!r}))")
    return 0


def cmd_generate(args) -> int:
    from europa_model.hf.generate import generate

    rd, _, ckpt, info = _checkpoint_and_model(args)
    try:
        text = generate(ckpt.path, args.prompt, args.max_new_tokens, sampling="sampled" if args.sampled else "greedy",
                        seed=args.seed, temperature=args.temperature, top_p=args.top_p, flavor=info.flavor,
                        vocab_size=info.vocab_size, tokenizer_dir=rd.stage_dir("tokenizer"), routing=info.routing)
    except ValueError as e:
        raise UsageError(f"generate: {e}") from None
    how = f"sampled, seed {args.seed}" if args.sampled else "greedy"
    print(f"europa: generate: {ckpt.name} of {rd.path} ({how}, at most {args.max_new_tokens} new tokens)", file=sys.stderr)
    print(args.prompt + text)
    return 0
