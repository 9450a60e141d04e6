"""The pretrain job's sbatch script for JUPITER, rendered from `[pretrain]` (never edited by hand).

The script starts ONE task per node (`srun --ntasks-per-node=1`), which runs `torchrun` with 4 ranks (one per
GPU); torchrun's c10d rendezvous runs on the first node of the allocation, addressed by its InfiniBand name
(JSC convention: hostname + "i"). Binding: Slurm gives the task all the node's cores (`--cpus-per-task=288
--cpu-bind=cores`), then `torchrun --numa-binding=node` pins each rank to the 72 cores of the Grace attached
to its GPU (numactl), so its host memory (offloaded activations, pinned buffers, data loader) is that Grace's
LPDDR5X, one NVLink-C2C hop from its GPU, and OMP_NUM_THREADS = cores / 4. Every rank runs
`python -m stages.pretrain.entry --run-dir R --job-dir J`, which reads R/run.toml (written by `europa launch`)
and the tokenizer/shards outputs, and writes checkpoints and metrics under J.
"""

from __future__ import annotations

import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from pipeline.fsutil import atomic_write_text
from stages.pretrain.launch.checks import validate

if TYPE_CHECKING:
    from pipeline.config import PipelineConfig
    from stages.pretrain.config import PretrainConfig
    from stages.pretrain.planner.report import Plan

SCRIPT_NAME = "job.sbatch"

# Environment for every rank; [pretrain.slurm] env is exported after these and overrides them.
BASE_ENV: tuple[tuple[str, str, str], ...] = (
    ("CUDA_DEVICE_MAX_CONNECTIONS", "1", "one hardware queue: keeps FSDP/EP communication kernels in issue order"),
    ("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1", "a failed or timed-out collective aborts the rank: the job ends instead of hanging"),
    ("NCCL_SOCKET_IFNAME", "ib0", "NCCL/Gloo bootstrap over IPoIB, not the management Ethernet"),
    ("GLOO_SOCKET_IFNAME", "ib0", ""),
    ("NCCL_IB_TIMEOUT", "22", "InfiniBand retransmission timeout 4.096us x 2^22 (~17 s): rides out link flaps at 384 nodes"),
    ("NCCL_NET_GDR_LEVEL", "SYS", "GPUDirect RDMA although the HCAs hang off the Grace (GH200: NCCL leaves it off by default)"),
    ("NCCL_NET_GDR_C2C", "1", "same, for NCCL >= 2.24: GDR through NVLink-C2C"),
    ("PYTHONUNBUFFERED", "1", "log lines reach slurm-<id>.out as they happen"),
)


@dataclass
class RenderedJob:
    sbatch: str                 # the script text
    layout: str                 # a few lines: nodes, degrees, binding, Slurm settings
    plan: Plan                  # the planner's estimate (plan.text() for humans)
    run_dir: Path
    job_dir: Path
    warnings: list[str] = field(default_factory=list)

    @property
    def script_path(self) -> Path:
        return self.job_dir / SCRIPT_NAME

    def report(self) -> str:
        out = [self.layout, "", self.plan.text()]
        out += [f"warning: {w}" for w in self.warnings if w not in self.plan.warnings]
        return "\n".join(out)

    def write(self) -> Path:
        """job.sbatch, plan.txt and plan.json into the job directory (created); returns the script's path."""
        self.job_dir.mkdir(parents=True, exist_ok=True)
        atomic_write_text(self.script_path, self.sbatch)
        self.script_path.chmod(0o755)
        atomic_write_text(self.job_dir / "plan.txt", self.report() + "\n")
        atomic_write_text(self.job_dir / "plan.json", self.plan.to_json() + "\n")
        return self.script_path


def _setup_lines(settings: PretrainConfig) -> list[str]:
    if settings.slurm.setup:
        return ["# [pretrain.slurm] setup", *settings.slurm.setup]
    if sys.prefix != sys.base_prefix:
        return ["# no [pretrain.slurm] setup given: the virtual environment that rendered this script",
                f"source {shlex.quote(str(Path(sys.prefix) / 'bin' / 'activate'))}"]
    return ["# no [pretrain.slurm] setup given and no virtual environment: torchrun must be on PATH"]


