"""`[evaluate.job] launcher = "slurm"` against a real localhost Slurm (tests/slurm/cluster.py): the evaluation job
is rendered on the run's machine (stages/cluster: the training's machine profile and [pretrain.slurm] settings,
the evaluation entry point), submitted and left running by the scheduled deployment's round, then followed to its
end and collected by `europa evaluate`'s round: one gloo rank on each of two nodes (n1, n2: their rendezvous
is Slurm's NodeAddr, as the names do not resolve)."""

from __future__ import annotations

import json
import shutil

import pytest

from pipeline.config import load_config
from pipeline.rundir import RunDir
from stages.evaluate.runner import evaluate_run

pytestmark = pytest.mark.slow

CPU_NODES = """
[pretrain.slurm]
account = "demo"
[pretrain.machine]
preset = "custom"
partition = "cpu"
gpus_per_node = 0
cpus_per_node = 2
memory_gib = 3
network_interfaces = ["lo"]
[evaluate.job]
launcher = "slurm"
nodes = 2
poll_s = 0.3
"""


def test_slurm_evaluation_job_is_submitted_followed_and_collected(slurm_cluster_two_nodes, trained_run, tmp_path):
    cfg, src = trained_run
    run_dir = tmp_path / "run"
    shutil.copytree(src, run_dir, ignore=shutil.ignore_patterns(".lock", "eval", "evaluate"))
    (tmp_path / "slurm.toml").write_text(cfg.read_text() + CPU_NODES)
    config = load_config(tmp_path / "slurm.toml")

    # the scheduled deployment's round: submit, do not wait
    first = evaluate_run(RunDir(run_dir), config, which="step-6", wait=False)
    assert first.evaluated == [] and first.pending and "Slurm job " in first.pending[0]["state"]
    job = RunDir(run_dir).store_job_dir("eval", "step-6")
    (submitted,) = [json.loads(line)["job_id"] for line in (job / "submissions.jsonl").read_text().splitlines()]
    script = (job / "job.sbatch").read_text()
    assert "#SBATCH --account=demo" in script and "#SBATCH --nodes=2" in script and "--job-name=europa-eval-step-6" in script
    assert "-m stages.evaluate.distributed --run-dir" in script and "torchrun --nnodes=$SLURM_NNODES" in script
    assert "EUROPA evaluation of" in script and "--gres" not in script and "--seed-checkpoint" not in script
    assert slurm_cluster_two_nodes.field(submitted, "JobName") == "europa-eval-step-6"

    # `europa evaluate`'s round: the same job (not a second one) is followed to its end and collected
    done = evaluate_run(RunDir(run_dir), config, which="step-6")
    assert done.evaluated == [6]
    assert len((job / "submissions.jsonl").read_text().splitlines()) == 1
    assert slurm_cluster_two_nodes.state(submitted) == "COMPLETED"
    assert "rendezvous 127.0.0.1:" in (job / f"slurm-{submitted}.out").read_text()  # n1's NodeAddr
    m = json.loads((run_dir / "eval" / "step-6" / "metrics.json").read_text())
    assert m["job"]["launcher"] == "slurm" and m["job"]["ranks"] == 2 and sorted(m["sets"]["val"])
