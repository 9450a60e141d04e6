"""Memory and throughput planner for the EUROPA MoE: per-GPU memory on a GH200, FLOPs, utilisation, days.

Everything here is an ESTIMATE from the model's shape and the configured layout, made before a job is
queued; it is not a measurement. It is good for "does this layout fit, and roughly with how much room",
for comparing switches (activation checkpointing, offload, unshard_async_op, EP degree) and for the
compute figures of the compliance documents; the job's own metrics (torchtitan's memory and MFU lines,
`<job>/metrics.jsonl`) are the truth once it runs. `europa plan` prints it; `europa launch jupiter` refuses a
layout whose estimate does not fit in HBM.

Model (all per GPU, for one micro-step of `local_batch_size x seq_len` tokens)
-------------------------------------------------------------------------------
Parameters come from `europa_model.flavors.count_parameters` (the model on the meta device), cached per
process.

Sharding, as torchtitan 0.3.0 lays it out (`ParallelDims`, `apply_fsdp`): the non-expert parameters are
sharded over FSDP (`data_parallel_shard`) and TP; the routed experts are first spread over EP, then each EP
rank's experts are sharded over `efsdp = data_parallel_shard x TP / EP`. Both end up as `1 / (dp_shard x TP)`
of their group per GPU; `data_parallel_replicate` (HSDP) holds whole copies. Norms are counted as if TP-
sharded too (they are 0.0001% of the parameters).

Persistent state (bytes per local parameter):
- parameters 4: torchtitan builds the model in fp32 and FSDP2 keeps the *sharded* parameters in fp32; with
  `precision = "bfloat16"` they are all-gathered as bf16 copies for compute, so the fp32 shard IS the master
  copy (no second one).
- gradients 4: reduce-scattered in fp32 (torchtitan's `mixed_precision_reduce = "float32"`), sharded.
- optimizer: AdamW 8 (two fp32 moments); DistMuon 4 (one fp32 momentum buffer) for the matrices, with AdamW
  (8) for the embedding, lm_head and norms, as torchtitan's Kimi recipe (models/kimi_k2_7/config_registry.py,
  after Moonlight) splits them.
So AdamW costs 16 bytes per local parameter and DistMuon ~12 (12.03 for europa-1t).

FSDP all-gather buffers (compute dtype: 2 bytes in bf16, 4 in fp32). FSDP units are torchtitan's: the
embedding, each transformer block, and norm + lm_head together. A MoE block's unsharded size is its
attention, shared expert and router over TP plus its routed experts over EP (an EP rank holds E/EP whole
experts while the block runs). In the peak phases two block units are unsharded (the running one and the
explicitly prefetched one; torchtitan sets explicit prefetch whenever EP > 1) with the running block's
gradients in bf16 and two fp32 reduce-scatter inputs in flight (the running and the previous block: FSDP2
keeps the previous one alive until the next reduce-scatter).

unshard_async_op. Without it, FSDP2 allocates each all-gather's flat output buffer on its all-gather copy-in
stream; the CUDA caching allocator keeps a pool per stream, so that pool's high-water mark (the two largest
consecutive units: embedding + first block, or last block + lm_head) stays reserved and never serves
activations. With it (pytorch#135523) the all-gather runs with `async_op=True` from the compute stream and
the buffers come from the compute pool; only the one flat buffer in flight counts. This derives the part of
the saving that follows from buffer sizes; EUROPA measured ~14 GiB freed per GPU, the rest being
cross-stream fragmentation, which this planner does NOT model: the figure without unshard_async_op is a
lower bound.

Activations, bytes per token per layer, counted tensor by tensor from the flavor's dimensions
(`_layer_tensors`: MLA attention with q-LoRA, SwiGLU dense FFN, MoE with shared expert, sigmoid router,
routed SwiGLU experts with top-k token copies; EP all-to-all outputs when EP > 1) in the compute dtype. What
stays saved for backward depends on the AC policy:
- none: every tensor autograd keeps;
- selective: torchtitan's op-level SAC: layer input, attention output, top-k, all-to-all outputs and every
  second linear output; norms, activations, RoPE and the routed grouped GEMMs are recomputed;
- full: only each layer's input; the layer is recomputed in backward;
- offload: the graph_trainer's `sac_and_offload`: default SAC (every linear output saved) whose saved tensors
  move to the host (the GPU's own Grace, over NVLink-C2C) largest first until `offload_budget_gb` (GiB per
  rank, as torchtitan counts it) is used; the layers in flight (`offload_prefetch_layers` reloaded ahead in
  backward, one deferred in forward, the running one) stay on the GPU, and whatever exceeds the budget too.
Plus the working set of the layer under backward (its full activations, recomputed or saved, with their
gradients in flight: one MoE layer's "none" set). Activations are divided by TP (sequence parallel);
routing is assumed balanced (the aux-loss-free bias keeps it near), so EP receive buffers are top_k tokens
per token.

Loss: torchtitan's ChunkedLossWrapper as the pretrain stage configures it (8 chunks): one chunk's logits at
14 bytes per logit (bf16 logits, fp32 copy and log-probs, fp32 gradients) plus the lm_head unsharded in bf16
with its bf16 gradient and fp32 reduce-scatter input, and the fp32 hidden-state gradient of the whole
micro-step.

Optimizer step (after backward, no activations): AdamW's foreach temporaries (~one fp32 copy of the local
shard); DistMuon's FlexShard redistribution of one bucket (two MoE blocks' matrices, fp32 in and out, the
Kimi recipe's bucketing) plus Newton-Schulz on the largest whole matrix a rank owns (~12 bytes per element:
fp32 gathered update and result, bf16 iterates), plus AdamW temporaries for its non-matrix share.

Peak = the largest of three phases (loss at the end of forward; backward through the blocks; optimizer
step) + a runtime reserve (CUDA context, cuBLAS workspaces, NCCL communicator buffers: 4 GiB). Verdict
against 96 GiB of HBM per GH200 (NVIDIA's "96 GB" are binary, as an "80 GB" H100 reports 79.6 GiB): fits
when the peak leaves >= 10% of HBM free (allocator fragmentation is not modelled), tight when under 10% is
left, does not fit when over HBM. Host memory per GPU: 120 GB LPDDR5X per Grace on JUPITER compute nodes,
one Grace per GPU, minus 16 GiB for the OS, psslurm, the rank's Python and data loader.

FLOPs per token (torchtitan's own formula, `get_moe_model_nparams_and_flops`, so the planner's utilisation
matches the trainer's MFU line): 6 x active matmul parameters (active parameters minus the embedding table,
lm_head included) + attention 6 x layers x heads x (qk_nope + qk_rope + v head dims) x seq_len (the PaLM
12 x L x H x Q x T with MLA's unequal q/k and v head dims; the causal mask's saving is not subtracted). The
anchor convention, 6 x 32.8e9 active parameters, is shown beside it.
Utilisation implied by a throughput (EUROPA: 1,300 tokens/s per GPU) = tokens/s x FLOPs per token / peak,
with GH200's dense bf16 peak of 989 TFLOP/s. Training compute = planned tokens (steps x global batch x
seq_len) x FLOPs per token, compared with the EU AI Act's 1e25 FLOP presumption of systemic risk.
"""

