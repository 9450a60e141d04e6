"""One Prefect flow per stage, and the parent flow that chains them.

A stage flow calls the same `execute_stage` as the local engine, with a mapper that submits units as Prefect
tasks (coarse: a language x a batch of files, never a document; in bundles, flows/bundles.py) to the
task runner `[orchestration]` names: threads or processes on this machine, or Dask workers (prefect-dask;
docs/scaling.md). Prefect's own caching is off: the run directory's unit markers and fingerprints decide what is done, whichever engine ran it.
"""

from __future__ import annotations

import hashlib
import logging
import queue
import re
import time
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any, Iterator

import flows  # noqa: F401  importing flows first sets the offline defaults before Prefect loads
from prefect import flow, get_run_logger, task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NO_CACHE
from prefect.context import FlowRunContext
from prefect.task_runners import ProcessPoolTaskRunner, ThreadPoolTaskRunner

from flows.bundles import BundlePlanner
from flows.dask_cluster import DATA_STAGES, dask_scheduler, discard_early, started_early
from flows.task_context import init_pool_worker, settings_by_value
from flows.temporary_server import reporting_to, temporary_server
from pipeline import progress
from pipeline.config import PipelineConfig
from pipeline.errors import interrupt_on_sigterm
from pipeline.executor import PlannedUnits, UnitBatch, execute_stage, execute_unit, unit_finished, unit_stage
from pipeline.retry import is_transient
from pipeline.registry import STAGE_NAMES, get_stage
from pipeline.rundir import RunDir
from pipeline.runconfig import load_run_config
from pipeline.stage import StageContext


IN_FLIGHT_PER_WORKER = 2  # tasks submitted per worker: one running, one waiting, so no worker waits on `europa`
LOOK_AGAIN_S = 5.0  # how often the mapper asks a Dask scheduler its size again (a cluster that grows or shrinks)
PROGRESS_S = 1.0  # how often the mapper looks for units that finished inside tasks still running


@dataclass(frozen=True)
class BundleDone:
    """What a finished bundle tells `europa`, whatever its size: its seconds, the retries of the units that took
    any (by their place in the bundle) and the work its units did (`unit_work`, for the progress line's rate).
    The results stay in the unit folders."""

    seconds: float
    retries: dict[int, int]
    work: tuple[float, str] | None


@task(name="stage-units", task_run_name="{label}", cache_policy=NO_CACHE, log_prints=True)
def units_task(ctx: StageContext[Any], batch: UnitBatch, label: str) -> BundleDone:
    """The units of one bundle (flows/bundles.py), in order."""
    stage, retries, work, t0 = unit_stage(ctx), {}, None, time.perf_counter()
    for k, unit in enumerate(batch):
        done = execute_unit(ctx, unit)
        if done.retries:
            retries[k] = done.retries
        w = stage.unit_work(unit, done.result)
        if w:
            work = (work[0] + w[0], w[1]) if work else w
    return BundleDone(time.perf_counter() - t0, retries, work)


@dataclass
class InFlight:
    """A submitted bundle: where its units are in the hand-out order, the tries it has had, and how many of its
    units have been reported."""

    positions: range
    batch: UnitBatch
    tries: int
    reported: int = 0


