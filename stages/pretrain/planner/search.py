"""`europa plan --search`: every layout of the configured GPUs and global batch that fits, ranked by the
throughput model.

Why: the layout decides a multi-million GPU-hour budget, and a typed-in layout is one guess among thousands the
same planner can price. The search keeps what the run is (model, GPUs, nodes, global batch, sequence length,
optimizer, tensor parallelism) and varies only what changes how fast it trains, each over what the pinned
torchtitan offers:
- HSDP replicas x FSDP degree (every divisor of the GPUs);
- expert-parallel degree (every divisor of the routed experts that divides the FSDP x TP ranks);
- the all-to-all (standard, deepep) and, with deepep, node-limited routing (groups = the nodes an EP group spans,
  2 or 4 of them per token, and only where a token still chooses among MIN_CHOICE x top-k experts: routing
  changes the model, and a token confined to one node's 8 experts of 384 is another model; the standard
  all-to-all gains nothing from it, routing.py);
- local batch (1, 2, 4, 8 sequences; the micro-steps follow from the global batch);
- activation checkpointing (none, selective, full, offload);
- float8 rowwise on or off (Hopper and later).
A layout is feasible when the memory estimate leaves the planner's margin in HBM ("fits", not "tight") and,
with offload, its activations fit the host memory per GPU. Feasible layouts are ranked by the expected band of
the prediction; the pessimistic and optimistic bands come with each. Everything is an estimate (report.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterator

from stages.cluster.machine import Hardware
from stages.pretrain.planner.memory import estimate_memory
from stages.pretrain.planner.shape import ModelShape, model_shape
from stages.pretrain.planner.throughput import Band, predict
from stages.pretrain.planner.workload import from_settings

if TYPE_CHECKING:
    from stages.pretrain.config import PretrainConfig

LOCAL_BATCHES = (1, 2, 4, 8)
AC_MODES = ("none", "selective", "full", "offload")
LIMITED_GROUPS = (2, 4)  # nodes a token may reach (DeepSeek-V3: 4)
MIN_CHOICE = 4  # a limited token still picks its top-k among >= MIN_CHOICE x top-k experts (DeepSeek-V3: 16x)


@dataclass(frozen=True)
class Candidate:
    """One layout and what the planner predicts for it."""

    settings: PretrainConfig
    tokens_per_s: Band  # per GPU
    memory_gib: float  # per GPU, peak + runtime reserve
    hbm_gib: float
    verdict: str  # fits | tight | does not fit (memory.py), or "host memory" (offload beyond the Grace)
    bottleneck: str

    @property
    def feasible(self) -> bool:
        return self.verdict == "fits"

    def to_dict(self) -> dict:
        return {"layout": self.describe(), "tokens_per_s_per_gpu": vars(self.tokens_per_s),
                "memory_gib": self.memory_gib, "verdict": self.verdict, "bottleneck": self.bottleneck}

    def describe(self) -> str:
        s = self.settings
        p, moe = s.parallelism, s.moe
        routing = (f", {moe.num_limited_groups} of {moe.num_expert_groups} node groups" if moe.node_limited else "")
        micro = s.global_batch // (s.local_batch_size * p.data_parallel_degree)
        return (f"HSDP {p.data_parallel_replicate} x FSDP {p.shard_degree}, EP {p.expert_parallel}, "
                f"{moe.comm_backend}{routing}, local batch {s.local_batch_size} ({micro} micro-step"
                f"{'s' if micro > 1 else ''}), "
                f"AC {s.activation_checkpoint.mode}, float8 {s.float8 or 'off'}")


@dataclass(frozen=True)
class SearchResult:
    ranked: list[Candidate]  # feasible layouts, best expected tokens/s first
    configured: Candidate  # the config's own layout, priced the same way
    considered: int
    tight: int  # layouts within the planner's memory margin of HBM: left out
    too_large: int  # layouts that do not fit in HBM (or, offloaded, in host memory)

    @property
    def best(self) -> Candidate | None:
        return self.ranked[0] if self.ranked else None

    def best_where(self, **settings_of) -> Candidate | None:
        """The best feasible layout with these [pretrain.moe] values (e.g. comm_backend="standard")."""
        return next((c for c in self.ranked
                     if all(getattr(c.settings.moe, k) == v for k, v in settings_of.items())), None)

    def rank_of_configured(self) -> int | None:
        """1-based place of the configured layout among the feasible ones; None if it is not feasible."""
        key = layout_key(self.configured.settings)
        return next((i + 1 for i, c in enumerate(self.ranked) if layout_key(c.settings) == key), None)


def layout_key(s: PretrainConfig) -> tuple:
    p, moe = s.parallelism, s.moe
    return (p.data_parallel_replicate, p.shard_degree, p.expert_parallel, moe.comm_backend, moe.num_expert_groups,
            moe.num_limited_groups, s.local_batch_size, s.activation_checkpoint.mode, s.float8)


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def layouts(settings: PretrainConfig, shape: ModelShape, hardware: Hardware) -> Iterator[PretrainConfig]:
    """Every layout the module docstring lists, as [pretrain] settings (the rest of `settings` unchanged)."""
    p = settings.parallelism
    world, tp, gpn = p.world_size, p.tensor_parallel, hardware.gpus_per_node
    global_batch = settings.global_batch
    float8s = (None, "rowwise") if hardware.arch in ("hopper", "blackwell") else (None,)
    for replicate in _divisors(world // tp):
        shard = world // (replicate * tp)
        for ep in (e for e in _divisors(shard * tp) if shape.num_experts % e == 0):
            routings: list[tuple[str, int | None, int | None]] = [("standard", None, None), ("deepep", None, None)]
            nodes = ep // gpn
            if ep % gpn == 0 and nodes > 1 and shape.num_experts % nodes == 0:
                per_group = shape.num_experts // nodes
                routings += [("deepep", nodes, m) for m in LIMITED_GROUPS
                             if m < nodes and per_group >= 2 and m * per_group >= MIN_CHOICE * shape.top_k]
            for lbs in LOCAL_BATCHES:
                if global_batch % (lbs * replicate * shard):
                    continue
                for mode in AC_MODES:
                    for f8 in float8s:
                        for backend, groups, limited in routings:
                            yield settings.model_copy(update={
                                "local_batch_size": lbs, "float8": f8,
                                "global_batch_size": global_batch,
                                "parallelism": p.model_copy(update={"data_parallel_replicate": replicate,
                                                                    "data_parallel_shard": shard,
                                                                    "expert_parallel": ep}),
                                "moe": settings.moe.model_copy(update={"comm_backend": backend,
                                                                       "num_expert_groups": groups,
                                                                       "num_limited_groups": limited}),
                                "activation_checkpoint": settings.activation_checkpoint.model_copy(
                                    update={"mode": mode}),
                            })


def price(s: PretrainConfig, shape: ModelShape, hardware: Hardware) -> Candidate:
    memory = estimate_memory(s, shape, hardware)
    prediction = predict(from_settings(s, shape, memory, gpus_per_node=hardware.gpus_per_node), hardware)
    verdict = memory.verdict
    if s.activation_checkpoint.mode == "offload" and memory.offload_host_gib > memory.host_usable_gib:
        verdict = "host memory"
    return Candidate(settings=s, tokens_per_s=prediction.tokens_per_s, memory_gib=memory.total_gib,
                     hbm_gib=memory.hbm_gib, verdict=verdict, bottleneck=prediction.expected.bottleneck)


def search(settings: PretrainConfig, vocab_size: int | None, hardware: Hardware,
           shape: ModelShape | None = None) -> SearchResult:
    """`hardware`: the planner's view of the machine, its peak already set from [pretrain] (report._with_peak)."""
    shape = shape or model_shape(settings.flavor, vocab_size)
    ranked, considered, tight, too_large = [], 0, 0, 0
    for s in layouts(settings, shape, hardware):
        considered += 1
        c = price(s, shape, hardware)
        if c.feasible:
            ranked.append(c)
        elif c.verdict == "tight":
            tight += 1
        else:
            too_large += 1
    ranked.sort(key=lambda c: (-c.tokens_per_s.expected, c.memory_gib, c.describe()))
    return SearchResult(ranked=ranked, configured=price(settings, shape, hardware), considered=considered,
                        tight=tight, too_large=too_large)