from __future__ import annotations

import functools
import json
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from stages.pretrain.config import PretrainConfig

GIB = 1024**3

EUROPA_TOKENS_PER_S_PER_GPU = 1300.0   # PyTorch blog, Nov 2026 (anchors.md)
EU_AI_ACT_THRESHOLD_FLOPS = 1e25        # Art. 51(2): presumption of high-impact capabilities
LOSS_CHUNKS = 8                         # ChunkedLossWrapper default, as stages/pretrain/trainer_config.py uses it
FIT_MARGIN = 0.10                       # share of HBM left free for "fits"
LOGIT_BYTES = 14                        # per logit of one loss chunk (see module docstring)
AC_MODES = ("none", "selective", "full", "offload")


@dataclass(frozen=True)
class Hardware:
    name: str = "NVIDIA GH200 (JUPITER Booster)"
    hbm_gib: float = 96.0
    peak_bf16_flops: float = 989e12
    host_gib_per_gpu: float = 120e9 / GIB     # 120 GB LPDDR5X per Grace, one Grace per GPU
    host_reserve_gib: float = 16.0
    c2c_gb_per_s: float = 450.0               # NVLink-C2C 900 GB/s, per direction
    runtime_reserve_gib: float = 4.0
    gpus_per_node: int = 4
    cores_per_gpu: int = 72

    @property
    def host_usable_gib(self) -> float:
        return self.host_gib_per_gpu - self.host_reserve_gib


