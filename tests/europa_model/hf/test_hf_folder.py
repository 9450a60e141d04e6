"""The Hugging Face export of a tiny EUROPA checkpoint, loaded back by transformers offline: same logits as
our torchtitan model, same parameters, every tensor indexed, checksums that verify, a working tokenizer.

One module-scoped export per dtype (~10 s together on 2 cores, OMP_NUM_THREADS=1).
"""

from __future__ import annotations

import hashlib
import html
import json
import os
import re
import types
from pathlib import Path

os.environ["OMP_NUM_THREADS"] = "1"  # before torch: 2 shared cores
os.environ["HF_HUB_OFFLINE"] = "1"   # everything below is local; a Hub lookup would be a bug

import pytest  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from tests.europa_model.hf.hf_checkpoints import build_unit_scale_model, save_checkpoint  # noqa: E402

VOCAB = 1000
SEQ = 40


def _fp32_experts(experts, x_RD, num_tokens_per_expert_E):
    """torchtitan's GroupedExperts math (w2(silu(w1 x) * w3 x), tokens grouped by expert) in fp32:
    torchtitan casts routed experts to bf16 whatever the parameter dtype, which rounds at ~4e-3 and would
    hide a layout error under the 1e-4 tolerance."""
    out, start = [], 0
    for e, n in enumerate(num_tokens_per_expert_E.tolist()):
        x = x_RD[start:start + n]
        start += n
        out.append(F.linear(F.silu(F.linear(x, experts.w1_EFD[e])) * F.linear(x, experts.w3_EFD[e]), experts.w2_EDF[e]))
    return torch.cat(out)


def _logits_ours(model, ids):
    pos = torch.arange(ids.shape[1]).expand_as(ids)  # one document per row, plain causal
    with torch.no_grad():
        return model(ids, positions=pos, attention_masks=model.get_attention_masks(positions=pos)).float()


def _logits_hf(model, ids):
    with torch.no_grad():
        return model(input_ids=ids).logits.float()


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory, udhr_dir) -> Path:
    """A SentencePiece BPE tokenizer trained as the tokenizer stage trains it, exported to HF files."""
    import sentencepiece as spm

    from stages.tokenizer.hf_export import export_hf

    tmp = tmp_path_factory.mktemp("tok")
    lines = []
    for stem in ("deu_1996", "eng", "fra", "ell_monotonic", "pol"):
        raw = (udhr_dir / f"{stem}.html").read_text(encoding="utf-8")
        paragraphs = re.findall(r"<p>(.*?)</p>", raw, re.S)
        lines += [" ".join(html.unescape(re.sub(r"<[^>]+>", "", p)).split()) for p in paragraphs]
    (tmp / "corpus.txt").write_text("\n".join(x for x in lines if x) + "\n", encoding="utf-8")
    spm.SentencePieceTrainer.train(
        input=str(tmp / "corpus.txt"), model_prefix=str(tmp / "tokenizer"), model_type="bpe", vocab_size=VOCAB,
        byte_fallback=True, normalization_rule_name="identity", add_dummy_prefix=True, remove_extra_whitespaces=False,
        split_digits=True, unk_id=0, bos_id=1, eos_id=2, pad_id=3, character_coverage=0.9999, num_threads=1,
        minloglevel=2)
    out = tmp / "tokenizer_hf"
    export_hf(tmp / "tokenizer.model", out)
    (out / "tokenizer.model").write_bytes((tmp / "tokenizer.model").read_bytes())
    return out


@pytest.fixture(scope="module")
def ours_and_checkpoint(tmp_path_factory):
    model = build_unit_scale_model("tiny", VOCAB, seed=0)
    ck = save_checkpoint(model, tmp_path_factory.mktemp("ck") / "step-2")
    return model, ck


@pytest.fixture(scope="module")
def exported(tmp_path_factory, ours_and_checkpoint, tokenizer_dir):
    from europa_model.hf import export_checkpoint

    _, ck = ours_and_checkpoint
    root = tmp_path_factory.mktemp("hf")
    # small shards: the tiny model (3.3 MB in fp32) spreads over several files, experts straddling a boundary
    return {dtype: export_checkpoint(ck, "tiny", VOCAB, root / dtype, dtype=dtype, tokenizer_dir=tokenizer_dir,
                                     max_shard_bytes=700_000)
            for dtype in ("fp32", "bf16")}


def _load(path, dtype=None):
    from transformers import AutoModelForCausalLM

    model, info = AutoModelForCausalLM.from_pretrained(path, local_files_only=True, output_loading_info=True,
                                                       **({"dtype": dtype} if dtype else {}))
    return model.eval(), info


