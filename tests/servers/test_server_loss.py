"""The run directory stays the source of truth when the Prefect server goes away: a run whose server dies in the
middle of a stage stops in one line naming the server (its workers with it), and `europa run` afterwards resumes
from the unit folders, running none of the finished units again, with the outputs of an uninterrupted run. And a
server or database that cannot be reached is one line and exit 2 before any work starts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil

from pipeline.config import REPO_ROOT
from pipeline.executor import execute_stage
from pipeline.rundir import RunDir
from tests.pipeline import fake_stage
from tests.servers.harness import free_port

WORDS = [f"w{i:03d}" for i in range(40)]
CLI = "import sys; from tests.pipeline.fake_stage import cli; sys.exit(cli(sys.argv[1:]))"


def write_config(tmp_path: Path, log: Path) -> Path:
    cfg = tmp_path / "config.toml"
    cfg.write_text(textwrap.dedent(f"""
        [run]
        name = "fake"
        languages = ["en"]

        [orchestration]
        engine = "prefect"
        task_runner = "processes"
        max_workers = 2
        retry_backoff_s = 0
        server_timeout_s = 5

        [ingest]
        words = {json.dumps(WORDS)}
        log = "{log}"
        """), encoding="utf-8")
    return cfg


def europa(args: list[str], env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", CLI, *args], cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def environment(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_API")}
    env.update({"PYTHONPATH": str(REPO_ROOT), "PREFECT_HOME": str(tmp_path / "prefect-home"), "OMP_NUM_THREADS": "1",
                "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "180"}, **extra)
    return env


def ran(log: Path) -> list[str]:
    return log.read_text().split() if log.exists() else []


def finished_units(run_dir: Path) -> set[str]:
    return {p.parent.name for p in (run_dir / ".work" / "ingest").glob("*/count/*/result.json")}


def reference_digest(tmp_path: Path) -> str:
    from pipeline import registry

    saved = registry._PARTS["ingest"]
    fake_stage.install()
    try:
        manifest, _ = execute_stage(RunDir(tmp_path / "ref"), fake_stage.config(words=WORDS, log=str(tmp_path / "l")),
                                    "ingest")
    finally:
        registry._PARTS["ingest"] = saved
    return manifest.output_digest


def interrupt(proc: subprocess.Popen, log: Path, kill_server) -> tuple[str, list[int]]:
    """Wait until a few units are done, kill the server, wait for the run to end; (its stderr, its child pids)."""
    deadline = time.monotonic() + 240
    while len(ran(log)) < 6:
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.2)
    children = [c.pid for c in psutil.Process(proc.pid).children(recursive=True)]
    kill_server()
    _, err = proc.communicate(timeout=120)
    return err, children


def assert_one_line_and_resumable(err: str, code: int, children: list[int], server: str, how: str) -> None:
    errors = [line for line in err.splitlines() if line.startswith("europa: error:")]
    assert code == 1 and len(errors) == 1, err
    assert f"the Prefect server at {server}" in errors[0] and how in errors[0]
    assert "every finished unit is kept" in errors[0] and "rerun `europa run --run-dir" in errors[0]
    assert "Traceback" not in err
    time.sleep(1)
    assert not [pid for pid in children if psutil.pid_exists(pid) and psutil.Process(pid).status() != "zombie"]


def test_a_run_whose_temporary_server_dies_stops_in_one_line_and_resumes(tmp_path):
    log, run_dir = tmp_path / "log", tmp_path / "run"
    cfg = write_config(tmp_path, log)
    env = environment(tmp_path, FAKE_SLOW_S="0.3")
    proc = europa(["run", "--config", str(cfg), "--run-dir", str(run_dir), "--to", "ingest"], env)

    def kill_temporary_server():
        for child in psutil.Process(proc.pid).children(recursive=True):
            if any("uvicorn" in part for part in child.cmdline()):
                child.kill()

    err, children = interrupt(proc, log, kill_temporary_server)
    assert_one_line_and_resumable(err, proc.returncode, children, "http://127.0.0.1:", "exited with status -9")
    done_before, runs_before = finished_units(run_dir), len(ran(log))
    assert done_before and len(done_before) < len(WORDS)

    rerun = europa(["run", "--run-dir", str(run_dir), "--to", "ingest"], environment(tmp_path))
    out, err = rerun.communicate(timeout=300)
    assert rerun.returncode == 0, err
    again = ran(log)[runs_before:]
    assert not {f"count/{w}" for w in done_before} & set(again)  # finished units are not run again
    assert {u.split("/")[1] for u in ran(log) if u.startswith("count/")} == set(WORDS)
    assert RunDir(run_dir).manifest("ingest").output_digest == reference_digest(tmp_path)


def test_a_run_whose_server_stops_answering_stops_in_one_line_and_resumes(tmp_path, prefect_server_factory, postgres):
    """PostgreSQL, as a cluster's server has it; the client's timeout does not depend on the database (an
    SQLite-backed variant took another minute of CI and found nothing this one does not)."""
    url = postgres.url
    server = prefect_server_factory(url)
    log, run_dir = tmp_path / "log", tmp_path / "run"
    cfg = write_config(tmp_path, log)
    proc = europa(["run", "--config", str(cfg), "--run-dir", str(run_dir), "--to", "ingest"],
                  environment(tmp_path, FAKE_SLOW_S="0.3", PREFECT_API_URL=server.api_url))
    err, children = interrupt(proc, log, server.kill)
    assert_one_line_and_resumable(err, proc.returncode, children, server.api_url, "has not answered for 5 s")
    done_before, runs_before = finished_units(run_dir), len(ran(log))

    again_server = prefect_server_factory(url)  # the same database, another port
    rerun = europa(["run", "--run-dir", str(run_dir), "--to", "ingest"], environment(tmp_path, PREFECT_API_URL=again_server.api_url))
    _, err = rerun.communicate(timeout=300)
    assert rerun.returncode == 0, err
    assert not {f"count/{w}" for w in done_before} & set(ran(log)[runs_before:])
    assert RunDir(run_dir).manifest("ingest").output_digest == reference_digest(tmp_path)


def test_a_server_that_does_not_answer_is_one_line_and_exit_2_before_any_work(tmp_path):
    log, run_dir = tmp_path / "log", tmp_path / "run"
    cfg = write_config(tmp_path, log)
    url = f"http://127.0.0.1:{free_port()}/api"
    proc = europa(["run", "--config", str(cfg), "--run-dir", str(run_dir), "--to", "ingest"], environment(tmp_path, PREFECT_API_URL=url))
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 2
    assert err.strip().splitlines()[-1] == (
        f"europa: error: the Prefect server at {url} (PREFECT_API_URL) does not answer; start it (docs/scaling.md, "
        f"\"A Prefect server for the cluster\"), or unset PREFECT_API_URL to let the run start a temporary one")
    assert not log.exists() and not (run_dir / ".work").exists()


def test_a_database_that_cannot_be_reached_is_one_line_and_exit_2_before_any_work(tmp_path):
    log, run_dir = tmp_path / "log", tmp_path / "run"
    cfg = write_config(tmp_path, log)
    url = f"postgresql+asyncpg://prefect:s3cret@127.0.0.1:{free_port()}/prefect"
    proc = europa(["run", "--config", str(cfg), "--run-dir", str(run_dir), "--to", "ingest"],
                  environment(tmp_path, PREFECT_API_DATABASE_CONNECTION_URL=url))
    _, err = proc.communicate(timeout=120)
    last = err.strip().splitlines()[-1]
    assert proc.returncode == 2, err
    assert last.startswith("europa: error: the Prefect server's database at postgresql+asyncpg://***@127.0.0.1:")
    assert "(PREFECT_API_DATABASE_CONNECTION_URL) cannot be reached" in last and "s3cret" not in err
    assert not log.exists() and not (run_dir / ".work").exists()
