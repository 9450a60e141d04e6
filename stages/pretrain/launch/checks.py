"""Checks of a `[pretrain]` layout for its machine (`[pretrain.machine]`: JUPITER's Booster by default, or a
profile of another cluster or a CPU partition) before anything is rendered or submitted.

Validation happens before anything is rendered: each problem is one line that names the `[pretrain...]` key
and the fix (degrees vs GPUs, expert parallel vs experts, memory vs HBM or node memory from the planner,
account for submission). Nothing here imports torch unless the planner needs parameter counts.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import TYPE_CHECKING

from stages.cluster.config import time_limit_hours
from stages.cluster.errors import LaunchError
from stages.cluster.machine import Hardware

if TYPE_CHECKING:
    from pipeline.config import PipelineConfig
    from stages.pretrain.config import PretrainConfig
    from stages.pretrain.planner.report import Plan

NOMINAL_PEAK_FLOPS = 1e12  # the planner's utilisation needs a peak; where the profile has none, this, with a warning


def _vocab_size(config: PipelineConfig) -> int | None:
    tok = config.stages.get("tokenizer")
    return getattr(tok, "vocab_size", None)


def check_layout(settings: PretrainConfig) -> list[str]:
    """Layout problems that need no parameter counts (cheap): one line each, naming the key and the fix."""
    from stages.pretrain.planner.shape import flavor_dims

    p, s, hw = settings.parallelism, settings.slurm, settings.machine.hardware()
    errors: list[str] = []
    if settings.launcher != "slurm":
        errors.append(f"[pretrain] launcher = {settings.launcher!r}: a Slurm job needs launcher = \"slurm\"")
    if hw.has_gpus:
        if settings.device == "cpu":
            errors.append(f"[pretrain] device = \"cpu\": {hw.name} trains on its GPUs; use device = \"auto\" or "
                          "\"cuda\" (or declare a CPU partition in [pretrain.machine] with gpus_per_node = 0)")
        if p.processes_per_node != hw.gpus_per_node:
            errors.append(f"[pretrain.parallelism] processes_per_node = {p.processes_per_node} must equal the "
                          f"{hw.gpus_per_node} GPUs per node of {hw.name} (one rank per GPU); set processes_per_node = "
                          f"{hw.gpus_per_node}")
    else:
        if settings.device == "cuda":
            errors.append(f"[pretrain] device = \"cuda\": {hw.name} has no GPUs ([pretrain.machine] gpus_per_node = 0); "
                          "use device = \"auto\" or \"cpu\"")
        if p.processes_per_node > hw.cores_per_node:
            errors.append(f"[pretrain.parallelism] processes_per_node = {p.processes_per_node}: more ranks than the "
                          f"{hw.cores_per_node} cores of a node; at most {hw.cores_per_node}")
        if settings.activation_checkpoint.mode == "offload":
            errors.append("[pretrain.activation_checkpoint] mode = \"offload\" moves activations from GPU to host "
                          "memory; on a CPU partition use \"none\", \"selective\" or \"full\"")
    ranks = p.nodes * p.processes_per_node
    degrees = p.data_parallel_replicate * p.shard_degree * p.tensor_parallel
    if degrees != ranks:
        errors.append(
            f"[pretrain.parallelism] data_parallel_replicate {p.data_parallel_replicate} x data_parallel_shard "
            f"{p.shard_degree} x tensor_parallel {p.tensor_parallel} = {degrees} but nodes {p.nodes} x "
            f"{p.processes_per_node} ranks = {ranks}; change nodes or a degree so that they match")
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


def memory_error(pl: Plan, hw: Hardware) -> str | None:
    """The planner's refusal as one line, with its figures, or None when the estimate fits."""
    m = pl.memory
    if m.fits:
        return None
    parts = sorted(m.phases[m.peak_phase].items(), key=lambda kv: -kv[1])[:4]
    figures = ", ".join(f"{name} {gib:.1f}" for name, gib in parts)
    if hw.has_gpus:
        where, limit = "GPU memory", f"{m.hbm_gib:.0f} GiB HBM of a GPU of {hw.name}"
        fix = ("more GPUs per replica ([pretrain.parallelism] nodes, data_parallel_shard), [pretrain.activation_checkpoint] "
               "mode = \"offload\" or \"full\", or a smaller local_batch_size / seq_len")
    else:
        where, limit = "node memory", f"{m.hbm_gib:.1f} GiB per rank ({hw.memory_gib_per_node:g} GiB of a node of {hw.name} shared by its ranks)"
        fix = ("fewer ranks per node ([pretrain.parallelism] processes_per_node), more nodes, [pretrain.activation_checkpoint] "
               "mode = \"full\", or a smaller local_batch_size / seq_len")
    return (f"[pretrain] the layout does not fit in {where}: the planner estimates {m.total_gib:.1f} GiB per rank "
            f"at its peak ({m.peak_phase}: {figures} GiB; reserve {m.runtime_reserve_gib:.0f}) > {limit}; fix: {fix} "
            f"(`europa plan` shows every term)")


