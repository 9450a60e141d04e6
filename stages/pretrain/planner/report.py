"""The planner's report for `[pretrain]`: per-GPU memory, predicted throughput, FLOPs, utilisation and days.

Everything here is an ESTIMATE from the model's shape and the configured layout, made before a job is
queued; it is not a measurement. It is good for "does this layout fit, and roughly with how much room",
for comparing switches (activation checkpointing, offload, unshard_async_op, EP degree) and for the
compute figures of the compliance documents; the job's own metrics (torchtitan's memory and MFU lines,
`<job>/metrics.jsonl`) are the truth once it runs. `europa plan` prints it; `europa launch jupiter` refuses a
layout whose estimate does not fit in HBM.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from stages.cluster.machine import JUPITER_BOOSTER, Hardware
from stages.pretrain.planner.memory import AC_MODES, MemoryEstimate, estimate_memory
from stages.pretrain.planner.projection import EUROPA_TOKENS_PER_S_PER_GPU, Projection, project
from stages.pretrain.planner.shape import model_shape
from stages.pretrain.planner.throughput import BANDS, Prediction, predict
from stages.pretrain.planner.workload import Workload, from_settings

WHAT_IF_LIMITED_GROUPS = 4  # DeepSeek-V3's node limit, for the what-if rows when routing is not limited

if TYPE_CHECKING:
    from stages.pretrain.config import PretrainConfig


@dataclass(frozen=True)
class Layout:
    """The configured layout as the planner counts it."""

    nodes: int
    processes_per_node: int
    gpus: int
    data_parallel_replicate: int
    data_parallel_shard: int
    tensor_parallel: int
    expert_parallel: int
    efsdp: int  # the ranks each routed expert is FSDP-sharded over
    data_parallel_ranks: int
    gpus_per_replica: int


@dataclass(frozen=True)
class OffloadTraffic:
    """Activation offload's host traffic per micro-step (NVLink-C2C)."""

    gib_each_way: float
    micro_step_s: float
    transfer_s: float
    share_of_micro_step: float


@dataclass(frozen=True)
class WhatIf:
    """A routing variant of the configured layout and what the throughput model predicts for it."""

    label: str
    prediction: Prediction
    note: str  # the keys that make it so ("" for the configured routing's opposite)


@dataclass
class Plan:
    flavor: str
    vocab_size: int
    total_params: int
    active_params: int
    layout: Layout
    tokens_per_microstep: int
    hardware: Hardware
    memory: MemoryEstimate
    variants: dict[str, dict[str, float]]     # ac mode -> {"async": GiB total, "no_async": GiB total}
    throughput: Projection                    # at the stated rate (EUROPA's 1,300 tokens/s or --tokens-per-s)
    prediction: Prediction                    # the throughput model's, for the configured layout
    predicted: dict[str, Projection]          # band -> projection at the predicted rate
    what_if: list[WhatIf]                     # routing variants
    offload_traffic: OffloadTraffic | None
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "estimate": True,
            "flavor": self.flavor, "vocab_size": self.vocab_size,
            "total_params": self.total_params, "active_params": self.active_params,
            "layout": asdict(self.layout), "tokens_per_microstep": self.tokens_per_microstep,
            "hardware": asdict(self.hardware),
            "memory": self.memory.to_dict(),
            "variants": self.variants,
            "throughput": {**asdict(self.throughput), "above_threshold": self.throughput.above_threshold},
            "prediction": self.prediction.to_dict(),
            "predicted": {b: {**asdict(p), "above_threshold": p.above_threshold} for b, p in self.predicted.items()},
            "what_if": [{"label": w.label, "note": w.note, "tokens_per_s_per_gpu": asdict(w.prediction.tokens_per_s),
                         "bottleneck": w.prediction.expected.bottleneck} for w in self.what_if],
            "offload_traffic": asdict(self.offload_traffic) if self.offload_traffic is not None else None,
            "warnings": self.warnings,
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    def text(self) -> str:
        from stages.pretrain.planner.text import format_plan

        return format_plan(self)