def what_target_needs(result: SearchResult, target: float, hardware: Hardware,
                      shape: ModelShape | None = None) -> str:
    """One paragraph a reader can check: which layouts reach `target` tokens/s per GPU in which band, and for the
    best layout, the ceiling each resource alone allows (expected band), so the bound that forbids it is named."""
    best = result.best
    if best is None:
        return f"{target:,.0f} tokens/s per GPU: no layout fits, so none reaches it."
    s = best.settings
    shape = shape or model_shape(s.flavor, None)
    memory = estimate_memory(s, shape, hardware)
    work = from_settings(s, shape, memory, gpus_per_node=hardware.gpus_per_node)
    b = predict(work, hardware).expected
    hidden = predict(work.with_(overlap="full"), hardware).expected
    tok = b.tokens_per_microstep
    ceilings = {"compute": tok / b.compute_s, "InfiniBand": tok / b.ib_busy_s if b.ib_busy_s else float("inf"),
                "NVLink": tok / b.nvlink_busy_s if b.nvlink_busy_s else float("inf")}
    binding = min(ceilings, key=ceilings.get)
    reach = {band: sum(1 for c in result.ranked if c.tokens_per_s.at(band) >= target)
             for band in ("expected", "optimistic")}
    parts = [f"{target:,.0f} tokens/s per GPU: {reach['expected']:,} of {len(result.ranked):,} feasible layouts reach "
             f"it in the expected band, {reach['optimistic']:,} in the optimistic one."]
    parts.append(f"The best layout ({best.describe()}) is predicted at {best.tokens_per_s.expected:,.0f}; per "
                 f"micro-step of {tok:,.0f} tokens its GPU computes {b.compute_s:.2f} s, keeps InfiniBand busy "
                 f"{b.ib_busy_s:.2f} s and NVLink {b.nvlink_busy_s:.2f} s, and waits {b.exposed_a2a_s:.2f} s for "
                 f"the all-to-all, which torchtitan 0.3.0 runs on the compute stream.")
    parts.append(f"Each resource alone would allow: compute {ceilings['compute']:,.0f}, InfiniBand "
                 f"{ceilings['InfiniBand']:,.0f}, NVLink {ceilings['NVLink']:,.0f} tokens/s per GPU (before the "
                 f"optimizer step); with all communication hidden under compute (DualPipe-like overlap, not in the "
                 f"pinned torchtitan) the layout gives {hidden.tokens_per_s_per_gpu:,.0f}, bound by {binding}.")
    if ceilings[binding] < target:
        parts.append(f"So {target:,.0f} is forbidden by {binding} for this layout at the model's efficiencies "
                     f"(stages/pretrain/planner/throughput.py); reaching it needs a higher {binding} efficiency than "
                     f"the calibration gives, or fewer bytes or FLOPs per token.")
    else:
        parts.append(f"So {target:,.0f} is within the layout's resource ceilings: it needs the communication "
                     f"hidden, which the pinned torchtitan does not do.")
    return " ".join(parts)


