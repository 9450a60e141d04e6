"""What each Prefect task run carries to its worker, made cheap: the flow's settings, and an API client.

Prefect rebuilds both for every task run that leaves `europa`'s process (a process-pool or Dask worker), a fixed
cost per task run (measured: docs/benchmarks.md):
- the flow's settings are turned into a dict for every submit (SettingsContext.serialize, in `europa`) and built
  again from it on the worker (pydantic-settings reads the environment, the profiles and the TOML files again,
  twice per task run in a process pool);
- every task run opens two API clients (one to hydrate its context, one in the task engine), each loading
  certifi's CA bundle into a TLS context even for http:// and a connection of its own.
`settings_by_value` sends the settings object itself (pickled, as the rest of the task's context is), which the
worker takes as it is; `keep_api_client` gives a worker one client for its life, which both reuse (Prefect's
documented reuse of an entered SyncClientContext): the pool's initializer, and `dask_setup` for Dask workers
(a Dask preload, named in flows.DASK_WORKER_CONFIG).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from prefect.context import SettingsContext


class SettingsByValue(SettingsContext):
    """A settings context that travels as its objects, not as a dict to validate again. Prefect turns settings
    into a dict so that a Windows path cannot reach a Linux worker; a pipeline's processes share one platform
    (and one installation), so the objects are what the dict would have been rebuilt into."""

    def serialize(self, include_secrets: bool = True) -> dict[str, Any]:
        if not include_secrets:  # a record for people, not for a worker: Prefect's own, secrets masked
            return super().serialize(include_secrets=False)
        return {"profile": self.profile, "settings": self.settings}


@contextmanager
def settings_by_value() -> Iterator[None]:
    """Around the submits of task runs: the current settings, sent as SettingsByValue."""
    current = SettingsContext.get()
    with SettingsByValue(profile=current.profile, settings=current.settings):
        yield


def keep_api_client() -> None:
    """One Prefect API client for this worker process's life, entered in the context its task runs start from.
    Without an API URL there is no client to keep (Prefect would start a server for it). The server's version is
    not checked here: `europa` checked the same server with the same installation, and a Dask worker starts
    while the run's temporary server may still be starting (flows/dask_cluster.py)."""
    from prefect.context import SyncClientContext
    from prefect.settings import PREFECT_API_URL, PREFECT_CLIENT_SERVER_VERSION_CHECK_ENABLED, temporary_settings

    from pipeline.secrets import install_log_redaction

    install_log_redaction()  # this process's log records reach the server too: masked as they are made
    if PREFECT_API_URL.value():
        with temporary_settings({PREFECT_CLIENT_SERVER_VERSION_CHECK_ENABLED: False}):
            SyncClientContext().__enter__()  # left entered: the worker process ends with its pool or cluster


def init_pool_worker() -> None:
    """The process pool's initializer: the worker ends with `europa` (pipeline/children.py) and keeps one API
    client for its life."""
    from pipeline.children import exit_with_parent

    exit_with_parent()
    keep_api_client()


def dask_setup(worker: Any) -> None:
    """Dask's preload hook, run in the worker process as it starts, before it registers with the scheduler: the
    tasks it then runs start from a copy of this context (distributed's run_in_executor_with_context), so the
    client entered here is theirs (tests/flows/test_flows.py checks that it is)."""
    keep_api_client()
