"""`europa launch jupiter`: the EUROPA preset config, the rendered sbatch script, machine profiles (the JUPITER
preset, a CPU partition, another GPU cluster) and the refusals. What a real Slurm says to these scripts is
tested against a localhost Slurm in tests/slurm/test_launcher.py."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

from stages.cluster.errors import LaunchError
from stages.pretrain.launch.checks import check_layout
from stages.pretrain.launch.sbatch import render_job
from pipeline.cli import main
from pipeline.config import REPO_ROOT, ConfigError, dump_toml, load_config
from pipeline.languages import EU_LANGUAGE_CODES

PRESET = REPO_ROOT / "configs" / "jupiter-1t.toml"


def preset_data() -> dict:
    return tomllib.loads(PRESET.read_text(encoding="utf-8"))


def write_variant(tmp_path: Path, **pretrain_updates) -> Path:
    """The preset with [pretrain] sub-tables updated: write_variant(tmp, parallelism={"nodes": 2})."""
    data = preset_data()
    for key, value in pretrain_updates.items():
        if isinstance(value, dict):
            data["pretrain"].setdefault(key, {}).update(value)
        else:
            data["pretrain"][key] = value
    path = tmp_path / "jupiter.toml"
    path.write_text(dump_toml(data), encoding="utf-8")
    return path


def fake_tools(tmp_path: Path, **scripts: str) -> Path:
    """A bin folder holding only the given tools (name -> sh body); use it as PATH."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name, body in scripts.items():
        p = bin_dir / name
        p.write_text(f"#!/bin/sh\n{body}\n")
        p.chmod(0o755)
    return bin_dir


@pytest.fixture(scope="module")
def preset_config():
    return load_config(PRESET)


@pytest.fixture(scope="module")
def rendered(preset_config, tmp_path_factory):
    run = tmp_path_factory.mktemp("run")
    return render_job(preset_config, run, run / "pretrain-launch")


def test_preset_config_loads_with_the_europa_layout(preset_config):
    c = preset_config
    assert c.run.name == "europa-1t" and c.orchestration.task_runner == "processes"
    fw2, en = c.section("ingest").sources
    assert (fw2.kind, fw2.repo, fw2.hf_config) == ("huggingface", "HuggingFaceFW/fineweb-2", "{fineweb2}")
    assert set(fw2.languages) == set(EU_LANGUAGE_CODES) - {"en"}
    assert (en.kind, en.repo, en.languages) == ("huggingface", "HuggingFaceFW/fineweb", ["en"])
    assert c.section("tokenizer").vocab_size == 262_144
    p = c.section("pretrain")
    assert (p.flavor, p.optimizer.name, p.precision, p.launcher) == ("europa-1t", "dist_muon", "bfloat16", "slurm")
    assert p.activation_checkpoint.mode == "offload" and p.parallelism.unshard_async_op
    par = p.parallelism
    assert (par.nodes * par.processes_per_node, par.data_parallel_replicate) == (1536, 4)
    assert par.world_size // par.data_parallel_replicate == 384  # GPUs per data-parallel replica
    assert c.section("shards").mixture.total_tokens == p.steps * p.global_batch_size * p.seq_len


def test_fineweb2_configs_are_per_language():
    """The preset names each language's FineWeb-2 config: Estonian is ekk_Latn there (est_Latn in FLORES)."""
    from pipeline.languages import expand_template

    assert expand_template("{fineweb2}", "et") == "ekk_Latn" and expand_template("{flores}", "et") == "est_Latn"
    assert expand_template("{fineweb2}", "bg") == "bul_Cyrl"
    assert expand_template("{fineweb2}", "lv") == "lvs_Latn"