def fragment(c: Candidate) -> str:
    """The layout as TOML to paste over [pretrain]'s keys (only the keys the search varies)."""
    s = c.settings
    p, moe = s.parallelism, s.moe
    lines = [f"# europa plan --search: {c.tokens_per_s.expected:,.0f} tokens/s per GPU expected "
             f"({c.tokens_per_s.pessimistic:,.0f}-{c.tokens_per_s.optimistic:,.0f}), {c.memory_gib:.1f} of "
             f"{c.hbm_gib:.0f} GiB, bound by {c.bottleneck}",
             "[pretrain]", f"local_batch_size = {s.local_batch_size}", f"global_batch_size = {s.global_batch}"]
    lines.append(f'float8 = "{s.float8}"' if s.float8 else "# float8: off (bf16 matmuls)")
    lines += ["", "[pretrain.parallelism]", f"data_parallel_replicate = {p.data_parallel_replicate}",
              f"data_parallel_shard = {p.shard_degree}", f"expert_parallel = {p.expert_parallel}",
              "", "[pretrain.moe]", f'comm_backend = "{moe.comm_backend}"']
    if moe.node_limited:
        lines += [f"num_expert_groups = {moe.num_expert_groups}", f"num_limited_groups = {moe.num_limited_groups}"]
    lines += ["", "[pretrain.activation_checkpoint]", f'mode = "{s.activation_checkpoint.mode}"']
    return "\n".join(lines) + "\n"


def format_search(result: SearchResult, top: int = 5) -> str:
    lines = [f"europa plan --search (ESTIMATES): {result.considered:,} layouts, {len(result.ranked):,} fit with the "
             f"planner's memory margin ({result.tight:,} tight, {result.too_large:,} do not fit)", ""]
    header = f"  {'#':>2}  {'tokens/s per GPU (band)':<24} {'GiB':>6}  layout; bottleneck"
    lines.append(header)
    for i, c in enumerate(result.ranked[:top], start=1):
        t = c.tokens_per_s
        lines.append(f"  {i:>2}  {t.expected:>6,.0f} ({t.pessimistic:,.0f}-{t.optimistic:,.0f}){'':<6} "
                     f"{c.memory_gib:>6.1f}  {c.describe()}; {c.bottleneck}")
    standard = result.best_where(comm_backend="standard")
    if standard is not None and standard is not result.best:
        t = standard.tokens_per_s
        lines += ["", f"  best with the standard all-to-all (no deep_ep package, routing unchanged): {t.expected:,.0f} "
                  f"({t.pessimistic:,.0f}-{t.optimistic:,.0f}), {standard.memory_gib:.1f} GiB: {standard.describe()}; "
                  f"{standard.bottleneck}"]
    conf, rank = result.configured, result.rank_of_configured()
    where = f"#{rank} of {len(result.ranked):,}" if rank else f"not feasible ({conf.verdict})"
    lines += ["", f"  the config's layout: {conf.tokens_per_s.expected:,.0f} tokens/s per GPU, {conf.memory_gib:.1f} "
              f"GiB, {where}: {conf.describe()}"]
    return "\n".join(lines)
