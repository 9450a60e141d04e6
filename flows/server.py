"""The Prefect server a run or a deployment talks to: the configured one (PREFECT_API_URL), checked to answer
before any work, or one this process starts (a run's temporary server, `europa eval-schedule --start-server`),
its PostgreSQL database checked first; and the watch that ends a run in one line when its server goes away.
"""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

from pipeline.children import die_with_parent
from pipeline.errors import EuropaError
from pipeline.secrets import redact_text

START_TIMEOUT_S = 120.0
DATABASE_TIMEOUT_S = 10.0  # for a PostgreSQL database to take a connection
WATCH_EVERY_S = 5.0  # how often a run looks whether its Prefect server still answers
SERVER_LOST_EXIT = 1  # a run whose server went away mid-stage: failed, resumable


def configured_api_url() -> str | None:
    from prefect.settings import PREFECT_API_URL

    return PREFECT_API_URL.value() or None


def responds(api_url: str, timeout: float = 5.0) -> bool:
    """Whether the server's health endpoint answers 200. The standard library's client, not httpx: it is polled
    every 0.1 s while a server starts, and each `httpx.get` builds a TLS context (the CA bundle parsed again)
    even for http://, CPU taken from the starting server."""
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(f"{api_url.rstrip('/')}/health", timeout=timeout) as answer:
            return answer.status == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False


@contextlib.contextmanager
def local_server(port: int) -> Iterator[str]:
    """`prefect server start` on 127.0.0.1:`port` (its database under PREFECT_HOME, ~/.prefect by default),
    waited for until it answers; yields its API URL; stopped when the block ends."""
    from pipeline.errors import UsageError

    check_database()
    url = f"http://127.0.0.1:{port}/api"
    if responds(url, timeout=1.0):
        raise UsageError(f"eval-schedule: a server already answers at {url}; use it (PREFECT_API_URL={url}) "
                         "instead of --start-server, or pass another --port")
    env = {**os.environ, "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "DO_NOT_TRACK": "1"}
    env.pop("PREFECT_API_URL", None)
    proc = subprocess.Popen([sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1", "--port", str(port)],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            preexec_fn=die_with_parent())
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not responds(url, timeout=1.0):
            if proc.poll() is not None:
                why = (proc.stderr.read() or "").strip().splitlines()[-1:] if proc.stderr else []
                raise UsageError(f"eval-schedule: `prefect server start` exited with {proc.returncode}"
                                 + (f": {why[0]}" if why else ""))
            if time.monotonic() > deadline:
                raise UsageError(f"eval-schedule: the Prefect server did not answer at {url} within {START_TIMEOUT_S:.0f} s")
            time.sleep(0.5)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()


class ServerUnreachable(EuropaError):
    """The Prefect server (or its database) a run would report to does not answer: nothing was started."""

    exit_code = 2


def check_reachable(api_url: str) -> None:
    """ServerUnreachable, in one line, unless the configured server answers: before any work, not after a
    stage's first task run has retried for a minute."""
    if not responds(api_url):
        raise ServerUnreachable(f"the Prefect server at {api_url} (PREFECT_API_URL) does not answer; start it "
                                f"(docs/scaling.md, \"A Prefect server for the cluster\"), or unset PREFECT_API_URL "
                                f"to let the run start a temporary one")


def check_database() -> None:
    """ServerUnreachable, in one line, when the server this process would start is to use a PostgreSQL database
    (PREFECT_API_DATABASE_CONNECTION_URL) that does not take a connection: a server started on it would exit at
    once with a traceback in its own output."""
    from prefect.settings import get_current_settings

    url = get_current_settings().server.database.connection_url
    url = url.get_secret_value() if url is not None else ""
    if not url.startswith("postgresql"):
        return
    import asyncio

    import asyncpg

    async def connect() -> None:
        conn = await asyncpg.connect(url.replace("postgresql+asyncpg://", "postgresql://", 1), timeout=DATABASE_TIMEOUT_S)
        await conn.close()

    try:
        asyncio.run(connect())
    except Exception as e:  # refused, unknown host, wrong password, no such database: all one answer to the user
        why = redact_text(str(e).splitlines()[0] if str(e) else type(e).__name__)
        raise ServerUnreachable(f"the Prefect server's database at {redact_text(url)} "
                                f"(PREFECT_API_DATABASE_CONNECTION_URL) cannot be reached: {why}; start PostgreSQL or "
                                f"fix the URL (docs/scaling.md, \"A Prefect server for the cluster\")") from None


class ServerWatch:
    """Watches the Prefect server a run reports to and ends the run, in one line, when it is gone: a temporary
    server that exited, or any server that has not answered for `timeout_s`.

    Why end it: Prefect's engine cannot finish a task or flow run without its API and retries every call for about
    a minute, so a run would hang for many minutes and then fail with tracebacks. The run directory is the source
    of truth: every finished unit is in place (a unit folder appears whole or not at all), so the run stops the
    way a killed one does, which every stage survives, its worker processes with it, and `europa run` resumes
    from the unit folders once a server answers again."""

    def __init__(self, api_url: str, run_dir: str, timeout_s: float, process: Any = None,
                 every_s: float = WATCH_EVERY_S):
        self.api_url, self.run_dir, self.timeout_s, self.every_s = api_url, run_dir, timeout_s, every_s
        self._process = process  # the temporary server's Popen: its exit needs no waiting
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="europa-server-watch", daemon=True)

    def __enter__(self) -> ServerWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()

    def _watch(self) -> None:
        silent_since = None
        while not self._stop.wait(self.every_s):
            status = self._process.poll() if self._process is not None else None
            if status is not None:
                return self._lost(f"exited with status {status}")
            if responds(self.api_url, timeout=min(self.every_s, 10.0)):
                silent_since = None
            elif silent_since is None:
                silent_since = time.monotonic()
            elif time.monotonic() - silent_since >= self.timeout_s:
                return self._lost(f"has not answered for {self.timeout_s:.0f} s ([orchestration] server_timeout_s)")

    def _lost(self, how: str) -> None:
        if self._stop.is_set():  # the run ended meanwhile
            return
        again = "start it again, then " if self._process is None else ""
        message = (f"the Prefect server at {self.api_url} {how} during the run; every finished unit is kept in "
                   f"{self.run_dir}: {again}rerun `europa run --run-dir {self.run_dir}` to resume")
        logging.getLogger("europa").error(message)
        sys.stderr.write(f"\neuropa: error: {message}\n")
        sys.stderr.flush()
        stop_children()
        logging.shutdown()
        os._exit(SERVER_LOST_EXIT)


def stop_children(wait_s: float = 5.0) -> None:
    """SIGTERM to every process this one started (workers, a local Dask cluster, a temporary server), SIGKILL to
    those still there after `wait_s`."""
    import psutil

    children = psutil.Process().children(recursive=True)
    for child in children:
        try:
            child.terminate()
        except psutil.Error:
            pass
    _, alive = psutil.wait_procs(children, timeout=wait_s)
    for child in alive:
        try:
            child.kill()
        except psutil.Error:
            pass
