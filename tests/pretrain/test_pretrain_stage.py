"""The pretrain stage trains the tiny EUROPA MoE for real with torchtitan on CPU: one process, torchrun, resume."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pipeline.cli import main
from pipeline.config import REPO_ROOT, ConfigError, load_config
from europa_model.checkpoints import complete_checkpoints
from pipeline.fsutil import sha256_file
from pipeline.rundir import RunDir
from stages.pretrain import job as jobdir
from tests.runs import make_run


def losses(folder: Path) -> dict[int, float]:
    return {r["step"]: r["loss"] for r in jobdir.metrics(folder)}


@pytest.fixture(scope="module")
def trained(trained_run):
    return trained_run


def test_trains_checkpoints_and_records(trained):
    cfg, run_dir = trained
    out = run_dir / "pretrain"
    m = json.loads((out / "manifest.json").read_text())
    s = m["statistics"]
    # two checkpoints (interval 3), complete DCP folders with the full training state
    assert [c.name for c in complete_checkpoints(out)] == ["step-3", "step-6"]
    assert s["checkpoint"]["path"] == "checkpoints/step-6"
    outputs = {o["path"]: o["sha256"] for o in m["outputs"]}
    for f in s["checkpoint"]["files"]:
        assert sha256_file(out / f["path"]) == f["sha256"] == outputs[f["path"]]  # outputs reuse these
    assert any(p.startswith("checkpoints/step-3/") for p in outputs)  # earlier checkpoints are listed too
    # every step logged with the figures the manifest is built from; the model learned something
    rows = jobdir.metrics(out)
    assert [r["step"] for r in rows] == [1, 2, 3, 4, 5, 6]
    for key in ("loss", "grad_norm", "lr", "tokens_per_s_per_device", "memory_gib", "mfu_pct"):
        assert all(r[key] is not None for r in rows), key
    assert rows[-1]["loss"] < rows[0]["loss"]
    assert list((out / "tb").rglob("events.out.tfevents.*")), "TensorBoard events missing"
    t, c = s["training"], s["compute"]
    assert t["steps"] == 6 and t["tokens_seen"] == 6 * 4 * 64 and t["device_count"] == 1 and t["device_type"] == "cpu"
    assert t["device_hours"] > 0 and t["wall_time_s"] > 0
    a, b, hw = c["architecture"], c["counted"], c["hardware"]
    assert a["flops"] == a["flops_per_token"] * t["tokens_seen"]
    assert a["flops_per_token"] == 6 * s["model"]["active_matmul_params"] + a["flops_per_token_attention"]
    # (b) counted in the job's first step: the formula and the executed operations agree; the experts are seen
    assert b["counted_step"] == 1 and b["flops"] == b["flops_per_step"] * 6 and b["recomputed_flops_per_step"] == 0
    assert 0.9 < b["ratio_to_architecture"] < 1.1 and b["by_operation"]["_grouped_mm"] > 0
    assert (out / "flop_count.json").exists()
    # (c) devices x seconds x the CPU's theoretical peak bounds (a): utilisation below 100%
    assert hw["flops"] == pytest.approx(hw["device_seconds"] * hw["peak_flops_per_device"])
    assert a["flops"] < hw["flops"] and 0 < hw["implied_utilisation"] < 1
    assert "FLOP/cycle" in hw["peak_source"] and "MHz" in hw["peak_source"]
    assert s["model"]["total_params"] > s["model"]["active_params"] > 0


def test_checkpoint_digests_come_from_the_ranks_and_nothing_is_read_twice(trained, tmp_path, monkeypatch):
    """Every kept checkpoint's files were hashed by the training rank while saving (checksums-rank0.json); the
    stage publishes them, record and manifest, without reading one checkpoint file: counted by wrapping the one
    sha256 function the stage and the manifest use."""
    import shutil

    from pipeline import fsutil

    cfg, run_dir = trained
    published = json.loads((run_dir / "pretrain" / "manifest.json").read_text())
    # a copy of the run whose training job is finished but not published (its job folder is what the published
    # stage folder was made from): the stage only publishes
    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy, copy_function=os.link,
                    ignore=shutil.ignore_patterns("pretrain", ".lock", ".staging", ".trash", ".work"))
    job = RunDir(copy).job_dir("pretrain", published["fingerprint"])
    shutil.copytree(run_dir / "pretrain", job, copy_function=os.link, ignore=shutil.ignore_patterns("manifest.json"))
    reads: list[str] = []
    real = fsutil.sha256_file

    def counting(path, *a, **k):
        reads.append(str(path))
        return real(path, *a, **k)

    monkeypatch.setattr(fsutil, "sha256_file", counting)
    assert main(["stage", "pretrain", "--config", str(cfg), "--run-dir", str(copy)]) == 0
    monkeypatch.setattr(fsutil, "sha256_file", real)
    data_reads = [r for r in reads if "/checkpoints/" in r and "checksums-rank" not in r]
    assert data_reads == [], data_reads
    assert any("metrics.jsonl" in r for r in reads)  # the other outputs are hashed as before

    m = json.loads((copy / "pretrain" / "manifest.json").read_text())
    kept = m["statistics"]["checkpoint"]["kept"]
    # the same job, published again: not retrained (its statistics, wall time and segments included, are equal)
    assert m["fingerprint"] == published["fingerprint"] and m["statistics"] == published["statistics"]
    assert [k["step"] for k in kept] == [3, 6]
    outputs = {o["path"]: o["sha256"] for o in m["outputs"]}
    for k in kept:
        assert k["hashed_on_ranks"] == k["files"] >= 2 and k["hashed_at_publish"] == 0
        folder = copy / "pretrain" / k["path"]
        assert (folder / "checksums-rank0.json").is_file()
        data = [p for p in sorted(folder.iterdir()) if not p.name.startswith("checksums-rank")]
        assert len(data) == k["files"] and sum(p.stat().st_size for p in data) == k["bytes"]
        for p in data:  # the recorded digests are the files' (read here, by the test)
            assert outputs[f"{k['path']}/{p.name}"] == sha256_file(p)
    assert kept[-1]["sha256"] == m["statistics"]["checkpoint"]["sha256"]


def test_rerun_is_fresh_and_skips(trained, capsys):
    cfg, run_dir = trained
    t0 = time.monotonic()
    assert main(["stage", "pretrain", "--config", str(cfg), "--run-dir", str(run_dir)]) == 0
    assert time.monotonic() - t0 < 10
    assert "fresh, nothing to do" in capsys.readouterr().out


def test_resumes_from_latest_checkpoint_after_a_crash(tmp_path, data_run, udhr_dir, trained):
    """Kill training after its first checkpoint; the rerun resumes there and ends where an uninterrupted run
    ends: same losses after the checkpoint (dataloader, optimizer and schedule state restored)."""
    _, reference_run = trained
    cfg, run_dir = make_run(tmp_path, data_run, udhr_dir)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "pipeline.cli", "stage", "pretrain", "--config", str(cfg),
                             "--run-dir", str(run_dir)], cwd=REPO_ROOT, env=env, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    job = None
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        jobs = RunDir(run_dir).job_dirs("pretrain")
        if jobs and any(c.step == 3 for c in complete_checkpoints(jobs[0])):
            job = jobs[0]
            break
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert job is not None, "training never wrote its step-3 checkpoint"
    if any(c.step == 6 for c in complete_checkpoints(job)):
        pytest.skip("training finished before it could be interrupted")

    assert main(["status", "--config", str(cfg), "--run-dir", str(run_dir)]) == 0
    assert main(["stage", "pretrain", "--config", str(cfg), "--run-dir", str(run_dir)]) == 0
    out = run_dir / "pretrain"
    log = (out / "train.log").read_text()
    assert "Loading the checkpoint" in log or "resum" in log.lower()
    resumed, reference = losses(out), losses(reference_run / "pretrain")
    for step in (4, 5, 6):
        assert resumed[step] == pytest.approx(reference[step], rel=1e-4), step
    assert json.loads((out / "manifest.json").read_text())["statistics"]["training"]["segments"] == 2


def test_config_errors_name_the_key(tmp_path, data_run, udhr_dir):
    cfg, _ = make_run(tmp_path, data_run, udhr_dir, **{"parallelism.processes_per_node": "2"})
    with pytest.raises(ConfigError, match=r"\[pretrain\].*launcher 'local' runs one process"):
        load_config(cfg)
    cfg, _ = make_run(tmp_path / "b", data_run, udhr_dir, launcher='"torchrun"',
                      **{"parallelism.processes_per_node": "2", "parallelism.expert_parallel": "4"})
    with pytest.raises(ConfigError, match="expert_parallel 4 must divide"):
        load_config(cfg)


def test_activation_offload_on_cpu_is_refused_naming_the_supported_modes(tmp_path, data_run, udhr_dir):
    from stages.pretrain.trainer_config import UnsupportedSetting, build_trainer_config

    cfg, run_dir = make_run(tmp_path, data_run, udhr_dir, **{"activation_checkpoint.mode": '"offload"'})
    settings = load_config(cfg).section("pretrain")
    kwargs = dict(shards_dir=run_dir / "shards", tokenizer_dir=run_dir / "tokenizer", job_dir=tmp_path / "job",
                  vocab_size=1000, seed=1)
    with pytest.raises(UnsupportedSetting, match=r'activation_checkpoint\] mode = "offload".*"selective" or "full"'):
        build_trainer_config(settings, device_type="cpu", **kwargs)
    # on a GPU node the same setting selects torchtitan's compile-based trainer with SAC + host offload
    config = build_trainer_config(settings, device_type="cuda", **kwargs)
    assert type(config).__qualname__ == "GraphTrainer.Config"
    assert config.compile.memory_policy == "sac_and_offload" and config.compile.cpu_offload_budget_gb == 60.0


@pytest.mark.slow
def test_two_ranks_with_expert_parallel_match_one_process(tmp_path, data_run, udhr_dir):
    """1 process (batch 8) against torchrun with 2 gloo ranks (batch 4 each): FSDP2, expert parallel 2,
    unshard_async_op, DistMuon with FlexShard placements. The data order is global, so both see the same global
    batches, and both start from the same initial weights (the 2-rank run from a seed checkpoint): the losses
    agree to float32 reduction-order noise (stated tolerance: relative 1e-4)."""
    common = {"steps": "4", "optimizer.name": '"dist_muon"'}
    one_cfg, one_dir = make_run(tmp_path / "one", data_run, udhr_dir, local_batch_size="8", **common)
    two_cfg, two_dir = make_run(tmp_path / "two", data_run, udhr_dir, local_batch_size="4", launcher='"torchrun"',
                                **common, **{"parallelism.processes_per_node": "2", "parallelism.expert_parallel": "2",
                                             "parallelism.unshard_async_op": "true"})
    for cfg, run_dir in ((one_cfg, one_dir), (two_cfg, two_dir)):
        assert main(["stage", "pretrain", "--config", str(cfg), "--run-dir", str(run_dir)]) == 0
    log = (two_dir / "pretrain" / "train.log").read_text()
    assert "Optimizer DistMuon" in log and "unshard_async_op on" in log
    assert "Loading the checkpoint from" in log and "seed" in log  # both ranks start from one seed checkpoint
    stats = json.loads((two_dir / "pretrain" / "manifest.json").read_text())["statistics"]
    assert stats["training"]["device_count"] == 2 and stats["training"]["tokens_seen"] == 4 * 8 * 64
    # the operations counted on each rank add up to the one process's (same global batch, same model)
    one = json.loads((one_dir / "pretrain" / "manifest.json").read_text())["statistics"]["compute"]["counted"]
    two = stats["compute"]["counted"]
    assert two["flops_per_step"] == one["flops_per_step"] and two["by_operation"] == one["by_operation"]
    # two ranks share this machine's cores: each rank's peak is half the machine's
    assert stats["compute"]["hardware"]["peak_flops_per_device"] * 2 == pytest.approx(
        json.loads((one_dir / "pretrain" / "manifest.json").read_text())["statistics"]["compute"]["hardware"]["peak_flops_per_device"])
    for kept in stats["checkpoint"]["kept"]:  # each rank hashed its own shard files while saving
        folder = two_dir / "pretrain" / kept["path"]
        assert {p.name for p in folder.glob("checksums-rank*.json")} == {"checksums-rank0.json", "checksums-rank1.json"}
        assert kept["hashed_at_publish"] == 0 and kept["hashed_on_ranks"] == kept["files"] >= 3
    a, b = losses(one_dir / "pretrain"), losses(two_dir / "pretrain")
    assert sorted(a) == sorted(b) == [1, 2, 3, 4]
    for step in a:
        assert b[step] == pytest.approx(a[step], rel=1e-4), step


def test_divergence_stops_naming_the_step_and_the_last_good_checkpoint(tmp_path, data_run, udhr_dir, capsys):
    cfg, run_dir = make_run(tmp_path, data_run, udhr_dir, steps="12", **{"optimizer.lr": "30.0"})
    assert main(["stage", "pretrain", "--config", str(cfg), "--run-dir", str(run_dir)]) == 1
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "stage pretrain: training diverged at step" in err and "lower [pretrain.optimizer] lr" in err
    step = int(err.split("at step ")[1].split()[0])
    assert (f"last good checkpoint {run_dir}" in err and f"step-{step - 1}" in err) or "no checkpoint before it" in err
    assert not (run_dir / "pretrain").exists()  # nothing published
