"""A job's sbatch script, rendered from the machine profile and the Slurm settings (never edited by hand).

The script starts ONE task per node (`srun --ntasks-per-node=1`) with all the node's cores, which runs
`torchrun` with one rank per GPU (or the job's ranks per node on a CPU partition); torchrun's c10d rendezvous
runs on the first node of the allocation, at a port derived from the job id (two jobs on one node do not
collide). The first node is addressed by its fast interface's name where the machine has one (JSC
convention: hostname + "i"), else by its hostname, else, when that does not resolve, by the address Slurm
knows it by (NodeAddr). JUPITER's binding: Slurm gives the task all 288 cores, then `torchrun
--numa-binding=node` pins each rank to the 72 cores of the Grace attached to its GPU (numactl), so its host
memory is that Grace's LPDDR5X, one NVLink-C2C hop away; OMP_NUM_THREADS = cores / ranks. What every rank
runs (`python -m <entry>`) and what runs before the ranks start are the job's (the training job:
stages/pretrain/launch/sbatch.py; the distributed evaluation: stages/evaluate/job.py).
"""

from __future__ import annotations

import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path

from stages.cluster import slurm
from stages.cluster.config import SlurmConfig
from stages.cluster.machine import Hardware

SCRIPT_NAME = "job.sbatch"
PORT_BASE, PORT_SPAN = 20000, 10000  # MASTER_PORT = 20000 + job id % 10000: below Linux's ephemeral ports
PYTHONUNBUFFERED = ("PYTHONUNBUFFERED", "1", "log lines reach slurm-<id>.out as they happen")


@dataclass(frozen=True)
class JobScript:
    """What a job script says: where the job runs (machine, Slurm settings, nodes, ranks per node), the module
    every rank runs, and the comments that say what it is."""

    hardware: Hardware
    slurm: SlurmConfig
    job_name: str
    nodes: int
    ranks_per_node: int
    job_dir: Path
    entry: list[str]  # the module and its arguments every rank runs (`python -m ...`)
    title: str  # the script's first comment, before ": re-render, do not edit."
    header: list[str] = field(default_factory=list)  # comment lines under the title
    prelude: list[str] = field(default_factory=list)  # shell lines before the ranks start

    @property
    def command(self) -> str:
        return "-m " + " ".join(shlex.quote(a) for a in self.entry)

    @property
    def path(self) -> Path:
        return self.job_dir / SCRIPT_NAME


def job_name(slurm_settings: SlurmConfig, run_name: str) -> str:
    """[pretrain.slurm] job_name, else the run's name (prefixed europa- where it is not already)."""
    return slurm_settings.job_name or (run_name if run_name.startswith("europa") else f"europa-{run_name}")


def port(slurm_settings: SlurmConfig) -> str:
    """MASTER_PORT as the script computes it."""
    p = slurm_settings.master_port
    return str(p) if p else f"$(( {PORT_BASE} + SLURM_JOB_ID % {PORT_SPAN} ))"


def setup_lines(slurm_settings: SlurmConfig) -> list[str]:
    if slurm_settings.setup:
        return ["# [pretrain.slurm] setup", *slurm_settings.setup]
    if sys.prefix != sys.base_prefix:
        return ["# no [pretrain.slurm] setup given: the virtual environment that rendered this script",
                f"source {shlex.quote(str(Path(sys.prefix) / 'bin' / 'activate'))}"]
    return ["# no [pretrain.slurm] setup given and no virtual environment: torchrun must be on PATH"]


def environment(hw: Hardware) -> list[tuple[str, str, str]]:
    """(name, value, why) for every rank, before [pretrain.slurm] env (which overrides them)."""
    out = list(hw.env)
    if hw.network_interfaces:
        names = ",".join(hw.network_interfaces)
        out += [("NCCL_SOCKET_IFNAME", names, "NCCL/gloo bootstrap on the machine's fast interface, not the management network"),
                ("GLOO_SOCKET_IFNAME", names, "")]
    return [*out, PYTHONUNBUFFERED]