GH200 = Hardware()


# ---------------------------------------------------------------------------------------------------------
# The model's shape


@dataclass(frozen=True)
class ModelShape:
    flavor: str
    vocab_size: int
    dim: int
    n_layers: int
    n_dense_layers: int
    n_heads: int
    q_lora_rank: int
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int
    dense_hidden_dim: int
    moe_hidden_dim: int
    num_experts: int
    num_shared_experts: int
    top_k: int
    total: int
    active: int
    active_matmul: int
    embedding: int
    output: int
    norms: int
    attention_per_layer: int
    dense_ffn_per_layer: int
    shared_per_layer: int
    router_per_layer: int
    routed_per_layer: int

    @property
    def n_moe_layers(self) -> int:
        return self.n_layers - self.n_dense_layers

    @property
    def head_dims(self) -> int:
        return self.qk_nope_head_dim + self.qk_rope_head_dim + self.v_head_dim


def flavor_dims(flavor: str):
    """The flavor's architecture numbers (`europa_model.flavors.Flavor`; imports torch and torchtitan)."""
    from europa_model.flavors import FLAVORS

    return FLAVORS[flavor]


@functools.lru_cache(maxsize=None)
def model_shape(flavor: str, vocab_size: int | None = None) -> ModelShape:
    """Counts on the meta device (a few seconds for europa-1t), cached per process."""
    from europa_model.flavors import FLAVORS, count_parameters

    f = FLAVORS[flavor]
    c = count_parameters(flavor, vocab_size)
    n_moe = f.n_layers - f.n_dense_layers
    return ModelShape(
        flavor=flavor, vocab_size=c["vocab_size"], dim=f.dim, n_layers=f.n_layers, n_dense_layers=f.n_dense_layers,
        n_heads=f.n_heads, q_lora_rank=f.q_lora_rank, kv_lora_rank=f.kv_lora_rank,
        qk_nope_head_dim=f.qk_nope_head_dim, qk_rope_head_dim=f.qk_rope_head_dim, v_head_dim=f.v_head_dim,
        dense_hidden_dim=f.dense_hidden_dim, moe_hidden_dim=f.moe_hidden_dim, num_experts=f.num_experts,
        num_shared_experts=f.num_shared_experts, top_k=f.top_k,
        total=c["total"], active=c["active"], active_matmul=c["active_matmul"], embedding=c["embedding"],
        output=c["output"], norms=c["norms"],
        attention_per_layer=c["attention"] // f.n_layers,
        dense_ffn_per_layer=c["dense_ffn"] // max(f.n_dense_layers, 1),
        shared_per_layer=c["shared_experts"] // max(n_moe, 1),
        router_per_layer=c["router"] // max(n_moe, 1),
        routed_per_layer=c["routed_experts"] // max(n_moe, 1),
    )


