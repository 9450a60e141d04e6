"""A PostgreSQL-backed Prefect server, as a cluster's login node runs one (docs/scaling.md, "A Prefect server for
the cluster"): a run reports to it, its task runs are rows in PostgreSQL, and the scheduled evaluation's deployment
(`europa eval-schedule`) is served from it and evaluates a run's checkpoints when it fires."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time

from pipeline.config import REPO_ROOT
from pipeline.rundir import RunDir
from tests.servers.test_server_loss import WORDS, environment, europa, ran, reference_digest, write_config


def test_a_run_reports_to_a_postgres_backed_server(tmp_path, postgres, prefect_server_factory):
    server = prefect_server_factory(postgres.url)
    log, run_dir = tmp_path / "log", tmp_path / "run"
    before = int(postgres.query("select count(*) from task_run"))
    proc = europa(["run", "--config", str(write_config(tmp_path, log)), "--run-dir", str(run_dir), "--to", "ingest"],
                  environment(tmp_path, PREFECT_API_URL=server.api_url))
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    assert sorted(ran(log)) == sorted([f"count/{w}" for w in WORDS] + ["total/all"])
    assert RunDir(run_dir).manifest("ingest").output_digest == reference_digest(tmp_path)
    task_runs = int(postgres.query("select count(*) from task_run")) - before
    assert 0 < task_runs < len(WORDS)  # bundles, in PostgreSQL
    assert postgres.query("select count(*) from flow_run where name = 'ingest' and state_type = 'COMPLETED'") != "0"


def test_the_scheduled_evaluation_is_served_from_a_postgres_backed_server(tmp_path, postgres, prefect_server_factory,
                                                                          trained_run):
    from prefect import get_client
    from prefect.deployments import run_deployment
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from flows.evaluate import deployment_name

    server = prefect_server_factory(postgres.url)
    run_dir = tmp_path / "run"
    shutil.copytree(trained_run[1], run_dir, symlinks=True, ignore=shutil.ignore_patterns(".lock"))
    name = f"europa-evaluate/{deployment_name(RunDir(run_dir))}"
    env = {**environment(tmp_path, PREFECT_API_URL=server.api_url), "PREFECT_RUNNER_POLL_FREQUENCY": "2"}
    serving = subprocess.Popen([sys.executable, "-m", "pipeline.cli", "eval-schedule", "--run-dir", str(run_dir),
                                "--cron", "0 0 1 1 *"], cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        with temporary_settings({PREFECT_API_URL: server.api_url}):
            deadline = time.monotonic() + 180
            while postgres.query(f"select count(*) from deployment where name = '{name.split('/')[1]}'") == "0":
                assert serving.poll() is None and time.monotonic() < deadline, serving.communicate()[0]
                time.sleep(1)
            flow_run = run_deployment(name, timeout=0)  # as the schedule would, without waiting for the clock
            with get_client(sync_client=True) as client:
                while not client.read_flow_run(flow_run.id).state.is_final():
                    assert serving.poll() is None and time.monotonic() < deadline + 240, serving.communicate()[0]
                    time.sleep(2)
                state = client.read_flow_run(flow_run.id).state
        assert state.is_completed(), state
        assert (run_dir / "eval" / "step-3" / "metrics.json").exists()
        assert (run_dir / "eval" / "step-6" / "metrics.json").exists()
    finally:
        os.killpg(serving.pid, signal.SIGINT)
        try:
            serving.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(serving.pid, signal.SIGKILL)
