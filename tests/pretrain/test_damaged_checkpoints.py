"""One damaged checkpoint costs its own steps at most, never the training: it is set aside (kept, named) and
training resumes from the newest intact one; evaluation redoes only what changed. Real checkpoints of a real
6-step tiny training (checkpoints at steps 3 and 6)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from europa_model.checkpoints import checkpoint_damage, complete_checkpoints
from pipeline.cli import main
from pipeline.config import REPO_ROOT
from pipeline.fsutil import sha256_file
from pipeline.rundir import JOB_LOCK, RunDir
from stages.pretrain import job as jobdir


@pytest.fixture
def finished(trained_run, tmp_path):
    """A private copy of the trained run: (config, run dir)."""
    cfg, run_dir = trained_run
    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy, ignore=shutil.ignore_patterns(".lock"))
    return cfg, copy


def record(run_dir: Path) -> dict:
    return json.loads((run_dir / "pretrain" / "manifest.json").read_text())["statistics"]


def test_damage_is_found_without_reading_the_tensors(finished):
    _, run_dir = finished
    step3 = run_dir / "pretrain" / "checkpoints" / "step-3"
    assert checkpoint_damage(step3) is None
    data = next(step3.glob("*.distcp"))
    (step3 / "checksums-rank0.json").unlink()  # no rank record: the DCP metadata's byte ranges still tell
    with open(data, "r+b") as f:
        f.truncate(data.stat().st_size // 2)
    assert f"{data.name} is " in checkpoint_damage(step3) and "reads up to" in checkpoint_damage(step3)
    (step3 / ".metadata").write_bytes(b"\x80\x04truncated")
    assert checkpoint_damage(step3).startswith("unreadable .metadata")
    (step3 / ".metadata").unlink()
    assert checkpoint_damage(step3).startswith("no .metadata")


def test_a_deleted_metadata_file_is_set_aside_and_nothing_is_retrained_or_reevaluated(finished, capsys, caplog):
    cfg, run_dir = finished
    assert main(["run", "--config", str(cfg), "--run-dir", str(run_dir), "--to", "evaluate"]) == 0
    before = record(run_dir)
    final = run_dir / "pretrain" / "checkpoints" / "step-6"
    final_digests = {p.name: sha256_file(p) for p in final.iterdir()}
    evaluated = {p.parent.name: p.stat().st_mtime_ns for p in (run_dir / "eval").glob("step-*/metrics.json")}
    assert sorted(evaluated) and len(evaluated) == 2
    (run_dir / "pretrain" / "checkpoints" / "step-3" / ".metadata").unlink()
    capsys.readouterr()
    caplog.clear()

    assert main(["run", "--config", str(cfg), "--run-dir", str(run_dir), "--to", "evaluate"]) == 0
    out = capsys.readouterr().out + caplog.text  # the progress lines go through logging
    assert "checkpoint step-3 is damaged (no .metadata" in out and "nothing to train" in out
    after = record(run_dir)
    assert after["training"]["segments"] == before["training"]["segments"]  # no training process ran
    assert [c["step"] for c in after["checkpoint"]["kept"]] == [6]
    (aside,) = after["checkpoint"]["set_aside"]
    assert aside["step"] == 3 and aside["path"] == "damaged-checkpoints/step-3" and "no .metadata" in aside["reason"]
    assert (run_dir / "pretrain" / "damaged-checkpoints" / "step-3").is_dir()  # kept, not deleted
    assert {p.name: sha256_file(p) for p in final.iterdir()} == final_digests
    assert after["checkpoint"]["sha256"] == before["checkpoint"]["sha256"]
    # evaluation: step-6 is unchanged and step-3 is gone, so nothing is evaluated again
    assert {p.parent.name: p.stat().st_mtime_ns for p in (run_dir / "eval").glob("step-*/metrics.json")} == evaluated
    assert "set aside damaged-checkpoints/step-3" in out
    assert main(["status", "--config", str(cfg), "--run-dir", str(run_dir)]) == 0
    status = capsys.readouterr().out
    assert "damaged-checkpoints/step-3" in status
    assert not [line for line in status.splitlines() if line.startswith(("pretrain", "evaluate")) and "fresh" not in line]


def test_a_truncated_final_checkpoint_resumes_from_the_one_before(finished, capsys, caplog):
    cfg, run_dir = finished
    before = record(run_dir)
    reference = {r["step"]: r["loss"] for r in jobdir.metrics(run_dir / "pretrain")}
    data = next((run_dir / "pretrain" / "checkpoints" / "step-6").glob("*.distcp"))
    with open(data, "r+b") as f:
        f.truncate(1000)

    assert main(["stage", "pretrain", "--config", str(cfg), "--run-dir", str(run_dir)]) == 0
    out = capsys.readouterr().out + caplog.text
    assert "checkpoint step-6 is damaged" in out and "resuming from step-3" in out
    after = record(run_dir)
    assert after["training"]["segments"] == before["training"]["segments"] + 1
    segments = jobdir.segments(run_dir / "pretrain")
    assert segments[-1].start_step == 3  # only steps 4-6 were trained again
    assert [c["step"] for c in after["checkpoint"]["kept"]] == [3, 6]
    assert after["checkpoint"]["set_aside"][0]["step"] == 6
    resumed = {r["step"]: r["loss"] for r in jobdir.metrics(run_dir / "pretrain")}
    assert resumed[6] == pytest.approx(reference[6], rel=1e-4)
    assert checkpoint_damage(run_dir / "pretrain" / "checkpoints" / "step-6") is None


def test_force_retrains_from_step_0_even_when_the_published_training_could_be_continued(finished, capsys):
    """--force means from scratch: the published training is not brought back (a forced rerun that continued it
    would publish the same weights, and its downstream stages would look fresh)."""
    cfg, run_dir = finished
    (run_dir / "pretrain" / "checkpoints" / "step-3" / ".metadata").unlink()
    assert main(["stage", "pretrain", "--config", str(cfg), "--run-dir", str(run_dir), "--force"]) == 0
    after = record(run_dir)
    assert [s.start_step for s in jobdir.segments(run_dir / "pretrain")] == [0]
    assert [c["step"] for c in after["checkpoint"]["kept"]] == [3, 6] and not after["checkpoint"].get("set_aside")


def test_status_tells_a_live_job_without_europa_from_a_dead_one(finished, capsys):
    """What kill -9 of europa under a Slurm job (or a trainer that outlived it) looks like: the attempt says
    running, the run lock is free, and the job's own lock tells whether its process still lives."""
    cfg, run_dir = finished
    rd = RunDir(run_dir)
    job = rd.job_dir("pretrain", "f" * 16)
    job.mkdir(parents=True)
    rd.record_attempt("pretrain", "running", "f" * 16, job_dir=job)
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from stages.pretrain.entry import trainer_lock\n"
         f"with trainer_lock({str(job)!r}, 0):\n    print('held', flush=True); time.sleep(120)"],
        cwd=REPO_ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        assert main(["status", "--config", str(cfg), "--run-dir", str(run_dir)]) == 0
        line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("pretrain"))
        assert "running" in line and f"pid {holder.pid} (training" in line and str(job) in line
    finally:
        holder.kill()
        holder.wait()
    assert main(["status", "--config", str(cfg), "--run-dir", str(run_dir)]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("pretrain"))
    assert "interrupted" in line and "pid" not in line
    assert (job / JOB_LOCK).exists()  # a lock file left behind means nothing by itself
    assert complete_checkpoints(run_dir / "pretrain")