def _layout(settings: PretrainConfig) -> Layout:
    p = settings.parallelism
    return Layout(
        nodes=p.nodes, processes_per_node=p.processes_per_node, gpus=p.world_size,
        data_parallel_replicate=p.data_parallel_replicate, data_parallel_shard=p.shard_degree,
        tensor_parallel=p.tensor_parallel, expert_parallel=p.expert_parallel,
        efsdp=p.shard_degree * p.tensor_parallel // p.expert_parallel,
        data_parallel_ranks=p.data_parallel_replicate * p.shard_degree,
        gpus_per_replica=p.world_size // p.data_parallel_replicate)


def _variant(settings: PretrainConfig, mode: str, async_op: bool) -> PretrainConfig:
    return settings.model_copy(update={
        "activation_checkpoint": settings.activation_checkpoint.model_copy(update={"mode": mode}),
        "parallelism": settings.parallelism.model_copy(update={"unshard_async_op": async_op}),
    })


def plan(settings: PretrainConfig, vocab_size: int | None = None, *, hardware: Hardware = JUPITER_BOOSTER,
         tokens_per_s_per_gpu: float = EUROPA_TOKENS_PER_S_PER_GPU) -> Plan:
    """The planner's report for `[pretrain]` settings (vocab_size: the tokenizer's; None = flavor default)."""
    shape = model_shape(settings.flavor, vocab_size)
    memory = estimate_memory(settings, shape, hardware)
    variants = {
        mode: {("async" if a else "no_async"): estimate_memory(_variant(settings, mode, a), shape, hardware).total_gib
               for a in (True, False)}
        for mode in AC_MODES
    }
    stated = project(settings, shape, tokens_per_s_per_gpu, hardware)
    work = from_settings(settings, shape, memory, gpus_per_node=hardware.gpus_per_node)
    prediction = predict(work, _with_peak(hardware, settings))
    predicted = {b: project(settings, shape, prediction.bands[b].tokens_per_s_per_gpu, hardware) for b in BANDS}
    expected = prediction.expected
    traffic = None
    if settings.activation_checkpoint.mode == "offload":
        traffic = OffloadTraffic(gib_each_way=memory.offload_host_gib, micro_step_s=expected.micro_s,
                                 transfer_s=expected.c2c_s,
                                 share_of_micro_step=expected.c2c_s / expected.micro_s if expected.micro_s else 0.0)
    warnings = list(memory.notes) + prediction.notes
    problem = settings.routing_problem()
    if problem:
        warnings.append(problem)
    if settings.precision != "bfloat16":
        warnings.append('[pretrain] precision = "float32": GPUs train in bfloat16 (set precision = "bfloat16")')
    return Plan(
        flavor=shape.flavor, vocab_size=shape.vocab_size, total_params=shape.total, active_params=shape.active,
        layout=_layout(settings), tokens_per_microstep=settings.local_batch_size * settings.seq_len,
        hardware=hardware, memory=memory, variants=variants, throughput=stated, prediction=prediction,
        predicted=predicted, what_if=_what_if(work, _with_peak(hardware, settings)), offload_traffic=traffic,
        warnings=warnings,
    )


def _with_peak(hardware: Hardware, settings: PretrainConfig) -> Hardware:
    """[pretrain] peak_flops_per_device, when set, is the device's bf16 peak (fp8 twice that)."""
    from dataclasses import replace

    peak = settings.peak_flops_per_device
    return replace(hardware, peak_bf16_flops=peak, peak_fp8_flops=2 * peak) if peak else hardware


def _what_if(work: Workload, hardware: Hardware) -> list[WhatIf]:
    """Node-limited routing with each dispatcher: what it changes for this layout (routing.py says why the
    standard all-to-all gains nothing from it)."""
    nodes = max(1, -(-work.expert_parallel // work.gpus_per_node))
    if nodes <= 1:
        return []
    limited = work.num_expert_groups is not None
    groups = work.num_expert_groups if limited else nodes
    m = work.num_limited_groups if limited else min(WHAT_IF_LIMITED_GROUPS, nodes)
    other = "deepep" if work.dispatcher == "standard" else "standard"
    rows = []
    if limited:
        rows.append(("routing not limited", work.with_(num_expert_groups=None, num_limited_groups=None), ""))
    else:
        rows.append((f"node-limited routing, {m} of {groups} node groups", work.with_(num_expert_groups=groups,
                     num_limited_groups=m), "[pretrain.moe] num_expert_groups / num_limited_groups"))
    rows.append((f"... and comm_backend = \"{other}\"", work.with_(num_expert_groups=groups, num_limited_groups=m,
                 dispatcher=other), "[pretrain.moe] comm_backend"))
    return [WhatIf(label, predict(w, hardware), note) for label, w, note in rows]
