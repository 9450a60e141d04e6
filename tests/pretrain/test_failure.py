"""Why a training process stopped, as it records it (J/failures/rank-<R>.json), not as a log line says it."""

from __future__ import annotations

import os
import subprocess
import sys

from pipeline.config import REPO_ROOT
from stages.pretrain.failure import Failure, clear_failures, read_failure, write_failure


def test_the_divergence_explains_the_end_over_the_errors_it_caused(tmp_path):
    write_failure(tmp_path, Failure("error", "RuntimeError: collective timed out", rank=0, step=7))
    write_failure(tmp_path, Failure("diverged", "global_avg_loss=nan", rank=3, step=7))
    assert read_failure(tmp_path) == Failure("diverged", "global_avg_loss=nan", rank=3, step=7)
    clear_failures(tmp_path)
    assert read_failure(tmp_path) is None
    write_failure(tmp_path, Failure("error", "b", rank=2))
    write_failure(tmp_path, Failure("error", "a", rank=1))
    assert read_failure(tmp_path).rank == 1  # else the lowest rank's


def test_a_training_process_with_bad_inputs_records_them(tmp_path):
    run, job = tmp_path / "run", tmp_path / "job"
    run.mkdir()
    (run / "run.toml").write_text('[run]\nname = "t"\n')
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "-m", "stages.pretrain.entry", "--run-dir", str(run), "--job-dir", str(job)],
                         capture_output=True, text=True, env=env, cwd=REPO_ROOT, timeout=120)
    assert out.returncode != 0
    failure = read_failure(job)
    assert failure is not None and failure.kind == "input" and "no tokenizer or shards output" in failure.message
