"""Machine profiles ([pretrain.machine]): the JUPITER preset keeps its figures and checks; a profile of one's own
(a CPU partition, another GPU cluster) is declared in the config, checked against its own node and rendered
for it; none of it, nor [pretrain.slurm], enters the stage's fingerprint."""

from __future__ import annotations

import shutil
import subprocess
import textwrap

import pytest

from pipeline.config import ConfigError, load_config
from stages.cluster.errors import LaunchError
from stages.cluster.machine import JUPITER_BOOSTER
from stages.pretrain.launch.checks import check_layout
from stages.pretrain.launch.sbatch import render_job
from tests.pretrain.test_launch import PRESET, write_variant

CPU_MACHINE = """
[pretrain.machine]
preset = "custom"
name = "test CPU nodes"
partition = "cpu"
gpus_per_node = 0
cpus_per_node = 8
memory_gib = 16
"""


def tiny_config(tmp_path, machine: str = CPU_MACHINE, **pretrain: str):
    lines = {"flavor": '"tiny"', "seq_len": "64", "local_batch_size": "4", "steps": "20", "launcher": '"slurm"', **pretrain}
    body = textwrap.dedent("""
        [run]
        name = "test"
        [pretrain]
        """) + "".join(f"{k} = {v}\n" for k, v in lines.items()) + \
        "[pretrain.parallelism]\nprocesses_per_node = 2\n" + textwrap.dedent(machine)
    path = tmp_path / "config.toml"
    path.write_text(body, encoding="utf-8")
    return load_config(path)


def test_the_preset_is_jupiters_booster_and_fixes_its_hardware(tmp_path):
    hw = load_config(PRESET).section("pretrain").machine.hardware()
    assert hw == JUPITER_BOOSTER
    assert (hw.gpus_per_node, hw.cores_per_node, hw.network_interfaces, hw.hostname_suffix, hw.max_time_hours) == \
        (4, 288, ("ib0",), "i", 24)
    with pytest.raises(ConfigError, match=r"\[pretrain\.machine\]: gpus_per_node = 8: the jupiter-booster preset "
                                          r"fixes the node's hardware; .*preset = \"custom\""):
        load_config(write_variant(tmp_path, machine={"gpus_per_node": 8}))
    # site settings may change on the preset: another partition of the same nodes
    devel = load_config(write_variant(tmp_path, machine={"partition": "develbooster"})).section("pretrain")
    assert devel.machine.hardware().partition == "develbooster" and devel.machine.hardware().gpus_per_node == 4


def test_old_slurm_keys_say_where_they_moved(tmp_path):
    with pytest.raises(ConfigError, match=r"\[pretrain\.slurm\]: cpus_per_task describes the machine and moved to "
                                          r"\[pretrain\.machine\] \(as cpus_per_node\)"):
        load_config(write_variant(tmp_path, slurm={"cpus_per_task": 288}))


def test_a_custom_profile_names_what_it_lacks(tmp_path):
    with pytest.raises(ConfigError, match=r"preset = \"custom\" needs gpus_per_node, cpus_per_node, memory_gib"):
        tiny_config(tmp_path, '[pretrain.machine]\npreset = "custom"\npartition = "cpu"\n')
    with pytest.raises(ConfigError, match="needs gpu_memory_gib"):
        tiny_config(tmp_path, CPU_MACHINE.replace("gpus_per_node = 0", "gpus_per_node = 2"))


def test_a_cpu_partition_renders_without_gres_and_with_a_seed_checkpoint(tmp_path):
    config = tiny_config(tmp_path)
    job = render_job(config, tmp_path / "run", tmp_path / "run" / "job", require_account=True)  # no account needed
    s = job.sbatch
    assert "#SBATCH --partition=cpu" in s and "#SBATCH --cpus-per-task=8" in s and "--gres" not in s
    assert "export OMP_NUM_THREADS=4" in s  # 8 cores / 2 ranks
    for absent in ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "CUDA_DEVICE_MAX_CONNECTIONS", "NCCL_NET_GDR", "--account"):
        assert absent not in s, absent  # no interfaces declared: the system's choice; no GPUs: no NCCL/CUDA settings
    assert "NUMA_BINDING=\n" in s and "numactl" not in s  # no binding unless declared
    seed = s.index("--seed-checkpoint")
    assert s.index("srun --nodes=1 --ntasks=1") < seed < s.index("torchrun --nnodes")  # one process, before the ranks
    assert "--nproc_per_node=2" in s and "on test CPU nodes" in job.layout and "2 CPU ranks" in job.layout
    script = tmp_path / "job.sbatch"
    script.write_text(s)
    assert subprocess.run([shutil.which("bash"), "-n", str(script)]).returncode == 0
    lo = tiny_config(tmp_path, CPU_MACHINE + 'network_interfaces = ["lo"]\nnuma_binding = "node"\n')
    s = render_job(lo, tmp_path / "run", tmp_path / "run" / "job").sbatch
    assert "export GLOO_SOCKET_IFNAME=lo" in s and "export NCCL_SOCKET_IFNAME=lo" in s and "--numa-binding=node" in s