def prefect_mapper(ctx: StageContext[Any], units: PlannedUnits) -> dict[str, int]:
    """The units as Prefect tasks in bundles of decreasing size (flows/bundles.py), a few tasks per worker in
    flight, so a step makes task runs by the workers, not by the units. Each unit is reported as its folder
    appears, also while its bundle's task still runs. The first failure is raised at once, except a transient
    one (a Dask worker lost with its node), after which the bundle's unreported units are submitted again
    ([orchestration] retries, counted for each of them like a unit's own; finished units are not run again)."""
    o = ctx.config.orchestration
    planner = BundlePlanner([units.cost(k) for k in range(len(units))])
    workers = PoolSize(o.max_workers)
    finished: queue.Queue = queue.Queue()
    pending: dict[Any, InFlight] = {}
    retries: dict[str, int] = {}
    reported = [0]

    def submit(positions: range, tries: int) -> None:
        batch = units.batch(positions.start, positions.stop)
        more = f"+{len(batch) - 1}" if len(batch) > 1 else ""
        with settings_by_value():  # not rebuilt by every task run (flows/task_context.py)
            future = units_task.submit(ctx, batch, f"{ctx.stage}:{units.step.name}:{batch.ids[0]}{more}")
        pending[future] = InFlight(positions, batch, tries)
        future.add_done_callback(finished.put)

    def report(flight: InFlight, upto: int) -> None:
        """Progress for the bundle's units up to `upto` (the work they did is added when the bundle ends)."""
        for i in range(flight.reported, upto):
            reported[0] += 1
            progress.unit_done(ctx.stage, reported[0], len(units), flight.batch.ids[i])
        flight.reported = max(flight.reported, upto)

    def finished_so_far(flight: InFlight) -> int:
        """How many of the bundle's units have their unit folder (a task runs them in order)."""
        n = flight.reported
        while n < len(flight.batch) and unit_finished(ctx, units.step.name, flight.batch.ids[n]):
            n += 1
        return n

    while planner or pending:
        width = workers()
        while planner and len(pending) < IN_FLIGHT_PER_WORKER * width:
            submit(planner.next_bundle(width), 0)
        try:
            future = finished.get(timeout=PROGRESS_S)
        except queue.Empty:
            for flight in pending.values():
                report(flight, finished_so_far(flight))
            continue
        flight = pending.pop(future)
        try:
            took = future.result()
        except Exception as e:
            if flight.tries >= o.retries or not is_transient(e):
                raise
            report(flight, finished_so_far(flight))
            left = range(flight.positions.start + flight.reported, flight.positions.stop)
            if not left:  # every unit of it finished; what was lost is the task's answer (and their retry counts)
                continue
            first = flight.batch.ids[flight.reported]
            progress.note(ctx.stage, f"unit(s) {first}{f' and {len(left) - 1} more' if len(left) > 1 else ''}: "
                          f"{type(e).__name__}: {e}; submitting again ({flight.tries + 1} of {o.retries})")
            time.sleep(o.retry_backoff_s * 2**flight.tries)
            submit(left, flight.tries + 1)
            continue
        planner.observe(flight.positions, took.seconds)
        for k, uid in enumerate(flight.batch.ids):
            if took.retries.get(k, 0) + flight.tries:
                retries[uid] = took.retries.get(k, 0) + flight.tries
        if took.work:
            progress.work_done(ctx.stage, took.work)
        report(flight, len(flight.batch))
    return retries


class PoolSize:
    """How many units can run at once: the threads of the Dask scheduler's workers (asked again every
    LOOK_AGAIN_S: a dask-jobqueue cluster grows as its jobs start), else `max_workers` on this machine."""

    def __init__(self, max_workers: int):
        self._size, self._asked = max_workers, -LOOK_AGAIN_S
        from prefect_dask import DaskTaskRunner  # here, as in task_runner: runs without Dask never import it

        flow_run = FlowRunContext.get()
        runner = flow_run.task_runner if flow_run else None

        self._client = runner.client if isinstance(runner, DaskTaskRunner) else None

    def __call__(self) -> int:
        if self._client is not None and time.monotonic() - self._asked >= LOOK_AGAIN_S:
            self._size, self._asked = max(1, sum(self._client.nthreads().values())), time.monotonic()
        return self._size


def task_runner(config: PipelineConfig, dask_address: str | None = None):
    """The Prefect task runner `[orchestration]` asks for; dask needs the scheduler's address (see dask_scheduler)."""
    o = config.orchestration
    if o.task_runner == "dask":
        from prefect_dask import DaskTaskRunner

        return DaskTaskRunner(address=dask_address or o.dask_address)
    if o.task_runner == "processes":
        return ProcessPoolTaskRunner(max_workers=o.max_workers, initializer=init_pool_worker)
    return ThreadPoolTaskRunner(max_workers=o.max_workers)


# The configuration a pipeline run was started with, by run directory, for the flows of this process: the
# run's run.toml has its secrets masked (it is a record), so flows started here must not run from it. Flows
# started elsewhere (a deployment) read run.toml; units travel to other processes with their context.
_CONFIGS: dict[str, PipelineConfig] = {}


def _config(run_dir: str) -> PipelineConfig:
    return _CONFIGS.get(str(RunDir(run_dir).path)) or load_run_config(RunDir(run_dir))


def _run_stage(run_dir: str, force: bool = False) -> dict[str, Any]:
    """Body of every stage flow; the stage is the flow's name."""
    from prefect.runtime import flow_run

    interrupt_on_sigterm()  # Prefect's engine put its own SIGTERM handler in place for this flow run
    name = flow_run.flow_name
    rd = RunDir(run_dir)
    config = _config(run_dir)
    manifest, ran = execute_stage(rd, config, name, force=force, mapper=prefect_mapper)
    logger = get_run_logger()
    if ran:
        report = rd.stage_dir(name) / "report.md"  # a stage's own report, where it writes one, is what people read
        markdown = report.read_text(encoding="utf-8") if report.exists() else get_stage(name).summary_markdown(manifest)
        create_markdown_artifact(key=artifact_key(rd, f"{name}-summary"), markdown=markdown,
                                 description=f"{name} stage of {rd.path}")
        logger.info("%s published to %s", name, rd.stage_dir(name))
    else:
        logger.info("%s is fresh; skipped", name)
    return {"stage": name, "ran": ran, "fingerprint": manifest.fingerprint, "summary": manifest.summary}


STAGE_FLOWS = {name: flow(name=name, flow_run_name=f"{name}", log_prints=True)(_run_stage) for name in STAGE_NAMES}


