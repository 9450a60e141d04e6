"""A checkpoint of the run as its Hugging Face folder with the model card: what `europa export hf` writes, and
what the compliance stage writes (or reuses) as the released form whose files the AI Act documents hash.

Why one function for both: the folder users distribute and the folder the documents' digests describe must be
the same bytes made the same way; `export/step-<N>-<dtype>/` is where both look first.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Callable

from pipeline.rundir import RunDir

EXPORT_INFO = "europa_export.json"  # europa_model/hf/convert.py writes it beside the weights
SHA256SUMS = "SHA256SUMS"


def default_folder(rd: RunDir, step: int, dtype: str) -> Path:
    return rd.export_dir(f"step-{step}-{dtype}")


def export_run_checkpoint(rd: RunDir, config, ckpt, info, dtype: str, out: Path, *, overwrite: bool,
                          live: bool = False, progress: Callable[[int, int], None] | None = None):
    """Write `out` for checkpoint `ckpt` (stages.checkpoints.Checkpoint) holding model `info` (ModelInfo), with the
    model card written from the run's records; returns europa_model.hf.ExportResult. ValueError on bad input."""
    from europa_model.flavors import build_model_args
    from europa_model.hf import export_checkpoint
    from europa_model.hf.config import known_differences
    from stages.model_card import model_card

    card = model_card(rd, config, step=ckpt.step, flavor=info.flavor, vocab_size=info.vocab_size, dtype=dtype,
                      known_differences=known_differences(build_model_args(info.flavor, info.vocab_size, **info.routing)),
                      training_in_progress=live)
    return export_checkpoint(ckpt.path, info.flavor, info.vocab_size, out, dtype=dtype, routing=info.routing,
                             tokenizer_dir=rd.stage_dir("tokenizer"), overwrite=overwrite,
                             progress=progress or stderr_progress("export"), extra_files={"README.md": card})


def stderr_progress(what: str) -> Callable[[int, int], None]:
    shown = [0.0]

    def progress(done: int, total: int) -> None:
        if time.monotonic() - shown[0] >= 2 or done == total:
            shown[0] = time.monotonic()
            print(f"europa: {what}: {done / 1e6:,.0f} of {total / 1e6:,.0f} MB", file=sys.stderr)

    return progress


def complete_export(folder: Path, checkpoint: Path, dtype: str) -> dict[str, str] | None:
    """name -> sha256 of a finished export of `checkpoint` in `dtype` at `folder`, or None (absent, of another
    checkpoint or dtype, or a listed file missing)."""
    sums, meta = folder / SHA256SUMS, folder / EXPORT_INFO
    if not (sums.is_file() and meta.is_file()):
        return None
    try:
        info = json.loads(meta.read_text(encoding="utf-8"))
    except ValueError:
        return None
    if Path(info.get("checkpoint", "")).resolve() != checkpoint.resolve() or not _same_dtype(info.get("dtype"), dtype):
        return None
    files = read_sha256sums(sums)
    return files if all((folder / n).is_file() for n in files) else None


def read_sha256sums(path: Path) -> dict[str, str]:
    out = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        digest, _, name = line.partition("  ")
        if digest and name:
            out[name] = digest
    return out


def _same_dtype(recorded: str | None, dtype: str) -> bool:
    return recorded == {"bf16": "bfloat16", "fp32": "float32"}.get(dtype, dtype)
