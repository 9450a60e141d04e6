"""`europa`: the command line. Parses arguments, resolves the config, holds the lock, reports; no stage logic.

Exit codes: 0 success; 1 a stage failed; 2 bad usage, config or input (the one stderr line says what to fix);
3 the run directory is locked by another process.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from pipeline.config import ConfigError
from pipeline.registry import STAGE_NAMES, StageNotImplemented, downstream_of, is_implemented
from pipeline.rundir import RunDirLocked

EXIT_OK, EXIT_STAGE_FAILED, EXIT_USAGE, EXIT_LOCKED = 0, 1, 2, 3


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="europa", description="EUROPA: raw text in 24 EU languages -> MoE model -> EU AI Act documentation.")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def common(sp, config=True):
        if config:
            sp.add_argument("--config", metavar="FILE", help="TOML config (default: the run's run.toml, else configs/demo.toml)")
        sp.add_argument("--run-dir", metavar="DIR", help="run directory (default: runs/<run.name>)")

    r = sub.add_parser("run", help="run the pipeline (stages that are fresh are skipped)")
    common(r)
    r.add_argument("--from", dest="from_stage", choices=STAGE_NAMES, help="first stage to run")
    r.add_argument("--to", dest="to_stage", choices=STAGE_NAMES, help="last stage to run")
    r.add_argument("--force", nargs="+", default=[], choices=STAGE_NAMES, metavar="STAGE",
                   help="rerun these stages (and everything downstream) even if fresh")

    s = sub.add_parser("stage", help="run one stage")
    s.add_argument("name", choices=STAGE_NAMES, metavar="STAGE", help=f"one of: {', '.join(STAGE_NAMES)}")
    common(s)
    s.add_argument("--force", action="store_true", help="rerun even if fresh")
    s.add_argument("--strict", action="store_true",
                   help="compliance only: fail while any value is open (same as [compliance] strict = true)")

    st = sub.add_parser("status", help="each stage: fresh / stale / missing / failed, key counts, duration")
    common(st)
    st.add_argument("--json", action="store_true", help="machine-readable output")

    ev = sub.add_parser("evaluate", help="evaluate the run's checkpoints that are not evaluated yet (or one)")
    common(ev, config=False)
    ev.add_argument("--checkpoint", metavar="step-N|latest", default=None,
                    help="evaluate this complete checkpoint (again, if it was); default: every new one")
    es = sub.add_parser("eval-schedule", help="serve a Prefect deployment that evaluates new checkpoints on a schedule")
    common(es, config=False)
    es.add_argument("--cron", default=None, help='cron schedule, UTC (default: [evaluate] cron, "*/30 * * * *")')
    la = sub.add_parser("launch", help="render (and submit) the pretraining job for JUPITER's Slurm",
                        description="Validate [pretrain] for JUPITER (layout, memory estimate), render the sbatch "
                        "script into <run>/pretrain-launch/ and optionally submit it. See docs/jupiter.md.")
    la.add_argument("target", choices=["jupiter"])
    common(la)
    g = la.add_mutually_exclusive_group()
    g.add_argument("--dry-run", action="store_true", help="print the script and the plan; write nothing")
    g.add_argument("--submit", action="store_true", help="also submit with sbatch (on a JUPITER login node)")
    pl = sub.add_parser("plan", help="estimate per-GPU memory, FLOPs per token, utilisation and days for [pretrain]")
    common(pl)
    pl.add_argument("--tokens-per-s", type=float, default=None, metavar="N",
                    help="throughput per GPU to plan with (default: EUROPA's 1,300 tokens/s on GH200)")
    pl.add_argument("--json", action="store_true", help="machine-readable output")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "status":
            return cmd_status(args)
        if args.command == "run":
            return cmd_run(args)
        if args.command == "stage":
            return cmd_stage(args)
        if args.command == "launch":
            return cmd_launch(args)
        if args.command == "plan":
            return cmd_plan(args)
        if args.command == "evaluate":
            return cmd_evaluate(args)
        if args.command == "eval-schedule":
            return cmd_eval_schedule(args)
        raise AssertionError(args.command)
    except StageNotImplemented as e:
        return _fail(str(e), EXIT_USAGE)
    except (ConfigError, ValueError) as e:
        return _fail(str(e), EXIT_USAGE)
    except RunDirLocked as e:
        return _fail(str(e), EXIT_LOCKED)
    except KeyboardInterrupt:
        return _fail("interrupted; finished units are kept and a rerun resumes from them", 130)
    except Exception as e:  # a stage failure: one line, the details are in <run>/.state/<stage>.json
        if os.environ.get("EUROPA_DEBUG"):
            raise
        return _fail(str(e) if "stage" in str(e) else f"{type(e).__name__}: {e}", EXIT_STAGE_FAILED)


def _fail(message: str, code: int) -> int:
    from pipeline.secrets import redact_text

    print(f"europa: error: {redact_text(message)}", file=sys.stderr)
    return code


def cmd_status(args) -> int:
    from pipeline.executor import statuses
    from pipeline.runconfig import resolve

    rd, config = resolve(args.config, args.run_dir)
    rows = statuses(rd, config)
    if args.json:
        print(json.dumps([{"stage": s.name, "state": s.state, "reason": s.reason,
                           "summary": s.manifest.summary if s.manifest else {},
                           "duration_s": s.manifest.duration_s if s.manifest else None,
                           "finished_at": s.manifest.finished_at if s.manifest else None} for s in rows], indent=2))
        return EXIT_OK
    print(f"run directory: {rd.path}")
    print(f"{'stage':<11} {'state':<16} {'duration':>9}  {'finished (UTC)':<20} details")
    for s in rows:
        m = s.manifest
        dur = f"{m.duration_s:.1f}s" if m else "-"
        fin = m.finished_at[:19].replace("T", " ") if m else "-"
        counts = ", ".join(f"{k} {v:,}" if isinstance(v, int) else f"{k} {v}" for k, v in (m.summary if m else {}).items())
        detail = "; ".join(x for x in (s.reason, counts) if x)
        print(f"{s.name:<11} {s.state:<16} {dur:>9}  {fin:<20} {detail}")
    return EXIT_OK


def cmd_evaluate(args) -> int:
    """Evaluate beside training: takes only eval/.lock, never the run's lock (training holds that for weeks)."""
    from pipeline.runconfig import resolve
    from stages.evaluate.results import EvalLocked
    from stages.evaluate.runner import NothingToEvaluate, evaluate_run
    from stages.evaluate.scoring import CheckpointError

    rd, config = resolve(None, args.run_dir)
    try:
        outcome = evaluate_run(rd, config, which=args.checkpoint)
    except NothingToEvaluate as e:
        return _fail(f"evaluate {rd.path}: {e}", EXIT_USAGE)
    except CheckpointError as e:
        return _fail(f"evaluate: {e}", EXIT_STAGE_FAILED)
    except EvalLocked as e:
        return _fail(str(e), EXIT_LOCKED)
    for s in outcome.skipped:
        print(f"europa: evaluate: skipped step-{s['step']}: {s['reason']}", file=sys.stderr)
    print(f"europa: evaluate: {outcome.message}")
    if outcome.evaluated:
        print(f"europa: evaluate: report {rd.path / 'eval' / 'report.md'}")
    return EXIT_OK


