"""The EUROPA MoE as torchtitan 0.3.0 model configs: flavors `tiny`, `small` and `europa-1t`.

Why these choices
-----------------
Family. torchtitan's DeepSeek-V3 model code (`DeepSeekV3Model`, its MLA `Attention`, and the public layer
builder `torchtitan.models.deepseek_v3.build_mla_moe_layers`), with the Kimi-K2 text tower as the starting
point. Kimi-K2.5 (torchtitan's `kimi_k2_7`) is the closest published design to EUROPA (~1T total, ~32B
active, 384 routed experts, top-8, 1 shared expert, first layer dense, MLA) but it is the same
`build_mla_moe_layers` text tower wrapped in a multimodal model (`KimiK25Model`, vision encoder, VLM
pipelining); EUROPA is text-only, so we use the plain DeepSeek-V3 model, its parallelize function
(FSDP/EP/TP/CP), its pipelining and its HF state-dict adapter unchanged. The parameter names are those of
Kimi's text tower, so Kimi's DistMuon recipe (kimi_k2_7/config_registry.py) can be adapted to them later.

europa-1t (what it is optimized for: frontier quality per training FLOP at ~33B active, on GH200 nodes):
- Kimi-K2's skeleton unchanged: dim 7168, 61 layers, MLA with 64 heads (half of DeepSeek-V3's 128: Kimi
  found it cheaper at inference for a small loss), q-LoRA 1536, KV-LoRA 512 (the cached latent), head dims
  128 (nope) + 64 (rope) / 128 (v); 384 routed experts, top-8 (sparsity 48), 1 shared expert; sigmoid
  routing with normalized top-k weights (route_scale 2.827); torchtitan's aux-loss-free balancing bias.
  Group-limited (node-limited) routing is off in the flavor and a run's choice (`[pretrain.moe]`
  num_expert_groups / num_limited_groups, passed to `build_model_args`): the right groups depend on how
  many nodes an expert-parallel group spans, and they are recorded with the checkpoints (job_info.json). 384 = 2^7 * 3 splits evenly over EP degrees 8 ... 384 (a 384-GPU replica
  can hold 1 expert per GPU per layer, or 4 per GPU at EP 96).
- Vocabulary 262,144 (2^18), the Gemma 3 / Salamandra size, instead of Kimi's 163,840 or EuroLLM's 128k.
  The tokenizer must serve 24 EU languages in 5 scripts; on FLORES the OpenEuroLLM tokenizer needs 1.79
  tokens per word at 262k against 2.00 at 128k, i.e. ~10% fewer tokens for the same text and ~11% more
  text per context window (assuming our tokenizer stage gains what OpenEuroLLM's did: measure it).
  The price per token is the output projection: 131,072 more rows cost
  2 x 131072 x 7168 FLOPs, ~3% of the per-token matmul work; the lookup table costs no FLOPs. So the
  bigger vocabulary spends ~7% less compute per byte of text, and the 3.76B embedding parameters are 0.4%
  of the total. Embeddings stay untied (as in DeepSeek-V3/Kimi; torchtitan refuses tying with PP).
- To pay for the bigger vocabulary inside the 32.8B active budget, the routed experts are narrower
  (hidden 1920 instead of 2048, still a multiple of 128 for the grouped GEMMs) and the first 2 layers are
  dense (Kimi: 1, DeepSeek-V3: 3: early layers are where routing helps least and balances worst). Of the
  depths (56-65), dense-layer counts (1-3) and expert widths (steps of 64) around Kimi's, at 128k or 256k
  vocabulary, this is the closest to both announced counts (951.9B total, 32.8B active): 948.7B (-0.33%)
  and 32.81B (+0.02%), see `count_parameters`; no 128k combination came within 0.6%.
- RoPE theta 50,000 without YaRN, max_seq_len 8192: pretraining runs at 4k-8k tokens; YaRN (as in Kimi's
  released checkpoints) belongs to the later long-context extension, not to pretraining.
- No multi-token-prediction layers (DeepSeek-V3 has 1; each would add a full MoE layer, ~16B, to the
  totals, which the announced figures do not include).

small: a one-GPU proxy (~2B total, fits with AdamW state on one 96 GB GH200) with the SAME routing regime
(384 experts, top-8, 1 shared, sigmoid + normalized weights, 2 dense first layers) and the same MLA code
path (q-LoRA on), shrunk in width and depth (dim 768, 12 layers). Use it to debug the pipeline and to
study routing/balancing and optimizer settings before the big run, not for scaling-law fits. At the
262k vocabulary its per-token compute is mostly the embedding and output (0.40B of 0.48B active).

tiny: ~0.8M parameters at the demo tokenizer's 4,000 pieces (dim 64, 3 layers: 1 dense + 2 MoE, 8
experts top-2, 1 shared, MLA with q-LoRA): exercises every module type of europa-1t on a CPU in seconds.

Vocabulary. Every flavor takes the run's tokenizer size (`vocab_size`); defaults: tiny 4,000 (the demo
tokenizer), small and europa-1t 262,144. For tensor parallelism the vocabulary must divide by the TP
degree (pad the tokenizer to a multiple of 128 for GPU efficiency).

Normalization. RMSNorm eps 1e-5 (torchtitan's default) for the layer norms and the final norm, and 1e-6 for
MLA's two latent norms (`q_norm`, `kv_norm`), DeepSeek-V3's own value: Hugging Face's `DeepseekV3Attention`
builds those two with eps 1e-6 whatever config.json says, so only with this value does the exported model
compute what we trained (logits within 1e-5 instead of ~5e-4 apart; europa_model/hf/config.py).

Counting (`count_parameters`): the model is instantiated on the meta device and numel is summed.
total counts every parameter once, input embedding and output projection included; buffers (RoPE cache,
expert bias, token counters) are not parameters. active (per token) = total minus, in each MoE layer, the
routed experts a token does not use: routed_params x (1 - top_k / n_experts); the shared expert, the
router, attention, norms, dense layers, the embedding row lookup and the output projection all count as
active. We also report active_non_embedding (active minus tok_embeddings and lm_head) and
active_matmul (active minus tok_embeddings: the N of the usual 6 x N FLOPs-per-token estimate).
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
