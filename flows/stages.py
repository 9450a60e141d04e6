"""One Prefect flow per stage, and the parent flow that chains them.

A stage flow calls the same `execute_stage` as the local engine, with a mapper that submits each unit as a
Prefect task (coarse: a language x a batch of files, never a document). Prefect's own caching is off: the
run directory's unit markers and fingerprints decide what is done, whichever engine ran it.
"""

from __future__ import annotations

from typing import Any

import flows  # noqa: F401  (offline defaults before Prefect loads)
from prefect import flow, get_run_logger, task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NO_CACHE
from prefect.futures import as_completed
from prefect.task_runners import ProcessPoolTaskRunner, ThreadPoolTaskRunner

from pipeline import progress
from pipeline.config import PipelineConfig
from pipeline.executor import execute_stage, execute_unit
from pipeline.registry import STAGE_NAMES, get_stage
from pipeline.rundir import RunDir
from pipeline.runconfig import load_run_config
from pipeline.stage import StageContext, Unit


@task(name="stage-unit", task_run_name="{ctx.stage}:{unit.id}", cache_policy=NO_CACHE, log_prints=True)
def unit_task(ctx: StageContext, unit: Unit) -> dict[str, Any]:
    return execute_unit(ctx, unit)


def prefect_mapper(ctx: StageContext, units: list[Unit]) -> list[dict[str, Any]]:
    futures = {unit_task.submit(ctx, unit): unit for unit in units}
    for done, fut in enumerate(as_completed(list(futures)), start=1):
        fut.result()  # raise the first failure at once
        progress.unit_done(ctx.stage, done, len(units), futures[fut].id)
    return [f.result() for f in futures]


def task_runner(config: PipelineConfig):
    o = config.orchestration
    return ProcessPoolTaskRunner(max_workers=o.max_workers) if o.task_runner == "processes" else ThreadPoolTaskRunner(max_workers=o.max_workers)


def _run_stage(run_dir: str, force: bool = False) -> dict[str, Any]:
    """Body of every stage flow; the stage is the flow's name."""
    from prefect.runtime import flow_run

    name = flow_run.flow_name
    rd = RunDir(run_dir)
    config = load_run_config(rd)
    manifest, ran = execute_stage(rd, config, name, force=force, mapper=prefect_mapper)
    logger = get_run_logger()
    if ran:
        create_markdown_artifact(key=f"{name}-summary", markdown=get_stage(name).summary_markdown(manifest),
                                 description=f"{name} stage of {rd.path}")
        logger.info("%s published to %s", name, rd.stage_dir(name))
    else:
        logger.info("%s is fresh; skipped", name)
    return {"stage": name, "ran": ran, "fingerprint": manifest.fingerprint, "summary": manifest.summary}


STAGE_FLOWS = {name: flow(name=name, flow_run_name=f"{name}", log_prints=True)(_run_stage) for name in STAGE_NAMES}


@flow(name="europa-pipeline", log_prints=True)
def pipeline_flow(run_dir: str, stages: list[str], forced: list[str]) -> list[dict[str, Any]]:
    """Run the given (implemented) stages in order; a stage is skipped when fresh unless forced."""
    config = load_run_config(RunDir(run_dir))
    runner = task_runner(config)
    return [STAGE_FLOWS[name].with_options(task_runner=runner)(run_dir, force=name in forced) for name in stages]
