"""The training job's sbatch script, rendered from `[pretrain]` for its machine (stages/cluster/sbatch.py
renders the script itself) after the layout and memory checks (checks.py).

Every rank runs `python -m stages.pretrain.entry --run-dir R --job-dir J`, which reads R/run.toml (written by
`europa launch`) and the tokenizer/shards outputs, and writes checkpoints and metrics under J. On a CPU
partition a multi-rank job first writes a seed checkpoint in one process (as the local torchrun launcher does:
CPU ranks cannot initialise sharded experts differently).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from pipeline.fsutil import atomic_write_text
from stages.cluster import sbatch as cluster_sbatch
from stages.cluster.sbatch import PORT_BASE, PORT_SPAN, SCRIPT_NAME, JobScript
from stages.pretrain.launch.checks import validate

if TYPE_CHECKING:
    from pipeline.config import PipelineConfig
    from stages.pretrain.config import PretrainConfig
    from stages.pretrain.planner.report import Plan


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


def job_name(settings: PretrainConfig, config: PipelineConfig) -> str:
    return cluster_sbatch.job_name(settings.slurm, config.run.name)


def training_script(settings: PretrainConfig, config: PipelineConfig, run_dir: Path, job_dir: Path,
                    header: list[str]) -> JobScript:
    """The training job: the entry point on every rank, after a seed checkpoint where CPU ranks need one."""
    p, hw = settings.parallelism, settings.machine.hardware()
    entry = ["stages.pretrain.entry", "--run-dir", str(run_dir), "--job-dir", str(job_dir)]
    script = JobScript(hardware=hw, slurm=settings.slurm, job_name=job_name(settings, config), nodes=p.nodes,
                       ranks_per_node=p.processes_per_node, job_dir=job_dir, entry=entry,
                       title=f"EUROPA pretraining on {hw.name}, rendered by `europa launch`", header=header)
    if hw.has_gpus or p.world_size == 1:
        return script
    q = shlex.quote
    seed = job_dir / "seed" / "checkpoints" / "step-0" / ".metadata"
    prelude = ["",
               "# CPU ranks cannot initialise sharded experts differently: start from a seed checkpoint written by one",
               "# process, unless training has one already or has checkpoints of its own (as the local torchrun launcher)",
               f'if [ ! -e {q(str(seed))} ] && ! compgen -G {q(str(job_dir / "checkpoints"))}"/step-*/.metadata" >/dev/null; then',
               '  echo "europa: writing a seed checkpoint"',
               f"  srun --nodes=1 --ntasks=1 --cpus-per-task={hw.cores_per_node} python {script.command} --seed-checkpoint",
               "fi"]
    return replace(script, prelude=prelude)


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
        sbatch=cluster_sbatch.render(training_script(settings, config, run_dir, job_dir, header)),
        layout=layout_summary(settings, config, job_dir),
        plan=pl, run_dir=run_dir, job_dir=job_dir, warnings=warnings,
    )
