"""`launcher = "slurm"`: `europa launch jupiter --submit` puts the job in the stage's own job folder, and the
stage follows that job (state, checkpoints, metrics) to its end and publishes it. There is no Slurm here:
sbatch / squeue / sacct are small scripts on PATH, and "the cluster" is the real training entry point started
in the background on this machine (one process instead of 4 GPUs)."""

from __future__ import annotations

import json
import os
import sys

import pytest

from pipeline.cli import main
from pipeline.config import REPO_ROOT
from stages.pretrain import stage as pretrain_stage
from tests.runs import make_run


def fake_slurm(tmp_path, run_dir):
    state = tmp_path / "slurm-state"
    state.mkdir()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    tools = {
        # sbatch SCRIPT: run the training entry on this machine in the background, answer a job id
        "sbatch": f'''for a in "$@"; do script="$a"; done
job=$(dirname "$script")
cd {REPO_ROOT}
nohup {sys.executable} -m stages.pretrain.entry --run-dir {run_dir} --job-dir "$job" > "$job/slurm-4242.out" 2>&1 &
echo $! > {state}/pid
echo "4242;jupiter"''',
        "squeue": f'kill -0 "$(cat {state}/pid)" 2>/dev/null && echo RUNNING; exit 0',
        "sacct": "echo COMPLETED",
    }
    for name, body in tools.items():
        p = bin_dir / name
        p.write_text(f"#!/bin/sh\n{body}\n")
        p.chmod(0o755)
    return bin_dir


@pytest.mark.slow
def test_launch_submit_then_the_stage_follows_and_publishes(tmp_path, data_run, udhr_dir, monkeypatch, capsys):
    cfg, run_dir = make_run(tmp_path, data_run, udhr_dir, launcher='"slurm"',
                            **{"parallelism.processes_per_node": "4", "slurm.account": '"demo"'})
    monkeypatch.setenv("PATH", str(fake_slurm(tmp_path, run_dir)) + os.pathsep + os.environ["PATH"])
    monkeypatch.setattr(pretrain_stage, "SLURM_POLL_S", 0.2)

    assert main(["launch", "jupiter", "--config", str(cfg), "--run-dir", str(run_dir), "--submit"]) == 0
    assert "submitted Slurm job 4242" in capsys.readouterr().out
    jobs = list((run_dir / ".work" / "pretrain").glob("*/job/jobs.jsonl"))
    assert len(jobs) == 1 and json.loads(jobs[0].read_text())["job_id"] == "4242"
    assert main(["status", "--run-dir", str(run_dir)]) == 0
    assert "pretrain    submitted" in capsys.readouterr().out

    assert main(["stage", "pretrain", "--config", str(cfg), "--run-dir", str(run_dir)]) == 0
    err = capsys.readouterr().err
    assert "following Slurm job 4242" in err and "new checkpoint step-3" in err
    m = json.loads((run_dir / "pretrain" / "manifest.json").read_text())
    assert m["statistics"]["training"]["launcher"] == "slurm" and m["statistics"]["checkpoint"]["final_step"] == 6
    assert (run_dir / "pretrain" / "checkpoints" / "step-6" / ".metadata").exists()
    assert "step:  6" in (run_dir / "pretrain" / "slurm-4242.out").read_text()
    assert (run_dir / "pretrain" / "job.sbatch").read_text().startswith("#!/bin/bash")
