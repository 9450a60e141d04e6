"""The pretrain job on JUPITER: render the sbatch script, submit it, read its state.

JUPITER Booster nodes: 4 GH200 superchips (one Hopper GPU with 96 GB HBM3 + one 72-core Grace with ~120 GB
LPDDR5X each, joined by 900 GB/s NVLink-C2C), 4 InfiniBand NDR200 HCAs, Slurm with ParaStation's psslurm
instead of slurmd (docs/jupiter.md has the user side).

The script starts ONE task per node (`srun --ntasks-per-node=1`), which runs `torchrun` with 4 ranks (one per
GPU); torchrun's c10d rendezvous runs on the first node of the allocation, addressed by its InfiniBand name
(JSC convention: hostname + "i"). Binding: Slurm gives the task all the node's cores (`--cpus-per-task=288
--cpu-bind=cores`), then `torchrun --numa-binding=node` pins each rank to the 72 cores of the Grace attached
to its GPU (numactl), so its host memory (offloaded activations, pinned buffers, data loader) is that Grace's
LPDDR5X, one NVLink-C2C hop from its GPU, and OMP_NUM_THREADS = cores / 4. Every rank runs
`python -m stages.pretrain.entry --run-dir R --job-dir J`, which reads R/run.toml (written by `europa launch`)
and the tokenizer/shards outputs, and writes checkpoints and metrics under J.

Validation happens before anything is rendered: each problem is one line that names the `[pretrain...]` key
and the fix (degrees vs GPUs, expert parallel vs experts, memory vs HBM from europa_model.planner, account
for submission). Nothing here imports torch unless the planner needs parameter counts.
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from europa_model.planner import Plan
    from pipeline.config import PipelineConfig
    from stages.pretrain.config import PretrainConfig

GPUS_PER_NODE = 4
CORES_PER_NODE = 288            # 4 Graces x 72 Neoverse-V2 cores
MAX_TIME_HOURS = 24             # booster partition wall-clock limit
LAUNCH_DIR = "pretrain-launch"  # <run>/pretrain-launch: the rendered job and its Slurm logs
SCRIPT_NAME = "job.sbatch"
TERMINAL_STATES = frozenset({"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY",
                             "PREEMPTED", "BOOT_FAIL", "DEADLINE", "REVOKED"})

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


class LaunchError(ValueError):
    """A problem with the launch, phrased as one line: the key, what is wrong, the fix."""


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
        _atomic_write(self.script_path, self.sbatch)
        self.script_path.chmod(0o755)
        _atomic_write(self.job_dir / "plan.txt", self.report() + "\n")
        _atomic_write(self.job_dir / "plan.json", self.plan.to_json() + "\n")
        return self.script_path


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


# ---------------------------------------------------------------------------------------------------------
# Validation


def _hours(time_limit: str) -> float:
    days, _, hms = time_limit.rpartition("-")
    h, m, s = (int(x) for x in hms.split(":"))
    return (int(days) if days else 0) * 24 + h + m / 60 + s / 3600


def _vocab_size(config: PipelineConfig) -> int | None:
    tok = config.stages.get("tokenizer")
    return getattr(tok, "vocab_size", None)


def check_layout(settings: PretrainConfig) -> list[str]:
    """Layout problems that need no parameter counts (cheap): one line each, naming the key and the fix."""
    from europa_model.planner import flavor_dims

    p, s = settings.parallelism, settings.slurm
    errors: list[str] = []
    if settings.launcher != "slurm":
        errors.append(f"[pretrain] launcher = {settings.launcher!r}: JUPITER jobs need launcher = \"slurm\"")
    if settings.device == "cpu":
        errors.append("[pretrain] device = \"cpu\": JUPITER trains on the GH200 GPUs; use device = \"auto\" or \"cuda\"")
    if s.gpus_per_node != GPUS_PER_NODE:
        errors.append(f"[pretrain.slurm] gpus_per_node = {s.gpus_per_node}: a JUPITER Booster node has {GPUS_PER_NODE} "
                      f"GH200; set gpus_per_node = {GPUS_PER_NODE}")
    if p.processes_per_node != s.gpus_per_node:
        errors.append(f"[pretrain.parallelism] processes_per_node = {p.processes_per_node} must equal [pretrain.slurm] "
                      f"gpus_per_node = {s.gpus_per_node} (one rank per GPU); set processes_per_node = {s.gpus_per_node}")
    gpus = p.nodes * s.gpus_per_node
    degrees = p.data_parallel_replicate * p.shard_degree * p.tensor_parallel
    if degrees != gpus:
        errors.append(
            f"[pretrain.parallelism] data_parallel_replicate {p.data_parallel_replicate} x data_parallel_shard "
            f"{p.shard_degree} x tensor_parallel {p.tensor_parallel} = {degrees} but nodes {p.nodes} x "
            f"{s.gpus_per_node} GPUs = {gpus}; change nodes or a degree so that they match")
    dims = flavor_dims(settings.flavor)
    if dims.num_experts % p.expert_parallel:
        errors.append(f"[pretrain.parallelism] expert_parallel = {p.expert_parallel} must divide the "
                      f"{dims.num_experts} routed experts of {settings.flavor}; pick a divisor (e.g. 8, 32, 96, 384)")
    if (p.shard_degree * p.tensor_parallel) % p.expert_parallel:
        errors.append(f"[pretrain.parallelism] expert_parallel = {p.expert_parallel} must divide data_parallel_shard x "
                      f"tensor_parallel = {p.shard_degree * p.tensor_parallel}")
    if p.tensor_parallel > 1 and dims.n_heads % p.tensor_parallel:
        errors.append(f"[pretrain.parallelism] tensor_parallel = {p.tensor_parallel} must divide the {dims.n_heads} "
                      f"attention heads of {settings.flavor}")
    if s.cpus_per_task > CORES_PER_NODE:
        errors.append(f"[pretrain.slurm] cpus_per_task = {s.cpus_per_task}: a JUPITER Booster node has "
                      f"{CORES_PER_NODE} cores (4 Graces x 72); set cpus_per_task = {CORES_PER_NODE}")
    for key in s.env:
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
            errors.append(f"[pretrain.slurm.env] {key!r} is not a valid environment variable name")
        elif _looks_secret(key, s.env[key]):
            errors.append(f"[pretrain.slurm.env] {key} looks like a credential, which must not be written into the "
                          f"config or the job script: export it in the shell that runs sbatch (the job inherits it)")
    return errors


def _looks_secret(key: str, value: str) -> bool:
    from pipeline.secrets import redact_text

    return bool(re.search(r"(TOKEN|PASSWORD|PASSWD|SECRET|API_KEY|CREDENTIAL)", key, re.IGNORECASE)) or \
        redact_text(value) != value


def memory_error(pl: Plan) -> str | None:
    """The planner's refusal as one line, with its figures, or None when the estimate fits."""
    m = pl.memory
    if m.fits:
        return None
    parts = sorted(m.phases[m.peak_phase].items(), key=lambda kv: -kv[1])[:4]
    figures = ", ".join(f"{name} {gib:.1f}" for name, gib in parts)
    return (f"[pretrain] the layout does not fit in GPU memory: the planner estimates {m.total_gib:.1f} GiB per GPU "
            f"at its peak ({m.peak_phase}: {figures} GiB; reserve {m.runtime_reserve_gib:.0f}) > {m.hbm_gib:.0f} GiB "
            f"HBM of a GH200; fix: more GPUs per replica ([pretrain.parallelism] nodes, data_parallel_shard), "
            f"[pretrain.activation_checkpoint] mode = \"offload\" or \"full\", or a smaller local_batch_size / seq_len "
            f"(`europa plan` shows every term)")


