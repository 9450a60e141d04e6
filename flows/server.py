"""Which Prefect server a long-lived deployment talks to: the configured one (PREFECT_API_URL), checked to
answer, or a local `prefect server start` this process starts and stops (`europa eval-schedule --start-server`).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator

START_TIMEOUT_S = 120.0


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

    url = f"http://127.0.0.1:{port}/api"
    if responds(url, timeout=1.0):
        raise UsageError(f"eval-schedule: a server already answers at {url}; use it (PREFECT_API_URL={url}) "
                         "instead of --start-server, or pass another --port")
    env = {**os.environ, "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "DO_NOT_TRACK": "1"}
    env.pop("PREFECT_API_URL", None)
    proc = subprocess.Popen([sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1", "--port", str(port)],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
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
