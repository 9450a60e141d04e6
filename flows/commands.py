"""The orchestration layer's command: `europa eval-schedule` serves the evaluation of new checkpoints as a
Prefect deployment on a cron schedule (flows/evaluate.py), while training writes them.

A schedule needs a Prefect server that runs its scheduler and outlives the command's start-up: without one,
Prefect would quietly start a temporary in-process server, the deployment would appear to be "scheduled", and
nothing would show in any UI afterwards. So the command refuses when no server is configured (PREFECT_API_URL)
or the configured one does not answer, naming the one command that works: `--start-server`, which starts a
local `prefect server start` for the deployment (its UI at the printed address) and stops it on Ctrl-C."""

from __future__ import annotations

import argparse
import sys

from pipeline.commands import add_run_options
from pipeline.errors import UsageError


def add_commands(sub: argparse._SubParsersAction) -> None:
    es = sub.add_parser("eval-schedule", help="serve a Prefect deployment that evaluates new checkpoints on a schedule")
    add_run_options(es, config=False)
    es.add_argument("--cron", default=None, help='cron schedule, UTC (default: [evaluate] cron, "*/30 * * * *")')
    es.add_argument("--start-server", action="store_true",
                    help="start a local Prefect server (prefect server start) for the deployment; stopped on Ctrl-C")
    es.add_argument("--port", type=int, default=4200, help="port of the server --start-server starts (default 4200)")
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
    from flows.server import configured_api_url, local_server, responds

    api = configured_api_url()
    again = f"europa eval-schedule --run-dir {rd.path} --start-server"
    if api is None and not args.start_server:
        raise UsageError("eval-schedule: no Prefect server is configured (PREFECT_API_URL), and a schedule needs one "
                         f"that keeps running: run `{again}` (starts one here), or point PREFECT_API_URL at yours")
    if api is not None and not responds(api):
        raise UsageError(f"eval-schedule: the Prefect server at {api} (PREFECT_API_URL) does not answer; start it, "
                         f"or unset PREFECT_API_URL and run `{again}`")
    with local_server(args.port) if api is None else _nothing(api) as url:
        print(f"europa: evaluating new checkpoints of {rd.path} on {cron!r}; Prefect server {url} "
              f"(UI {url.removesuffix('/api')}); Ctrl-C stops", file=sys.stderr)
        serve_schedule(str(rd.path), cron, api_url=url)
    return 0


class _nothing:
    def __init__(self, url: str):
        self.url = url

    def __enter__(self) -> str:
        return self.url

    def __exit__(self, *exc) -> None:
        return None
