"""The Dask scheduler a pipeline run's data stages share: a cluster someone else started (`dask_address`, e.g.
dask-jobqueue on Slurm) or a local one of `max_workers` single-threaded processes.

A local cluster is started before the flow when `europa` can (run_stages: `started_early`), while Prefect's
temporary server starts (flows/temporary_server.py), and each worker imports the stages' code meanwhile. Both
would otherwise be serial: the server's start, the cluster's, and each worker's import of Prefect's task engine
and a stage before its first unit, seconds that a run with one worker pays as much as a run with two.
pipeline_flow takes the early cluster over (`dask_scheduler`); after the data stages it closes it on a thread of
its own (`close_meanwhile`), which `started_early` joins when the run ends, so no worker process outlives the run
and the flow's end need not wait for the nannies to stop.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from flows import DASK_WORKER_CONFIG, DASK_WORKER_ENV
from pipeline import progress
from pipeline.config import PipelineConfig

# The stages whose units task_runner = "dask" sends to Dask workers (CPU work, files in, files out). The later
# stages' few units start or follow the training job and read its checkpoints: they stay on this machine.
DATA_STAGES = ("ingest", "tokenizer", "shards")

# Local clusters started before their run's flow, by run directory, until pipeline_flow takes them over.
_STARTED: dict[str, "LocalDaskCluster"] = {}
# Early clusters the flow is done with, closing meanwhile (threads), by run directory: joined when the run ends.
_CLOSING: dict[str, list[threading.Thread]] = {}


class LocalDaskCluster:
    """A local cluster whose workers report to `api_url`, with one import task queued on each worker (`modules`
    and `stages`: see import_stage_code)."""

    def __init__(self, config: PipelineConfig, api_url: str | None, modules: Sequence[str] = (), stages: Sequence[str] = ()):
        import dask
        from distributed import Client, LocalCluster

        o = config.orchestration
        logging.getLogger("distributed").setLevel(logging.WARNING)  # the cluster's lifecycle is not news
        spawn_env = {**dask.config.get("distributed.nanny.pre-spawn-environ"), **DASK_WORKER_ENV}
        with dask.config.set({"distributed.nanny.pre-spawn-environ": spawn_env, **DASK_WORKER_CONFIG}):
            self.cluster = LocalCluster(n_workers=o.max_workers, threads_per_worker=1, processes=True,
                                        dashboard_address=None, env={"PREFECT_API_URL": api_url} if api_url else {})
        self.api_url, self.address = api_url, self.cluster.scheduler_address
        self._client = Client(self.cluster)
        # Futures, kept so the imports are not cancelled; units submitted meanwhile wait behind them.
        self._imports = [self._client.submit(import_stage_code, list(modules), list(stages), workers=[w], pure=False,
                                             key=f"imports-{w}")
                         for w in self._client.scheduler_info()["workers"]] if modules or stages else []
        progress.note("dask", f"units run on a local Dask cluster: {o.max_workers} worker processes at {self.address}")

    def close(self) -> None:
        self._imports.clear()
        self._client.close()
        self.cluster.close()

    def close_meanwhile(self, run_dir: str) -> None:
        """Close on a thread of its own, joined when `started_early` ends: the nannies' graceful stop of their
        workers takes seconds, which the end of the flow (its last states, the log drain) need not wait for.
        Joined before the temporary server stops: a worker's last logs must still find it."""
        def close() -> None:
            try:
                self.close()
            except Exception as e:  # the run's work is done and recorded: say it, in one line, and go on
                logging.getLogger("europa").warning("closing the local Dask cluster at %s failed: %s", self.address, e)

        closing = threading.Thread(target=close, name=f"close-dask-{self.address}")
        closing.start()
        _CLOSING.setdefault(run_dir, []).append(closing)


def import_stage_code(modules: list[str], stages: list[str]) -> None:
    """On a worker: what its first unit would import (Prefect's task engine and the task's module, named by the
    caller, then each stage's)."""
    import importlib

    from pipeline.registry import get_stage

    for module in modules:
        importlib.import_module(module)
    for name in stages:
        get_stage(name)


@contextmanager
def started_early(config: PipelineConfig, run_dir: str, stages: list[str], api_url: str | None,
                  modules: list[str]) -> Iterator[None]:
    """Around a run's flow: start its local Dask cluster now when its data stages will use one, for
    `dask_scheduler` to take over, its workers importing `modules` and the data stages' code; closed here if the
    flow did not take it (it failed before, or never ran them)."""
    o = config.orchestration
    data = [s for s in stages if s in DATA_STAGES]
    if o.task_runner == "dask" and not o.dask_address and data:
        _STARTED[run_dir] = LocalDaskCluster(config, api_url, modules, data)
    try:
        yield
    finally:
        left = _STARTED.pop(run_dir, None)
        if left is not None:
            left.close()
        for closing in _CLOSING.pop(run_dir, []):  # no worker process outlives the run
            closing.join()


def discard_early(run_dir: str, api_url: str | None) -> None:
    """Close the early cluster of `run_dir` when its workers were told another API URL than the flow's (the
    temporary server had to move to another port): pipeline_flow then starts one that reports to the right one."""
    early = _STARTED.get(run_dir)
    if early is not None and early.api_url != api_url:
        _STARTED.pop(run_dir).close()


@contextmanager
def dask_scheduler(config: PipelineConfig, run_dir: str | None = None) -> Iterator[str | None]:
    """The address of the scheduler the data stages of one run share: `dask_address` when set, else the local
    cluster started early for `run_dir`, else a local cluster started now (its workers warm as they go), closed
    when the block ends. None for the other task runners."""
    o = config.orchestration
    if o.task_runner != "dask":
        yield None
    elif o.dask_address:
        progress.note("dask", f"units run on the Dask scheduler at {o.dask_address}")
        api = flow_api_url() or ""
        if _is_loopback(api) and not _is_loopback(o.dask_address):
            progress.note("dask", f"warning: this flow reports to the Prefect API at {api}, which workers on other "
                          f"machines cannot reach; start a server they can (docs/scaling.md) and set PREFECT_API_URL")
        yield o.dask_address
    else:
        early = _STARTED.pop(run_dir, None) if run_dir else None
        local = early or LocalDaskCluster(config, flow_api_url())
        try:
            yield local.address
        finally:
            if early is not None:  # started_early is still around it, and waits for it
                early.close_meanwhile(run_dir)
            else:
                local.close()


def flow_api_url() -> str | None:
    """The API the running flow reports to, for local Dask workers. Without it, a worker of a run with no
    PREFECT_API_URL would start a temporary server of its own, and its task runs would never show up in the
    flow's."""
    from prefect.context import FlowRunContext

    ctx = FlowRunContext.get()
    url = str(ctx.client.api_url) if ctx is not None and ctx.client is not None else ""
    return url if url.startswith("http") and "ephemeral-prefect" not in url else None


def _is_loopback(url: str) -> bool:
    host = url.split("://", 1)[-1].split("/", 1)[0].rsplit(":", 1)[0]
    return host in ("127.0.0.1", "localhost", "::1", "[::1]")