def job_name(settings: PretrainConfig, config: PipelineConfig) -> str:
    name = config.run.name
    return settings.slurm.job_name or (name if name.startswith("europa") else f"europa-{name}")


def layout_summary(settings: PretrainConfig, config: PipelineConfig, job_dir: Path) -> str:
    p, s = settings.parallelism, settings.slurm
    gpus = p.nodes * s.gpus_per_node
    efsdp = p.shard_degree * p.tensor_parallel // p.expert_parallel
    from stages.pretrain.planner.shape import flavor_dims

    experts = flavor_dims(settings.flavor).num_experts
    per_replica = gpus // p.data_parallel_replicate
    lines = [
        f"JUPITER job {job_name(settings, config)}: {p.nodes} nodes x {s.gpus_per_node} GH200 = {gpus:,} GPUs; "
        f"one torchrun per node ({s.gpus_per_node} ranks), c10d rendezvous on the first node's InfiniBand name, "
        f"port {s.master_port}",
        f"  data parallel: {p.data_parallel_replicate} HSDP replica(s) x FSDP {p.shard_degree} "
        f"({per_replica} GPUs = {per_replica // s.gpus_per_node} nodes per replica); tensor parallel {p.tensor_parallel}",
        f"  experts: EP {p.expert_parallel} -> {experts // p.expert_parallel} of {experts} routed experts per GPU per "
        f"MoE layer, each FSDP-sharded over {efsdp} GPU(s)",
        f"  CPUs: {s.cpus_per_task} cores per node, {s.cpus_per_task // s.gpus_per_node} per rank "
        f"(OMP_NUM_THREADS), NUMA binding {s.numa_binding} (one Grace per GPU)",
        f"  Slurm: partition {s.partition}, account {s.account or '(not set)'}, time {s.time_limit}, "
        f"qos {s.qos or '-'}, reservation {s.reservation or '-'}",
        f"  optimizer {settings.optimizer.name}, AC {settings.activation_checkpoint.mode}, unshard_async_op "
        f"{'on' if p.unshard_async_op else 'off'}, precision {settings.precision}; job dir {job_dir}",
    ]
    if per_replica // s.gpus_per_node <= 240:
        lines.append("  (a replica fits in one Dragonfly+ group of 240 nodes if Slurm places it so)")
    return "\n".join(lines)


