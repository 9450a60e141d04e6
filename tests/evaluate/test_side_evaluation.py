"""A side `europa evaluate` still going when `europa run` reaches its evaluate stage: the stage waits for it and
keeps what it evaluated, instead of failing the run (and compliance after it)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time

import pytest

from pipeline.cli import main
from pipeline.config import REPO_ROOT
from pipeline.fsutil import is_locked
from pipeline.rundir import RunDir


@pytest.fixture
def finished(trained_run, tmp_path):
    cfg, run_dir = trained_run
    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy, ignore=shutil.ignore_patterns(".lock", "eval", "evaluate", "compliance"))
    return cfg, copy


def metrics_written(run_dir) -> dict[str, int]:
    return {p.parent.name: p.stat().st_mtime_ns for p in (run_dir / "eval").glob("step-*/metrics.json")}


def test_the_evaluate_stage_waits_for_a_side_evaluation_holding_the_store(finished, capsys, caplog):
    """Deterministic: a process holds the results store for 4 s, as a side evaluation does."""
    cfg, run_dir = finished
    lock = RunDir(run_dir).store_dir("eval") / ".lock"
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from pipeline.rundir import RunDir\n"
         f"with RunDir({str(run_dir)!r}).store_lock('eval', 'evaluating (side)'):\n"
         "    print('held', flush=True); time.sleep(4)"],
        cwd=REPO_ROOT, stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held" and is_locked(lock)
    t0 = time.monotonic()
    assert main(["run", "--config", str(cfg), "--run-dir", str(run_dir)]) == 0
    assert holder.wait(timeout=30) == 0
    out = capsys.readouterr().out + caplog.text
    assert f"waiting: {run_dir / 'eval'}: evaluation in progress by pid {holder.pid}" in out
    assert time.monotonic() - t0 > 2
    assert sorted(metrics_written(run_dir)) == ["step-3", "step-6"]
    assert (run_dir / "compliance" / "manifest.json").exists()


def test_a_real_side_evaluation_and_the_run_evaluate_each_checkpoint_once(finished, capsys, caplog):
    cfg, run_dir = finished
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    side = subprocess.Popen([sys.executable, "-m", "pipeline.cli", "evaluate", "--run-dir",
                             str(run_dir)], cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    lock = RunDir(run_dir).store_dir("eval") / ".lock"
    deadline = time.monotonic() + 60
    while not is_locked(lock) and side.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert main(["run", "--config", str(cfg), "--run-dir", str(run_dir)]) == 0
    side_out, _ = side.communicate(timeout=120)
    assert side.returncode == 0, side_out
    out = capsys.readouterr().out + caplog.text
    # every checkpoint evaluated by exactly one of the two
    by_side = {s for s in ("step-3", "step-6") if f"{s} val:" in side_out}
    by_run = {s for s in ("step-3", "step-6") if f"[evaluate] {s} val:" in out}
    assert by_side | by_run == {"step-3", "step-6"} and not by_side & by_run, (by_side, by_run)
    assert (run_dir / "compliance" / "manifest.json").exists()
