"""`[evaluate.job] launcher = "slurm"`: the evaluation job is rendered by the pretrain stage's launcher (the
training's sbatch script and [pretrain.slurm] settings, the evaluation entry point), submitted, followed and
collected; the scheduled deployment does not wait for it. There is no Slurm here: sbatch / squeue / sacct are
small scripts on PATH, and "the cluster" runs the script's entry command under torchrun with one rank."""

from __future__ import annotations

import json
import os
import shutil
import sys

import pytest

from pipeline.config import REPO_ROOT, load_config
from pipeline.rundir import RunDir
from stages.evaluate.runner import evaluate_run

pytestmark = pytest.mark.slow


def fake_slurm(tmp_path):
    state = tmp_path / "slurm-state"
    state.mkdir()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    tools = {
        # sbatch SCRIPT: run the script's `-m <entry> ...` line on this machine in the background
        "sbatch": f'''for a in "$@"; do script="$a"; done
entry=$(grep -- '^    -m ' "$script" | sed 's/^    -m //')
cd {REPO_ROOT}
eval "nohup {sys.executable} -m torch.distributed.run --standalone --nproc_per_node=1 -m $entry" > "$(dirname "$script")/slurm-77.out" 2>&1 &
echo $! > {state}/pid
echo "77;jupiter"''',
        "squeue": f'kill -0 "$(cat {state}/pid)" 2>/dev/null && echo RUNNING; exit 0',
        "sacct": "echo COMPLETED",
    }
    for name, body in tools.items():
        p = bin_dir / name
        p.write_text(f"#!/bin/sh\n{body}\n")
        p.chmod(0o755)
    return bin_dir


def test_slurm_evaluation_job_is_submitted_followed_and_collected(trained_run, tmp_path, monkeypatch):
    cfg, src = trained_run
    run_dir = tmp_path / "run"
    shutil.copytree(src, run_dir, ignore=shutil.ignore_patterns(".lock", "eval", "evaluate"))
    monkeypatch.setenv("PATH", str(fake_slurm(tmp_path)) + os.pathsep + os.environ["PATH"])
    text = cfg.read_text() + ('\n[pretrain.slurm]\naccount = "demo"\n[evaluate.job]\nlauncher = "slurm"\nnodes = 2\n'
                              'poll_s = 0.3\n')
    (tmp_path / "slurm.toml").write_text(text)
    config = load_config(tmp_path / "slurm.toml")

    # the scheduled deployment's round: submit, do not wait
    first = evaluate_run(RunDir(run_dir), config, which="step-6", wait=False)
    assert first.evaluated == [] and first.pending and "Slurm job 77" in first.pending[0]["state"]
    job = run_dir / "eval" / "jobs" / "step-6"
    script = (job / "job.sbatch").read_text()
    assert "#SBATCH --account=demo" in script and "#SBATCH --nodes=2" in script and "--job-name=europa-eval-step-6" in script
    assert "-m stages.evaluate.distributed --run-dir" in script and "torchrun --nnodes=$SLURM_NNODES" in script
    assert "EUROPA evaluation of" in script
    assert json.loads((job / "submissions.jsonl").read_text().splitlines()[0])["job_id"] == "77"

    # `europa evaluate`'s round: the same job (not a second one) is followed to its end and collected
    done = evaluate_run(RunDir(run_dir), config, which="step-6")
    assert done.evaluated == [6]
    assert len((job / "submissions.jsonl").read_text().splitlines()) == 1
    m = json.loads((run_dir / "eval" / "step-6" / "metrics.json").read_text())
    assert m["job"]["launcher"] == "slurm" and m["job"]["ranks"] == 1 and sorted(m["sets"]["val"])
