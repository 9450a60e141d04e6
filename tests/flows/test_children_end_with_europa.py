"""A kill -9 of `europa` leaves none of its processes behind (its temporary Prefect server, its workers), and a
second trainer cannot enter a job folder a trainer is still running in."""

from __future__ import annotations

import json
import os
import signal
import time

import psutil
import pytest

from stages.pretrain.entry import TrainerRunning, trainer_lock
from tests.servers.test_server_loss import environment, europa, interrupt, write_config


@pytest.mark.parametrize("runner", ["threads", "processes", "dask"])
def test_kill_9_of_europa_leaves_no_process_of_the_run(tmp_path, runner):
    log, run_dir = tmp_path / "log", tmp_path / "run"
    cfg = write_config(tmp_path, log)
    cfg.write_text(cfg.read_text().replace('task_runner = "processes"', f'task_runner = "{runner}"'))
    proc = europa(["run", "--config", str(cfg), "--run-dir", str(run_dir), "--to", "ingest"],
                  environment(tmp_path, FAKE_SLOW_S="0.3"))
    _, children = interrupt(proc, log, lambda: os.kill(proc.pid, signal.SIGKILL))
    assert proc.returncode == -signal.SIGKILL
    assert children  # the temporary server at least
    deadline = time.monotonic() + 30
    while (left := [p for p in children if psutil.pid_exists(p) and psutil.Process(p).status() != "zombie"]) \
            and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not left, left


def test_a_second_trainer_is_refused_while_one_holds_the_job_folder(tmp_path):
    with trainer_lock(tmp_path, rank=0):
        with pytest.raises(TrainerRunning, match="another trainer is running in this job folder"):
            with trainer_lock(tmp_path, rank=0):
                pass
        with trainer_lock(tmp_path, rank=1):  # the other ranks follow their rank 0
            pass
    with trainer_lock(tmp_path, rank=0):  # released with its holder
        pass


@pytest.mark.parametrize("sig, code", [(signal.SIGTERM, 143)])
def test_sigterm_stops_a_run_as_ctrl_c_does(tmp_path, sig, code):
    """A scheduler's SIGTERM used to end `europa` with no message and a stage "failed TerminationSignal".
    (Ctrl-C itself, SIGINT to the process group, is tests/slurm/test_launcher.py's; SIGINT here took ~35 s of CI.)"""
    log, run_dir = tmp_path / "log", tmp_path / "run"
    cfg = write_config(tmp_path, log)
    proc = europa(["run", "--config", str(cfg), "--run-dir", str(run_dir), "--to", "ingest"],
                  environment(tmp_path, FAKE_SLOW_S="0.3"))
    err, children = interrupt(proc, log, lambda: os.kill(proc.pid, sig))
    assert proc.returncode == code
    assert err.strip().splitlines()[-1] == "europa: error: interrupted; finished units are kept and a rerun resumes from them", err
    assert "Traceback" not in err
    status = europa(["status", "--config", str(cfg), "--run-dir", str(run_dir), "--json"], environment(tmp_path))
    out, _ = status.communicate(timeout=120)
    assert json.loads(out)[0]["state"] == "interrupted"
    time.sleep(1)
    assert not [p for p in children if psutil.pid_exists(p) and psutil.Process(p).status() != "zombie"]
