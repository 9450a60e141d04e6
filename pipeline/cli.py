"""`europa`: the command line, a dispatcher. It knows the core commands (run, stage, status, verify); every other
command, and the options of `europa stage <name>`, belong to the stage that registers them in its
commands.py (pipeline/registry.py names those modules).

Exit codes come from the error raised (pipeline/errors.py): 0 success; 1 a stage failed; 2 bad usage, config or
input (the one stderr line says what to fix); 3 the run directory is in use; 130 interrupted (Ctrl-C); 143 terminated
(SIGTERM, otherwise handled as Ctrl-C).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

# Arrow's buffers from jemalloc, not pyarrow's default mimalloc, which keeps more resident at the same CPU
# (docs/benchmarks.md), and the peak per worker is what sizes a Dask worker. Arrow reads this
# once, when pyarrow is first imported, so it is set before any import below; the worker processes a run starts
# inherit it (Dask workers started elsewhere get it from flows.DASK_WORKER_ENV). A value already set wins.
os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "jemalloc")

from pipeline.commands import add_run_options, counts, resolve_run, run_stages
from pipeline.registry import STAGE_NAMES, commands_modules, downstream_of, stage_commands

EXIT_OK, EXIT_INTERRUPTED, EXIT_TERMINATED = 0, 130, 143


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="europa", description="EUROPA: raw text in 24 EU languages -> MoE model -> EU AI Act documentation.")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    r = sub.add_parser("run", help="run the pipeline (stages that are fresh are skipped)")
    add_run_options(r)
    r.add_argument("--from", dest="from_stage", choices=STAGE_NAMES, help="first stage to run")
    r.add_argument("--to", dest="to_stage", choices=STAGE_NAMES, help="last stage to run")
    r.add_argument("--force", nargs="+", default=[], choices=STAGE_NAMES, metavar="STAGE",
                   help="rerun these stages (and everything downstream) even if fresh")
    r.set_defaults(handler=cmd_run)

    s = sub.add_parser("stage", help="run one stage", description=f"Run one stage: {', '.join(STAGE_NAMES)}.")
    per_stage = s.add_subparsers(dest="name", required=True, metavar="STAGE")
    for name in STAGE_NAMES:
        sp = per_stage.add_parser(name, help=f"the {name} stage")
        add_run_options(sp)
        sp.add_argument("--force", action="store_true", help="rerun even if fresh")
        module = stage_commands(name)
        if module is not None and hasattr(module, "add_stage_options"):
            module.add_stage_options(sp)
        sp.set_defaults(handler=cmd_stage)

    st = sub.add_parser("status", help="each stage: fresh / stale / missing / failed, key counts, duration")
    add_run_options(st)
    st.add_argument("--json", action="store_true", help="machine-readable output")
    st.set_defaults(handler=cmd_status)

    v = sub.add_parser("verify", help="re-check published files against their manifests (missing, size, checksum)",
                       description="Re-check every published file of a run (or of one stage) against its manifest: "
                       "missing files, size and checksum mismatches, each named. Exit 0 when all verified, 1 when any is damaged.")
    add_run_options(v)
    v.add_argument("--stage", choices=STAGE_NAMES, help="only this stage (default: every published stage)")
    v.add_argument("--sizes-only", action="store_true", help="existence and sizes only, no checksums (seconds, not hours)")
    v.set_defaults(handler=cmd_verify)

    for module in commands_modules():
        if hasattr(module, "add_commands"):
            module.add_commands(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    from pipeline.errors import Terminated, interrupt_on_sigterm
    from pipeline.secrets import install_log_redaction

    install_log_redaction()
    interrupt_on_sigterm()
    args = _parser().parse_args(argv)
    try:
        return args.handler(args)
    except KeyboardInterrupt as e:
        from pipeline.stage import Detached

        if isinstance(e, Detached):  # the stage was following work that goes on (a Slurm job): it says how
            print(f"europa: interrupted: {e}", file=sys.stderr)
            return EXIT_INTERRUPTED
        return _fail("interrupted; finished units are kept and a rerun resumes from them",
                     EXIT_TERMINATED if isinstance(e, Terminated) else EXIT_INTERRUPTED)
    except OSError as e:  # the file system said no: say which path and what to do about it
        if os.environ.get("EUROPA_DEBUG"):
            raise
        return _fail(*os_error_message(e, getattr(args, "run_dir", None)))
    except Exception as e:  # noqa: BLE001 - one line for the user; details in <run>/.state/<stage>.json
        if os.environ.get("EUROPA_DEBUG"):
            raise
        code = getattr(e, "exit_code", None)
        return _fail(str(e) if code is not None else f"{type(e).__name__}: {e}", code or 1)


def os_error_message(e: OSError, run_dir: str | None) -> tuple[str, int]:
    """One line and an exit code for an operating-system error: the path, the problem, the fix."""
    import errno

    if e.errno is None or e.errno not in errno.errorcode:  # not the file system's: a library's error, as it said it
        return f"{type(e).__name__}: {e}", 1
    where = e.filename or run_dir or "the run directory"
    fixes = {
        errno.ENOSPC: ("no space left on the device", "free space there or choose another --run-dir; a rerun resumes "
                       "from the finished units", 1),
        errno.EDQUOT: ("disk quota exceeded", "free space or choose another --run-dir", 1),
        errno.EROFS: ("read-only file system", "choose a writable --run-dir", 2),
        errno.EACCES: ("permission denied", "choose a --run-dir you can write, or fix the folder's permissions", 2),
        errno.EPERM: ("operation not permitted", "choose a --run-dir you can write", 2),
        errno.EEXIST: ("exists and is in the way", "remove it or choose another --run-dir", 2),
        errno.ENOTDIR: ("a file where a folder is needed", "remove the file or choose another --run-dir", 2),
    }
    what, fix, code = fixes.get(e.errno, (e.strerror or type(e).__name__, "check the path", 1))
    return f"{where}: {what}; {fix}", code


def _fail(message: str, code: int) -> int:
    from pipeline.secrets import redact_text

    print(f"europa: error: {redact_text(message)}", file=sys.stderr)
    return code


def cmd_status(args) -> int:
    from pipeline.status import statuses

    rd, config = resolve_run(args, existing=True)
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
        detail = "; ".join(x for x in (s.reason, counts(m.summary) if m else "") if x)
        print(f"{s.name:<11} {s.state:<16} {dur:>9}  {fin:<20} {detail}")
    return EXIT_OK


def cmd_verify(args) -> int:
    from pipeline.errors import UsageError
    from pipeline.verify import ProgressLines, check_stage, human_bytes

    rd, _ = resolve_run(args, existing=True)
    stages = [args.stage] if args.stage else list(STAGE_NAMES)
    report = ProgressLines()
    damaged, checked = [], 0
    for name in stages:
        result = check_stage(rd, name, checksums=not args.sizes_only, progress=report)
        report.finish(name)
        if result is None:
            if args.stage:
                raise UsageError(f"stage {name} has not published anything in {rd.path}; nothing to verify")
            print(f"{name:<11} not published")
            continue
        checked += 1
        what = "sizes" if args.sizes_only else "sizes and checksums"
        if result.ok:
            print(f"{name:<11} verified: {result.files:,} files, {human_bytes(result.bytes)} ({what})")
            continue
        damaged.append(name)
        print(f"{name:<11} DAMAGED: {len(result.damage):,} of {result.files:,} files")
        for d in result.damage:
            print(f"  {d.describe(name)}")
    if damaged:
        fix = "; ".join(f"europa stage {n} --force --run-dir {rd.path}" for n in damaged)
        return _fail(f"{', '.join(damaged)}: damaged files (listed above); restore them or rerun: {fix}", 1)
    if not checked:
        raise UsageError(f"nothing is published in {rd.path}; nothing to verify")
    return EXIT_OK


def cmd_stage(args) -> int:
    module = stage_commands(args.name)
    if module is not None and hasattr(module, "run_instead") and (code := module.run_instead(args)) is not None:
        return code  # a stage option that writes without the executor (compliance --projected)
    overrides = module.stage_overrides(args) if module is not None and hasattr(module, "stage_overrides") else {}
    return run_stages(args.config, args.run_dir, [args.name], [args.name] if args.force else [], overrides)


def cmd_run(args) -> int:
    names = list(STAGE_NAMES)
    lo = names.index(args.from_stage) if args.from_stage else 0
    hi = names.index(args.to_stage) if args.to_stage else len(names) - 1
    if lo > hi:
        return _fail(f"--from {args.from_stage} comes after --to {args.to_stage}; stage order: {' -> '.join(names)}", 2)
    selected = names[lo : hi + 1]
    forced = sorted({d for f in args.force for d in downstream_of(f)} & set(selected), key=names.index)
    return run_stages(args.config, args.run_dir, selected, forced)


if __name__ == "__main__":
    sys.exit(main())