def render_sbatch(settings: PretrainConfig, config: PipelineConfig, run_dir: Path, job_dir: Path,
                  header: list[str] | None = None, *, entry: list[str] | None = None,
                  title: str = "EUROPA pretraining on JUPITER Booster, rendered by `europa launch jupiter`") -> str:
    """`entry`: the module and arguments every rank runs (default: the training entry point); another job of
    the run on the same machine and settings (the distributed evaluation) passes its own."""
    from pipeline.config import REPO_ROOT

    p, s = settings.parallelism, settings.slurm
    q = shlex.quote
    sb = [
        f"--job-name={job_name(settings, config)}",
        *([f"--account={s.account}"] if s.account else []),
        f"--partition={s.partition}",
        f"--nodes={p.nodes}",
        "--ntasks-per-node=1",
        f"--gres=gpu:{s.gpus_per_node}",
        f"--cpus-per-task={s.cpus_per_task}",
        f"--time={s.time_limit}",
        *([f"--qos={s.qos}"] if s.qos else []),
        *([f"--reservation={s.reservation}"] if s.reservation else []),
        f"--output={job_dir / 'slurm-%j.out'}",
    ]
    out = ["#!/bin/bash",
           f"# {title}: re-render, do not edit.",
           *(f"# {line}" for line in (header or [])),
           *(f"#SBATCH {x}" for x in sb)]
    if not s.account:
        out.append("# (no [pretrain.slurm] account: sbatch needs --account=<project> on JUPITER)")
    out += ["", "set -euo pipefail", f"cd {q(str(REPO_ROOT))}", ""]
    out += _setup_lines(settings)
    out += ["", f"# one rank per GH200, each on the {s.cpus_per_task // s.gpus_per_node} cores of its own Grace",
            f"export OMP_NUM_THREADS={s.cpus_per_task // s.gpus_per_node}"]
    for key, value, why in BASE_ENV:
        out.append(f"export {key}={q(value)}" + (f"  # {why}" if why else ""))
    if s.env:
        out.append("# [pretrain.slurm] env")
        out += [f"export {k}={q(v)}" for k, v in s.env.items()]
    out += [
        "",
        "# rendezvous host: the allocation's first node. On JSC systems the hostname with the suffix "
        f"{s.ib_hostname_suffix!r}",
        "# names its InfiniBand interface; use it when it resolves, so the c10d store talks over InfiniBand.",
        'head_node="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1)"',
    ]
    if s.ib_hostname_suffix:
        out += [f'if getent hosts "${{head_node}}{s.ib_hostname_suffix}" >/dev/null; then '
                f'MASTER_ADDR="${{head_node}}{s.ib_hostname_suffix}"; else MASTER_ADDR="$head_node"; fi']
    else:
        out += ['MASTER_ADDR="$head_node"']
    out += [f"export MASTER_ADDR MASTER_PORT={s.master_port}", ""]
    if s.numa_binding == "node":
        out += ["# torchrun --numa-binding=node runs each rank under numactl on the NUMA node (Grace) of its GPU",
                "NUMA_BINDING=--numa-binding=node",
                'command -v numactl >/dev/null || { echo "warning: numactl not found: ranks are not NUMA-bound" >&2; '
                "NUMA_BINDING=; }"]
    else:
        out += ["NUMA_BINDING="]
    out += [
        'echo "europa: job $SLURM_JOB_ID on $SLURM_NNODES nodes, rendezvous $MASTER_ADDR:' + str(s.master_port) + '"',
        "",
        "# one task per node with all its cores; torchrun starts the ranks and restarts none (checkpoints resume)",
        f'srun --nodes="$SLURM_NNODES" --ntasks-per-node=1 --cpus-per-task={s.cpus_per_task} --cpu-bind=cores '
        "--kill-on-bad-exit=1 \\",
        f"  torchrun --nnodes=$SLURM_NNODES --nproc_per_node={s.gpus_per_node} --rdzv_backend=c10d "
        f"--rdzv_endpoint=$MASTER_ADDR:{s.master_port} --rdzv_id=$SLURM_JOB_ID \\",
        "    --rdzv_conf=join_timeout=1800 $NUMA_BINDING \\",
        "    -m " + " ".join(q(a) for a in (entry or ["stages.pretrain.entry", "--run-dir", str(run_dir),
                                                   "--job-dir", str(job_dir)])),
        "",
    ]
    return "\n".join(out)


def render_job(config: PipelineConfig, run_dir: Path, job_dir: Path, *, require_account: bool = False) -> RenderedJob:
    """Validate `[pretrain]` for JUPITER and render the job; raises LaunchError (one line) when it cannot run.
    `require_account`: also demand [pretrain.slurm] account (what submission needs)."""
    run_dir, job_dir = Path(run_dir).resolve(), Path(job_dir).resolve()
    settings, pl, warnings = validate(config, require_account=require_account)
    m = pl.memory
    header = [
        f"config   {Path(config.source).resolve() if config.source else '<in memory>'}",
        f"run dir  {run_dir}",
        f"job dir  {job_dir}",
        f"planner  {m.total_gib:.1f} GiB per GPU at peak of {m.hbm_gib:.0f} GiB HBM ({m.verdict}; estimate, see plan.txt)",
    ]
    return RenderedJob(
        sbatch=render_sbatch(settings, config, run_dir, job_dir, header),
        layout=layout_summary(settings, config, job_dir),
        plan=pl, run_dir=run_dir, job_dir=job_dir, warnings=warnings,
    )
