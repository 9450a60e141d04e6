"""The evaluate stage's command: `europa evaluate` (the run's new complete checkpoints, or one, now): in this
process, or as a distributed job ([evaluate.job] launcher torchrun or slurm) that it starts and follows. It
takes only the evaluation store's lock, never the run's: training holds that one for weeks. (The same on a
schedule, `europa eval-schedule`, is a Prefect deployment: flows/commands.py.)"""

from __future__ import annotations

import argparse
import sys

from pipeline.commands import add_run_options
from pipeline.rundir import RunDir


def add_commands(sub: argparse._SubParsersAction) -> None:
    ev = sub.add_parser("evaluate", help="evaluate the run's checkpoints that are not evaluated yet (or one)")
    add_run_options(ev, config=False)
    ev.add_argument("--checkpoint", metavar="step-N|latest", default=None,
                    help="evaluate this complete checkpoint (again, if it was); default: every new one")
    ev.set_defaults(handler=cmd_evaluate)


def products(rd: RunDir) -> list[str]:
    report = rd.store_dir("eval") / "report.md"
    return [f"evaluation report: {report}"] if report.exists() else []


def cmd_evaluate(args) -> int:
    from pipeline.runconfig import resolve
    from stages.evaluate.runner import evaluate_run

    rd, config = resolve(None, args.run_dir, existing=True)
    outcome = evaluate_run(rd, config, which=args.checkpoint)
    for s in outcome.skipped:
        print(f"europa: evaluate: skipped step-{s['step']}: {s['reason']}", file=sys.stderr)
    for p in outcome.pending:
        print(f"europa: evaluate: step-{p['step']}: {p['state']}", file=sys.stderr)
    print(f"europa: evaluate: {outcome.message}")
    if outcome.evaluated:
        print(f"europa: evaluate: report {rd.store_dir('eval') / 'report.md'}")
    return 0