def _layer_tensors(s: ModelShape, moe: bool, ep: int) -> dict[str, int]:
    """Elements per token (in bf16 units: an fp32 tensor counts twice) that one block's forward leaves for
    backward, by category: input | linear | attention | small | comm | grouped | other."""
    h, d = s.n_heads, s.dim
    qk = s.qk_nope_head_dim + s.qk_rope_head_dim
    t = dict.fromkeys(("input", "linear", "attention", "small", "comm", "grouped", "other"), 0)
    t["input"] += d                                             # block input (attention_norm saves it)
    # MLA attention
    t["other"] += d                                             # attention_norm output
    t["linear"] += s.q_lora_rank + h * qk                       # wq_a, wq_b outputs
    t["other"] += s.q_lora_rank                                 # q_norm output
    t["linear"] += s.kv_lora_rank + s.qk_rope_head_dim          # wkv_a output
    t["other"] += s.kv_lora_rank                                # kv_norm output
    t["linear"] += h * (s.qk_nope_head_dim + s.v_head_dim)      # wkv_b output
    t["other"] += 2 * h * qk                                    # q and k after RoPE and concatenation
    t["attention"] += h * s.v_head_dim + 2 * h                  # attention output + fp32 log-sum-exp
    t["linear"] += d                                            # wo output
    t["other"] += 2 * d                                         # residual sum, ffn_norm output
    if not moe:
        f = s.dense_hidden_dim
        t["linear"] += 2 * f + d                                # w1, w3, w2 outputs
        t["other"] += f                                         # silu(w1)
        return t
    k, fe, fs = s.top_k, s.moe_hidden_dim, s.moe_hidden_dim * s.num_shared_experts
    t["linear"] += s.num_experts                                # router logits
    t["other"] += 2 * s.num_experts                             # fp32 sigmoid scores
    t["small"] += 5 * k                                         # top-k scores (fp32) and indices (int64)
    if ep > 1:
        t["comm"] += 2 * k * d                                  # dispatch and combine all-to-all outputs
    else:
        t["other"] += k * d                                     # tokens gathered per expert
    t["grouped"] += 2 * k * fe + k * d                          # routed w1, w3, w2 (grouped GEMMs)
    t["other"] += 2 * k * fe                                    # silu(w1), silu(w1) * w3
    t["linear"] += 2 * fs + d                                   # shared expert w1, w3, w2
    t["other"] += 2 * fs + d                                    # shared silu, product; routed + shared sum
    return t


def _largest_owned_matrix(s: ModelShape) -> int:
    """The largest matrix DistMuon computes whole on one rank (Kimi recipe: `Owned` for wq_a, wkv_a, wo, the
    dense FFN, router and shared experts; wq_b / wkv_b per head and the experts per expert are smaller)."""
    d = s.dim
    candidates = [d * s.q_lora_rank, d * (s.kv_lora_rank + s.qk_rope_head_dim), s.n_heads * s.v_head_dim * d,
                  s.num_experts * d, s.moe_hidden_dim * s.num_shared_experts * d]
    if s.n_dense_layers:
        candidates.append(s.dense_hidden_dim * d)
    return max(candidates)


def _saved(t: dict[str, int], mode: str) -> float:
    if mode == "none":
        return float(sum(t.values()))
    if mode == "full":
        return float(t["input"])
    base = t["input"] + t["attention"] + t["small"] + t["comm"]
    return base + (t["linear"] / 2 if mode == "selective" else t["linear"])


# ---------------------------------------------------------------------------------------------------------
# Estimates


@dataclass
class MemoryEstimate:
    """GiB per GPU. `components` are the terms of the peak phase; `phases` the three candidate peaks."""

    ac_mode: str
    unshard_async_op: bool
    local_params: float                       # parameters held per GPU (count, not GiB)
    persistent: dict[str, float]
    phases: dict[str, dict[str, float]]
    peak_phase: str
    peak_gib: float
    hbm_gib: float
    runtime_reserve_gib: float
    offload_host_gib: float
    host_usable_gib: float
    saved_activations_gib: float              # all saved activations of a micro-step (GPU + host)
    notes: list[str] = field(default_factory=list)

    @property
    def total_gib(self) -> float:
        return self.peak_gib + self.runtime_reserve_gib

    @property
    def margin_gib(self) -> float:
        return self.hbm_gib - self.total_gib

    @property
    def verdict(self) -> str:
        if self.total_gib > self.hbm_gib:
            return "does not fit"
        return "fits" if self.margin_gib >= FIT_MARGIN * self.hbm_gib else "tight"

    @property
    def fits(self) -> bool:
        return self.total_gib <= self.hbm_gib

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.update(total_gib=self.total_gib, margin_gib=self.margin_gib, verdict=self.verdict)
        return d


@dataclass
class ThroughputEstimate:
    tokens_per_s_per_gpu: float
    gpus: int
    flops_per_token: float                    # torchtitan's formula (matmul + attention)
    flops_per_token_matmul: float
    flops_per_token_attention: float
    flops_per_token_anchor: float             # 6 x active parameters (the blog's convention)
    peak_flops: float
    mfu: float
    mfu_anchor: float
    tokens_per_step: int
    step_time_s: float
    tokens_per_day: float
    planned_tokens: int
    days: float
    gpu_hours: float
    total_flops: float
    tokens_to_threshold: float
    threshold_flops: float = EU_AI_ACT_THRESHOLD_FLOPS

    @property
    def above_threshold(self) -> bool:
        return self.total_flops > self.threshold_flops  # Art. 51(2): "greater than 10^25"


