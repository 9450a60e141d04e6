"""Per-GPU memory of a training layout: persistent state, FSDP buffers, activations, loss, optimizer step.

An ESTIMATE from the model's shape and the configured layout (report.py says what it is good for): the peak of
three phases as torchtitan 0.3.0 shards, gathers and checkpoints, plus a runtime reserve, against the GPU's HBM
with a margin for what is not modelled (allocator fragmentation). The model term by term, and why: docs/model.md.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from stages.cluster.machine import GIB, JUPITER_BOOSTER, Hardware
from stages.pretrain.planner.shape import ModelShape

if TYPE_CHECKING:
    from stages.pretrain.config import PretrainConfig

LOSS_CHUNKS = 8                         # ChunkedLossWrapper default, as stages/pretrain/trainer_config.py uses it
FIT_MARGIN = 0.10                       # share of HBM left free for "fits"
LOGIT_BYTES = 14                        # per logit of one loss chunk (see module docstring)
AC_MODES = ("none", "selective", "full", "offload")


@dataclass
class SavedTensors:
    """Elements per token (in bf16 units: an fp32 tensor counts twice) that one block's forward leaves for
    backward, by what activation checkpointing does with them."""

    input: int = 0  # the block input: what full AC keeps
    linear: int = 0  # outputs of linear layers (selective AC keeps half of them)
    attention: int = 0  # attention output and log-sum-exp
    small: int = 0  # top-k scores and indices
    comm: int = 0  # all-to-all outputs
    grouped: int = 0  # grouped-GEMM outputs of the routed experts
    other: int = 0  # norms, activations, sums

    @property
    def total(self) -> int:
        return self.input + self.linear + self.attention + self.small + self.comm + self.grouped + self.other


def _layer_tensors(s: ModelShape, moe: bool, ep: int) -> SavedTensors:
    """What one block's forward leaves for backward, per token."""
    h, d = s.n_heads, s.dim
    qk = s.qk_nope_head_dim + s.qk_rope_head_dim
    t = SavedTensors()
    t.input += d                                             # block input (attention_norm saves it)
    # MLA attention
    t.other += d                                             # attention_norm output
    t.linear += s.q_lora_rank + h * qk                       # wq_a, wq_b outputs
    t.other += s.q_lora_rank                                 # q_norm output
    t.linear += s.kv_lora_rank + s.qk_rope_head_dim          # wkv_a output
    t.other += s.kv_lora_rank                                # kv_norm output
    t.linear += h * (s.qk_nope_head_dim + s.v_head_dim)      # wkv_b output
    t.other += 2 * h * qk                                    # q and k after RoPE and concatenation
    t.attention += h * s.v_head_dim + 2 * h                  # attention output + fp32 log-sum-exp
    t.linear += d                                            # wo output
    t.other += 2 * d                                         # residual sum, ffn_norm output
    if not moe:
        f = s.dense_hidden_dim
        t.linear += 2 * f + d                                # w1, w3, w2 outputs
        t.other += f                                         # silu(w1)
        return t
    k, fe, fs = s.top_k, s.moe_hidden_dim, s.moe_hidden_dim * s.num_shared_experts
    t.linear += s.num_experts                                # router logits
    t.other += 2 * s.num_experts                             # fp32 sigmoid scores
    t.small += 5 * k                                         # top-k scores (fp32) and indices (int64)
    if ep > 1:
        t.comm += 2 * k * d                                  # dispatch and combine all-to-all outputs
    else:
        t.other += k * d                                     # tokens gathered per expert
    t.grouped += 2 * k * fe + k * d                          # routed w1, w3, w2 (grouped GEMMs)
    t.other += 2 * k * fe                                    # silu(w1), silu(w1) * w3
    t.linear += 2 * fs + d                                   # shared expert w1, w3, w2
    t.other += 2 * fs + d                                    # shared silu, product; routed + shared sum
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


def _saved(t: SavedTensors, mode: str) -> float:
    if mode == "none":
        return float(t.total)
    if mode == "full":
        return float(t.input)
    base = t.input + t.attention + t.small + t.comm
    return base + (t.linear / 2 if mode == "selective" else t.linear)


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


def estimate_memory(settings: PretrainConfig, shape: ModelShape, hardware: Hardware = JUPITER_BOOSTER) -> MemoryEstimate:
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
    working = (t_moe.total if shape.n_moe_layers else t_dense.total) * tok * cb * to_gib
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