def render(job: JobScript) -> str:
    from pipeline.config import REPO_ROOT

    s, hw = job.slurm, job.hardware
    q = shlex.quote
    ranks, cpus = job.ranks_per_node, hw.cores_per_node
    sb = [
        f"--job-name={job.job_name}",
        *([f"--account={s.account}"] if s.account else []),
        f"--partition={hw.partition}",
        f"--nodes={job.nodes}",
        "--ntasks-per-node=1",
        *([f"--gres=gpu:{hw.gpus_per_node}"] if hw.has_gpus else []),
        f"--cpus-per-task={cpus}",
        f"--time={s.time_limit}",
        *([f"--qos={s.qos}"] if s.qos else []),
        *([f"--reservation={s.reservation}"] if s.reservation else []),
        f"--output={job.job_dir / 'slurm-%j.out'}",
    ]
    out = ["#!/bin/bash",
           f"# {job.title}: re-render, do not edit.",
           *(f"# {line}" for line in job.header),
           *(f"#SBATCH {x}" for x in sb)]
    if not s.account and hw.account_required:
        out.append("# (no [pretrain.slurm] account: sbatch needs --account=<project> here)")
    out += ["", "set -euo pipefail", f"cd {q(str(REPO_ROOT))}", ""]
    out += setup_lines(s)
    what = "GPU" if hw.has_gpus else "rank"
    out += ["", f"# {ranks} ranks per node, {cpus // ranks} cores per {what}",
            f"export OMP_NUM_THREADS={cpus // ranks}"]
    for key, value, why in environment(hw):
        out.append(f"export {key}={q(value)}" + (f"  # {why}" if why else ""))
    if s.env:
        out.append("# [pretrain.slurm] env")
        out += [f"export {k}={q(v)}" for k, v in s.env.items()]
    out += ["", "# rendezvous host: the allocation's first node, by the name of its fast interface where the machine "
            "has one", "# (hostname + suffix), else its hostname, else (a name DNS does not know) Slurm's NodeAddr",
            'head_node="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1)"']
    if hw.hostname_suffix:
        out += [f'if getent hosts "${{head_node}}{hw.hostname_suffix}" >/dev/null; then '
                f'MASTER_ADDR="${{head_node}}{hw.hostname_suffix}"',
                'elif getent hosts "$head_node" >/dev/null; then MASTER_ADDR="$head_node"']
    else:
        out += ['if getent hosts "$head_node" >/dev/null; then MASTER_ADDR="$head_node"']
    out += ['else MASTER_ADDR="$(scontrol show node "$head_node" | grep -o "NodeAddr=[^ ]*" | cut -d= -f2)"; fi',
            f"MASTER_PORT={port(s)}  # from the job id: two jobs on one node do not collide",
            "export MASTER_ADDR MASTER_PORT", ""]
    if hw.numa_binding == "node":
        out += ["# torchrun --numa-binding=node runs each rank under numactl on the NUMA node of its GPU",
                "NUMA_BINDING=--numa-binding=node",
                'command -v numactl >/dev/null || { echo "warning: numactl not found: ranks are not NUMA-bound" >&2; '
                "NUMA_BINDING=; }"]
    else:
        out += ["NUMA_BINDING="]
    out += job.prelude
    out += [
        "",
        'echo "europa: job $SLURM_JOB_ID on $SLURM_NNODES node(s), rendezvous $MASTER_ADDR:$MASTER_PORT"',
        "",
        "# one task per node with all its cores; torchrun starts the ranks and restarts none (checkpoints resume)",
        f'srun --nodes="$SLURM_NNODES" --ntasks-per-node=1 --cpus-per-task={cpus} --cpu-bind=cores '
        "--kill-on-bad-exit=1 \\",
        f"  torchrun --nnodes=$SLURM_NNODES --nproc_per_node={ranks} --rdzv_backend=c10d "
        "--rdzv_endpoint=$MASTER_ADDR:$MASTER_PORT --rdzv_id=$SLURM_JOB_ID \\",
        "    --rdzv_conf=join_timeout=1800 $NUMA_BINDING \\",
        f"    {job.command}",
        "",
    ]
    return "\n".join(out)


def submit(job: JobScript) -> tuple[str, Path]:
    """Render the script into its job folder, sbatch it and record it in the folder's jobs.jsonl; returns (job
    id, script path)."""
    job.job_dir.mkdir(parents=True, exist_ok=True)
    job.path.write_text(render(job))
    job.path.chmod(0o755)
    job_id = slurm.submit(job.path)
    slurm.record_submission(job.job_dir, job_id, job.path)
    return job_id, job.path
