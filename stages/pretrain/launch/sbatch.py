"""The pretrain job's sbatch script, rendered from `[pretrain]` for its machine (never edited by hand).

The script starts ONE task per node (`srun --ntasks-per-node=1`) with all the node's cores, which runs
`torchrun` with one rank per GPU (or `processes_per_node` ranks on a CPU partition); torchrun's c10d
rendezvous runs on the first node of the allocation, at a port derived from the job id (two jobs on one node
do not collide). The first node is addressed by its fast interface's name where the machine has one (JSC
convention: hostname + "i"), else by its hostname, else, when that does not resolve, by the address Slurm
knows it by (NodeAddr). JUPITER's binding: Slurm gives the task all 288 cores, then `torchrun
--numa-binding=node` pins each rank to the 72 cores of the Grace attached to its GPU (numactl), so its host
memory is that Grace's LPDDR5X, one NVLink-C2C hop away; OMP_NUM_THREADS = cores / ranks. On a CPU partition
there is no --gres, and a multi-rank job first writes a seed checkpoint in one process (as the local torchrun
launcher does: CPU ranks cannot initialise sharded experts differently). Every rank runs `python -m
stages.pretrain.entry --run-dir R --job-dir J`, which reads R/run.toml (written by `europa launch`) and the
tokenizer/shards outputs, and writes checkpoints and metrics under J.
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
    from stages.pretrain.hardware import Hardware
    from stages.pretrain.planner.report import Plan

SCRIPT_NAME = "job.sbatch"
PORT_BASE, PORT_SPAN = 20000, 10000  # MASTER_PORT = 20000 + job id % 10000: below Linux's ephemeral ports
PYTHONUNBUFFERED = ("PYTHONUNBUFFERED", "1", "log lines reach slurm-<id>.out as they happen")


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


def _port(settings: PretrainConfig) -> str:
    port = settings.slurm.master_port
    return str(port) if port else f"$(( {PORT_BASE} + SLURM_JOB_ID % {PORT_SPAN} ))"


def layout_summary(settings: PretrainConfig, config: PipelineConfig, job_dir: Path) -> str:
    from stages.pretrain.planner.shape import flavor_dims

    p, s, hw = settings.parallelism, settings.slurm, settings.machine.hardware()
    ranks = p.world_size
    efsdp = p.shard_degree * p.tensor_parallel // p.expert_parallel
    experts = flavor_dims(settings.flavor).num_experts
    per_replica = ranks // p.data_parallel_replicate
    device = f"{hw.gpus_per_node} GPUs" if hw.has_gpus else f"{p.processes_per_node} CPU ranks"
    unit = "GPU" if hw.has_gpus else "rank"
    port = s.master_port or f"{PORT_BASE} + job id % {PORT_SPAN}"
    lines = [
        f"Slurm job {job_name(settings, config)} on {hw.name}: {p.nodes} node(s) x {device} = {ranks:,} {unit}s; "
        f"one torchrun per node ({p.processes_per_node} ranks), c10d rendezvous on the first node, port {port}",
        f"  data parallel: {p.data_parallel_replicate} HSDP replica(s) x FSDP {p.shard_degree} "
        f"({per_replica} {unit}s = {per_replica // p.processes_per_node} nodes per replica); tensor parallel {p.tensor_parallel}",
        f"  experts: EP {p.expert_parallel} -> {experts // p.expert_parallel} of {experts} routed experts per {unit} per "
        f"MoE layer, each FSDP-sharded over {efsdp} {unit}(s)",
        f"  CPUs: {hw.cores_per_node} cores per node, {hw.cores_per_node // p.processes_per_node} per rank "
        f"(OMP_NUM_THREADS), NUMA binding {hw.numa_binding}; network interfaces "
        f"{','.join(hw.network_interfaces) or '(the system default)'}",
        f"  Slurm: partition {hw.partition}, account {s.account or '(not set)'}, time {s.time_limit}, "
        f"qos {s.qos or '-'}, reservation {s.reservation or '-'}",
        f"  optimizer {settings.optimizer.name}, AC {settings.activation_checkpoint.mode}, unshard_async_op "
        f"{'on' if p.unshard_async_op else 'off'}, precision {settings.precision}; job dir {job_dir}",
    ]
    if hw.preset == "jupiter-booster" and per_replica // p.processes_per_node <= 240:
        lines.append("  (a replica fits in one Dragonfly+ group of 240 nodes if Slurm places it so)")
    return "\n".join(lines)


def environment(hw: Hardware) -> list[tuple[str, str, str]]:
    """(name, value, why) for every rank, before [pretrain.slurm] env (which overrides them)."""
    out = list(hw.env)
    if hw.network_interfaces:
        names = ",".join(hw.network_interfaces)
        out += [("NCCL_SOCKET_IFNAME", names, "NCCL/gloo bootstrap on the machine's fast interface, not the management network"),
                ("GLOO_SOCKET_IFNAME", names, "")]
    return [*out, PYTHONUNBUFFERED]


def render_sbatch(settings: PretrainConfig, config: PipelineConfig, run_dir: Path, job_dir: Path,
                  header: list[str] | None = None, *, entry: list[str] | None = None, title: str | None = None) -> str:
    """`entry`: the module and arguments every rank runs (default: the training entry point, after a seed
    checkpoint where CPU ranks need one); another job of the run on the same machine and settings (the
    distributed evaluation) passes its own, and its `title`."""
    from pipeline.config import REPO_ROOT

    p, s, hw = settings.parallelism, settings.slurm, settings.machine.hardware()
    q = shlex.quote
    ranks, cpus = p.processes_per_node, hw.cores_per_node
    sb = [
        f"--job-name={job_name(settings, config)}",
        *([f"--account={s.account}"] if s.account else []),
        f"--partition={hw.partition}",
        f"--nodes={p.nodes}",
        "--ntasks-per-node=1",
        *([f"--gres=gpu:{hw.gpus_per_node}"] if hw.has_gpus else []),
        f"--cpus-per-task={cpus}",
        f"--time={s.time_limit}",
        *([f"--qos={s.qos}"] if s.qos else []),
        *([f"--reservation={s.reservation}"] if s.reservation else []),
        f"--output={job_dir / 'slurm-%j.out'}",
    ]
    out = ["#!/bin/bash",
           f"# {title or f'EUROPA pretraining on {hw.name}, rendered by `europa launch`'}: re-render, do not edit.",
           *(f"# {line}" for line in (header or [])),
           *(f"#SBATCH {x}" for x in sb)]
    if not s.account and hw.account_required:
        out.append("# (no [pretrain.slurm] account: sbatch needs --account=<project> here)")
    out += ["", "set -euo pipefail", f"cd {q(str(REPO_ROOT))}", ""]
    out += _setup_lines(settings)
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
            f"MASTER_PORT={_port(settings)}  # from the job id: two jobs on one node do not collide",
            "export MASTER_ADDR MASTER_PORT", ""]
    if hw.numa_binding == "node":
        out += ["# torchrun --numa-binding=node runs each rank under numactl on the NUMA node of its GPU",
                "NUMA_BINDING=--numa-binding=node",
                'command -v numactl >/dev/null || { echo "warning: numactl not found: ranks are not NUMA-bound" >&2; '
                "NUMA_BINDING=; }"]
    else:
        out += ["NUMA_BINDING="]
    training = entry is None
    command = "-m " + " ".join(q(a) for a in (entry or ["stages.pretrain.entry", "--run-dir", str(run_dir),
                                                        "--job-dir", str(job_dir)]))
    if training and not hw.has_gpus and p.world_size > 1:
        seed = job_dir / "seed" / "checkpoints" / "step-0" / ".metadata"
        out += ["",
                "# CPU ranks cannot initialise sharded experts differently: start from a seed checkpoint written by one",
                "# process, unless training has one already or has checkpoints of its own (as the local torchrun launcher)",
                f'if [ ! -e {q(str(seed))} ] && ! compgen -G {q(str(job_dir / "checkpoints"))}"/step-*/.metadata" >/dev/null; then',
                '  echo "europa: writing a seed checkpoint"',
                f"  srun --nodes=1 --ntasks=1 --cpus-per-task={cpus} python {command} --seed-checkpoint",
                "fi"]
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
        f"    {command}",
        "",
    ]
    return "\n".join(out)


def render_job(config: PipelineConfig, run_dir: Path, job_dir: Path, *, require_account: bool = False) -> RenderedJob:
    """Validate `[pretrain]` for its machine and render the job; raises LaunchError (one line) when it cannot
    run. `require_account`: also demand [pretrain.slurm] account where the machine charges one (submission)."""
    run_dir, job_dir = Path(run_dir).resolve(), Path(job_dir).resolve()
    settings, pl, warnings = validate(config, require_account=require_account)
    m = pl.memory
    unit = "GPU" if settings.machine.hardware().has_gpus else "rank"
    header = [
        f"config   {Path(config.source).resolve() if config.source else '<in memory>'}",
        f"run dir  {run_dir}",
        f"job dir  {job_dir}",
        f"planner  {m.total_gib:.1f} GiB per {unit} at peak of {m.hbm_gib:.0f} GiB ({m.verdict}; estimate, see plan.txt)",
    ]
    return RenderedJob(
        sbatch=render_sbatch(settings, config, run_dir, job_dir, header),
        layout=layout_summary(settings, config, job_dir),
        plan=pl, run_dir=run_dir, job_dir=job_dir, warnings=warnings,
    )