@dataclass
class Plan:
    flavor: str
    vocab_size: int
    total_params: int
    active_params: int
    layout: dict[str, int]
    tokens_per_microstep: int
    hardware: Hardware
    memory: MemoryEstimate
    variants: dict[str, dict[str, float]]     # ac mode -> {"async": GiB total, "no_async": GiB total}
    throughput: ThroughputEstimate
    offload_traffic: dict[str, float] | None
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "estimate": True,
            "flavor": self.flavor, "vocab_size": self.vocab_size,
            "total_params": self.total_params, "active_params": self.active_params,
            "layout": self.layout, "tokens_per_microstep": self.tokens_per_microstep,
            "hardware": asdict(self.hardware),
            "memory": self.memory.to_dict(),
            "variants": self.variants,
            "throughput": {**asdict(self.throughput), "above_threshold": self.throughput.above_threshold},
            "offload_traffic": self.offload_traffic,
            "warnings": self.warnings,
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    def text(self) -> str:
        return format_plan(self)


def _layout(settings: PretrainConfig) -> dict[str, int]:
    p = settings.parallelism
    dp = p.data_parallel_replicate * p.shard_degree
    return {
        "nodes": p.nodes, "processes_per_node": p.processes_per_node, "gpus": p.world_size,
        "data_parallel_replicate": p.data_parallel_replicate, "data_parallel_shard": p.shard_degree,
        "tensor_parallel": p.tensor_parallel, "expert_parallel": p.expert_parallel,
        "efsdp": p.shard_degree * p.tensor_parallel // p.expert_parallel,
        "data_parallel_ranks": dp,
        "gpus_per_replica": p.world_size // p.data_parallel_replicate,
    }


