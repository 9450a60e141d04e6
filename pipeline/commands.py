"""What every `europa` command shares, core or stage-owned: the run options, resolving the run, running stages.

A stage's own commands (stages/<stage>/commands.py) build on these, so they need nothing from the CLI module
and the CLI needs nothing from them but their registration functions.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any, Iterator

from pipeline.config import PipelineConfig
from pipeline.rundir import RunDir


def add_run_options(parser: argparse.ArgumentParser, *, config: bool = True) -> None:
    if config:
        parser.add_argument("--config", metavar="FILE",
                            help="TOML config (default: the run's run.toml, else configs/demo.toml)")
    parser.add_argument("--run-dir", metavar="DIR", help="run directory (default: runs/<run.name>)")


def resolve_run(args: argparse.Namespace, *, existing: bool = False) -> tuple[RunDir, PipelineConfig]:
    """The run a command works on (`existing`: a command that only reads refuses a run that does not exist)."""
    from pipeline.runconfig import resolve

    return resolve(getattr(args, "config", None), args.run_dir, existing=existing)


def run_stages(config_path: str | None, run_dir_path: str | None, selected: list[str], forced: list[str],
               overrides: dict[str, dict[str, Any]] | None = None) -> int:
    """Bring `selected` up to date (rerunning `forced`) under the run's lock, on the configured engine."""
    from pipeline.status import build_context, statuses
    from pipeline.registry import ENGINES, load
    from pipeline.runconfig import resolve, save_run_config

    from pipeline.runconfig import describe_source

    t0 = time.monotonic()
    rd, config = resolve(config_path, run_dir_path)
    print(f"europa: run directory {rd.path}; {describe_source(config_path, rd)}")
    for section, values in (overrides or {}).items():  # command-line settings become part of run.toml
        config.stages[section] = config.section(section).model_copy(update=values)
    with rd.lock(f"europa {' '.join(sys.argv[1:]) or 'run'}"), run_log(rd) as log_path:
        save_run_config(rd, config)
        state = {s.name: s.state for s in statuses(rd, config)}
        todo = [n for n in selected if n in forced or state[n] != "fresh"]
        if not todo:
            from pipeline.executor import tidy

            for name in selected:
                tidy(rd, name)
            print(f"europa: {', '.join(selected)}: fresh, nothing to do ({time.monotonic() - t0:.1f}s); {rd.path}")
            print_products(rd)
            return 0
        to_run = selected[selected.index(todo[0]):]  # everything after the first stale stage may become stale by it
        preflight(rd, build_context(rd, config, to_run[0]))  # fail fast (missing upstream, bad input)
        results = load(ENGINES[config.orchestration.engine])(rd, config, to_run, forced)
    for r in results:
        verb = "ran" if r["ran"] else "fresh, skipped"
        print(f"europa: {r['stage']}: {verb}: " + counts(r["summary"]))
    print(f"europa: done in {time.monotonic() - t0:.1f}s; outputs in {rd.path}; full log {log_path}")
    print_products(rd)
    return 0


def preflight(rd: RunDir, ctx) -> None:
    """The first stage's checks before any engine starts; a refusal is recorded as the stage's failed attempt,
    so `europa status` says why as it does for a failure during the run."""
    from pipeline.registry import get_stage
    from pipeline.stage import InputError

    try:
        (ctx.impl or get_stage(ctx.stage)).preflight(ctx)
    except InputError as e:
        rd.record_attempt(ctx.stage, "failed", ctx.fingerprint, error=str(e))
        raise


@contextmanager
def run_log(rd: RunDir) -> Iterator[Path]:
    """The full log of one command in <run>/logs/: every progress line and, under Prefect, every engine message
    (flows/stages.py attaches it to Prefect's loggers) — the terminal shows only what a person reads."""
    logs = rd.logs_dir()
    logs.mkdir(parents=True, exist_ok=True)
    path = logs / f"{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}.log"
    handler = RunLogHandler(path, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    handler.set_name(RUN_LOG_HANDLER)
    europa = logging.getLogger("europa")
    europa.setLevel(logging.INFO)
    europa.propagate = False  # the terminal gets these lines from pipeline/progress.py, not from a log handler
    europa.addHandler(handler)
    warnings_log = logging.getLogger("py.warnings")  # library warnings (torch, torchtitan) go to the file too
    warnings_log.addHandler(handler)
    warnings_log.propagate = False
    logging.captureWarnings(True)
    try:
        yield path
    finally:
        logging.captureWarnings(False)
        warnings_log.removeHandler(handler)
        warnings_log.propagate = True
        europa.removeHandler(handler)
        handler.close()


RUN_LOG_HANDLER = "europa-run-log"


class RunLogHandler(logging.FileHandler):
    """The run log, which stops at the first write the file system refuses (a full disk) instead of printing
    a traceback per record: under Prefect, whose print-as-log turns that traceback into records of its own, a
    full disk printed thousands of lines and hit RecursionError. The command's own one-line error says why."""

    failed: OSError | None = None

    def emit(self, record: logging.LogRecord) -> None:
        if self.failed is None:
            super().emit(record)

    def handleError(self, record: logging.LogRecord) -> None:
        error = sys.exc_info()[1]
        if not isinstance(error, OSError):
            return super().handleError(record)
        self.failed = error
        with suppress(OSError):
            self.close()


def counts(summary: dict[str, Any]) -> str:
    return ", ".join(f"{k} {v:,}" if isinstance(v, int) else f"{k} {v}" for k, v in summary.items())


def print_products(rd: RunDir) -> None:
    """Where the things people come for are (each stage that makes one says where), once they exist."""
    from pipeline.registry import commands_modules

    for module in commands_modules():
        for line in getattr(module, "products", lambda _rd: [])(rd):
            print(f"europa: {line}")