def cmd_eval_schedule(args) -> int:
    from pipeline.runconfig import resolve

    rd, config = resolve(None, args.run_dir)
    if not rd.config_path.exists():
        return _fail(f"eval-schedule: {rd.path} has no run.toml; start the run first (europa run --run-dir {rd.path})", EXIT_USAGE)
    cron = args.cron or config.section("evaluate").cron
    from prefect.client.schemas.schedules import CronSchedule

    try:
        CronSchedule(cron=cron)
    except ValueError as e:
        return _fail(f"eval-schedule: --cron {cron!r} is not a valid cron expression ({e}); e.g. \"*/30 * * * *\"", EXIT_USAGE)
    from flows.evaluate import serve_schedule

    print(f"europa: evaluating new checkpoints of {rd.path} on {cron!r}; Ctrl-C stops", file=sys.stderr)
    serve_schedule(str(rd.path), cron)
    return EXIT_OK


def cmd_stage(args) -> int:
    if not is_implemented(args.name):
        raise StageNotImplemented(args.name)
    if args.strict and args.name != "compliance":
        return _fail(f"--strict applies to the compliance stage only, not {args.name}", EXIT_USAGE)
    overrides = {"compliance": {"strict": True}} if args.strict else {}
    return _execute(args.config, args.run_dir, [args.name], [args.name] if args.force else [], overrides)


