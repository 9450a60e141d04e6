"""The Prefect layer for real: ephemeral mode (one test harness), thread and process task runners, artifacts,
and a run reporting to a separately started `prefect server start`."""

from __future__ import annotations

import itertools
import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from pipeline.cli import main
from tests.conftest import duplicates_source, udhr_source, write_config

pytestmark = pytest.mark.slow
LANGS = '["de", "mt", "el", "hr"]'


def _config(tmp_path: Path, udhr_dir: Path, runner: str) -> Path:
    small = "[tokenizer]\nvocab_size = 1200\nreserved_tokens = 0\n[shards]\nval_fraction = 0.1\n"
    body = udhr_source(udhr_dir) + small + duplicates_source(tmp_path / "dups", udhr_dir)  # dedup across units
    cfg = write_config(tmp_path, body, engine="prefect", languages=LANGS)
    cfg.write_text(cfg.read_text().replace('engine = "prefect"', f'engine = "prefect"\ntask_runner = "{runner}"'))
    return cfg


def _ingest_task_runs() -> dict[str, str]:
    """Every ingest task run the Prefect API knows: id -> name."""
    from prefect import get_client

    runs: dict[str, str] = {}
    with get_client(sync_client=True) as client:
        for offset in itertools.count(0, 200):  # the API pages by 200 at most
            page = client.read_task_runs(limit=200, offset=offset)
            runs.update({str(t.id): t.name for t in page if t.name.startswith("ingest:")})
            if len(page) < 200:
                return runs


def test_prefect_flow_runs_units_as_tasks_and_leaves_an_artifact(prefect_harness, tmp_path, udhr_dir):
    from prefect.artifacts import Artifact

    (tmp_path / "t").mkdir()
    (tmp_path / "p").mkdir()
    threads = _config(tmp_path / "t", udhr_dir, "threads")
    processes = _config(tmp_path / "p", udhr_dir, "processes")
    before = _ingest_task_runs()  # the harness's server is shared with other tests
    assert main(["run", "--config", str(threads), "--run-dir", str(tmp_path / "run-t"), "--to", "shards"]) == 0
    assert main(["run", "--config", str(processes), "--run-dir", str(tmp_path / "run-p"), "--to", "shards"]) == 0
    m_t = json.loads((tmp_path / "run-t" / "ingest" / "manifest.json").read_text())
    m_p = json.loads((tmp_path / "run-p" / "ingest" / "manifest.json").read_text())
    assert set(m_t["statistics"]["per_language"]) == {"de", "mt", "el", "hr"}
    assert m_t["output_digest"] == m_p["output_digest"]  # the runner changes how, never what
    for stage in ("tokenizer", "shards"):
        a = json.loads((tmp_path / "run-t" / stage / "manifest.json").read_text())
        b = json.loads((tmp_path / "run-p" / stage / "manifest.json").read_text())
        assert a["output_digest"] == b["output_digest"], stage
    from flows.stages import artifact_key
    from pipeline.rundir import RunDir

    artifact = Artifact.get(artifact_key(RunDir(tmp_path / "run-p"), "ingest-summary"))
    assert artifact is not None and "| mt |" in artifact.data and "documents kept" in artifact.data

    # short units shared tasks (flows/bundles.py: "<stage>:<step>:<first unit>+<more>"), each unit run once
    names = [n for tid, n in _ingest_task_runs().items() if tid not in before]
    units_run = sum(1 + int(n.rpartition("+")[2]) if "+" in n else 1 for n in names)
    logs = "".join(f.read_text() for run in ("run-t", "run-p") for f in (tmp_path / run / "logs").glob("*.log"))
    units_planned = sum(int(n) for n in re.findall(r"\[ingest\] step \w+: (\d+) unit", logs))
    assert units_run == units_planned and len(names) < units_planned, names


_CLIENTS_SEEN: list = []  # in a worker process: the API clients its task runs were given (kept alive)


def _clients_so_far() -> int:
    """A task's body: how many distinct API clients this worker's task runs have had, this one included."""
    from prefect import get_client

    _CLIENTS_SEEN.append(get_client(sync_client=True))
    return len({id(c) for c in _CLIENTS_SEEN})


