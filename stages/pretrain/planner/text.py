"""The planner's report as text (`europa plan`, plan.txt beside a rendered job)."""

from __future__ import annotations

from typing import Any

from stages.pretrain.planner.calibration import calibration_line
from stages.pretrain.planner.projection import EUROPA_TOKENS_PER_S_PER_GPU
from stages.pretrain.planner.throughput import EFFICIENCIES

Plan = Any  # report.Plan (report.py imports this module: no import back)


def _si(x: float) -> str:
    for unit, scale in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(x) >= scale:
            return f"{x / scale:.2f}{unit}"
    return f"{x:.0f}"


def format_plan(pl: Plan) -> str:
    m, t, lay = pl.memory, pl.throughput, pl.layout
    lines = [
        "EUROPA planner (ESTIMATES, not measurements; assumptions: stages/pretrain/planner/)",
        f"model     {pl.flavor}: {_si(pl.total_params)} parameters, {_si(pl.active_params)} active per token, "
        f"vocabulary {pl.vocab_size:,}",
        f"layout    {lay.nodes} nodes x {lay.processes_per_node} = {lay.gpus} GPUs; "
        f"HSDP {lay.data_parallel_replicate} replicas x FSDP {lay.data_parallel_shard}, "
        f"TP {lay.tensor_parallel}, EP {lay.expert_parallel} (experts FSDP-sharded over {lay.efsdp}); "
        f"{lay.gpus_per_replica} GPUs per replica",
        f"micro-step {pl.tokens_per_microstep:,} tokens per GPU; AC {m.ac_mode}; "
        f"unshard_async_op {'on' if m.unshard_async_op else 'off'}; hardware {pl.hardware.name}",
        "",
        f"memory per GPU (GiB), peak phase: {m.peak_phase}",
    ]
    for name, gib in pl.memory.phases[m.peak_phase].items():
        lines.append(f"  {name:<66} {gib:8.1f}")
    lines.append(f"  {'runtime reserve (CUDA context, NCCL, cuBLAS)':<66} {m.runtime_reserve_gib:8.1f}")
    lines.append(f"  {'total':<66} {m.total_gib:8.1f}   of {m.hbm_gib:.0f} GiB HBM: {m.verdict} "
                 f"(margin {m.margin_gib:+.1f} GiB)")
    others = [f"{k} {sum(v.values()) + m.runtime_reserve_gib:.1f}" for k, v in m.phases.items() if k != m.peak_phase]
    lines.append(f"  other phases: {'; '.join(others)}")
    if m.ac_mode == "offload":
        lines.append(f"  offloaded to the Grace: {m.offload_host_gib:.1f} GiB of {m.saved_activations_gib:.1f} GiB "
                     f"saved activations (host usable per GPU ~{m.host_usable_gib:.0f} GiB)")
    if pl.offload_traffic is not None:
        tr = pl.offload_traffic
        lines.append(f"  offload traffic: {tr.gib_each_way:.1f} GiB each way per micro-step = {tr.transfer_s:.2f} s "
                     f"over NVLink-C2C vs a {tr.micro_step_s:.2f} s micro-step ({tr.share_of_micro_step:.0%}, "
                     f"overlapped with compute)")
    lines.append("")
    lines.append("total GiB per GPU by activation checkpointing       unshard_async_op on   off")
    for mode, v in pl.variants.items():
        mark = " <- configured" if mode == m.ac_mode else ""
        fit = lambda g: "" if g <= m.hbm_gib else " (over)"  # noqa: E731
        lines.append(f"  {mode:<50} {v['async']:8.1f}{fit(v['async']):7} {v['no_async']:7.1f}{fit(v['no_async'])}{mark}")
    lines.append("  (without unshard_async_op: derived all-gather pool only; EUROPA measured ~14 GiB freed, the rest "
                 "is fragmentation not modelled)")
    lines.append("  (recomputation: full AC re-runs every block's forward, ~1/3 more FLOPs; selective and offload re-run "
                 "the routed experts' grouped GEMMs, which torchtitan's SAC does not save: counted in the prediction)")
    lines += ["", *_throughput_lines(pl)]
    for w in pl.warnings:
        lines.append(f"warning: {w}")
    return "\n".join(lines)