def planner_hardware(settings: PretrainConfig) -> tuple[Hardware, list[str]]:
    """The machine as the planner sees it (a CPU rank's memory is its share of the node's), and what its
    figures rest on that the profile does not say."""
    hw = settings.machine.hardware().for_planner(settings.parallelism.processes_per_node)
    notes = []
    if settings.machine.measured:
        from stages.pretrain.planner.measured import read_measured

        p = settings.parallelism
        hw = replace(hw, measured=read_measured(settings.machine.measured, settings.machine.hardware(),
                                                expert_parallel=p.expert_parallel, shard_degree=p.shard_degree))
    if not hw.peak_bf16_flops and not settings.peak_flops_per_device:
        hw = replace(hw, peak_bf16_flops=NOMINAL_PEAK_FLOPS)
        notes.append(f"the plan's utilisation assumes a nominal {NOMINAL_PEAK_FLOPS / 1e12:.0f} TFLOP/s per rank: set "
                     "[pretrain] peak_flops_per_device (or [pretrain.machine] gpu_peak_flops) for real figures")
    if hw.preset is None and hw.has_gpus:
        measured = " and the measured file's rates" if hw.measured is not None else ""
        notes.append("[pretrain.machine] is a profile of its own: the planner's predicted throughput takes JUPITER's "
                     f"NVLink, InfiniBand and HBM bandwidths for it (only memory and peak FLOP/s are the profile's{measured})")
    return hw, notes


def validate(config: PipelineConfig, *, require_account: bool = False) -> tuple[PretrainConfig, Plan, list[str]]:
    """Check `[pretrain]` for its machine; returns (settings, plan, warnings) or raises LaunchError (first
    problem; the count of the others)."""
    from stages.pretrain.planner.report import plan as make_plan

    if "pretrain" not in config.stages:
        raise LaunchError("[pretrain]: this config has no pretrain settings; add a [pretrain] section "
                          "(configs/jupiter-1t.toml is the EUROPA layout)")
    settings = config.section("pretrain")
    hw = settings.machine.hardware()
    errors = check_layout(settings)
    if require_account and hw.account_required and not settings.slurm.account:
        errors.append(f"[pretrain.slurm] account is not set: --submit on {hw.name} needs the project to charge; add "
                      "account = \"<project>\" under [pretrain.slurm]")
    pl, notes = None, []
    if not errors:  # counts cost a few seconds and need a sane layout
        planner_hw, notes = planner_hardware(settings)
        pl = make_plan(settings, _vocab_size(config), hardware=planner_hw)
        err = memory_error(pl, hw)
        if err:
            errors.append(err)
    if errors:
        more = f" ({len(errors) - 1} more problem(s) after this one)" if len(errors) > 1 else ""
        raise LaunchError(errors[0] + more)
    warnings = list(pl.warnings) + notes
    if hw.max_time_hours is not None and time_limit_hours(settings.slurm.time_limit) > hw.max_time_hours:
        warnings.append(f"[pretrain.slurm] time_limit {settings.slurm.time_limit} is over the {hw.partition} partition's "
                        f"{hw.max_time_hours:g} h; Slurm will refuse it unless your QOS allows more")
    if pl.memory.verdict == "tight":
        warnings.append(f"the planner leaves only {pl.memory.margin_gib:.1f} GiB of memory free per rank (estimate); "
                        "expect allocator fragmentation to eat part of it")
    return settings, pl, warnings
