"""Predicted step time and tokens/s per GPU: which resource a micro-step waits for, and for how long.

A stated model, not a simulation. Per GPU and per micro-step (workload.py says what is counted):

    compute   = executed FLOPs / (peak x compute efficiency [x power-capped share])
                [/ (1 - SMs held by overlapped comm kernels)], the routed experts' FLOPs x routing imbalance
    all-to-all= per call max(IB bytes / (IB x eff), NVLink bytes / (NVLink x eff)), summed over the calls,
                x routing imbalance (the busiest rank's tokens over the mean: every call waits for it)
    FSDP      = ring all-gathers + reduce-scatters, IB and NVLink; HSDP all-reduce over IB
    C2C       = activation offload, each way, over NVLink-C2C
    critical  = compute + all-to-all (torchtitan's all-to-all blocks the compute stream; hidden under `full`
                overlap, e.g. DeepSeek's DualPipe) + the FSDP time prefetching does not hide
    micro     = max(critical, IB busy, NVLink busy, C2C busy)   (a link can carry only so much, overlapped or not)
    step      = micro-steps x micro x (1 + pipeline bubble) + optimizer step (DistMuon's redistribution over IB,
                Newton-Schulz, the elementwise update through HBM)
    tokens/s per GPU = micro-steps x tokens per GPU / step

Ring collectives share a node's InfiniBand: a ring through the 4 GPUs of a node crosses the network once per
node, so FSDP's inter-node bytes per GPU are a 1/4 share of a ring's traffic; an all-to-all's are not shared
(each GPU's copies leave through its own HCA). Traffic leaving a 240-node Dragonfly+ group runs on global links
at `inter_group` of the per-GPU rate.

The efficiencies are the model's knobs. Each is a band (pessimistic, expected, optimistic) and the prediction is
given for all three; the expected values were fitted on the published measurements named beside them and
checked on the others (published.py; docs/jupiter.md lists sources and the error on each case).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from stages.cluster.machine import JUPITER_BOOSTER, Hardware, MeasuredRates
from stages.pretrain.planner.routing import TokenTraffic, token_traffic
from stages.pretrain.planner.workload import Workload

BANDS = ("pessimistic", "expected", "optimistic")
NS_STEPS = 5      # Newton-Schulz iterations of DistMuon
ADAM_BYTES = 28   # per parameter through HBM in an AdamW-style update (read p, g, m, v; write p, m, v)


@dataclass(frozen=True)
class Band:
    pessimistic: float
    expected: float
    optimistic: float

    def at(self, band: str) -> float:
        return getattr(self, band)


@dataclass(frozen=True)
class Efficiencies:
    """Achieved fractions of the hardware's peak rates (published.py: which case fixed which)."""

    compute_hopper: Band = Band(0.24, 0.284, 0.40)       # fitted: DeepSeek-V3-16B, 8 x H100 (torchtitan #1789)
    compute_blackwell: Band = Band(0.15, 0.176, 0.21)    # fitted: DeepSeek-V3-16B, 8 x B200, EP 1 (torchtitan #1993)
    a2a_passes_standard: Band = Band(10.0, 7.8, 6.0)     # fitted: Qwen3-30B-A3B, 8 x B200, standard all-to-all
    a2a_passes_deepep: Band = Band(4.0, 2.0, 1.0)        # ASSUMED: DeepEP permutes inside its kernels
    a2a_nvlink: Band = Band(0.60, 0.70, 0.80)            # ASSUMED: NCCL / DeepEP all-to-all rate / NVLink rate
    a2a_ib_standard: Band = Band(0.40, 0.60, 0.75)       # ASSUMED: no cross-node torchtitan run with a known layout
    a2a_ib_deepep: Band = Band(0.75, 0.85, 0.92)         # DeepEP's own internode figures (~43-47 of 50 GB/s)
    collective_nvlink: Band = Band(0.60, 0.75, 0.85)     # NCCL ring bus bandwidth / link rate
    collective_ib: Band = Band(0.60, 0.75, 0.85)
    fsdp_hidden: Band = Band(0.80, 0.90, 1.00)           # checked: Qwen3-30B-A3B on 16 nodes (FSDP over IB)
    c2c: Band = Band(0.60, 0.75, 0.90)
    inter_group: Band = Band(0.50, 0.75, 1.00)           # ASSUMED: Dragonfly+ global links per GPU
    optimizer_compute: Band = Band(0.30, 0.50, 0.70)
    hbm: Band = Band(0.50, 0.70, 0.85)
    # ASSUMED: the sustained GEMM rate of a GPU under a module power cap (Hardware.power_cap_w; JUPITER's GH200:
    # 680 W for CPU, GPU and memory together) against the uncapped GPU the compute efficiency was fitted on.
    # A calibration job's GEMM replaces it (`europa launch calibrate`, measured_efficiencies below).
    power_capped_compute: Band = Band(0.80, 0.90, 1.00)
    # ASSUMED: tokens the busiest expert-parallel rank receives over the mean, with a learned router (the
    # aux-loss-free bias keeps it near 1); the slowest rank sets every all-to-all and the experts' compute.
    # Published runs force balanced routing or do not report it: they set Workload.routing_imbalance = 1.
    routing_imbalance: Band = Band(1.25, 1.10, 1.03)