def _ids(n_rows=3, seed=1):
    return torch.randint(4, VOCAB, (n_rows, SEQ), generator=torch.Generator().manual_seed(seed))


def test_fp32_export_gives_our_logits(exported, ours_and_checkpoint):
    ours, _ = ours_and_checkpoint
    hf, info = _load(exported["fp32"].out_dir)
    assert type(hf).__name__ == "DeepseekV3ForCausalLM"
    assert not any(info.values()), info  # no missing, unexpected or mismatched keys
    for layer in ours.layers.values():
        if layer.moe_enabled:
            experts = layer.moe.routed_experts.inner_experts
            experts.forward = types.MethodType(_fp32_experts, experts)
    try:
        ids = _ids()
        a, b = _logits_ours(ours, ids), _logits_hf(hf, ids)
        assert a.abs().max() > 1.0  # unit-scale weights: every tensor matters
        exact = (a - b).abs().max().item()
        # Our MLA latent norms use HF's fixed eps 1e-6 (europa_model/flavors.py): the model as transformers
        # loads it computes what ours does, to float32 rounding.
        print(f"fp32 export vs torchtitan (fp32 experts): max |logit diff| {exact:.2e} as loaded")
        assert exact < 1e-5
        # Sensitivity: the same comparison catches two swapped experts
        experts = hf.model.layers[1].mlp.experts
        with torch.no_grad():
            experts.gate_up_proj[[0, 1]] = experts.gate_up_proj[[1, 0]].clone()
        assert (a - _logits_hf(hf, ids)).abs().max().item() > 1e-2
    finally:
        for layer in ours.layers.values():
            if layer.moe_enabled:
                del layer.moe.routed_experts.inner_experts.forward


def test_torchtitan_as_it_runs_is_within_bf16_rounding(exported, ours_and_checkpoint):
    """Unpatched, our model rounds expert activations to bf16: the HF model differs by that much, no more."""
    ours, _ = ours_and_checkpoint
    hf, _ = _load(exported["fp32"].out_dir)
    ids = _ids()
    a, b = _logits_ours(ours, ids), _logits_hf(hf, ids)
    diff = (a - b).abs().max().item()
    print(f"fp32 export vs torchtitan as run (bf16 experts): max |logit diff| {diff:.2e} "
          f"of max |logit| {a.abs().max():.1f}")
    assert diff < 0.02 * a.abs().max().item()


def test_bf16_export_is_the_fp32_export_rounded_routers_kept(exported):
    from safetensors import safe_open

    res32, res16 = exported["fp32"], exported["bf16"]
    assert json.loads((res16.out_dir / "config.json").read_text())["dtype"] == "bfloat16"
    tensors32, tensors16 = {}, {}
    for res, into in ((res32, tensors32), (res16, tensors16)):
        for shard in res.shards:
            with safe_open(res.out_dir / shard, framework="pt") as f:
                into.update({k: f.get_tensor(k) for k in f.keys()})
    assert tensors16.keys() == tensors32.keys()
    router = {k for k in tensors32 if k.endswith((".mlp.gate.weight", ".mlp.gate.e_score_correction_bias"))}
    assert len(router) == 4  # 2 MoE layers x (gate, expert bias): transformers keeps them in fp32
    for k, t in tensors16.items():
        if k in router:
            assert t.dtype == torch.float32 and torch.equal(t, tensors32[k]), k
        else:
            assert t.dtype == torch.bfloat16 and torch.equal(t, tensors32[k].bfloat16()), k
    hf16, info = _load(res16.out_dir)
    assert not any(info.values()), info
    assert hf16.model.layers[1].mlp.gate.weight.dtype == torch.float32
    assert hf16.model.embed_tokens.weight.dtype == torch.bfloat16


def test_parameter_counts_agree(exported, ours_and_checkpoint):
    from europa_model.flavors import count_parameters

    ours, _ = ours_and_checkpoint
    hf, _ = _load(exported["fp32"].out_dir)
    n_hf = sum(p.numel() for p in hf.parameters())
    n_ours = sum(p.numel() for p in ours.parameters())
    print(f"parameters: torchtitan {n_ours:,}  HF {n_hf:,}")
    assert n_hf == n_ours == count_parameters("tiny", VOCAB)["total"] == exported["fp32"].parameters


