"""What one GPU does in one micro-step, as the throughput model needs it: FLOPs, and bytes per link.

A `Workload` is model dimensions (`ModelDims`) plus the layout and the training regime. `from_settings` makes
one from `[pretrain]` (our flavors, torchtitan's behaviour); published.py makes them for other people's
measured runs. Everything is per GPU and per micro-step (`tokens` = one data-parallel rank's local batch x
seq_len, divided by TP x PP: the share of the model's work one GPU does).

FLOPs (executed, which is what takes time; MFU counts torchtitan's convention instead, projection.py):
- matmuls: 2 x active matmul parameters forward, 4 x backward (lm_head in, embedding out);
- attention: 2 x layers x heads x (qk + v head dims) x seq_len forward per token, halved for the causal mask
  (flex/flash attention skip masked blocks), x3 with backward;
- recomputation by the activation-checkpointing policy, from torchtitan 0.3.0's policies: `selective` (op-level
  SAC: saves every second mm/linear and attention; grouped GEMMs are not in its save list) recomputes the
  routed experts' forward and half the other matmuls' forward; `offload` (graph_trainer's sac_and_offload:
  the default save list, every mm saved) recomputes the routed experts' forward; `full` recomputes the whole
  forward, attention and the all-to-alls included; `none` nothing.
Expert-parallel all-to-all: per MoE layer a dispatch and a combine forward and their two gradients backward
(+2 under full AC), each moving the token's copies (routing.py) of a dim-vector in the compute dtype.
FSDP2 (torchtitan's per micro-step behaviour, reshard after forward): every micro-step all-gathers each unit
twice (forward, backward; bf16) and reduce-scatters its gradients (fp32): 8 bytes per parameter over the
shard group; non-expert parameters over data_parallel_shard, routed experts (E/EP per EP rank) over efsdp =
shard x TP / EP; with HSDP each micro-step also all-reduces the fp32 gradient shards across replicas.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from stages.pretrain.config import PretrainConfig
    from stages.pretrain.planner.memory import MemoryEstimate
    from stages.pretrain.planner.shape import ModelShape

CAUSAL = 0.5  # share of the attention square a causal kernel computes


@dataclass(frozen=True)
class ModelDims:
    name: str
    dim: int
    n_layers: int
    n_moe_layers: int
    n_heads: int
    qk_head_dim: int
    v_head_dim: int
    num_experts: int
    top_k: int
    matmul_params: int            # active matmul parameters per token (the N of 6N): lm_head in, embedding out
    routed_active_params: int     # the top-k routed experts' share of matmul_params
    dense_params: int             # every parameter outside the routed experts
    routed_params: int            # all routed experts
    extra_output_passes: int = 0  # multi-token-prediction heads: extra lm_head matmuls (not in matmul_params)
    vocab_size: int = 0
    muon_matrices: tuple[tuple[int, int, int], ...] = ()   # (rows, cols, how many) DistMuon orthogonalizes

    @property
    def total_params(self) -> int:
        return self.dense_params + self.routed_params

    def attention_fwd_flops(self, seq_len: int) -> float:
        return 2.0 * self.n_layers * self.n_heads * (self.qk_head_dim + self.v_head_dim) * seq_len * CAUSAL

    @property
    def matmul_fwd_flops(self) -> float:
        return 2.0 * (self.matmul_params + self.extra_output_passes * self.dim * self.vocab_size)


@dataclass(frozen=True)
class Workload:
    model: ModelDims
    seq_len: int
    local_batch_size: int             # sequences per data-parallel rank per micro-step
    microsteps: int                   # micro-steps per optimizer step (gradient accumulation)
    gpus: int
    gpus_per_node: int
    data_parallel_replicate: int
    data_parallel_shard: int
    tensor_parallel: int = 1
    pipeline_parallel: int = 1
    expert_parallel: int = 1
    ac_mode: str = "selective"        # none | selective | full | offload | minimal (recompute_params only)
    recompute_params: int = 0         # minimal: matmul parameters whose forward is recomputed
    matmul_precision: str = "bf16"    # bf16 | fp8 (matmuls at the fp8 peak; attention stays bf16)
    dispatcher: str = "standard"      # standard | deepep (routing.py)
    a2a_bytes: float = 2.0            # bytes per element an all-to-all moves, averaged over its 4 calls
    compute_bytes: int = 2            # bytes per element of the compute dtype (FSDP all-gathers in it)
    num_expert_groups: int | None = None
    num_limited_groups: int | None = None
    overlap: str = "torchtitan"       # torchtitan: all-to-all blocks compute | full: all communication hidden
    comm_sm_share: float = 0.0        # share of the SMs communication kernels hold while compute runs (full overlap)
    gradient_sync: str = "microstep"  # microstep: FSDP2 (every micro-step) | step: ZeRO-1 style (negligible)
    optimizer: str = "adamw"          # adamw | dist_muon
    offload_gib: float = 0.0          # activations moved to the host per micro-step, each way
    pipeline_bubble: float = 0.0      # idle share added by a pipeline schedule
    routing_imbalance: float | None = None  # busiest EP rank's tokens / mean; None: the model's assumed band
    notes: tuple[str, ...] = field(default=())

    @property
    def tokens(self) -> float:
        """Tokens of one micro-step whose whole-model work one GPU does (TP and PP split a rank's tokens)."""
        return self.local_batch_size * self.seq_len / (self.tensor_parallel * self.pipeline_parallel)

    @property
    def efsdp(self) -> int:
        return max(1, self.data_parallel_shard * self.tensor_parallel // self.expert_parallel)

    @property
    def nodes(self) -> int:
        return max(1, self.gpus // self.gpus_per_node)

    def with_(self, **changes) -> Workload:
        return replace(self, **changes)


def dims_from_shape(shape: ModelShape) -> ModelDims:
    """Our flavors, from the planner's shape (parameter counts on the meta device)."""
    routed_total = shape.routed_per_layer * shape.n_moe_layers
    routed_active = routed_total * shape.top_k // max(shape.num_experts, 1)
    d, h = shape.dim, shape.n_heads
    qk = shape.qk_nope_head_dim + shape.qk_rope_head_dim
    per_layer = [(shape.q_lora_rank, d, 1), (h * qk, shape.q_lora_rank, 1)] if shape.q_lora_rank else [(h * qk, d, 1)]
    per_layer += [(shape.kv_lora_rank + shape.qk_rope_head_dim, d, 1),
                  (h * (shape.qk_nope_head_dim + shape.v_head_dim), shape.kv_lora_rank, 1), (d, h * shape.v_head_dim, 1)]
    mats = [(r, c, n * shape.n_layers) for r, c, n in per_layer]
    if shape.n_dense_layers:
        mats += [(shape.dense_hidden_dim, d, 2 * shape.n_dense_layers), (d, shape.dense_hidden_dim, shape.n_dense_layers)]
    if shape.n_moe_layers:
        fs = shape.moe_hidden_dim * shape.num_shared_experts
        e = shape.num_experts * shape.n_moe_layers
        mats += [(shape.num_experts, d, shape.n_moe_layers), (fs, d, 2 * shape.n_moe_layers), (d, fs, shape.n_moe_layers),
                 (shape.moe_hidden_dim, d, 2 * e), (d, shape.moe_hidden_dim, e)]
    return ModelDims(
        name=shape.flavor, dim=d, n_layers=shape.n_layers, n_moe_layers=shape.n_moe_layers, n_heads=h,
        qk_head_dim=qk, v_head_dim=shape.v_head_dim, num_experts=shape.num_experts, top_k=shape.top_k,
        matmul_params=shape.active_matmul, routed_active_params=routed_active,
        dense_params=shape.total - routed_total, routed_params=routed_total, vocab_size=shape.vocab_size,
        muon_matrices=tuple(mats),
    )


def from_settings(settings: PretrainConfig, shape: ModelShape, memory: MemoryEstimate | None = None,
                  gpus_per_node: int | None = None) -> Workload:
    """The workload `[pretrain]` asks for, as torchtitan 0.3.0 runs it (module docstring)."""
    p, moe = settings.parallelism, settings.moe
    dp = p.data_parallel_replicate * p.shard_degree
    micro = settings.global_batch // (settings.local_batch_size * dp) if settings.global_batch_size else 1
    cb = 2 if settings.precision == "bfloat16" else 4
    offload = memory.offload_host_gib if memory is not None and settings.activation_checkpoint.mode == "offload" else 0.0
    return Workload(
        model=dims_from_shape(shape), seq_len=settings.seq_len, local_batch_size=settings.local_batch_size,
        microsteps=max(1, micro), gpus=p.world_size, gpus_per_node=gpus_per_node or p.processes_per_node,
        data_parallel_replicate=p.data_parallel_replicate, data_parallel_shard=p.shard_degree,
        tensor_parallel=p.tensor_parallel, expert_parallel=p.expert_parallel,
        ac_mode=settings.activation_checkpoint.mode,
        matmul_precision="fp8" if settings.float8 else "bf16", a2a_bytes=cb, compute_bytes=cb,
        dispatcher=moe.comm_backend, num_expert_groups=moe.num_expert_groups, num_limited_groups=moe.num_limited_groups,
        optimizer=settings.optimizer.name, offload_gib=offload,
    )