def cmd_run(args) -> int:
    names = list(STAGE_NAMES)
    lo = names.index(args.from_stage) if args.from_stage else 0
    hi = names.index(args.to_stage) if args.to_stage else len(names) - 1
    if lo > hi:
        return _fail(f"--from {args.from_stage} comes after --to {args.to_stage}; stage order: {' -> '.join(names)}", EXIT_USAGE)
    selected = names[lo : hi + 1]
    missing = [n for n in selected if not is_implemented(n)]
    if missing:
        first = missing[0]
        explicit = args.to_stage is not None and not is_implemented(args.to_stage) or first in args.force
        if explicit or selected.index(first) == 0:
            raise StageNotImplemented(first)
        print(f"europa: stages {', '.join(missing)} are not implemented yet; running {' -> '.join(selected[: selected.index(first)])} only",
              file=sys.stderr)
        selected = selected[: selected.index(first)]
    forced = sorted({d for f in args.force for d in downstream_of(f)} & set(selected), key=names.index)
    return _execute(args.config, args.run_dir, selected, forced)


def cmd_plan(args) -> int:
    from europa_model.planner import EUROPA_TOKENS_PER_S_PER_GPU, plan
    from pipeline.runconfig import resolve

    _, config = resolve(args.config, args.run_dir)
    if "pretrain" not in config.stages:
        return _fail("[pretrain]: the pretrain stage's settings are unknown to this build; nothing to plan", EXIT_USAGE)
    tokenizer = config.stages.get("tokenizer")
    report = plan(config.section("pretrain"), getattr(tokenizer, "vocab_size", None),
                  tokens_per_s_per_gpu=args.tokens_per_s or EUROPA_TOKENS_PER_S_PER_GPU)
    print(report.to_json() if args.json else report.text())
    return EXIT_OK


def cmd_launch(args) -> int:
    """Validate and render into <run>/pretrain-launch/ (--dry-run: print only); --submit: sbatch it and record
    the job id in <run>/pretrain-launch/jobs.jsonl. The run's run.toml is (re)written: the job reads it."""
    from europa_model.jupiter import LAUNCH_DIR, record_submission, render_job, require_sbatch, submit
    from pipeline.executor import statuses
    from pipeline.runconfig import resolve, save_run_config

    rd, config = resolve(args.config, args.run_dir)
    run_dir = rd.path.resolve()
    job = render_job(config, run_dir, run_dir / LAUNCH_DIR, require_account=args.submit)
    if args.dry_run:
        print(job.sbatch)
        print(job.report())
        return EXIT_OK
    if args.submit:
        require_sbatch()  # before writing anything: --submit only makes sense on a login node
        not_fresh = [s for s in statuses(rd, config, upto=("tokenizer", "shards")) if s.state != "fresh"]
        if not_fresh:
            s = not_fresh[0]
            return _fail(f"stage {s.name} is {s.state} in {run_dir} ({s.reason}); the job trains on its output: run "
                         f"`europa run --run-dir {run_dir} --to shards` first", EXIT_USAGE)
    with rd.lock(f"europa launch jupiter{' --submit' if args.submit else ''}"):
        save_run_config(rd, config)
        if args.submit:  # train in the pretrain stage's own job folder: the stage then follows and publishes it
            from pipeline.executor import build_context
            from pipeline.rundir import utc_now

            ctx = build_context(rd, config, "pretrain")
            job = render_job(config, run_dir, ctx.work_dir / "job", require_account=True)
        script = job.write()
        if args.submit:
            job_id = submit(script)
            record_submission(job.job_dir, job_id, script)
            rd.write_state("pretrain", status="submitted", at=utc_now(), fingerprint=ctx.fingerprint, job_id=job_id)
    print(job.report())
    print(f"europa: rendered {script} (plan: {job.job_dir / 'plan.txt'})")
    if not args.submit:
        print(f"europa: submit with `europa launch jupiter --run-dir {run_dir} --submit`")
        return EXIT_OK
    print(f"europa: submitted Slurm job {job_id}; logs {job.job_dir}/slurm-{job_id}.out; "
          f"`europa stage pretrain --run-dir {run_dir}` follows it and publishes the result; "
          f"`europa eval-schedule --run-dir {run_dir}` evaluates its checkpoints as they appear")
    return EXIT_OK