def _throughput_lines(pl: Plan) -> list[str]:
    t, pr = pl.throughput, pl.prediction
    e, rate = pr.expected, pr.tokens_per_s
    w, tr = pr.workload, pr.traffic
    limit = (f"node-limited to {w.num_limited_groups} of {w.num_expert_groups} groups" if w.num_expert_groups
             else "not node-limited")
    europa = t.tokens_per_s_per_gpu == EUROPA_TOKENS_PER_S_PER_GPU
    lines = [
        "throughput per GPU, predicted (model and sources: stages/pretrain/planner/throughput.py, docs/jupiter.md)",
        f"  expected {rate.expected:,.0f} tokens/s (pessimistic {rate.pessimistic:,.0f}, optimistic "
        f"{rate.optimistic:,.0f}) against "
        + (f"EUROPA's reported {t.tokens_per_s_per_gpu:,.0f}" if europa else f"the {t.tokens_per_s_per_gpu:,.0f} asked for"),
        calibration_line(rate.expected),
        assumptions_line(pr),
        f"  bottleneck: {e.bottleneck}",
        f"  per micro-step ({e.tokens_per_microstep:,.0f} tokens per GPU, {e.microsteps} per step; expected band, s):",
        f"    compute {e.compute_s:.2f} ({pr.executed_flops_per_token:.2e} FLOPs per token executed, recomputation "
        f"included)",
        f"    expert all-to-all {e.a2a_s:.2f} (InfiniBand {e.a2a_ib_s:.2f}, NVLink {e.a2a_nvlink_s:.2f}, dispatcher "
        f"work {e.a2a_handling_s:.2f}; {'blocks compute' if w.overlap == 'torchtitan' else 'overlapped'}): "
        f"{w.dispatcher} dispatch, routing {limit}, {tr.ib_copies:.2f} of {w.model.top_k} copies per token cross "
        f"nodes, experts on {tr.nodes_per_token:.1f} of {tr.nodes_spanned} nodes per token (at most {tr.max_nodes})",
        f"    FSDP all-gather + reduce-scatter: InfiniBand {e.fsdp_ib_s:.2f}, NVLink {e.fsdp_nvlink_s:.2f}; HSDP "
        f"all-reduce {e.hsdp_ib_s:.2f} (prefetched: {e.exposed_fsdp_s:.2f} exposed)",
        f"    InfiniBand busy {e.ib_busy_s:.2f}, NVLink busy {e.nvlink_busy_s:.2f}, NVLink-C2C (offload) {e.c2c_s:.2f}; "
        f"critical path {e.critical_s:.2f} -> micro-step {e.micro_s:.2f}",
        f"  step {e.step_s:.1f} s (optimizer {e.optimizer_s:.2f} s)",
    ]
    if pl.what_if:
        lines.append("  what if (expected tokens/s per GPU, pessimistic-optimistic):")
        lines.append(f"    {'configured':<58} {rate.expected:7,.0f}  ({rate.pessimistic:,.0f}-{rate.optimistic:,.0f})")
        for row in pl.what_if:
            r = row.prediction.tokens_per_s
            change = r.expected / rate.expected - 1
            same = abs(change) < 0.005
            lines.append(f"    {row.label:<58} {r.expected:7,.0f}  ({r.pessimistic:,.0f}-{r.optimistic:,.0f}) "
                         + ("unchanged: the standard all-to-all sends one copy per (token, expert) wherever it goes"
                            if same else f"{change:+.0%}; {row.prediction.expected.bottleneck}"))
    p = pl.predicted
    lines += [
        "",
        f"FLOPs per token {t.flops_per_token:.3e} = 6 x {_si(t.flops_per_token_matmul / 6)} active matmul params "
        f"({t.flops_per_token_matmul:.3e}) + attention ({t.flops_per_token_attention:.3e}); "
        f"6 x active = {t.flops_per_token_anchor:.3e}",
        f"at the predicted {p['expected'].tokens_per_s_per_gpu:,.0f} tokens/s per GPU: MFU {p['expected'].mfu:.1%}; "
        f"{p['expected'].planned_tokens / 1e12:.3f}T tokens in {p['expected'].days:.0f} days "
        f"({p['optimistic'].days:.0f}-{p['pessimistic'].days:.0f}), {p['expected'].gpu_hours:,.0f} GPU-hours",
        f"at {t.tokens_per_s_per_gpu:,.0f} tokens/s per GPU{' (EUROPA)' if europa else ''}: "
        f"MFU {t.mfu:.1%} of {t.peak_flops / 1e12:.0f} TFLOP/s "
        f"({t.tokens_per_s_per_gpu * t.flops_per_token / 1e12:.0f} TFLOP/s; {t.mfu_anchor:.1%} counting 6 x active only)",
        f"  step {t.tokens_per_step / 1e6:.2f}M tokens = {t.step_time_s:.1f} s; whole job {t.tokens_per_day / 1e9:.1f}B "
        f"tokens/day on {t.gpus:,} GPUs",
        f"  planned {t.planned_tokens / 1e12:.3f}T tokens: {t.days:.1f} days, {t.gpu_hours:,.0f} GPU-hours",
        f"training compute {t.total_flops:.2e} FLOPs (whatever the rate) = {t.total_flops / t.threshold_flops:.1%} of "
        f"the EU AI Act's 1e25 ({'ABOVE' if t.above_threshold else 'below'}; 1e25 is reached at "
        f"{t.tokens_to_threshold / 1e12:.1f}T tokens)",
    ]
    return lines