@pytest.mark.parametrize("keep", [True, False])
@pytest.mark.parametrize("runner", ["processes", "dask"])
def test_workers_keep_one_api_client(prefect_harness, runner, keep, monkeypatch):
    """flows/task_context.py: every task run in a process-pool worker (the pool's initializer) or a Dask worker
    (a preload) gets the worker's one client (each new one costs two TLS contexts); without it each task run
    builds its own. Tells when Prefect, or how Dask hands its workers' context to their tasks, changes that.
    The API URL reaches the workers in their environment, as in a run (flows/temporary_server.py reporting_to)."""
    import dask
    from prefect import flow, task
    from prefect.settings import PREFECT_API_URL
    from prefect.task_runners import ProcessPoolTaskRunner

    from flows.task_context import keep_api_client

    monkeypatch.setenv("PREFECT_API_URL", PREFECT_API_URL.value())
    clients = task(_clients_so_far)
    cluster, environ = None, dict(os.environ)  # a Dask nanny writes its workers' environment into this process's
    if runner == "processes":
        task_runner = ProcessPoolTaskRunner(max_workers=1, initializer=keep_api_client if keep else None)
    else:
        from distributed import LocalCluster
        from prefect_dask import DaskTaskRunner

        with dask.config.set({"distributed.worker.preload": "flows.task_context" if keep else []}):
            cluster = LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None,
                                   env={"PREFECT_API_URL": PREFECT_API_URL.value()})
        task_runner = DaskTaskRunner(address=cluster.scheduler_address)

    @flow(task_runner=task_runner)
    def three_tasks() -> list[int]:
        return [clients.submit().result() for _ in range(3)]

    try:
        assert three_tasks() == ([1, 1, 1] if keep else [1, 2, 3])
    finally:
        if cluster is not None:
            cluster.close()
            os.environ.clear()
            os.environ.update(environ)


def _flow_settings_seen() -> tuple[int, str]:
    """A task's body: a setting the flow changed, and the type of the settings context the task run got."""
    from prefect.context import SettingsContext
    from prefect.settings import PREFECT_TASK_DEFAULT_RETRIES

    return PREFECT_TASK_DEFAULT_RETRIES.value(), type(SettingsContext.get()).__name__


def test_settings_travel_to_workers_as_objects(prefect_harness, monkeypatch):
    """flows/task_context.py: settings_by_value sends the flow's settings object, not a dict each task run
    validates again; a task run in another process still sees what the flow set, in Prefect's own context."""
    from prefect import flow, task
    from prefect.context import SettingsContext
    from prefect.settings import PREFECT_API_URL, PREFECT_TASK_DEFAULT_RETRIES, temporary_settings
    from prefect.task_runners import ProcessPoolTaskRunner

    from flows.task_context import SettingsByValue, keep_api_client, settings_by_value

    monkeypatch.setenv("PREFECT_API_URL", PREFECT_API_URL.value())
    seen = task(_flow_settings_seen)

    @flow(task_runner=ProcessPoolTaskRunner(max_workers=1, initializer=keep_api_client))
    def settings_of_a_task() -> tuple[int, str]:
        with temporary_settings({PREFECT_TASK_DEFAULT_RETRIES: 7}), settings_by_value():
            current = SettingsContext.get()
            assert isinstance(current, SettingsByValue)
            assert current.serialize()["settings"] is current.settings  # the object, not a dict
            assert isinstance(current.serialize(include_secrets=False)["settings"], dict)  # records: Prefect's own
            return seen.submit().result()

    assert settings_of_a_task() == (7, "SettingsContext")