def estimate_memory(settings: PretrainConfig, shape: ModelShape, hardware: Hardware = GH200) -> MemoryEstimate:
    p, ac = settings.parallelism, settings.activation_checkpoint
    tp, ep, shard = p.tensor_parallel, p.expert_parallel, p.shard_degree
    mode, async_op = ac.mode, p.unshard_async_op
    bf16 = settings.precision == "bfloat16"
    cb = 2 if bf16 else 4                                   # compute dtype bytes (all-gathered params, activations)
    to_gib = 1 / GIB

    local = shape.total / (shard * tp)
    local_adamw_only = (shape.embedding + shape.output + shape.norms) / (shard * tp)  # AdamW even under DistMuon
    if settings.optimizer.name == "adamw":
        optimizer = {"optimizer state (AdamW: 2 fp32 moments)": 8 * local * to_gib}
    else:
        optimizer = {"optimizer state (DistMuon momentum; AdamW for emb./lm_head/norms)":
                     (4 * (local - local_adamw_only) + 8 * local_adamw_only) * to_gib}
    persistent = {
        "parameters (fp32 shards = master)": 4 * local * to_gib,
        "gradients (fp32 shards)": 4 * local * to_gib,
        **optimizer,
    }
    persistent_total = sum(persistent.values())

    # FSDP units, unsharded, in parameters
    emb_unit = shape.embedding / tp
    out_unit = (shape.output + shape.dim) / tp
    dense_unit = (shape.attention_per_layer + shape.dense_ffn_per_layer) / tp
    moe_unit = (shape.attention_per_layer + shape.shared_per_layer + shape.router_per_layer) / tp + shape.routed_per_layer / ep
    block_unit = max(dense_unit if shape.n_dense_layers else 0, moe_unit if shape.n_moe_layers else 0)
    first_unit = dense_unit if shape.n_dense_layers else moe_unit
    last_unit = moe_unit if shape.n_moe_layers else dense_unit
    if async_op:
        ag_pool = {"all-gather flat buffer in flight (compute-stream pool)": block_unit * cb * to_gib}
    else:
        pair = max(emb_unit + first_unit, last_unit + out_unit, 2 * block_unit)
        ag_pool = {"all-gather stream pool, reserved (no unshard_async_op)": pair * cb * to_gib}

    # Activations
    tokens = settings.local_batch_size * settings.seq_len
    tok = tokens / tp
    t_dense, t_moe = _layer_tensors(shape, False, ep), _layer_tensors(shape, True, ep)
    per_token = shape.n_dense_layers * _saved(t_dense, mode) + shape.n_moe_layers * _saved(t_moe, mode)
    saved_all = per_token * tok * cb * to_gib
    working = sum(t_moe.values() if shape.n_moe_layers else t_dense.values()) * tok * cb * to_gib
    host = 0.0
    notes: list[str] = []
    if mode == "offload":
        layer_saved = max(_saved(t_moe, "offload") if shape.n_moe_layers else 0, _saved(t_dense, "offload"))
        in_flight = (max(ac.offload_prefetch_layers, 1) + 1) * layer_saved * tok * cb * to_gib
        offloadable = max(saved_all - in_flight, 0.0)
        host = min(offloadable, ac.offload_budget_gb)
        gpu_saved = saved_all - host
        if offloadable > ac.offload_budget_gb:
            notes.append(f"{offloadable - ac.offload_budget_gb:.1f} GiB of activations exceed offload_budget_gb "
                         f"{ac.offload_budget_gb:g} and stay on the GPU")
    else:
        gpu_saved = saved_all
    saved_label = {"none": "saved activations (no AC)", "selective": "saved activations (selective AC)",
                   "full": "saved activations (full AC: block inputs)",
                   "offload": "saved activations on GPU (offload: in flight + over budget)"}[mode]

    chunk = tokens / LOSS_CHUNKS
    loss_phase = {
        **persistent,
        saved_label: gpu_saved,
        "lm_head unsharded (bf16) + its gradient": 2 * out_unit * cb * to_gib,
        "lm_head fp32 reduce-scatter input": 4 * out_unit * to_gib,
        f"logits + loss of one of {LOSS_CHUNKS} chunks": chunk * shape.vocab_size / tp * LOGIT_BYTES * to_gib,
        "hidden-state gradient (fp32)": tokens * shape.dim * 4 * to_gib,
        "next block prefetched for backward": block_unit * cb * to_gib,
        **ag_pool,
    }
    backward_phase = {
        **persistent,
        saved_label: gpu_saved,
        "block under backward: activations + gradients": working,
        "2 blocks unsharded (running + prefetched)": 2 * block_unit * cb * to_gib,
        "running block's gradients (unsharded)": block_unit * cb * to_gib,
        "2 fp32 reduce-scatter inputs in flight": 2 * 4 * block_unit * to_gib,
        **ag_pool,
    }
    if settings.optimizer.name == "adamw":
        step_extra = {"AdamW foreach temporaries (~1 fp32 shard copy)": 4 * local * to_gib}
    else:
        muon_block = (shape.attention_per_layer + shape.shared_per_layer + shape.router_per_layer
                      + shape.routed_per_layer) / (shard * tp)
        step_extra = {
            "DistMuon bucket redistribution (2 MoE blocks, fp32 in + out)": 2 * 8 * muon_block * to_gib,
            "DistMuon Newton-Schulz on the largest owned matrix": 12 * _largest_owned_matrix(shape) * to_gib,
            "AdamW temporaries (embedding, lm_head, norms)": 4 * local_adamw_only * to_gib,
        }
    step_phase = {**persistent, **step_extra}
    phases = {"loss (end of forward)": loss_phase, "backward through the blocks": backward_phase,
              "optimizer step": step_phase}
    peak_phase = max(phases, key=lambda k: sum(phases[k].values()))
    if mode == "offload" and ac.offload_budget_gb > hardware.host_usable_gib:
        notes.append(f"offload_budget_gb {ac.offload_budget_gb:g} exceeds the ~{hardware.host_usable_gib:.0f} GiB "
                     f"of host memory usable per GPU")
    return MemoryEstimate(
        ac_mode=mode, unshard_async_op=async_op, local_params=local, persistent=persistent,
        phases=phases, peak_phase=peak_phase, peak_gib=sum(phases[peak_phase].values()),
        hbm_gib=hardware.hbm_gib, runtime_reserve_gib=hardware.runtime_reserve_gib,
        offload_host_gib=host, host_usable_gib=hardware.host_usable_gib, saved_activations_gib=saved_all,
        notes=notes,
    )


