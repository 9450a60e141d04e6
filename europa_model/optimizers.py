"""DistMuon with FlexShard placements for the EUROPA MoE (EUROPA's first optimization on JUPITER).

Adapted from torchtitan's Kimi-K2.5 recipe (models/kimi_k2_7/config_registry.py, `_dist_muon_optimizer`),
whose parameter names our model shares. What differs and why:
- EUROPA has `n_dense_layers` dense first layers (Kimi: exactly one), so "dense or MoE" is read from each
  layer's config instead of `layer_id == 0`.
- We run DistMuon under the `partial_dtensor` SPMD backend (the one that also works on CPU meshes), where the
  FSDP mesh axis is named `fsdp`; the Kimi recipe, written for `spmd_types`, names it `dp_shard`.
Placement (FlexShard): Muon orthogonalizes whole matrices, so each matrix is gathered onto ranks in units that
keep its structure: attention projections per head (`BlockShard` by q/k/v head size), routed experts per
expert (`Shard(0)` over the expert axes), everything else owned whole by one rank (`Owned`), spread over the
ranks; updates are bucketed two MoE layers at a time to amortize collective launches. Embeddings, norms and
the output projection stay on AdamW (Muon is for hidden matrices; Moonlight, arXiv 2502.16982).
"""

from __future__ import annotations

from torch.distributed.tensor import Shard
from torchtitan.components.optimizer import OptimizersContainer
from torchtitan.components.optimizer.optimizer import ParamGroupConfig
from torchtitan.distributed.flex_shard import BlockShard, BucketConfig, ComputeLayout, Owned
from torchtitan.distributed.parallel_dims import MeshAxisName

EXPERT_PROJECTIONS = ("w1_EFD", "w2_EDF", "w3_EFD")
FSDP_AXIS = MeshAxisName.FSDP.value  # partial_dtensor's name for the FSDP axis


def dist_muon_optimizer(model_config, *, lr: float, weight_decay: float, betas: tuple[float, float], eps: float,
                        momentum: float, ns_steps: int) -> OptimizersContainer.Config:
    """The optimizer config: DistMuon (FlexShard placements) for the hidden matrices, AdamW for the rest."""
    layers = list(model_config.layers)
    attention = layers[0].attention
    owned = ComputeLayout(shardings_by_mesh_axis={FSDP_AXIS: Owned()})
    per_query_head = ComputeLayout(shardings_by_mesh_axis={
        FSDP_AXIS: BlockShard(dim=0, block_size=attention.qk_nope_head_dim + attention.qk_rope_head_dim)})
    per_kv_head = ComputeLayout(shardings_by_mesh_axis={
        FSDP_AXIS: BlockShard(dim=0, block_size=attention.qk_nope_head_dim + attention.v_head_dim)})
    per_expert = ComputeLayout(shardings_by_mesh_axis={
        FSDP_AXIS: Shard(0), MeshAxisName.EFSDP.value: Shard(0), MeshAxisName.EP.value: Shard(0)})
    attention_layouts = {**({"wq_a": owned, "wq_b": per_query_head} if attention.q_lora_rank else {"wq": per_query_head}),
                         "wkv_a": owned, "wkv_b": per_kv_head, "wo": owned}

    def layouts_for(layer_id: int, layer_cfg) -> dict[str, ComputeLayout]:
        prefix = f"layers.{layer_id}"
        out = {f"{prefix}.attention.{name}.weight": layout for name, layout in attention_layouts.items()}
        if layer_cfg.moe is None:
            out.update({f"{prefix}.feed_forward.{w}.weight": owned for w in ("w1", "w2", "w3")})
        else:
            out.update({f"{prefix}.moe.routed_experts.inner_experts.{w}": per_expert for w in EXPERT_PROJECTIONS})
            out[f"{prefix}.moe.router.gate.weight"] = owned
            out.update({f"{prefix}.moe.shared_experts.{w}.weight": owned for w in ("w1", "w2", "w3")})
        return out

    per_layer = [layouts_for(i, cfg) for i, cfg in enumerate(layers)]
    n_dense = sum(1 for cfg in layers if cfg.moe is None)
    # dense layers alone (their FFN is much larger), MoE layers two at a time
    groups = [(i,) for i in range(n_dense)] + [tuple(range(i, min(i + 2, len(layers)))) for i in range(n_dense, len(layers), 2)]
    buckets = tuple(BucketConfig(name="layers." + "-".join(map(str, g)),
                                 patterns=tuple(fqn for i in g for fqn in per_layer[i])) for g in groups)
    muon_pattern = (r"(?:" rf"attention\.(?:{'|'.join(attention_layouts)})\.weight|"
                    rf"routed_experts\.inner_experts\.(?:{'|'.join(EXPERT_PROJECTIONS)})|"
                    r"feed_forward\.w[123]\.weight|moe\.router\.gate\.weight|moe\.shared_experts\.w[123]\.weight)$")
    return OptimizersContainer.Config(
        implementation="foreach",
        param_groups=[
            ParamGroupConfig(pattern=muon_pattern, optimizer_name="DistMuon", optimizer_kwargs={
                "lr": lr, "weight_decay": weight_decay, "momentum": momentum, "ns_steps": ns_steps,
                "foreach": False, "adjust_lr_fn": "match_rms_adamw"}),
            ParamGroupConfig(pattern=r".*", optimizer_name="AdamW", optimizer_kwargs={
                "lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay}),
        ],
        optimizer_factory_kwargs_by_name={"DistMuon": {"bucket_configs": buckets,
                                                       "compute_sharding_by_fqn": {k: v for d in per_layer for k, v in d.items()}}},
    )