EFFICIENCIES = Efficiencies()

# ASSUMED: the share of its dense bf16 peak a large GEMM reaches on an uncapped H100 SXM (cuBLAS, ~740 of 989
# TFLOP/s). The compute efficiencies were fitted on such GPUs, so a measured GEMM share over this one is the
# measured machine's compute derate, its power cap included.
REFERENCE_GEMM_SHARE = 0.75
# MeasuredRates field -> (the efficiency it replaces, the profile's rate it is a share of). The calibration job
# runs torch's all_to_all_single, the standard dispatcher's collective: DeepEP's bands stay assumed.
MEASURED_LINKS = {
    "a2a_ib_gb_per_s": ("a2a_ib_standard", "ib_gb_per_s_per_gpu"),
    "a2a_nvlink_gb_per_s": ("a2a_nvlink", "nvlink_gb_per_s"),
    "collective_ib_gb_per_s": ("collective_ib", "ib_gb_per_s_per_gpu"),
    "collective_nvlink_gb_per_s": ("collective_nvlink", "nvlink_gb_per_s"),
}


def measured_efficiencies(hw: Hardware, band: str) -> dict[str, float]:
    """The efficiencies a calibration job measured on `hw` (Hardware.measured), at one band: the slowest repeat
    for the pessimistic band, the median for the expected, the fastest for the optimistic."""
    m = hw.measured
    if m is None:
        return {}
    i = BANDS.index(band)
    out = {}
    for name, (efficiency, rate) in MEASURED_LINKS.items():
        value = getattr(m, name)
        if value is not None and getattr(hw, rate):
            out[efficiency] = value[i] / getattr(hw, rate)
    if m.gemm_bf16_flops is not None and hw.peak_bf16_flops:
        out["power_capped_compute"] = m.gemm_bf16_flops[i] / (hw.peak_bf16_flops * REFERENCE_GEMM_SHARE)
    return out


