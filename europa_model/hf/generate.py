"""Text from a EUROPA model through transformers' own `generate`, the way a user of the published folder
would get it, so what `europa generate` prints is what the Hugging Face release produces.

The prompt is encoded as the model was trained: BOS, then the text without further special tokens (the
tokenizer's config says add_bos_token=false, and the pretraining rows start every document with BOS).
A DCP checkpoint is first exported (fp32) to a temporary folder; for repeated use export once and pass
the folder.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Literal

__all__ = ["generate"]


def generate(
    model: str | Path,
    prompt: str,
    max_new_tokens: int = 64,
    *,
    sampling: Literal["greedy", "sampled"] = "greedy",
    seed: int = 0,
    temperature: float = 1.0,
    top_p: float = 1.0,
    flavor: str | None = None,
    vocab_size: int | None = None,
    tokenizer_dir: str | Path | None = None,
    routing: dict[str, int | None] | None = None,
) -> str:
    """The continuation of `prompt` (new text only). `model`: an exported folder, or a checkpoint folder
    (`step-N/`, then `flavor`, `vocab_size` and the run's `tokenizer_dir` are required). `sampled` draws
    with `temperature`/`top_p` from a generator seeded with `seed`: same seed, same text."""
    from europa_model.hf.convert import ExportError

    model = Path(model)
    if sampling not in ("greedy", "sampled"):
        raise ExportError(f"sampling {sampling!r}: choose 'greedy' or 'sampled'")
    if max_new_tokens < 1:
        raise ExportError(f"max_new_tokens must be at least 1, got {max_new_tokens}")
    if (model / ".metadata").is_file():
        if flavor is None or vocab_size is None or tokenizer_dir is None:
            raise ExportError(f"{model} is a checkpoint: give flavor, vocab_size and tokenizer_dir "
                              "(or export it first)")
        from europa_model.hf.convert import export_checkpoint

        with tempfile.TemporaryDirectory(prefix="europa-generate-") as tmp:
            folder = export_checkpoint(model, flavor, vocab_size, Path(tmp) / "hf", dtype="fp32",
                                       tokenizer_dir=tokenizer_dir, routing=routing).out_dir
            return _generate(folder, prompt, max_new_tokens, sampling, seed, temperature, top_p)
    if not (model / "config.json").is_file():
        raise ExportError(f"{model}: neither an exported model folder (config.json) nor a checkpoint (.metadata)")
    return _generate(model, prompt, max_new_tokens, sampling, seed, temperature, top_p)


def _generate(folder: Path, prompt: str, max_new_tokens: int, sampling: str, seed: int, temperature: float,
              top_p: float) -> str:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from europa_model.hf.convert import ExportError

    if not (folder / "tokenizer.json").is_file():
        raise ExportError(f"{folder}: no tokenizer.json; export with tokenizer_dir=<run>/tokenizer")
    tok = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    lm = AutoModelForCausalLM.from_pretrained(folder, local_files_only=True).eval()
    ids = [tok.bos_token_id] if tok.bos_token_id is not None else []
    ids += tok.encode(prompt, add_special_tokens=False)
    input_ids = torch.tensor([ids])
    options = {"do_sample": False}
    if sampling == "sampled":
        options = {"do_sample": True, "temperature": temperature, "top_p": top_p}
    with torch.random.fork_rng(devices=[]), torch.no_grad():
        torch.manual_seed(seed)
        out = lm.generate(input_ids, attention_mask=torch.ones_like(input_ids), max_new_tokens=max_new_tokens,
                          **options)
    return tok.decode(out[0, input_ids.shape[1]:], skip_special_tokens=True)