def assumptions_line(pr) -> str:
    """The derates no published run checks, with their bands, so a reader sees what they cost; and, where a
    calibration job measured this machine, what it measured instead."""
    e, w, m = EFFICIENCIES, pr.workload, pr.measured
    parts, measured = [], []
    cap = e.power_capped_compute
    if m is not None and m.gemm_bf16_flops is not None:
        slow, mid, fast = m.gemm_bf16_flops
        measured.append(f"GEMM {mid / 1e12:,.3g} TFLOP/s per GPU ({slow / 1e12:,.3g}-{fast / 1e12:,.3g})")
    elif pr.hardware_power_cap_w:
        parts.append(f"compute at {cap.expected:.0%} ({cap.pessimistic:.0%}-{cap.optimistic:.0%}) of the uncapped "
                     f"rate under the {pr.hardware_power_cap_w:.0f} W module power cap")
    if m is not None:
        for name, label in (("a2a_ib_gb_per_s", "all-to-all over the network"), ("a2a_nvlink_gb_per_s", "all-to-all in a node"),
                            ("collective_ib_gb_per_s", "FSDP rings over the network"),
                            ("collective_nvlink_gb_per_s", "FSDP rings in a node")):
            rates = getattr(m, name)
            if rates is not None:
                measured.append(f"{label} {rates[1]:,.3g} GB/s per GPU ({rates[0]:,.3g}-{rates[2]:,.3g})")
    imb = e.routing_imbalance
    if w.expert_parallel > 1 and w.routing_imbalance is None:
        parts.append(f"the busiest expert-parallel rank gets {imb.expected:.2f}x ({imb.optimistic:.2f}-{imb.pessimistic:.2f}) "
                     "the mean tokens")
    lines = []
    if measured:
        lines.append(f"  measured ({m.source}): " + "; ".join(measured))
        lines += [f"    {note}" for note in m.notes]
    lines.append("  assumed, not measured: " + "; ".join(parts) if parts else "  no power cap or routing imbalance assumed")
    return "\n".join(lines)