@dataclass
class Breakdown:
    """Seconds per micro-step (and per step for the optimizer) at one band."""

    band: str
    compute_s: float
    a2a_s: float
    a2a_handling_s: float
    a2a_ib_s: float
    a2a_nvlink_s: float
    fsdp_ib_s: float
    hsdp_ib_s: float
    fsdp_nvlink_s: float
    c2c_s: float
    exposed_a2a_s: float
    exposed_fsdp_s: float
    optimizer_s: float
    microsteps: int
    tokens_per_microstep: float
    bubble: float

    @property
    def critical_s(self) -> float:
        return self.compute_s + self.exposed_a2a_s + self.exposed_fsdp_s

    @property
    def ib_busy_s(self) -> float:
        return self.a2a_ib_s + self.fsdp_ib_s + self.hsdp_ib_s

    @property
    def nvlink_busy_s(self) -> float:
        return self.a2a_nvlink_s + self.fsdp_nvlink_s

    @property
    def micro_s(self) -> float:
        return max(self.critical_s, self.ib_busy_s, self.nvlink_busy_s, self.c2c_s)

    @property
    def step_s(self) -> float:
        return self.microsteps * self.micro_s * (1 + self.bubble) + self.optimizer_s

    @property
    def tokens_per_s_per_gpu(self) -> float:
        return self.microsteps * self.tokens_per_microstep / self.step_s

    @property
    def bottleneck(self) -> str:
        """What the micro-step waits for, in words, with the shares that make it up."""
        links = {"InfiniBand": self.ib_busy_s, "NVLink": self.nvlink_busy_s, "NVLink-C2C (offload)": self.c2c_s}
        link, busy = max(links.items(), key=lambda kv: kv[1])
        if busy > self.critical_s:
            if link == "InfiniBand":
                parts = {"all-to-all": self.a2a_ib_s, "FSDP": self.fsdp_ib_s, "HSDP all-reduce": self.hsdp_ib_s}
            elif link == "NVLink":
                parts = {"all-to-all": self.a2a_nvlink_s, "FSDP": self.fsdp_nvlink_s}
            else:
                parts = {}
            shares = ", ".join(f"{k} {v / busy:.0%}" for k, v in parts.items() if v > 0.005 * busy)
            return f"{link} bandwidth ({shares})" if shares else f"{link} bandwidth"
        parts = {"compute": self.compute_s, "exposed all-to-all": self.exposed_a2a_s,
                 "exposed FSDP": self.exposed_fsdp_s}
        top = max(parts, key=parts.get)
        shares = ", ".join(f"{k} {v / self.critical_s:.0%}" for k, v in parts.items() if v > 0.005 * self.critical_s)
        return f"{'compute' if top == 'compute' else top} ({shares})"

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.update(critical_s=self.critical_s, ib_busy_s=self.ib_busy_s, nvlink_busy_s=self.nvlink_busy_s,
                 micro_s=self.micro_s, step_s=self.step_s, tokens_per_s_per_gpu=self.tokens_per_s_per_gpu,
                 bottleneck=self.bottleneck)
        return d


@dataclass
class Prediction:
    workload: Workload
    hardware_name: str
    traffic: TokenTraffic
    bands: dict[str, Breakdown]
    executed_flops_per_token: float
    notes: list[str] = field(default_factory=list)
    hardware_power_cap_w: float | None = None
    measured: MeasuredRates | None = None

    @property
    def expected(self) -> Breakdown:
        return self.bands["expected"]

    @property
    def tokens_per_s(self) -> Band:
        return Band(*(self.bands[b].tokens_per_s_per_gpu for b in BANDS))

    def to_dict(self) -> dict[str, Any]:
        return {"hardware": self.hardware_name, "traffic": asdict(self.traffic),
                "executed_flops_per_token": self.executed_flops_per_token,
                "tokens_per_s_per_gpu": asdict(self.tokens_per_s), "bottleneck": self.expected.bottleneck,
                "bands": {b: v.to_dict() for b, v in self.bands.items()}, "notes": self.notes,
                "power_cap_w": self.hardware_power_cap_w,
                "measured": self.measured.source if self.measured is not None else None}


def executed_flops(w: Workload) -> tuple[float, float]:
    """(matmul, attention) FLOPs per token one training pass executes, recomputation included."""
    m = w.model
    fwd_mm, routed = m.matmul_fwd_flops, 2.0 * m.routed_active_params
    attn = m.attention_fwd_flops(w.seq_len)
    rec_mm, rec_attn = {
        "none": (0.0, 0.0),
        "minimal": (2.0 * w.recompute_params, 0.0),
        "selective": (routed + (fwd_mm - routed) / 2, 0.0),
        "offload": (routed, 0.0),
        "full": (fwd_mm, attn),
    }[w.ac_mode]
    return 3 * fwd_mm + rec_mm, 3 * attn + rec_attn