def _execute(config_path: str | None, run_dir_path: str | None, selected: list[str], forced: list[str],
             overrides: dict[str, dict] | None = None) -> int:
    from pipeline.executor import statuses
    from pipeline.runconfig import resolve, save_run_config

    t0 = time.monotonic()
    rd, config = resolve(config_path, run_dir_path)
    for section, values in (overrides or {}).items():  # command-line settings become part of run.toml
        config.stages[section] = config.section(section).model_copy(update=values)
    with rd.lock(f"europa {' '.join(sys.argv[1:]) or 'run'}"):
        save_run_config(rd, config)
        state = {s.name: s.state for s in statuses(rd, config)}
        todo = [n for n in selected if n in forced or state[n] != "fresh"]
        if not todo:
            print(f"europa: {', '.join(selected)}: fresh, nothing to do ({time.monotonic() - t0:.1f}s); {rd.path}")
            _print_products(rd)
            return EXIT_OK
        first = selected.index(todo[0])
        to_run = selected[first:]  # everything after the first stale stage may become stale by it
        from pipeline.executor import build_context

        build_context(rd, config, to_run[0])  # fail fast (missing upstream) before any engine starts
        if config.orchestration.engine == "prefect":
            from flows.stages import pipeline_flow

            results = pipeline_flow(str(rd.path), to_run, forced)
        else:
            from pipeline.executor import execute_stage

            results = []
            for name in to_run:
                manifest, ran = execute_stage(rd, config, name, force=name in forced)
                results.append({"stage": name, "ran": ran, "summary": manifest.summary})
    for r in results:
        verb = "ran" if r["ran"] else "fresh, skipped"
        print(f"europa: {r['stage']}: {verb}: " + ", ".join(f"{k} {v:,}" if isinstance(v, int) else f"{k} {v}" for k, v in r["summary"].items()))
    print(f"europa: done in {time.monotonic() - t0:.1f}s; outputs in {rd.path}")
    _print_products(rd)
    return EXIT_OK


def _print_products(rd) -> None:
    """Where the things people come for are, once the stages that make them have run."""
    pretrain = rd.manifest("pretrain")
    if pretrain is not None:
        ckpt = pretrain.statistics.get("checkpoint", {}).get("path")
        print(f"europa: model: {rd.stage_dir('pretrain') / ckpt} (torchtitan DCP checkpoint; tokenizer in {rd.stage_dir('tokenizer')})")
    if (rd.path / "eval" / "report.md").exists():
        print(f"europa: evaluation report: {rd.path / 'eval' / 'report.md'}")
    if (rd.stage_dir("compliance") / "index.html").exists():
        print(f"europa: EU AI Act documents: {rd.stage_dir('compliance') / 'index.html'}")


if __name__ == "__main__":
    sys.exit(main())
