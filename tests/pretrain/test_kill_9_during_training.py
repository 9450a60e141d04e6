"""kill -9 of `europa` while its local trainer runs: the trainer (torchrun and its rank) ends with it instead of
training on as an orphan, and the rerun resumes from the newest checkpoint as the only trainer of the job folder.
Before, the orphan and the rerun's trainer both wrote the run (metrics.jsonl had 250 rows for 150 steps)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import psutil

from pipeline.cli import main
from pipeline.config import REPO_ROOT
from pipeline.rundir import RunDir
from stages.pretrain import job as jobdir
from tests.runs import make_run

STEPS = 40


def logged_steps(job) -> list[int]:
    path = job / "metrics.jsonl"
    if not path.exists():
        return []
    return [json.loads(line)["step"] for line in path.read_text().splitlines() if line.strip()]


def test_kill_9_of_europa_ends_its_trainer_and_the_rerun_resumes_alone(tmp_path, data_run, udhr_dir, capsys):
    cfg, run_dir = make_run(tmp_path, data_run, udhr_dir, steps=str(STEPS), **{"checkpoint.interval": "5"})
    proc = subprocess.Popen([sys.executable, "-m", "pipeline.cli", "stage", "pretrain", "--config", str(cfg),
                             "--run-dir", str(run_dir)], cwd=REPO_ROOT, env={**os.environ, "OMP_NUM_THREADS": "1"},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 240
        job = None
        while time.monotonic() < deadline:
            jobs = RunDir(run_dir).job_dirs("pretrain")
            job = jobs[0] if jobs else None
            if job is not None and len(logged_steps(job)) >= 7:  # past the step-5 checkpoint, short of the end
                break
            assert proc.poll() is None, "europa ended before it could be killed"
            time.sleep(0.1)
        else:
            raise AssertionError("training did not reach step 7 within 240 s")
        trainers = psutil.Process(proc.pid).children(recursive=True)
        assert trainers  # torchrun and its rank at least
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    deadline = time.monotonic() + 30
    while (left := [p for p in trainers if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]) \
            and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not left, [(p.pid, p.cmdline()[:3]) for p in left]
    killed_at = max(logged_steps(job))
    assert killed_at < STEPS
    time.sleep(1)
    assert max(logged_steps(job)) == killed_at  # nobody trains on in the job folder

    assert main(["stage", "pretrain", "--config", str(cfg), "--run-dir", str(run_dir)]) == 0
    published = run_dir / "pretrain"
    starts = [s.start_step for s in jobdir.segments(published)]
    assert starts[0] == 0 and len(starts) == 2 and 5 <= starts[1] <= killed_at  # resumed from a checkpoint
    steps = logged_steps(published)
    # each step logged once per segment that ran it: the resumed segment repeats at most the steps since its checkpoint
    assert sorted(set(steps)) == list(range(1, STEPS + 1))
    assert len(steps) - STEPS <= killed_at - starts[1]