def ring_bytes(total: float, members: int, per_node: int) -> tuple[float, float]:
    """(InfiniBand, NVLink) bytes per GPU of a ring collective moving `total` per GPU over `members` ranks of
    which `per_node` share a node: the ring leaves each node once, so its network share is 1/per_node."""
    if members <= 1:
        return 0.0, 0.0
    per_node = max(1, min(per_node, members))
    if members <= per_node:
        return 0.0, total
    return total / per_node, total * (per_node - 1) / per_node


def _ns_flops(rows: int, cols: int) -> float:
    m, n = min(rows, cols), max(rows, cols)
    return NS_STEPS * (4.0 * m * m * n + 2.0 * m**3)


def _breakdown(w: Workload, hw: Hardware, traffic: TokenTraffic, eff: Efficiencies, band: str) -> Breakdown:
    e = {name: getattr(eff, name).at(band) for name in eff.__dataclass_fields__}
    e.update(measured_efficiencies(hw, band))
    measured_gemm = hw.measured is not None and hw.measured.gemm_bf16_flops is not None
    m, tok = w.model, w.tokens
    gpn = w.gpus_per_node
    # compute
    mm, attn = executed_flops(w)
    peak_mm = hw.peak_fp8_flops if w.matmul_precision == "fp8" else hw.peak_bf16_flops
    eta = e[f"compute_{hw.arch}"] * (e["power_capped_compute"] if hw.power_cap_w or measured_gemm else 1.0)
    imbalance = (w.routing_imbalance if w.routing_imbalance is not None else e["routing_imbalance"]) \
        if w.expert_parallel > 1 else 1.0
    # the routed experts' share of the matmuls runs at the busiest rank's load
    mm *= 1 + (imbalance - 1) * m.routed_active_params / m.matmul_params
    compute = tok * (mm / (peak_mm * eta) + attn / (hw.peak_bf16_flops * eta))
    compute /= (1 - w.comm_sm_share)
    # expert-parallel all-to-all
    calls = 4 + (2 if w.ac_mode == "full" else 0)
    ep_on = w.expert_parallel > 1
    per_copy = m.dim * w.a2a_bytes * m.n_moe_layers * calls * tok
    ib_rate = hw.ib_gb_per_s_per_gpu * 1e9 * e[f"a2a_ib_{w.dispatcher}"]
    if traffic.nodes_spanned > hw.nodes_per_network_group:
        ib_rate *= e["inter_group"]
    a2a_ib = traffic.ib_copies * per_copy / ib_rate if traffic.ib_copies else 0.0
    a2a_nvl = traffic.nvlink_copies * per_copy / (hw.nvlink_gb_per_s * 1e9 * e["a2a_nvlink"])
    # the dispatcher's own work on every copy (permute, pad, unpermute, scatter-add, count exchange): HBM passes
    handling = e[f"a2a_passes_{w.dispatcher}"] * m.top_k * per_copy / (hw.hbm_gb_per_s * 1e9) if ep_on else 0.0
    a2a_ib, a2a_nvl, handling = a2a_ib * imbalance, a2a_nvl * imbalance, handling * imbalance
    a2a = max(a2a_ib, a2a_nvl) + handling
    # FSDP (+ HSDP) per micro-step
    fsdp_ib = fsdp_nvl = hsdp_ib = 0.0
    pp, tp = w.pipeline_parallel, w.tensor_parallel
    if w.gradient_sync == "microstep":
        bpp = 2 * w.compute_bytes + 4
        d_ib, d_nvl = ring_bytes(bpp * m.dense_params / (tp * pp) * (1 - 1 / w.data_parallel_shard),
                            w.data_parallel_shard, gpn // tp)
        ep = w.expert_parallel
        x_ib, x_nvl = ring_bytes(bpp * m.routed_params / (ep * pp) * (1 - 1 / w.efsdp), w.efsdp,
                            gpn // ep if ep < gpn else 1)
        ib_coll = hw.ib_gb_per_s_per_gpu * 1e9 * e["collective_ib"]
        fsdp_ib = (d_ib + x_ib) / ib_coll
        fsdp_nvl = (d_nvl + x_nvl) / (hw.nvlink_gb_per_s * 1e9 * e["collective_nvlink"])
        r = w.data_parallel_replicate
        if r > 1:
            local = m.total_params / (w.data_parallel_shard * tp * pp)
            spans_groups = w.nodes > hw.nodes_per_network_group
            hsdp_ib = 4 * local * 2 * (r - 1) / r / (ib_coll * (e["inter_group"] if spans_groups else 1.0))
    fsdp = max(fsdp_ib + hsdp_ib, fsdp_nvl)
    c2c = w.offload_gib * 2**30 / (hw.c2c_gb_per_s * 1e9 * e["c2c"])
    # optimizer step
    local = m.total_params / (w.data_parallel_shard * tp * pp)
    optimizer = local * ADAM_BYTES / (hw.hbm_gb_per_s * 1e9 * e["hbm"])
    if w.optimizer == "dist_muon" and m.muon_matrices:
        per_replica = w.gpus / w.data_parallel_replicate
        ns = sum(n * _ns_flops(r_, c_) for r_, c_, n in m.muon_matrices) / per_replica
        ns_s = ns / (hw.peak_bf16_flops * e["optimizer_compute"])
        ep = w.expert_parallel
        local_experts = m.routed_params / (ep * w.efsdp * pp)
        local_dense = m.dense_params / (w.data_parallel_shard * tp * pp)
        moved = 2 * 4 * (local_experts * (1 - 1 / w.efsdp) + local_dense * (1 - 1 / w.data_parallel_shard))
        over_ib = w.data_parallel_shard > gpn or (ep >= gpn and w.efsdp > 1)
        rate = (hw.ib_gb_per_s_per_gpu if over_ib else hw.nvlink_gb_per_s) * 1e9 * e["collective_ib"]
        optimizer = moved / rate + max(ns_s, optimizer)
    return Breakdown(
        band=band, compute_s=compute, a2a_s=a2a, a2a_handling_s=handling, a2a_ib_s=a2a_ib, a2a_nvlink_s=a2a_nvl,
        fsdp_ib_s=fsdp_ib, hsdp_ib_s=hsdp_ib, fsdp_nvlink_s=fsdp_nvl, c2c_s=c2c,
        exposed_a2a_s=a2a if w.overlap == "torchtitan" else 0.0,
        exposed_fsdp_s=(1 - e["fsdp_hidden"]) * fsdp if w.overlap == "torchtitan" else 0.0,
        optimizer_s=optimizer, microsteps=w.microsteps, tokens_per_microstep=tok, bubble=w.pipeline_bubble,
    )


def predict(w: Workload, hardware: Hardware = JUPITER_BOOSTER, efficiencies: Efficiencies = EFFICIENCIES) -> Prediction:
    m = w.model
    traffic = token_traffic(top_k=m.top_k, expert_parallel=w.expert_parallel, gpus_per_node=w.gpus_per_node,
                            dispatcher=w.dispatcher, num_expert_groups=w.num_expert_groups,
                            num_limited_groups=w.num_limited_groups)
    notes = list(w.notes)
    if w.num_expert_groups is not None and not traffic.aligned:
        notes.append(f"num_expert_groups {w.num_expert_groups} does not line up with the {traffic.nodes_spanned} nodes "
                     "an expert-parallel group spans: groups straddle nodes, so routing bounds no node count")
    if traffic.nodes_spanned > hardware.nodes_per_network_group:
        notes.append(f"an expert-parallel group spans {traffic.nodes_spanned} nodes, more than one "
                     f"{hardware.nodes_per_network_group}-node network group: its all-to-all crosses global links")
    bands = {b: _breakdown(w, hardware, traffic, efficiencies, b) for b in BANDS}
    mm, attn = executed_flops(w)
    return Prediction(workload=w, hardware_name=hardware.name, traffic=traffic, bands=bands,
                      executed_flops_per_token=mm + attn, notes=notes, hardware_power_cap_w=hardware.power_cap_w,
                      measured=hardware.measured)