def test_index_covers_every_tensor_and_shards_are_bounded(exported, ours_and_checkpoint):
    from safetensors import safe_open

    res = exported["fp32"]
    index = json.loads((res.out_dir / "model.safetensors.index.json").read_text())
    found, size = {}, 0
    for shard in res.shards:
        with safe_open(res.out_dir / shard, framework="pt") as f:
            for k in f.keys():
                assert k not in found, f"{k} in two shards"
                found[k] = shard
                t = f.get_tensor(k)
                size += t.numel() * t.element_size()
    assert index["weight_map"] == found
    assert index["metadata"]["total_size"] == size == res.total_bytes
    assert len(found) == res.tensors == 91  # 49 torchtitan tensors, routed experts split: 2 layers x 8 x 3 - 6
    assert len(res.shards) > 1 and all(n.startswith("model-") for n in res.shards)
    largest = max(t.numel() * 4 for t in ours_and_checkpoint[0].state_dict().values())
    assert all((res.out_dir / s).stat().st_size <= 700_000 + largest + 65_536 for s in res.shards)


def test_checksums_cover_every_file(exported):
    out = exported["bf16"].out_dir
    lines = (out / "SHA256SUMS").read_text().splitlines()
    listed = dict(reversed(line.split("  ", 1)) for line in lines)
    assert set(listed) == {p.name for p in out.iterdir()} - {"SHA256SUMS"}
    for name, digest in listed.items():
        assert hashlib.sha256((out / name).read_bytes()).hexdigest() == digest, name
    assert listed == exported["bf16"].sha256


def test_config_comes_from_the_flavor(exported):
    from europa_model.flavors import FLAVORS

    f = FLAVORS["tiny"]
    cfg = json.loads((exported["fp32"].out_dir / "config.json").read_text())
    assert cfg["architectures"] == ["DeepseekV3ForCausalLM"] and cfg["model_type"] == "deepseek_v3"
    assert cfg["rms_norm_eps"] == 1e-5  # torchtitan's RMSNorm default, not HF's 1e-6
    assert cfg["hidden_size"] == f.dim and cfg["num_hidden_layers"] == f.n_layers
    assert cfg["first_k_dense_replace"] == f.n_dense_layers and cfg["intermediate_size"] == f.dense_hidden_dim
    assert cfg["n_routed_experts"] == f.num_experts and cfg["num_experts_per_tok"] == f.top_k
    assert cfg["n_shared_experts"] == f.num_shared_experts and cfg["moe_intermediate_size"] == f.moe_hidden_dim
    assert (cfg["q_lora_rank"], cfg["kv_lora_rank"], cfg["qk_rope_head_dim"]) == (f.q_lora_rank, f.kv_lora_rank, 8)
    assert (cfg["n_group"], cfg["topk_group"], cfg["norm_topk_prob"]) == (1, 1, True)
    assert cfg["routed_scaling_factor"] == f.route_scale
    assert cfg["rope_parameters"] == {"rope_type": "default", "rope_theta": f.rope_theta} and cfg["rope_interleave"]
    assert cfg["num_nextn_predict_layers"] == 0 and cfg["vocab_size"] == VOCAB
    assert (cfg["bos_token_id"], cfg["eos_token_id"], cfg["pad_token_id"]) == (1, 2, 3)
    info = json.loads((exported["fp32"].out_dir / "europa_export.json").read_text())
    assert info["flavor"] == "tiny" and info["parameters"] == exported["fp32"].parameters
    assert not any("latent RMSNorm eps" in d for d in info["known_differences"])  # flavors use HF's 1e-6
    assert any("bf16" in d for d in info["known_differences"])
    gen = json.loads((exported["fp32"].out_dir / "generation_config.json").read_text())
    assert (gen["bos_token_id"], gen["eos_token_id"]) == (1, 2)


def test_tokenizer_is_copied_and_loads(exported, tokenizer_dir):
    from transformers import AutoTokenizer

    out = exported["fp32"].out_dir
    for name in ("tokenizer.json", "tokenizer_config.json", "tokenizer.model"):
        assert (out / name).read_bytes() == (tokenizer_dir / name).read_bytes()
    tok = AutoTokenizer.from_pretrained(out, local_files_only=True)
    assert tok("Alle Menschen sind frei").input_ids and tok.bos_token_id == 1


def test_generate_from_the_folder_is_reproducible(exported):
    from europa_model.hf.generate import generate

    out = exported["fp32"].out_dir
    greedy = generate(out, "Alle Menschen", max_new_tokens=6)
    assert greedy == generate(out, "Alle Menschen", max_new_tokens=6) and isinstance(greedy, str)
    s1 = generate(out, "Alle Menschen", max_new_tokens=6, sampling="sampled", seed=3)
    assert s1 == generate(out, "Alle Menschen", max_new_tokens=6, sampling="sampled", seed=3)