def validate(config: PipelineConfig, *, require_account: bool = False) -> tuple[PretrainConfig, Plan, list[str]]:
    """Check `[pretrain]` for JUPITER; returns (settings, plan, warnings) or raises LaunchError (first problem;
    the count of the others)."""
    from europa_model.planner import plan as make_plan

    if "pretrain" not in config.stages:
        raise LaunchError("[pretrain]: this config has no pretrain settings; add a [pretrain] section "
                          "(configs/jupiter-1t.toml is the EUROPA layout)")
    settings = config.section("pretrain")
    errors = check_layout(settings)
    if require_account and not settings.slurm.account:
        errors.append("[pretrain.slurm] account is not set: --submit needs the JUPITER project to charge; add "
                      "account = \"<project>\" under [pretrain.slurm]")
    pl = None
    if not errors:  # counts cost a few seconds and need a sane layout
        pl = make_plan(settings, _vocab_size(config))
        err = memory_error(pl)
        if err:
            errors.append(err)
    if errors:
        more = f" ({len(errors) - 1} more problem(s) after this one)" if len(errors) > 1 else ""
        raise LaunchError(errors[0] + more)
    warnings = list(pl.warnings)
    if _hours(settings.slurm.time_limit) > MAX_TIME_HOURS:
        warnings.append(f"[pretrain.slurm] time_limit {settings.slurm.time_limit} is over the booster partition's "
                        f"{MAX_TIME_HOURS} h; Slurm will refuse it unless your QOS allows more")
    if pl.memory.verdict == "tight":
        warnings.append(f"the planner leaves only {pl.memory.margin_gib:.1f} GiB of HBM free (estimate); "
                        "expect allocator fragmentation to eat part of it")
    return settings, pl, warnings