def flops_per_token(shape: ModelShape, seq_len: int) -> tuple[float, float, float]:
    """(total, matmul part, attention part): torchtitan's 6 x N_active_matmul + 6 x L x H x (qk + v) x T, the
    same estimate the pretrain manifest records (europa_model/flops.py; the parameter count here is cached)."""
    from europa_model.flops import attention_flops_per_token

    matmul = 6.0 * shape.active_matmul
    attention = float(attention_flops_per_token(shape.flavor, seq_len))
    return matmul + attention, matmul, attention


def estimate_throughput(settings: PretrainConfig, shape: ModelShape, hardware: Hardware = GH200,
                        tokens_per_s_per_gpu: float = EUROPA_TOKENS_PER_S_PER_GPU) -> ThroughputEstimate:
    p = settings.parallelism
    gpus = p.world_size
    fpt, mm, attn = flops_per_token(shape, settings.seq_len)
    peak = settings.peak_flops_per_device or hardware.peak_bf16_flops
    dp = p.data_parallel_replicate * p.shard_degree
    global_batch = settings.global_batch_size or settings.local_batch_size * dp
    tokens_per_step = global_batch * settings.seq_len
    planned = settings.steps * tokens_per_step
    rate = tokens_per_s_per_gpu * gpus
    tokens_per_day = rate * 86_400
    days = planned / tokens_per_day
    return ThroughputEstimate(
        tokens_per_s_per_gpu=tokens_per_s_per_gpu, gpus=gpus,
        flops_per_token=fpt, flops_per_token_matmul=mm, flops_per_token_attention=attn,
        flops_per_token_anchor=6.0 * shape.active, peak_flops=peak,
        mfu=tokens_per_s_per_gpu * fpt / peak, mfu_anchor=tokens_per_s_per_gpu * 6.0 * shape.active / peak,
        tokens_per_step=tokens_per_step, step_time_s=tokens_per_step / rate,
        tokens_per_day=tokens_per_day, planned_tokens=planned, days=days, gpu_hours=days * 24 * gpus,
        total_flops=planned * fpt, tokens_to_threshold=EU_AI_ACT_THRESHOLD_FLOPS / fpt,
    )


def _variant(settings: PretrainConfig, mode: str, async_op: bool) -> PretrainConfig:
    return settings.model_copy(update={
        "activation_checkpoint": settings.activation_checkpoint.model_copy(update={"mode": mode}),
        "parallelism": settings.parallelism.model_copy(update={"unshard_async_op": async_op}),
    })


def plan(settings: PretrainConfig, vocab_size: int | None = None, *, hardware: Hardware = GH200,
         tokens_per_s_per_gpu: float = EUROPA_TOKENS_PER_S_PER_GPU) -> Plan:
    """The planner's report for `[pretrain]` settings (vocab_size: the tokenizer's; None = flavor default)."""
    shape = model_shape(settings.flavor, vocab_size)
    memory = estimate_memory(settings, shape, hardware)
    variants = {
        mode: {("async" if a else "no_async"): estimate_memory(_variant(settings, mode, a), shape, hardware).total_gib
               for a in (True, False)}
        for mode in AC_MODES
    }
    tp = estimate_throughput(settings, shape, hardware, tokens_per_s_per_gpu)
    traffic = None
    if settings.activation_checkpoint.mode == "offload":
        micro_tokens = settings.local_batch_size * settings.seq_len
        micro_s = micro_tokens / tokens_per_s_per_gpu
        transfer_s = 2 * memory.offload_host_gib * GIB / (hardware.c2c_gb_per_s * 1e9)
        traffic = {"gib_each_way": memory.offload_host_gib, "micro_step_s": micro_s, "transfer_s": transfer_s,
                   "share_of_micro_step": transfer_s / micro_s if micro_s else 0.0}
    warnings = list(memory.notes)
    if settings.precision != "bfloat16":
        warnings.append('[pretrain] precision = "float32": GPUs train in bfloat16 (set precision = "bfloat16")')
    return Plan(
        flavor=shape.flavor, vocab_size=shape.vocab_size, total_params=shape.total, active_params=shape.active,
        layout=_layout(settings), tokens_per_microstep=settings.local_batch_size * settings.seq_len,
        hardware=hardware, memory=memory, variants=variants, throughput=tp, offload_traffic=traffic,
        warnings=warnings,
    )