def test_cpu_partition_checks(tmp_path):
    settings = tiny_config(tmp_path).section("pretrain")
    assert check_layout(settings) == []
    (e,) = check_layout(settings.model_copy(update={"device": "cuda"}))
    assert e.startswith('[pretrain] device = "cuda": test CPU nodes has no GPUs')
    many = settings.model_copy(update={"parallelism": settings.parallelism.model_copy(
        update={"processes_per_node": 16, "data_parallel_shard": -1})})
    assert any("more ranks than the 8 cores of a node" in x for x in check_layout(many))


def test_memory_is_checked_against_the_nodes_memory(tmp_path):
    small = tiny_config(tmp_path, CPU_MACHINE.replace("memory_gib = 16", "memory_gib = 0.5"))
    with pytest.raises(LaunchError, match=r"does not fit in node memory: .* > 0\.2 GiB per rank \(0\.5 GiB of a node of "
                                          r"test CPU nodes shared by its ranks\); fix: fewer ranks per node"):
        render_job(small, tmp_path / "run", tmp_path / "run" / "job")


def test_another_gpu_cluster_is_a_profile(tmp_path):
    machine = textwrap.dedent("""
        [pretrain.machine]
        preset = "custom"
        name = "Leonardo Booster (4 x A100 64 GB)"
        partition = "boost_usr_prod"
        gpus_per_node = 4
        cpus_per_node = 32
        memory_gib = 480
        gpu_memory_gib = 64
        gpu_peak_flops = 312e12
        network_interfaces = ["ib0", "ib1"]
        max_time = "24:00:00"
        """)
    config = tiny_config(tmp_path, machine.replace("[pretrain.machine]", '[pretrain.slurm]\ntime_limit = "48:00:00"\n'
                                                   "[pretrain.machine]"), device='"cuda"', precision='"bfloat16"')
    with pytest.raises(LaunchError, match="processes_per_node = 2 must equal the 4 GPUs per node of Leonardo"):
        render_job(config, tmp_path / "run", tmp_path / "run" / "job")
    s = config.section("pretrain")
    config.stages["pretrain"] = s.model_copy(update={"parallelism": s.parallelism.model_copy(update={"processes_per_node": 4})})
    job = render_job(config, tmp_path / "run", tmp_path / "run" / "job")
    for line in ("#SBATCH --partition=boost_usr_prod", "#SBATCH --gres=gpu:4", "#SBATCH --cpus-per-task=32",
                 "export OMP_NUM_THREADS=8", "export NCCL_SOCKET_IFNAME=ib0,ib1", "CUDA_DEVICE_MAX_CONNECTIONS=1"):
        assert line in job.sbatch, line
    assert "NCCL_NET_GDR_C2C" not in job.sbatch and "--seed-checkpoint" not in job.sbatch  # GH200 only; GPUs: no seed
    assert any("over the boost_usr_prod partition's 24 h" in w for w in job.warnings)
    assert job.plan.memory.hbm_gib == 64


def test_launch_settings_stay_out_of_the_fingerprint(tmp_path):
    from pipeline.status import fingerprint_inputs
    from pipeline.stage import StageContext
    from pipeline.registry import get_stage
    from pipeline.rundir import RunDir

    def inputs(**pretrain):
        config = tiny_config(tmp_path, CPU_MACHINE, **pretrain)
        return fingerprint_inputs(get_stage("pretrain"), StageContext(RunDir(tmp_path / "run"), config, "pretrain", "", {}))

    base = inputs()
    assert "slurm" not in base["config"] and "machine" not in base["config"]
    assert inputs(**{"launcher": '"slurm"'}) == base
    raised = tiny_config(tmp_path, '[pretrain.slurm]\ntime_limit = "48:00:00"\nqos = "long"\n' + CPU_MACHINE)
    assert raised.section("pretrain").slurm.time_limit == "48:00:00"
    assert fingerprint_inputs(get_stage("pretrain"), StageContext(RunDir(tmp_path / "run"), raised, "pretrain", "", {})) == base
    assert inputs(steps="21") != base  # what is trained does count