def test_rendered_script_starts_torchrun_on_every_node(rendered, tmp_path):
    s = rendered.sbatch
    for line in ("#SBATCH --partition=booster", "#SBATCH --nodes=384", "#SBATCH --ntasks-per-node=1",
                 "#SBATCH --gres=gpu:4", "#SBATCH --cpus-per-task=288", "#SBATCH --time=24:00:00"):
        assert line in s, line
    assert "#SBATCH --account" not in s  # not set in the preset: sbatch would ask for it
    # srun -> torchrun with c10d rendezvous on the first node, the entry module with run and job dirs
    assert "srun " in s and "--ntasks-per-node=1" in s and "--cpu-bind=cores" in s
    assert ("torchrun --nnodes=$SLURM_NNODES --nproc_per_node=4 --rdzv_backend=c10d "
            "--rdzv_endpoint=$MASTER_ADDR:$MASTER_PORT --rdzv_id=$SLURM_JOB_ID") in s
    assert "MASTER_PORT=$(( 20000 + SLURM_JOB_ID % 10000 ))" in s  # two jobs on one node: two ports
    assert 'grep -o "NodeAddr=[^ ]*"' in s  # a head node name that does not resolve: Slurm's address
    assert f"-m stages.pretrain.entry --run-dir {rendered.run_dir} --job-dir {rendered.job_dir}" in s
    assert 'scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1' in s
    assert 'MASTER_ADDR="${head_node}i"' in s  # JSC: InfiniBand hostname
    # NCCL / InfiniBand / threads / binding
    for env in ("NCCL_SOCKET_IFNAME=ib0", "NCCL_IB_TIMEOUT=", "NCCL_NET_GDR_LEVEL=", "CUDA_DEVICE_MAX_CONNECTIONS=1",
                "TORCH_NCCL_ASYNC_ERROR_HANDLING=", "OMP_NUM_THREADS=72", "--numa-binding=node",
                "NCCL_DEBUG=WARN"):  # the last from [pretrain.slurm] env
        assert env in s, env
    # the script is valid bash
    bash = shutil.which("bash")
    script = tmp_path / "job.sbatch"
    script.write_text(s)
    assert subprocess.run([bash, "-n", str(script)]).returncode == 0
    # layout and planner report
    assert "1,536 GPUs" in rendered.layout and "EP 96" in rendered.layout
    assert "fits" in rendered.report() and "FLOPs per token" in rendered.report()


def test_setup_lines_account_and_env_reach_the_script(tmp_path):
    path = write_variant(tmp_path, slurm={"account": "europa-llm", "qos": "normal", "reservation": "europa",
                                          "setup": ["module load Stages/2025 CUDA", "source /p/venv/bin/activate"],
                                          "env": {"NCCL_IB_TIMEOUT": "23"}})
    job = render_job(load_config(path), tmp_path / "run", tmp_path / "run" / "pretrain-launch", require_account=True)
    s = job.sbatch
    for line in ("#SBATCH --account=europa-llm", "#SBATCH --qos=normal", "#SBATCH --reservation=europa",
                 "module load Stages/2025 CUDA", "source /p/venv/bin/activate"):
        assert line in s, line
    # user env comes after the defaults, so it wins
    assert s.index("export NCCL_IB_TIMEOUT=22") < s.index("export NCCL_IB_TIMEOUT=23")


