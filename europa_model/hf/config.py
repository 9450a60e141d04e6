"""A EUROPA flavor as a transformers `DeepseekV3Config`: every number is read off the torchtitan model config
that `europa_model.flavors.build_model_args` builds, so the exported config.json cannot drift from what was
trained (a hand-written table would, silently, the day a flavor changes).

What transformers 5.24's `DeepseekV3ForCausalLM` can express, and what we refuse rather than approximate:
- routing: sigmoid scores only (HF hard-codes sigmoid); our "no group-limited routing" is HF's n_group=1,
  topk_group=1 (one group holding every expert, always selected); a router bias has no HF slot.
- layers: HF builds `first_k_dense_replace` dense layers, then MoE layers only; any other pattern is refused.
- RoPE: torchtitan's `ComplexRoPE` rotates adjacent pairs, which is HF's `rope_interleave=True`; YaRN/llama
  scaling would need their HF parameters mapped, so they are refused until someone does (and tests) that.
- RMSNorm eps: HF reads `rms_norm_eps` for the layer norms and the final norm (torchtitan's default is 1e-5,
  HF's 1e-6: copying the default would be the known pitfall). HF builds the MLA latent norms
  (`q_a_layernorm`, `kv_a_layernorm`) with eps 1e-6 regardless of the config, so our flavors build theirs
  with 1e-6 too (europa_model/flavors.py); a model trained with another value is exported, and the
  difference (~5e-4 in logits at 1e-5) is listed in europa_export.json and the model card.
- biases: none in our layers; one would be a state-dict key without an HF name, refused by names.py.
- multi-token prediction: HF's `num_nextn_predict_layers` defaults to 1; ours have none, so 0 is written.
"""

from __future__ import annotations

from typing import Any

__all__ = ["HF_LATENT_NORM_EPS", "HFConfigError", "generation_config", "hf_config", "known_differences"]

HF_LATENT_NORM_EPS = 1e-6  # transformers 5.24 DeepseekV3Attention: DeepseekV3RMSNorm(q_lora_rank / kv_lora_rank)


class HFConfigError(ValueError):
    """A model config that the transformers DeepseekV3 architecture cannot represent; the message says which part."""


def _only(values: set, what: str) -> Any:
    if len(values) != 1:
        raise HFConfigError(f"{what} differs between layers ({sorted(values, key=str)}); "
                            "DeepseekV3Config has one value")
    return next(iter(values))