def run_stages(run_dir: RunDir, config: PipelineConfig, stages: list[str], forced: list[str]) -> list[dict[str, Any]]:
    """The Prefect engine (pipeline/registry.py ENGINES): the parent flow over the stages' flows, named after the
    run; Prefect's own console messages go to the run's log file (pipeline/commands.py run_log), not the terminal.

    Without PREFECT_API_URL the run starts Prefect's temporary server (flows/temporary_server.py) and makes its
    URL the run's API URL, so that the processes the flow starts report to it too. Why the URL: a
    ProcessPoolTaskRunner worker receives the parent's settings, which name no API when the server is the
    temporary one, so each worker process would start a temporary server of its own (a uvicorn each, all writing
    the one SQLite database under PREFECT_HOME), on CPU taken from the workers. A local Dask cluster starts while
    the server does (flows/dask_cluster.py)."""
    from prefect.settings import (PREFECT_API_URL, PREFECT_SERVER_EPHEMERAL_ENABLED,
                                  PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS)

    from flows.server import ServerWatch, check_database, check_reachable

    configured = PREFECT_API_URL.value() or None
    if configured:
        check_reachable(configured)
    elif PREFECT_SERVER_EPHEMERAL_ENABLED.value():
        check_database()  # the temporary server's, if it is to be PostgreSQL
    key = str(run_dir.path)
    timeout = config.orchestration.server_timeout_s
    _CONFIGS[key] = config
    try:
        with prefect_console_to_run_log(), temporary_server() as server, \
                started_early(config, key, stages, server.api_url if server else configured,
                              modules=["prefect.task_engine", __name__]):
            named = pipeline_flow.with_options(flow_run_name=f"{run_dir.path.name}: {' -> '.join(stages)}")
            if server is None:
                with ServerWatch(configured, key, timeout) if configured else nullcontext():
                    return named(key, stages, forced)
            server.wait(PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS.value())
            discard_early(key, server.api_url)
            with reporting_to(server.api_url), ServerWatch(server.api_url, key, timeout, server.process):
                return named(key, stages, forced)
    finally:
        _CONFIGS.pop(key, None)


@contextmanager
def prefect_console_to_run_log() -> Iterator[None]:
    """Prefect writes a line per task and a traceback per failure to the terminal; the CLI shows progress and one
    line per error instead. Its console handlers are raised to CRITICAL for the run and the run's log file (the
    handler pipeline/commands.py put on the `europa` logger) receives everything, at Prefect's own levels."""
    from prefect.logging.handlers import PrefectConsoleHandler

    from pipeline.commands import RUN_LOG_HANDLER

    loggers = [logging.getLogger()] + [lg for lg in logging.Logger.manager.loggerDict.values() if isinstance(lg, logging.Logger)]
    consoles = [(h, h.level) for lg in loggers for h in lg.handlers if isinstance(h, PrefectConsoleHandler)]
    files = [h for h in logging.getLogger("europa").handlers if h.get_name() == RUN_LOG_HANDLER]
    root = logging.getLogger()
    for h, _ in consoles:
        h.setLevel(logging.CRITICAL)
    for h in files:
        root.addHandler(h)
    try:
        yield
    finally:
        for h, level in consoles:  # afterwards warnings only: the temporary server's goodbye is not news either
            h.setLevel(max(level, logging.WARNING))
        for h in files:
            root.removeHandler(h)


def artifact_key(run_dir: RunDir, name: str) -> str:
    """A Prefect artifact key per run directory (two runs never overwrite each other's): the folder's name and
    a short hash of its path, then the artifact's name; only the characters Prefect allows."""
    slug = re.sub(r"[^a-z0-9]+", "-", run_dir.path.name.lower()).strip("-") or "run"
    return f"{slug}-{hashlib.sha1(str(run_dir.path).encode()).hexdigest()[:8]}-{name}"


@flow(name="europa-pipeline", log_prints=True)
def pipeline_flow(run_dir: str, stages: list[str], forced: list[str]) -> list[dict[str, Any]]:
    """Run the given stages in order; a stage is skipped when fresh unless forced."""
    config = _config(run_dir)
    results = []
    data, later = [s for s in stages if s in DATA_STAGES], [s for s in stages if s not in DATA_STAGES]
    if data:  # a local Dask cluster lives only as long as the data stages
        with dask_scheduler(config, run_dir) as address:
            runner = task_runner(config, address)
            results += [STAGE_FLOWS[name].with_options(task_runner=runner)(run_dir, force=name in forced) for name in data]
    if later:
        o = config.orchestration
        runner = ThreadPoolTaskRunner(max_workers=o.max_workers) if o.task_runner == "dask" else task_runner(config)
        results += [STAGE_FLOWS[name].with_options(task_runner=runner)(run_dir, force=name in forced) for name in later]
    return results