# ---------------------------------------------------------------------------------------------------------
# Text


def _si(x: float) -> str:
    for unit, scale in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(x) >= scale:
            return f"{x / scale:.2f}{unit}"
    return f"{x:.0f}"


def format_plan(pl: Plan) -> str:
    m, t, lay = pl.memory, pl.throughput, pl.layout
    lines = [
        f"EUROPA planner (ESTIMATES, not measurements; assumptions: europa_model/planner.py)",
        f"model     {pl.flavor}: {_si(pl.total_params)} parameters, {_si(pl.active_params)} active per token, "
        f"vocabulary {pl.vocab_size:,}",
        f"layout    {lay['nodes']} nodes x {lay['processes_per_node']} = {lay['gpus']} GPUs; "
        f"HSDP {lay['data_parallel_replicate']} replicas x FSDP {lay['data_parallel_shard']}, "
        f"TP {lay['tensor_parallel']}, EP {lay['expert_parallel']} (experts FSDP-sharded over {lay['efsdp']}); "
        f"{lay['gpus_per_replica']} GPUs per replica",
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
    if pl.offload_traffic:
        tr = pl.offload_traffic
        lines.append(f"  offload traffic: {tr['gib_each_way']:.1f} GiB each way per micro-step = {tr['transfer_s']:.2f} s "
                     f"over NVLink-C2C vs a {tr['micro_step_s']:.2f} s micro-step ({tr['share_of_micro_step']:.0%}, "
                     f"overlapped with compute)")
    lines.append("")
    lines.append("total GiB per GPU by activation checkpointing       unshard_async_op on   off")
    for mode, v in pl.variants.items():
        mark = " <- configured" if mode == m.ac_mode else ""
        fit = lambda g: "" if g <= m.hbm_gib else " (over)"  # noqa: E731
        lines.append(f"  {mode:<50} {v['async']:8.1f}{fit(v['async']):7} {v['no_async']:7.1f}{fit(v['no_async'])}{mark}")
    lines.append("  (without unshard_async_op: derived all-gather pool only; EUROPA measured ~14 GiB freed, the rest "
                 "is fragmentation not modelled)")
    lines.append("  (full AC recomputes every block's forward in backward: ~1/3 more FLOPs per token than below; "
                 "selective and offload recompute only cheap ops)")
    lines += [
        "",
        f"FLOPs per token {t.flops_per_token:.3e} = 6 x {_si(t.flops_per_token_matmul / 6)} active matmul params "
        f"({t.flops_per_token_matmul:.3e}) + attention ({t.flops_per_token_attention:.3e}); "
        f"6 x active = {t.flops_per_token_anchor:.3e}",
        f"utilisation at {t.tokens_per_s_per_gpu:,.0f} tokens/s per GPU: {t.mfu:.1%} of {t.peak_flops / 1e12:.0f} TFLOP/s "
        f"({t.tokens_per_s_per_gpu * t.flops_per_token / 1e12:.0f} TFLOP/s; {t.mfu_anchor:.1%} counting 6 x active only)",
        f"step {t.tokens_per_step / 1e6:.2f}M tokens = {t.step_time_s:.1f} s; whole job {t.tokens_per_day / 1e9:.1f}B tokens/day "
        f"on {t.gpus:,} GPUs",
        f"planned {t.planned_tokens / 1e12:.3f}T tokens: {t.days:.1f} days, {t.gpu_hours:,.0f} GPU-hours, "
        f"{t.total_flops:.2e} FLOPs = {t.total_flops / t.threshold_flops:.1%} of the EU AI Act's 1e25 "
        f"({'ABOVE' if t.above_threshold else 'below'}; 1e25 is reached at {t.tokens_to_threshold / 1e12:.1f}T tokens)",
    ]
    for w in pl.warnings:
        lines.append(f"warning: {w}")
    return "\n".join(lines)
