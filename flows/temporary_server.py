"""Prefect's temporary API server for a run that names none (no PREFECT_API_URL), started without waiting.

Prefect starts the same server itself (prefect.server.api.server.SubprocessASGIServer) the first time a client
needs an API, and waits for it there. Starting it here instead gains two things on a small machine:
- the run's other start-up work (the local Dask cluster and its workers' imports, flows/dask_cluster.py) runs
  while the server starts, which takes seconds, most of them imports;
- `europa` never imports Prefect's server package (seconds of its own start-up), which SubprocessASGIServer lives in.
The command line is Prefect's own (SubprocessASGIServer._run_uvicorn_command, Prefect 3.9): uvicorn with Prefect's
app factory, no UI, the ephemeral-server switches, and this process's Prefect settings in its environment.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from pipeline.children import die_with_parent

STARTUP_FAILURE = 3  # uvicorn's exit status when it could not bind its port or its app did not start
STOP_WAIT_S = 5.0  # as Prefect's own: SIGTERM, then SIGKILL after this long
DRAIN_WAIT_S = 10.0  # for the logs and events this process has not sent yet

log = logging.getLogger("europa")


class TemporaryServer:
    """One Prefect API server on a free port of 127.0.0.1, its database under PREFECT_HOME; `api_url` is known
    from the start, `wait` blocks until it answers, `stop` ends it."""

    def __init__(self) -> None:
        self.port = _free_port()
        self._process: subprocess.Popen | None = None

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/api"

    @property
    def process(self) -> subprocess.Popen | None:
        return self._process

    def start(self) -> None:
        """Why SIGINT is blocked while it starts (its process inherits the mask): a Ctrl-C on the terminal
        reaches every process of the foreground group; without this it also ended the server, and the flow
        engine then spent minutes retrying to record the interrupted flow runs against it instead of exiting.
        The server still stops on SIGTERM, as `stop` ends it; a Ctrl-C pressed meanwhile is delivered right after."""
        import prefect
        from prefect.settings import get_current_settings

        env = {**os.environ, "PREFECT_UI_ENABLED": "0", "PREFECT__SERVER_EPHEMERAL": "1", "PREFECT__SERVER_FINAL": "1",
               **get_current_settings().to_environment_variables(exclude_unset=True)}
        env.pop("PREFECT_API_URL", None)
        command = [sys.executable, "-m", "uvicorn", "--app-dir", str(Path(prefect.__file__).parent.parent),
                   "--factory", "prefect.server.api.server:create_app", "--host", "127.0.0.1", "--port", str(self.port),
                   "--log-level", "error", "--lifespan", "on"]
        log.info("Starting temporary server on http://127.0.0.1:%d (Prefect's API for this run; set PREFECT_API_URL "
                 "to use a server of your own)", self.port)
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            self._process = subprocess.Popen(command, env=env, preexec_fn=die_with_parent())
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)

    def wait(self, timeout_s: float) -> None:
        """Until the server answers. uvicorn exits with STARTUP_FAILURE both when its port was taken between
        choosing it and binding it, and when the app itself failed to start (its database, say): only the first
        starts it again, on another port (so `api_url` changes; callers that handed it out compare)."""
        from flows.server import responds
        from pipeline.errors import EuropaError

        deadline = time.monotonic() + timeout_s
        while True:
            status = self._process.poll()
            if status == STARTUP_FAILURE and not _is_free(self.port) and time.monotonic() < deadline:
                self.port = _free_port()
                self.start()
                continue
            if status is not None:
                self._process = None
                raise EuropaError(f"Prefect's temporary server exited with status {status} before it answered; "
                                  f"its messages are above. Start one yourself (`prefect server start`) and set "
                                  f"PREFECT_API_URL, or see docs/scaling.md")
            if responds(self.api_url, timeout=2.0):
                return
            if time.monotonic() > deadline:
                self.stop()
                raise EuropaError(f"Prefect's temporary server did not answer at {self.api_url} within "
                                  f"{timeout_s:.0f} s (PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS)")
            time.sleep(0.1)

    def stop(self) -> None:
        if self._process is None:
            return
        self._process.terminate()
        try:
            self._process.wait(timeout=STOP_WAIT_S)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        self._process = None


@contextmanager
def temporary_server() -> Iterator[TemporaryServer | None]:
    """A started TemporaryServer when Prefect would start one (no PREFECT_API_URL, ephemeral servers enabled),
    stopped when the block ends; None otherwise. The caller waits for it (`wait`) before its first flow."""
    from prefect.settings import PREFECT_API_URL, PREFECT_SERVER_EPHEMERAL_ENABLED

    if PREFECT_API_URL.value() or not PREFECT_SERVER_EPHEMERAL_ENABLED.value():
        yield None
        return
    server = TemporaryServer()
    server.start()
    try:
        yield server
    finally:
        server.stop()


@contextmanager
def reporting_to(api_url: str) -> Iterator[None]:
    """Make `api_url` the Prefect API of this process for the block: of every thread (Prefect's settings
    context is a context variable, which threads started without it do not see: one that forwards a process
    pool's logs then started a temporary server of its own) and of the processes it starts (their environment).
    The block ends after this process's Prefect services (the API log and event workers) have sent what they
    hold to it: a temporary server stopped first, they retried it against a closed port for over a minute as
    `europa` exited."""
    from prefect.context import refresh_global_settings_context
    from prefect.events.worker import EventsWorker
    from prefect.logging.handlers import APILogWorker
    from prefect.settings import PREFECT_API_URL, temporary_settings

    before = os.environ.get("PREFECT_API_URL")
    os.environ["PREFECT_API_URL"] = api_url
    refresh_global_settings_context()
    try:
        with temporary_settings(updates={PREFECT_API_URL: api_url}):
            try:
                yield
            finally:
                for service in (APILogWorker, EventsWorker):
                    service.drain_all(timeout=DRAIN_WAIT_S)
    finally:
        if before is None:
            os.environ.pop("PREFECT_API_URL", None)
        else:
            os.environ["PREFECT_API_URL"] = before
        refresh_global_settings_context()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _is_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True