def test_degrees_that_do_not_multiply_name_the_key(tmp_path, capsys):
    path = write_variant(tmp_path, parallelism={"nodes": 2, "data_parallel_replicate": 1, "data_parallel_shard": 16,
                                                "expert_parallel": 8})
    with pytest.raises(ConfigError, match=r"\[pretrain\.parallelism\].*do not multiply"):
        load_config(path)
    assert main(["launch", "jupiter", "--config", str(path), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "[pretrain.parallelism]" in err


def test_layout_checks_name_key_and_fix(tmp_path):
    base = load_config(PRESET).section("pretrain")

    def errors(**par):
        s = base.model_copy(update={"parallelism": base.parallelism.model_copy(update=par)})
        return check_layout(s)

    assert errors() == []
    e = errors(nodes=192, processes_per_node=8)[0]
    assert "[pretrain.parallelism] processes_per_node = 8 must equal the 4 GPUs per node of NVIDIA GH200" in e
    (e,) = errors(nodes=96)
    assert "[pretrain.parallelism]" in e and "1536" in e and "384" in e and "nodes" in e
    (e,) = errors(nodes=5, data_parallel_replicate=1, data_parallel_shard=20, expert_parallel=5)
    assert "expert_parallel = 5 must divide the 384 routed experts" in e
    local = base.model_copy(update={"launcher": "torchrun"})
    assert any('launcher = "slurm"' in x for x in check_layout(local))


def test_layout_that_does_not_fit_is_refused_with_the_planners_figures(tmp_path, capsys):
    path = write_variant(tmp_path, global_batch_size=8,
                         parallelism={"nodes": 2, "data_parallel_replicate": 1, "data_parallel_shard": 8,
                                      "expert_parallel": 8})
    with pytest.raises(LaunchError) as e:
        render_job(load_config(path), tmp_path / "run", tmp_path / "run" / "pretrain-launch")
    msg = str(e.value)
    assert msg.startswith("[pretrain] the layout does not fit in GPU memory") and "GiB" in msg and "96 GiB HBM" in msg
    assert "parameters (fp32 shards = master)" in msg
    assert main(["launch", "jupiter", "--config", str(path), "--run-dir", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "does not fit" in err
    assert not (tmp_path / "run" / "pretrain-launch").exists()


def test_dry_run_prints_and_writes_nothing(tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["launch", "jupiter", "--config", str(PRESET), "--run-dir", str(run), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("#!/bin/bash") and "torchrun --nnodes=$SLURM_NNODES" in out
    assert "--rdzv_backend=c10d" in out and "NCCL_SOCKET_IFNAME=ib0" in out and "ESTIMATES" in out
    assert not run.exists()


def test_launch_renders_into_the_run_directory(tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["launch", "jupiter", "--config", str(PRESET), "--run-dir", str(run)]) == 0
    launch = run / "pretrain-launch"
    assert (launch / "job.sbatch").read_text().startswith("#!/bin/bash")
    assert os.access(launch / "job.sbatch", os.X_OK)
    assert json.loads((launch / "plan.json").read_text())["memory"]["verdict"] == "fits"
    assert "FLOPs per token" in (launch / "plan.txt").read_text()
    assert 'flavor = "europa-1t"' in (run / "run.toml").read_text()  # what the job's entry reads
    assert "--submit" in capsys.readouterr().out


def test_submit_without_sbatch_is_a_clear_usage_error(tmp_path, monkeypatch, capsys):
    path = write_variant(tmp_path, slurm={"account": "europa-llm"})
    monkeypatch.setenv("PATH", str(fake_tools(tmp_path)))  # nothing on PATH
    assert main(["launch", "jupiter", "--config", str(path), "--run-dir", str(tmp_path / "run"), "--submit"]) == 2
    err = capsys.readouterr().err
    assert "sbatch not found: --submit must run on a login node of the cluster" in err and err.count("\n") == 1
    assert not (tmp_path / "run").exists()


def test_submit_needs_an_account(tmp_path, capsys):
    assert main(["launch", "jupiter", "--config", str(PRESET), "--run-dir", str(tmp_path / "run"), "--submit"]) == 2
    assert "[pretrain.slurm] account is not set" in capsys.readouterr().err


def test_submit_needs_fresh_shards(tmp_path, monkeypatch, capsys):
    path = write_variant(tmp_path, slurm={"account": "europa-llm"})
    monkeypatch.setenv("PATH", str(fake_tools(tmp_path, sbatch="echo 1") ) + os.pathsep + os.environ["PATH"])
    assert main(["launch", "jupiter", "--config", str(path), "--run-dir", str(tmp_path / "run"), "--submit"]) == 2
    err = capsys.readouterr().err
    assert "stage tokenizer is missing" in err and "--to shards" in err


def test_credentials_in_slurm_env_are_refused(tmp_path):
    path = write_variant(tmp_path, slurm={"env": {"HF_TOKEN": "hf_abcdefghijklmnopqrstuvwxyz012345"}})
    with pytest.raises(LaunchError, match=r"\[pretrain\.slurm\.env\] HF_TOKEN looks like a credential"):
        render_job(load_config(path), tmp_path / "run", tmp_path / "run" / "pretrain-launch")
