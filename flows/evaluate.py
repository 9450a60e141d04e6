"""Scheduled evaluation: a Prefect flow that evaluates a run's new complete checkpoints, and its deployment.

`europa eval-schedule --run-dir R --cron "*/30 * * * *"` serves `evaluate_new_checkpoints` for R on that
schedule (`flow.serve`: no work pool, no worker; runs offline). Each run evaluates only checkpoints not yet
evaluated, leaves the report as a markdown artifact (key `evaluation-report`) and, when a language regressed,
an `evaluation-regressions` artifact and a warning in the flow's log, so the Prefect UI shows it at once.
A run that finds nothing new, or no checkpoint yet, succeeds quietly: the schedule keeps going while
training writes checkpoints.
"""

from __future__ import annotations

from typing import Any

import flows  # noqa: F401  (offline defaults before Prefect loads)
from prefect import flow, get_run_logger
from prefect.artifacts import create_markdown_artifact, create_table_artifact

from flows.stages import artifact_key
from pipeline.rundir import RunDir
from pipeline.runconfig import load_run_config


@flow(name="europa-evaluate", flow_run_name="evaluate {run_dir}", log_prints=True)
def evaluate_new_checkpoints(run_dir: str, checkpoint: str | None = None) -> dict[str, Any]:
    from pipeline.rundir import StoreLocked
    from stages.evaluate.runner import evaluate_run

    logger = get_run_logger()
    rd = RunDir(run_dir)
    config = load_run_config(rd)
    try:
        outcome = evaluate_run(rd, config, which=checkpoint, wait=False)  # a Slurm job is looked at next round
    except StoreLocked as e:  # another evaluation holds the results folder: this round has nothing to do
        logger.info("%s", e)
        return {"evaluated": [], "skipped": [], "flagged": [], "message": str(e)}
    logger.info("%s: %s", rd.path, outcome.message)
    for s in outcome.skipped:
        logger.warning("skipped step %s: %s", s["step"], s["reason"])
    for p in outcome.pending:
        logger.info("step %s: evaluation job still running (%s)", p["step"], p["state"])
    if outcome.evaluated and outcome.report:
        create_markdown_artifact(key=artifact_key(rd, "evaluation-report"), markdown=outcome.report,
                                 description=f"per-language evaluation of {rd.path}")
    if outcome.flagged:
        logger.warning("REGRESSION: %s", ", ".join(f"{r['lang']} ({r['set']}) {r['relative_change']:+.1%}" for r in outcome.flagged))
        create_table_artifact(key=artifact_key(rd, "evaluation-regressions"), table=[
            {"language": r["lang"], "set": r["set"], "figure": "bits per byte" if r["kind"] == "bits_per_byte" else r["metric"],
             "value": round(r["value"], 4), "previous": round(r["previous_value"], 4),
             "change": f"{r['relative_change']:+.2%}",
             "standard_errors": None if not r["change_stderr"] else round(r["change"] / r["change_stderr"], 1),
             "since_step": r["previous_step"]} for r in outcome.flagged],
            description=f"languages worse beyond the threshold and their noise ({rd.path})")
    return {"evaluated": outcome.evaluated, "skipped": outcome.skipped, "pending": outcome.pending,
            "flagged": [r["lang"] for r in outcome.flagged], "message": outcome.message}


def deployment_name(run_dir: RunDir) -> str:
    return f"evaluate-{run_dir.path.name}"


def serve_schedule(run_dir: str, cron: str, *, api_url: str) -> None:
    """Block, evaluating on the cron schedule against the Prefect server at `api_url`, until interrupted."""
    from prefect.settings import PREFECT_API_URL, temporary_settings

    rd = RunDir(run_dir)
    with temporary_settings(updates={PREFECT_API_URL: api_url}):
        evaluate_new_checkpoints.serve(name=deployment_name(rd), cron=cron, parameters={"run_dir": str(rd.path)},
                                       description=f"evaluate new checkpoints of {rd.path}")
