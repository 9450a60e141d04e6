"""Checks of a `[pretrain]` layout for JUPITER before anything is rendered or submitted.

Validation happens before anything is rendered: each problem is one line that names the `[pretrain...]` key
and the fix (degrees vs GPUs, expert parallel vs experts, memory vs HBM from the planner, account
for submission). Nothing here imports torch unless the planner needs parameter counts.

"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from stages.pretrain.hardware import JUPITER_BOOSTER

if TYPE_CHECKING:
    from pipeline.config import PipelineConfig
    from stages.pretrain.config import PretrainConfig
    from stages.pretrain.planner.report import Plan

GPUS_PER_NODE = JUPITER_BOOSTER.gpus_per_node
CORES_PER_NODE = JUPITER_BOOSTER.cores_per_node
MAX_TIME_HOURS = JUPITER_BOOSTER.max_time_hours


class LaunchError(ValueError):
    """A problem with the launch, phrased as one line: the key, what is wrong, the fix."""

    exit_code = 2


def _hours(time_limit: str) -> float:
    days, _, hms = time_limit.rpartition("-")
    h, m, s = (int(x) for x in hms.split(":"))
    return (int(days) if days else 0) * 24 + h + m / 60 + s / 3600


def _vocab_size(config: PipelineConfig) -> int | None:
    tok = config.stages.get("tokenizer")
    return getattr(tok, "vocab_size", None)


def check_layout(settings: PretrainConfig) -> list[str]:
    """Layout problems that need no parameter counts (cheap): one line each, naming the key and the fix."""
    from stages.pretrain.planner.shape import flavor_dims

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
    from stages.pretrain.planner.report import plan as make_plan

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
