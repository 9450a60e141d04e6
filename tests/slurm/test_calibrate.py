"""`europa launch calibrate --submit` on the localhost Slurm: the calibration job (torchrun, 2 gloo ranks on a CPU
machine profile) measures the all-to-all, the FSDP rings and a GEMM at the layout's sizes, and the plan with
its measured.json differs from the plan without it, naming what was measured."""

from __future__ import annotations

import json
import textwrap

from pipeline.cli import main
from stages.cluster import slurm
from tests.slurm.cluster import CPU
from tests.slurm.test_launcher import wait_for

CONFIG = f"""
[run]
name = "calibrate"
languages = ["de"]
[pretrain]
flavor = "tiny"
seq_len = 64
local_batch_size = 4
launcher = "slurm"
[pretrain.parallelism]
processes_per_node = 2
expert_parallel = 2
[pretrain.machine]
preset = "custom"
name = "localhost test cluster"
partition = "{CPU.partition}"
gpus_per_node = 0
cpus_per_node = 2
memory_gib = 7
network_interfaces = ["lo"]
"""


def plan_json(cfg, run_dir, capsys) -> dict:
    assert main(["plan", "--json", "--config", str(cfg), "--run-dir", str(run_dir)]) == 0
    return json.loads(capsys.readouterr().out)


def test_the_calibration_job_runs_on_slurm_and_its_file_changes_the_plan(slurm_cluster, tmp_path, capsys):
    cfg, run_dir = tmp_path / "config.toml", tmp_path / "run"
    cfg.write_text(textwrap.dedent(CONFIG))
    assert main(["launch", "calibrate", "--config", str(cfg), "--run-dir", str(run_dir), "--submit"]) == 0
    out = capsys.readouterr().out
    assert "all_to_all over 2 ranks (expert parallel)" in out and "all_gather + reduce_scatter over 2 ranks" in out
    job_dir = run_dir / "pretrain-launch" / "calibrate"
    (submission,) = slurm.submitted_jobs(job_dir)
    state = wait_for("the calibration job to end", lambda: (s := slurm_cluster.state(submission.job_id))
                     in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT") and s, timeout=180, every=0.5)
    log = (job_dir / f"slurm-{submission.job_id}.out").read_text()
    assert state == "COMPLETED", log[-2000:]
    measured = json.loads((job_dir / "measured.json").read_text())
    assert measured["slurm_job_id"] == submission.job_id and measured["backend"] == "gloo"
    assert [m["op"] for m in measured["measurements"]] == ["all_to_all", "all_gather", "reduce_scatter", "gemm"]

    without = plan_json(cfg, run_dir, capsys)
    cfg.write_text(cfg.read_text().replace('network_interfaces = ["lo"]',
                                           'network_interfaces = ["lo"]\nmeasured = "run/pretrain-launch/calibrate/measured.json"'))
    with_file = plan_json(cfg, run_dir, capsys)
    before, after = (p["prediction"]["bands"]["expected"] for p in (without, with_file))
    assert with_file["prediction"]["measured"] == str(job_dir / "measured.json")
    assert without["prediction"]["measured"] is None
    assert after["compute_s"] != before["compute_s"] and after["a2a_nvlink_s"] != before["a2a_nvlink_s"]
    assert after["tokens_per_s_per_gpu"] != before["tokens_per_s_per_gpu"]
