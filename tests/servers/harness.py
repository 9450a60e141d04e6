"""Real servers for the orchestration tests: a private PostgreSQL cluster and `prefect server start` processes.

    pg = Postgres().start()               # initdb + pg_ctl as the `postgres` user, 127.0.0.1:<free port>, trust auth
    pg.url                                # postgresql+asyncpg://postgres@127.0.0.1:<port>/prefect
    server = PrefectServer(tmp, database_url=pg.url).start()   # or database_url=None: SQLite under its PREFECT_HOME
    server.api_url; server.kill()

PostgreSQL refuses to run as root, so its processes run as the `postgres` user the Debian package creates
(`runuser`, which needs root, as CI has). `missing()` says in one line why this machine cannot run them; the
fixtures (tests/servers/conftest.py) skip on a developer's machine and fail under CI, as the Slurm tests do.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

INSTALL_HINT = "bash tests/servers/install.sh (as root)"
START_TIMEOUT_S = 180.0


def _bindir() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    return Path(found[-1]).parent if found else None


def missing() -> str | None:
    """Why this machine cannot run a private PostgreSQL cluster (one line), or None when it can."""
    if os.geteuid() != 0:
        return "a private PostgreSQL cluster runs as the `postgres` user, which needs root to switch to"
    if _bindir() is None:
        return f"PostgreSQL is not installed (no /usr/lib/postgresql/*/bin/initdb): run {INSTALL_HINT}"
    try:
        pwd.getpwnam("postgres")
    except KeyError:
        return f"no `postgres` user (the postgresql package creates it): run {INSTALL_HINT}"
    if shutil.which("runuser") is None:
        return "runuser (util-linux) is not installed"
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Postgres:
    """A PostgreSQL cluster of its own (data, socket, log) in a fresh folder under /tmp that the `postgres` user
    can reach (pytest's own temporary folders are root's alone), with one database, `prefect`."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="europa-postgres-", dir="/tmp"))
        self.port = free_port()
        self.bin = _bindir()

    @property
    def url(self) -> str:
        return f"postgresql+asyncpg://postgres@127.0.0.1:{self.port}/prefect"

    def _as_postgres(self, *cmd: str) -> None:
        subprocess.run(["runuser", "-u", "postgres", "--", *cmd], check=True, capture_output=True, text=True,
                       cwd="/tmp")

    def start(self) -> Postgres:
        self.root.mkdir(parents=True, exist_ok=True)
        data, run = self.root / "data", self.root / "run"
        run.mkdir(exist_ok=True)
        pg = pwd.getpwnam("postgres")
        os.chown(self.root, pg.pw_uid, pg.pw_gid)
        os.chown(run, pg.pw_uid, pg.pw_gid)
        self._as_postgres(str(self.bin / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres", "--no-sync",
                          "-E", "UTF8")
        self._as_postgres(str(self.bin / "pg_ctl"), "-D", str(data), "-l", str(self.root / "postgres.log"), "-w",
                          "-t", "60", "-o", f"-p {self.port} -k {run} -c listen_addresses=127.0.0.1 -c fsync=off "
                          f"-c synchronous_commit=off -c full_page_writes=off", "start")
        self._as_postgres(str(self.bin / "createdb"), "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres",
                          "prefect")
        return self

    def query(self, sql: str) -> str:
        out = subprocess.run(["runuser", "-u", "postgres", "--", "psql", "-h", "127.0.0.1", "-p", str(self.port),
                              "-d", "prefect", "-tAc", sql], check=True, capture_output=True, text=True, cwd="/tmp")
        return out.stdout.strip()

    def stop(self) -> None:
        try:
            self._as_postgres(str(self.bin / "pg_ctl"), "-D", str(self.root / "data"), "-m", "immediate", "stop")
        except subprocess.CalledProcessError:
            pass
        shutil.rmtree(self.root, ignore_errors=True)


def answers(api_url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{api_url}/health", timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


class PrefectServer:
    """`prefect server start` on 127.0.0.1:<free port> with its own PREFECT_HOME, on PostgreSQL at `database_url`
    or on SQLite in its home: what a cluster's login node runs for its runs."""

    def __init__(self, root: Path, database_url: str | None = None):
        self.root, self.database_url = Path(root), database_url
        self.port = free_port()
        self.proc: subprocess.Popen | None = None

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/api"

    def environment(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_API")}
        env.update({"PREFECT_HOME": str(self.root / "prefect-home"), "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
                    "DO_NOT_TRACK": "1", "PREFECT_UI_ENABLED": "false"})
        if self.database_url:
            env["PREFECT_API_DATABASE_CONNECTION_URL"] = self.database_url
        return env

    def start(self) -> PrefectServer:
        (self.root / "prefect-home").mkdir(parents=True, exist_ok=True)
        log = open(self.root / "server.log", "ab")
        self.proc = subprocess.Popen([sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1",
                                      "--port", str(self.port)], env=self.environment(), stdout=log,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + START_TIMEOUT_S
        while not answers(self.api_url):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                tail = (self.root / "server.log").read_text(errors="replace")[-2000:]
                raise RuntimeError(f"prefect server start did not answer at {self.api_url}:\n{tail}")
            time.sleep(0.5)
        return self

    def kill(self) -> None:
        """SIGKILL to the server and everything it started (its process group)."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill()
