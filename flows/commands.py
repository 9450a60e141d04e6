"""The orchestration layer's command: `europa eval-schedule` serves the evaluation of new checkpoints as a
Prefect deployment on a cron schedule (flows/evaluate.py), while training writes them."""

from __future__ import annotations

import argparse
import sys

from pipeline.commands import add_run_options
from pipeline.errors import UsageError


def add_commands(sub: argparse._SubParsersAction) -> None:
    es = sub.add_parser("eval-schedule", help="serve a Prefect deployment that evaluates new checkpoints on a schedule")
    add_run_options(es, config=False)
    es.add_argument("--cron", default=None, help='cron schedule, UTC (default: [evaluate] cron, "*/30 * * * *")')
    es.set_defaults(handler=cmd_eval_schedule)


def cmd_eval_schedule(args) -> int:
    from pipeline.runconfig import resolve

    rd, config = resolve(None, args.run_dir, existing=True)
    if not rd.config_path.exists():
        raise UsageError(f"eval-schedule: {rd.path} has no run.toml; start the run first (europa run --run-dir {rd.path})")
    cron = args.cron or config.section("evaluate").cron
    from prefect.client.schemas.schedules import CronSchedule

    try:
        CronSchedule(cron=cron)
    except ValueError as e:
        raise UsageError(f"eval-schedule: --cron {cron!r} is not a valid cron expression ({e}); e.g. \"*/30 * * * *\"") from None
    from flows.evaluate import serve_schedule  # Prefect loads only here

    print(f"europa: evaluating new checkpoints of {rd.path} on {cron!r}; Ctrl-C stops", file=sys.stderr)
    serve_schedule(str(rd.path), cron)
    return 0
