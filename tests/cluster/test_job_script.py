"""A job script of the cluster package (stages/cluster/sbatch.py) for a job that is not training: the machine's
part (Slurm resources, binding, environment, rendezvous) from the profile and the Slurm settings, the job's
part (what every rank runs, what runs before) from the job; submitting it records it in its folder. The
training job's script is tested in tests/pretrain/test_launch.py and tests/pretrain/test_machine.py."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from stages.cluster import sbatch, slurm
from stages.cluster.config import MachineConfig, SlurmConfig
from stages.cluster.machine import JUPITER_BOOSTER

CPU = MachineConfig(preset="custom", name="cpu test nodes", partition="cpu", gpus_per_node=0, cpus_per_node=8,
                    memory_gib=16, network_interfaces=["lo"])


def script(tmp_path: Path, **kw) -> sbatch.JobScript:
    args = dict(hardware=JUPITER_BOOSTER, slurm=SlurmConfig(account="proj"), job_name="europa-eval-step-6", nodes=2,
                ranks_per_node=4, job_dir=tmp_path / "job", entry=["some.module", "--flag", "a b"],
                title="A job of the run", header=["job dir  x"])
    return sbatch.JobScript(**{**args, **kw})


def test_the_machines_part_comes_from_the_profile_and_the_jobs_part_from_the_job(tmp_path):
    text = sbatch.render(script(tmp_path))
    assert text.startswith("#!/bin/bash\n# A job of the run: re-render, do not edit.\n# job dir  x\n")
    for line in ("#SBATCH --job-name=europa-eval-step-6", "#SBATCH --account=proj", "#SBATCH --partition=booster",
                 "#SBATCH --nodes=2", "#SBATCH --gres=gpu:4", "#SBATCH --cpus-per-task=288",
                 f"#SBATCH --output={tmp_path / 'job' / 'slurm-%j.out'}", "export OMP_NUM_THREADS=72",
                 "export NCCL_SOCKET_IFNAME=ib0", "NUMA_BINDING=--numa-binding=node", 'MASTER_ADDR="${head_node}i"',
                 "MASTER_PORT=$(( 20000 + SLURM_JOB_ID % 10000 ))", "--nproc_per_node=4", "    -m some.module --flag 'a b'"):
        assert line in text, line
    assert "stages.pretrain" not in text and "seed" not in text  # nothing of training's
    assert subprocess.run([shutil.which("bash"), "-n"], input=text, text=True).returncode == 0


def test_a_cpu_partition_and_a_prelude(tmp_path):
    text = sbatch.render(script(tmp_path, hardware=CPU.hardware(), ranks_per_node=2, slurm=SlurmConfig(master_port=23456),
                                prelude=["", "echo before the ranks"]))
    assert "--gres" not in text and "#SBATCH --account" not in text and "export GLOO_SOCKET_IFNAME=lo" in text
    assert "export OMP_NUM_THREADS=4" in text and "NUMA_BINDING=\n" in text and "MASTER_PORT=23456" in text
    assert text.index("echo before the ranks") < text.index('echo "europa: job $SLURM_JOB_ID')


def test_job_name_defaults_to_the_run(tmp_path):
    assert sbatch.job_name(SlurmConfig(), "demo") == "europa-demo"
    assert sbatch.job_name(SlurmConfig(), "europa-1t") == "europa-1t"
    assert sbatch.job_name(SlurmConfig(job_name="mine"), "demo") == "mine"


def test_submit_renders_into_the_job_folder_and_records_the_job(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sbatch").write_text("#!/bin/sh\necho 4242\n")
    (bin_dir / "sbatch").chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))
    job = script(tmp_path)
    job_id, path = sbatch.submit(job)
    assert (job_id, path) == ("4242", tmp_path / "job" / "job.sbatch")
    assert path.read_text() == sbatch.render(job) and path.stat().st_mode & 0o111
    (recorded,) = slurm.submitted_jobs(job.job_dir)
    assert (recorded.job_id, recorded.script) == ("4242", str(path))