# ---------------------------------------------------------------------------------------------------------
# Rendering


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
    from europa_model.planner import flavor_dims

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
                  header: list[str] | None = None) -> str:
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
           "# EUROPA pretraining on JUPITER Booster, rendered by `europa launch jupiter`: re-render, do not edit.",
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
        f"    -m stages.pretrain.entry --run-dir {q(str(run_dir))} --job-dir {q(str(job_dir))}",
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


# ---------------------------------------------------------------------------------------------------------
# Slurm


def _need(tool: str, what: str) -> str:
    path = shutil.which(tool)
    if path is None:
        raise LaunchError(f"{tool} not found: {what} must run on a JUPITER login node")
    return path


def require_sbatch() -> str:
    return _need("sbatch", "--submit")


def submit(script_path: Path | str, *, after: str | None = None) -> str:
    """`sbatch --parsable` the script; returns the job id. `after`: start only once that job has ended
    (`--dependency=afterany:`), to chain 24-hour jobs that resume from the latest checkpoint."""
    sbatch = require_sbatch()
    cmd = [sbatch, "--parsable", *([f"--dependency=afterany:{after}"] if after else []), str(script_path)]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        raise LaunchError(f"sbatch did not answer within 120 s for {script_path}; check `squeue --me` before retrying") from None
    if r.returncode != 0:
        why = (r.stderr.strip().splitlines() or [f"exit status {r.returncode}"])[-1]
        raise LaunchError(f"sbatch refused {script_path}: {why}")
    lines = r.stdout.strip().splitlines()
    job_id = lines[-1].split(";")[0].strip() if lines else ""
    if not re.fullmatch(r"\d+(_\d+)?", job_id):
        raise LaunchError(f"sbatch answered {r.stdout.strip()!r} instead of a job id for {script_path}")
    return job_id


def record_submission(job_dir: Path, job_id: str, script_path: Path) -> None:
    """Append the submission to <job dir>/jobs.jsonl (what the flow follows)."""
    entry = {"job_id": job_id, "submitted_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
             "script": str(script_path), "script_sha256": hashlib.sha256(Path(script_path).read_bytes()).hexdigest()}
    with open(Path(job_dir) / "jobs.jsonl", "a", encoding="utf-8") as f:
        f.write(json.dumps(entry) + "\n")


def submitted_jobs(job_dir: Path) -> list[dict]:
    path = Path(job_dir) / "jobs.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def job_state(job_id: str) -> str:
    """PENDING / RUNNING / COMPLETED / FAILED / ... from squeue while the job is queued or running, else from
    sacct (accounting); UNKNOWN when neither knows the id."""
    squeue, sacct = shutil.which("squeue"), shutil.which("sacct")
    if squeue is None and sacct is None:
        raise LaunchError("squeue not found: job states can only be read on a JUPITER login node")
    if squeue:
        r = subprocess.run([squeue, "-h", "-j", str(job_id), "-o", "%T"], capture_output=True, text=True, timeout=60)
        state = r.stdout.strip().splitlines()[0].strip() if r.returncode == 0 and r.stdout.strip() else ""
        if state:
            return state
    if sacct:
        r = subprocess.run([sacct, "-n", "-X", "-P", "-j", str(job_id), "-o", "State"],
                           capture_output=True, text=True, timeout=60)
        for line in r.stdout.splitlines():
            if line.strip():
                return line.split()[0].strip().rstrip("+")  # "CANCELLED by 123" -> CANCELLED
    return "UNKNOWN"


def is_finished(state: str) -> bool:
    return state in TERMINAL_STATES