def hf_config(model_config, *, dtype: str, bos_token_id: int | None = None, eos_token_id: int | None = None,
              pad_token_id: int | None = None):
    """The `DeepseekV3Config` of a torchtitan `DeepSeekV3Model.Config` (europa_model.flavors.build_model_args)."""
    from torchtitan.models.common.rope import ComplexRoPE
    from transformers import DeepseekV3Config

    layers = list(model_config.layers)
    if getattr(model_config, "mtp_layers", None):
        raise HFConfigError(f"{len(model_config.mtp_layers)} multi-token-prediction layers: the export does not map "
                            "them yet (europa_model/hf/config.py)")
    moe_flags = [layer.moe is not None for layer in layers]
    n_dense = moe_flags.index(True) if True in moe_flags else len(layers)
    if any(not f for f in moe_flags[n_dense:]):
        raise HFConfigError(f"dense/MoE layer pattern {['moe' if f else 'dense' for f in moe_flags]}: HF DeepseekV3 "
                            "needs all dense layers first (first_k_dense_replace)")
    attn = [layer.attention for layer in layers]
    moes = [layer.moe for layer in layers if layer.moe is not None]

    rope = _only({type(a.rope) for a in attn}, "RoPE type")
    if not issubclass(rope, ComplexRoPE.Config):
        raise HFConfigError(f"RoPE {rope.__qualname__}: the export maps torchtitan's ComplexRoPE "
                            "(HF rope_interleave=True) only")
    scaling = _only({a.rope.scaling for a in attn}, "RoPE scaling")
    if scaling != "none":
        raise HFConfigError(f"RoPE scaling {scaling!r}: map its parameters to HF rope_parameters in "
                            "europa_model/hf/config.py (and test them) before exporting")

    norm_eps = {model_config.norm.eps} | {n.eps for layer in layers for n in (layer.attention_norm, layer.ffn_norm)}
    eps = _only(norm_eps, "RMSNorm eps")
    theta = _only({a.rope.theta for a in attn}, "RoPE theta")
    q_lora = _only({a.q_lora_rank for a in attn}, "q_lora_rank")
    n_heads = _only({a.n_heads for a in attn}, "n_heads")
    kwargs: dict[str, Any] = dict(
        vocab_size=model_config.vocab_size,
        hidden_size=model_config.dim,
        num_hidden_layers=len(layers),
        num_attention_heads=n_heads,
        num_key_value_heads=n_heads,  # MLA: every head gets its own expanded key/value
        q_lora_rank=q_lora or None,  # HF: None = a plain q_proj
        kv_lora_rank=_only({a.kv_lora_rank for a in attn}, "kv_lora_rank"),
        qk_nope_head_dim=_only({a.qk_nope_head_dim for a in attn}, "qk_nope_head_dim"),
        qk_rope_head_dim=_only({a.qk_rope_head_dim for a in attn}, "qk_rope_head_dim"),
        v_head_dim=_only({a.v_head_dim for a in attn}, "v_head_dim"),
        max_position_embeddings=_only({a.rope.max_seq_len for a in attn}, "RoPE max_seq_len"),
        rope_parameters={"rope_type": "default", "rope_theta": float(theta)},
        rope_interleave=True,
        rms_norm_eps=float(eps),
        hidden_act="silu",  # torchtitan FeedForward and GroupedExperts: w2(silu(w1 x) * w3 x)
        attention_bias=False,  # a bias would be a state-dict key without HF name: names.py refuses it
        tie_word_embeddings=False,
        first_k_dense_replace=n_dense,
        num_nextn_predict_layers=0,
        bos_token_id=bos_token_id,
        eos_token_id=eos_token_id,
        pad_token_id=pad_token_id,
        dtype=dtype,
        architectures=["DeepseekV3ForCausalLM"],
    )
    if n_dense:
        dense_hidden = {layer.feed_forward.w1.out_features for layer in layers[:n_dense]}
        kwargs["intermediate_size"] = _only(dense_hidden, "dense hidden dim")
    if moes:
        routers = [m.router for m in moes]
        score = _only({r.score_func for r in routers}, "router score function")
        if score != "sigmoid":
            raise HFConfigError(f"router score function {score!r}: HF DeepseekV3 routes with sigmoid scores only")
        n_experts = _only({m.num_experts for m in moes}, "number of routed experts")
        hidden = _only({m.routed_experts.inner_experts.hidden_dim for m in moes}, "routed expert hidden dim")
        shared = _only({m.shared_experts.w1.out_features if m.shared_experts else 0 for m in moes},
                       "shared expert hidden dim")
        if shared % hidden:
            raise HFConfigError(f"shared expert hidden dim {shared} is not a multiple of the routed experts' {hidden}: "
                                "HF sizes shared experts as n_shared_experts x moe_intermediate_size")
        groups = _only({r.num_expert_groups for r in routers}, "router expert groups")
        limited = _only({r.num_limited_groups for r in routers}, "router limited groups")
        kwargs.update(
            n_routed_experts=n_experts,
            moe_intermediate_size=hidden,
            n_shared_experts=shared // hidden,
            num_experts_per_tok=_only({r.top_k for r in routers}, "router top_k"),
            norm_topk_prob=bool(_only({r.route_norm for r in routers}, "router route_norm")),
            routed_scaling_factor=float(_only({r.route_scale for r in routers}, "router route_scale")),
            n_group=groups or 1,  # None: one group of all experts, which HF's group-limited routing always keeps
            topk_group=limited or 1,
        )
        kwargs.setdefault("intermediate_size", hidden)
    else:
        kwargs.update(first_k_dense_replace=len(layers))
    return DeepseekV3Config(**kwargs)


def known_differences(model_config) -> list[str]:
    """How the exported model computes differently from ours, for the model card (europa_export.json)."""
    out = []
    eps = {a.kv_norm.eps for a in (layer.attention for layer in model_config.layers)}
    eps |= {a.q_norm.eps for a in (layer.attention for layer in model_config.layers) if a.q_lora_rank}
    if eps != {HF_LATENT_NORM_EPS}:
        out.append(f"MLA latent RMSNorm eps: ours {sorted(eps)}, transformers {HF_LATENT_NORM_EPS} (fixed in its code); "
                   "logits differ by ~1e-4 to 5e-4 (measured); europa_model/flavors.py trains with 1e-6 since code_version 2")
    if any(layer.moe is not None for layer in model_config.layers):
        out.append("routed experts: torchtitan computes them in bf16 whatever the weights' dtype; transformers in "
                   "the dtype the model is loaded in")
    return out


def generation_config(config):
    """Greedy decoding with the tokenizer's BOS/EOS/PAD: what `generate()` uses when the caller says nothing."""
    from transformers import GenerationConfig

    pad = config.pad_token_id if config.pad_token_id is not None else config.eos_token_id
    return GenerationConfig(bos_token_id=config.bos_token_id, eos_token_id=config.eos_token_id, pad_token_id=pad,
                            do_sample=False)
