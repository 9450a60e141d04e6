"""The export of a checkpoint the pretrain stage wrote (torchtitan's Trainer, 6 tiny steps, optimizer and
dataloader state in the same files) with the run's own tokenizer: transformers loads it, scores the run's
text like our evaluator's model does, and generates. Slow: it builds the session's trained run (ingest ->
tokenizer -> shards -> pretrain, ~10 s here) when no other test has."""

from __future__ import annotations

import json
import os
import types

os.environ["OMP_NUM_THREADS"] = "1"
os.environ["HF_HUB_OFFLINE"] = "1"

import pytest  # noqa: E402
import torch  # noqa: E402

pytestmark = pytest.mark.slow


def test_pipeline_checkpoint_exports_and_scores_the_same(trained_run, tmp_path):
    from tokenizers import Tokenizer
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from europa_model.hf import export_checkpoint
    from europa_model.hf.generate import generate
    from stages.evaluate.scoring import load_model
    from tests.europa_model.hf.test_hf_folder import _fp32_experts

    _, run_dir = trained_run
    ck = run_dir / "pretrain" / "checkpoints" / "step-6"
    vocab = Tokenizer.from_file(str(run_dir / "tokenizer" / "tokenizer.json")).get_vocab_size(with_added_tokens=True)
    assert vocab == 1000  # tests/runs.py: [tokenizer] vocab_size
    res = export_checkpoint(ck, "tiny", vocab, tmp_path / "hf", dtype="fp32", tokenizer_dir=run_dir / "tokenizer")
    assert res.tensors == 91
    assert json.loads((res.out_dir / "europa_export.json").read_text())["step"] == 6

    hf, info = AutoModelForCausalLM.from_pretrained(res.out_dir, local_files_only=True, output_loading_info=True)
    assert not any(info.values()), info
    ours = load_model(ck, "tiny", vocab, "cpu")
    for layer in ours.layers.values():
        if layer.moe_enabled:
            experts = layer.moe.routed_experts.inner_experts
            experts.forward = types.MethodType(_fp32_experts, experts)
    tok = AutoTokenizer.from_pretrained(res.out_dir, local_files_only=True)
    text = "Alle Menschen sind frei und gleich an Würde und Rechten geboren."
    ids = torch.tensor([[tok.bos_token_id, *tok.encode(text, add_special_tokens=False)]])
    pos = torch.arange(ids.shape[1]).unsqueeze(0)
    with torch.no_grad():
        a = ours(ids, positions=pos, attention_masks=ours.get_attention_masks(positions=pos)).float()
        b = hf(input_ids=ids).logits.float()
    print(f"pipeline checkpoint: max |logit diff| {(a - b).abs().max():.2e} as loaded")
    assert (a - b).abs().max() < 1e-5
    assert isinstance(generate(res.out_dir, "Alle Menschen", max_new_tokens=5), str)