@pytest.mark.parametrize("runner", ["processes", "dask"])
def test_workers_report_to_the_flows_temporary_server(tmp_path, udhr_dir, runner):
    """Without PREFECT_API_URL, `europa` starts one temporary server; the process pool's workers, and the local
    Dask cluster's (started while the server starts, flows/dask_cluster.py), must use it, not start one each
    (each costs a uvicorn's CPU, taken from the workers on a small machine)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_API")}
    env["PREFECT_HOME"] = str(tmp_path / "prefect-home")
    cfg = _config(tmp_path, udhr_dir, runner)
    run = subprocess.run([sys.executable, "-m", "pipeline.cli", "stage", "ingest", "--config", str(cfg), "--run-dir", str(tmp_path / "run")],
                         env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    log = "".join(p.read_text() for p in (tmp_path / "run" / "logs").glob("*.log"))
    everything = run.stdout + run.stderr + log
    assert everything.count("Starting temporary server") == 1, everything[-3000:]
    assert "ingest:filter:" in everything  # the workers' task runs were logged (to the flow's server)
    assert "Error logging to API" not in everything  # what the flow logged was sent before the server stopped
    if runner == "dask":
        assert log.count("units run on a local Dask cluster") == 1, log[-3000:]  # the early one, taken over


def test_a_temporary_server_that_cannot_start_ends_the_run_with_one_message(tmp_path, udhr_dir):
    """uvicorn exits with the same status for an app that failed to start as for a taken port; the first must
    end the run with the fix named, not start the server again on port after port."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_API")}
    env["PREFECT_HOME"] = str(tmp_path / "prefect-home")
    env["PREFECT_API_DATABASE_CONNECTION_URL"] = f"sqlite+aiosqlite:///{tmp_path}/missing/prefect.db"
    cfg = _config(tmp_path, udhr_dir, "threads")
    run = subprocess.run([sys.executable, "-m", "pipeline.cli", "stage", "ingest", "--config", str(cfg), "--run-dir", str(tmp_path / "run")],
                         env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 1, run.stderr[-2000:]
    assert ("europa: error: Prefect's temporary server exited with status 3 before it answered; its messages are "
            "above. Start one yourself (`prefect server start`) and set PREFECT_API_URL") in run.stderr, run.stderr[-2000:]
    assert run.stderr.count("Application startup failed") == 1, run.stderr[-2000:]


def test_temporary_server_moves_when_its_port_is_taken(tmp_path, monkeypatch):
    """A port chosen free can be taken before the server binds it; the server then starts on another one, and
    its new URL is what the run reports to (run_stages compares it with the one the Dask workers were given)."""
    from flows.temporary_server import TemporaryServer

    monkeypatch.setenv("PREFECT_HOME", str(tmp_path / "prefect-home"))
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        server = TemporaryServer()
        server.port = taken.getsockname()[1]
        first = server.api_url
        server.start()
        try:
            server.wait(timeout_s=120)
            assert server.api_url != first
            with urllib.request.urlopen(f"{server.api_url}/health", timeout=10) as answer:
                assert answer.status == 200
        finally:
            server.stop()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_flow_reports_to_a_running_prefect_server(tmp_path, udhr_dir):
    port = _free_port()
    env = {**os.environ, "PREFECT_HOME": str(tmp_path / "prefect-home"), "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
           "DO_NOT_TRACK": "1", "PREFECT_UI_ENABLED": "false"}
    env.pop("PREFECT_API_URL", None)
    server = subprocess.Popen([sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1", "--port", str(port)],
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    api = f"http://127.0.0.1:{port}/api"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                urllib.request.urlopen(f"{api}/health", timeout=2).read()
                break
            except OSError:
                assert time.monotonic() < deadline, "prefect server did not start within 120 s"
                assert server.poll() is None, "prefect server exited"
                time.sleep(1)
        cfg = _config(tmp_path, udhr_dir, "threads")
        run = subprocess.run([sys.executable, "-m", "pipeline.cli", "run", "--config", str(cfg), "--run-dir", str(tmp_path / "run"), "--to", "shards"],
                             env={**env, "PREFECT_API_URL": api}, capture_output=True, text=True, timeout=300)
        assert run.returncode == 0, run.stderr[-2000:]
        log = "".join(p.read_text() for p in (tmp_path / "run" / "logs").glob("*.log"))  # Prefect's messages go there
        assert "Beginning flow run" in log and "Starting temporary server" not in log  # it used ours
        req = urllib.request.Request(f"{api}/flow_runs/filter", data=b"{}", headers={"Content-Type": "application/json"})
        flow_runs = json.loads(urllib.request.urlopen(req, timeout=10).read())
        assert {r["name"] for r in flow_runs} >= {"ingest", "tokenizer", "shards"}
        assert all(r["state_type"] == "COMPLETED" for r in flow_runs)
        req = urllib.request.Request(f"{api}/artifacts/filter", data=b"{}", headers={"Content-Type": "application/json"})
        keys = {a["key"] for a in json.loads(urllib.request.urlopen(req, timeout=10).read())}
        from flows.stages import artifact_key
        from pipeline.rundir import RunDir

        assert {artifact_key(RunDir(tmp_path / "run"), f"{s}-summary") for s in ("ingest", "tokenizer", "shards")} <= keys
    finally:
        server.terminate()
        server.wait(timeout=30)
