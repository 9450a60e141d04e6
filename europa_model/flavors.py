"""The EUROPA MoE as torchtitan 0.3.0 model configs: flavors `tiny`, `small` and `europa-1t`.

torchtitan's DeepSeek-V3 model code with Kimi-K2's text tower as the starting point: EUROPA is text-only, so the
plain DeepSeek-V3 model, its parallelize, pipelining and Hugging Face adapter serve unchanged. europa-1t keeps
Kimi-K2's skeleton and pays for a 262k vocabulary with narrower experts and two dense layers, to meet the announced
parameter counts; `small` is a one-GPU proxy with the same routing, `tiny` runs every module type on a CPU. Why
each choice, and how `count_parameters` counts: docs/model.md.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from europa_model import cpu_compat

cpu_compat.apply()  # before torchtitan is imported: no-op on a GPU node with triton

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
from torchtitan.components.optimizer import register_moe_load_balancing_hook  # noqa: E402
from torchtitan.distributed.pipeline_parallel import pipeline_llm  # noqa: E402
from torchtitan.models.common import ComplexRoPE, Embedding, Linear, RMSNorm  # noqa: E402
from torchtitan.models.common.param_init import depth_scaled_std  # noqa: E402
from torchtitan.models.deepseek_v3 import build_mla_moe_layers  # noqa: E402
from torchtitan.models.deepseek_v3.model import DeepSeekV3Model  # noqa: E402
from torchtitan.models.deepseek_v3.state_dict_adapter import DeepSeekV3StateDictAdapter  # noqa: E402
from torchtitan.models.utils import validate_converter_order  # noqa: E402
from torchtitan.protocols.model_spec import ModelSpec  # noqa: E402

from europa_model.parallelize import parallelize_europa  # noqa: E402

__all__ = ["FLAVORS", "EUROPA_VOCAB_SIZE", "LATENT_NORM_EPS", "ROUTING_KEYS", "Flavor", "build_model_args",
           "count_parameters", "model_registry", "routing_of"]

EUROPA_VOCAB_SIZE = 262_144
LATENT_NORM_EPS = 1e-6  # MLA q_norm / kv_norm: DeepSeek-V3's value, the one transformers hard-codes (see above)
ROUTING_KEYS = ("num_expert_groups", "num_limited_groups")  # job_info.json keys = build_model_args arguments


def routing_of(info: dict | None) -> dict[str, int | None]:
    """The routing arguments of `build_model_args` recorded for a checkpoint (job_info.json; absent = off)."""
    return {k: (info or {}).get(k) for k in ROUTING_KEYS}


@dataclass(frozen=True)
class Flavor:
    """The architecture numbers of one flavor (everything but the vocabulary, which the tokenizer sets)."""

    default_vocab_size: int
    dim: int
    n_layers: int
    n_dense_layers: int          # the first n layers have a dense SwiGLU FFN, the rest a MoE
    n_heads: int
    q_lora_rank: int             # MLA: query low-rank (0 = plain wq)
    kv_lora_rank: int            # MLA: the cached key/value latent
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int
    dense_hidden_dim: int
    moe_hidden_dim: int          # per routed expert; the shared expert(s) use n_shared x this
    num_experts: int
    num_shared_experts: int
    top_k: int
    route_scale: float
    max_seq_len: int
    rope_theta: float = 50_000.0


FLAVORS: dict[str, Flavor] = {
    "tiny": Flavor(
        default_vocab_size=4_000, dim=64, n_layers=3, n_dense_layers=1, n_heads=4,
        q_lora_rank=32, kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16,
        dense_hidden_dim=192, moe_hidden_dim=64, num_experts=8, num_shared_experts=1, top_k=2,
        route_scale=1.0, max_seq_len=2048,
    ),
    "small": Flavor(
        default_vocab_size=EUROPA_VOCAB_SIZE, dim=768, n_layers=12, n_dense_layers=2, n_heads=12,
        q_lora_rank=384, kv_lora_rank=256, qk_nope_head_dim=64, qk_rope_head_dim=32, v_head_dim=64,
        dense_hidden_dim=2048, moe_hidden_dim=192, num_experts=384, num_shared_experts=1, top_k=8,
        route_scale=2.827, max_seq_len=8192,
    ),
    "europa-1t": Flavor(
        default_vocab_size=EUROPA_VOCAB_SIZE, dim=7168, n_layers=61, n_dense_layers=2, n_heads=64,
        q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128,
        dense_hidden_dim=18432, moe_hidden_dim=1920, num_experts=384, num_shared_experts=1, top_k=8,
        route_scale=2.827, max_seq_len=8192,
    ),
}

# Initialization: DeepSeek-V3's / Kimi's, copied (they are private in torchtitan and are a training choice
# we may change, e.g. for Muon).
_LINEAR_INIT = {"weight": partial(nn.init.trunc_normal_, std=0.02), "bias": nn.init.zeros_}
_NORM_INIT = {"weight": nn.init.ones_}
_EMBEDDING_INIT = {"weight": partial(nn.init.normal_, std=1.0)}


def _output_linear_init(dim: int) -> dict[str, Callable]:
    s = dim**-0.5
    return {"weight": partial(nn.init.trunc_normal_, std=s, a=-3 * s, b=3 * s), "bias": nn.init.zeros_}


def _depth_init(layer_id: int) -> dict[str, Callable]:
    return {"weight": partial(nn.init.trunc_normal_, std=depth_scaled_std(0.02, layer_id)), "bias": nn.init.zeros_}


def _depth_experts_init(layer_id: int) -> dict[str, Callable]:
    return {
        "w1_EFD": partial(nn.init.trunc_normal_, std=0.02),
        "w2_EDF": partial(nn.init.trunc_normal_, std=depth_scaled_std(0.02, layer_id)),
        "w3_EFD": partial(nn.init.trunc_normal_, std=depth_scaled_std(0.02, layer_id)),
    }


def _flavor(flavor: str) -> Flavor:
    try:
        return FLAVORS[flavor]
    except KeyError:
        raise ValueError(f"unknown EUROPA flavor {flavor!r}; choose one of {sorted(FLAVORS)}") from None


def build_model_args(
    flavor: str,
    vocab_size: int | None = None,
    *,
    attn_backend: str = "flex",
    moe_comm_backend: str = "standard",
    non_blocking_capacity_factor: float | None = None,
    num_expert_groups: int | None = None,
    num_limited_groups: int | None = None,
) -> DeepSeekV3Model.Config:
    """A fresh `DeepSeekV3Model.Config` for `flavor` with the tokenizer's `vocab_size` (None: the flavor's
    default). `attn_backend`: torchtitan's "flex" (works on CPU for forward), "flex_flash" or "varlen"
    (CUDA). `num_expert_groups` / `num_limited_groups`: node-limited routing (None: off), torchtitan's router
    arguments. Configs are mutable (the Trainer resizes RoPE to the run's seq_len), hence a new one per call."""
    f = _flavor(flavor)
    vocab_size = f.default_vocab_size if vocab_size is None else int(vocab_size)
    if vocab_size < 1:
        raise ValueError(f"vocab_size must be positive, got {vocab_size}")
    layers = build_mla_moe_layers(
        n_layers=f.n_layers,
        n_dense_layers=f.n_dense_layers,
        dim=f.dim,
        n_heads=f.n_heads,
        q_lora_rank=f.q_lora_rank,
        kv_lora_rank=f.kv_lora_rank,
        qk_nope_head_dim=f.qk_nope_head_dim,
        qk_rope_head_dim=f.qk_rope_head_dim,
        v_head_dim=f.v_head_dim,
        mscale=1.0,  # only used with YaRN scaling
        dense_hidden_dim=f.dense_hidden_dim,
        moe_hidden_dim=f.moe_hidden_dim,
        num_experts=f.num_experts,
        num_shared_experts=f.num_shared_experts,
        router_top_k=f.top_k,
        router_score_func="sigmoid",
        router_num_expert_groups=num_expert_groups,
        router_num_limited_groups=num_limited_groups,
        router_route_scale=f.route_scale,
        router_route_norm=True,
        attn_backend=attn_backend,
        moe_comm_backend=moe_comm_backend,
        non_blocking_capacity_factor=non_blocking_capacity_factor,
        linear_init=_LINEAR_INIT,
        norm_init=_NORM_INIT,
        depth_init=_depth_init,
        depth_experts_init=_depth_experts_init,
        rope=ComplexRoPE.Config(dim=f.qk_rope_head_dim, max_seq_len=f.max_seq_len, theta=f.rope_theta),
    )
    for layer in layers:  # the builder takes no eps: set it on the latent norms' configs it made
        layer.attention.q_norm.eps = LATENT_NORM_EPS
        layer.attention.kv_norm.eps = LATENT_NORM_EPS
    return DeepSeekV3Model.Config(
        vocab_size=vocab_size,
        dim=f.dim,
        tok_embeddings=Embedding.Config(num_embeddings=vocab_size, embedding_dim=f.dim, param_init=_EMBEDDING_INIT),
        norm=RMSNorm.Config(normalized_shape=f.dim, param_init=_NORM_INIT),
        lm_head=Linear.Config(in_features=f.dim, out_features=vocab_size, param_init=_output_linear_init(f.dim)),
        layers=layers,
        mtp_layers=[],
    )


def model_registry(
    flavor: str,
    vocab_size: int | None = None,
    *,
    attn_backend: str = "flex",
    moe_comm_backend: str = "standard",
    non_blocking_capacity_factor: float | None = None,
    converters: list | None = None,
    unshard_async_op: bool = False,
    graph_trainer: bool = False,
    num_expert_groups: int | None = None,
    num_limited_groups: int | None = None,
) -> ModelSpec:
    """The torchtitan `ModelSpec` for a flavor, as `torchtitan.models.deepseek_v3.model_registry` builds it;
    a `config_registry` module (torchtitan's `--module`) puts it in `Trainer.Config(model_spec=...)`.

    `unshard_async_op`: see europa_model/parallelize.py. `graph_trainer`: the same model for torchtitan's
    compile-based `experiments/graph_trainer` (the only path with activation offload to host memory), with
    that trainer's parallelize function."""
    config = build_model_args(flavor, vocab_size, attn_backend=attn_backend, moe_comm_backend=moe_comm_backend,
                              non_blocking_capacity_factor=non_blocking_capacity_factor,
                              num_expert_groups=num_expert_groups, num_limited_groups=num_limited_groups)
    if converters is not None:
        validate_converter_order(converters)
        for c in converters:
            config = c.build().convert(config)
    parallelize_fn = partial(parallelize_europa, unshard_async_op=unshard_async_op)
    if graph_trainer:
        from dataclasses import fields

        from torchtitan.experiments.graph_trainer.deepseek_v3 import _parallelize_fn as graph_parallelize
        from torchtitan.experiments.graph_trainer.deepseek_v3.model import GraphTrainerDeepSeekV3Model

        config = GraphTrainerDeepSeekV3Model.Config(**{f.name: getattr(config, f.name) for f in fields(config)})
        parallelize_fn = graph_parallelize
    return ModelSpec(
        name="europa",
        flavor=flavor,
        model=config,
        parallelize_fn=parallelize_fn,
        pipelining_fn=pipeline_llm,
        post_optimizer_build_fn=register_moe_load_balancing_hook,
        state_dict_adapter=DeepSeekV3StateDictAdapter,
    )


def _group(name: str) -> str:
    if name.startswith("tok_embeddings."):
        return "embedding"
    if name.startswith("lm_head."):
        return "output"
    if ".moe.routed_experts." in name:
        return "routed_experts"
    if ".moe.shared_experts." in name:
        return "shared_experts"
    if ".moe.router." in name:
        return "router"
    if ".attention." in name:
        return "attention"
    if ".feed_forward." in name:
        return "dense_ffn"
    return "norms"  # attention_norm, ffn_norm, final norm


def count_parameters(flavor: str, vocab_size: int | None = None) -> dict:
    """Parameter counts of a flavor, from the model instantiated on the meta device (no memory used).

    Keys (ints unless noted): total, active (per token; embedding and output projection included),
    active_non_embedding (active without tok_embeddings and lm_head), active_matmul (active without
    tok_embeddings), one key per group (embedding, output, attention, dense_ffn, shared_experts, router,
    routed_experts, norms), routed_experts_active, and the flavor, vocab_size, num_experts, top_k."""
    config = build_model_args(flavor, vocab_size)
    with torch.device("meta"):
        model = config.build()
    groups = dict.fromkeys(
        ["embedding", "output", "attention", "dense_ffn", "shared_experts", "router", "routed_experts", "norms"], 0)
    for name, p in model.named_parameters():
        groups[_group(name)] += p.numel()
    total = sum(groups.values())
    assert total == sum(p.numel() for p in model.parameters())  # no parameter shared or missed

    # Routed experts a token does not use, layer by layer (each layer's own E and top_k).
    inactive = 0
    routed_active = 0
    for layer_cfg, layer in zip(config.layers, model.layers.values(), strict=True):
        if layer_cfg.moe is None:
            continue
        n_experts, top_k = layer_cfg.moe.num_experts, layer_cfg.moe.router.top_k
        routed = sum(p.numel() for p in layer.moe.routed_experts.parameters())
        assert routed % n_experts == 0
        routed_active += routed // n_experts * top_k
        inactive += routed - routed // n_experts * top_k
    active = total - inactive
    f = _flavor(flavor)
    return {
        "flavor": flavor,
        "vocab_size": config.vocab_size,
        "num_experts": f.num_experts,
        "top_k": f.top_k,
        "total": total,
        "active": active,
        "active_non_embedding": active - groups["embedding"] - groups["output"],
        "active_matmul": active - groups["embedding"],
        "routed_experts_active": routed_active,
        **groups,
    }


if __name__ == "__main__":  # python -m europa_model.flavors: print the counts of every flavor
    for name in FLAVORS:
        c = count_parameters(name)
        print(f"{name:10s} vocab {c['vocab_size']:>7,}  total {c['total']:>17,}  active {c['active']:>15,}  "
              f"active w/o embeddings {c['active_non_embedding']:>15,}")
