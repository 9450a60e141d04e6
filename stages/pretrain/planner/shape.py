"""The model's shape as the planner sees it: a flavor's dimensions and parameter counts.

Parameters come from `europa_model.flavors.count_parameters` (the model on the meta device), cached per
process.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass


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
