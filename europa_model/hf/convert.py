"""A torchtitan DCP checkpoint of a EUROPA flavor -> a Hugging Face model folder that
`transformers.AutoModelForCausalLM.from_pretrained` loads as `DeepseekV3ForCausalLM` (and vLLM, SGLang or
lm-evaluation-harness read as any DeepSeek-V3 checkpoint):

    model-0000i-of-0000n.safetensors   per-expert weights (the hub layout; transformers 5 fuses them on load)
    model.safetensors.index.json       every tensor -> its shard
    config.json, generation_config.json
    tokenizer.json, tokenizer_config.json[, tokenizer.model]   copied from the run's tokenizer folder
    europa_export.json                 where it came from (checkpoint, flavor, dtype, library versions) and how
                                       the HF model computes differently from ours (for the model card)
    SHA256SUMS                         `sha256sum -c` format, every other file: what a publisher signs

Streaming: tensors are read one at a time (dcp_reader.py) and written straight into shards whose layout is
planned from the checkpoint metadata beforehand (names.py, safetensors_writer.py), so memory is one
checkpoint tensor in the output dtype (plus a 16 MB slab when casting), whatever the model size. The folder appears
only when complete: everything is written into a hidden sibling folder that is renamed at the end.
"""

from __future__ import annotations

import json
import math
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from europa_model.hf.config import generation_config, hf_config, known_differences
from europa_model.hf.dcp_reader import CheckpointError, DCPCheckpoint
from europa_model.hf.names import TRAINING_STATE_PREFIXES, ExportPlanError, HFTensor, adapter_for, plan
from europa_model.hf.safetensors_writer import StreamingShard
from pipeline.fsutil import atomic_dir, sha256_file

__all__ = ["DTYPES", "ExportError", "ExportResult", "export_checkpoint"]

DTYPES = {"bf16": torch.bfloat16, "bfloat16": torch.bfloat16, "fp32": torch.float32, "float32": torch.float32}
_HF_DTYPE = {torch.bfloat16: "bfloat16", torch.float32: "float32"}
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")  # required
TOKENIZER_OPTIONAL = ("tokenizer.model",)
DEFAULT_MAX_SHARD_BYTES = 5_000_000_000  # transformers' historical default: small enough for any hub upload


class ExportError(ValueError):
    """The export cannot go ahead; the message names the file or key and what to do."""


@dataclass
class ExportResult:
    out_dir: Path
    shards: list[str]
    tensors: int                 # HF tensors written
    parameters: int              # model parameters (buffers such as the expert bias excluded)
    total_bytes: int             # tensor bytes, as in the index's metadata.total_size
    sha256: dict[str, str] = field(default_factory=dict)  # file name -> hex digest, every file but SHA256SUMS


def _shards(tensors: list[HFTensor], max_bytes: int) -> list[list[HFTensor]]:
    groups: list[list[HFTensor]] = [[]]
    size = 0
    for t in tensors:
        if groups[-1] and size + t.nbytes > max_bytes:
            groups.append([])
            size = 0
        groups[-1].append(t)
        size += t.nbytes
    return groups


def _special_ids(tokenizer_dir: Path, vocab_size: int) -> dict[str, int | None]:
    from tokenizers import Tokenizer

    for name in TOKENIZER_FILES:
        if not (tokenizer_dir / name).is_file():
            raise ExportError(f"tokenizer folder {tokenizer_dir}: no {name}; pass the run's tokenizer/ folder "
                              "(the tokenizer stage writes it)")
    tok = Tokenizer.from_file(str(tokenizer_dir / "tokenizer.json"))
    if tok.get_vocab_size(with_added_tokens=True) > vocab_size:
        raise ExportError(f"tokenizer {tokenizer_dir / 'tokenizer.json'} has {tok.get_vocab_size(with_added_tokens=True)}"
                          f" tokens, more than the model's vocab_size {vocab_size}: it is not this run's tokenizer")
    cfg = json.loads((tokenizer_dir / "tokenizer_config.json").read_text(encoding="utf-8"))
    ids: dict[str, int | None] = {}
    for role in ("bos", "eos", "pad"):
        token = cfg.get(f"{role}_token")
        if isinstance(token, dict):
            token = token.get("content")
        ids[f"{role}_token_id"] = tok.token_to_id(token) if token else None
        if token and ids[f"{role}_token_id"] is None:
            raise ExportError(f"{tokenizer_dir / 'tokenizer_config.json'}: {role}_token {token!r} is not in tokenizer.json")
    return ids


def _versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for pkg in ("torch", "torchtitan", "transformers", "safetensors"):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            out[pkg] = "absent"
    return out


def export_checkpoint(
    checkpoint_dir: str | Path,
    flavor: str,
    vocab_size: int | None,
    out_dir: str | Path,
    *,
    dtype: str = "bf16",
    tokenizer_dir: str | Path | None = None,
    max_shard_bytes: int = DEFAULT_MAX_SHARD_BYTES,
    overwrite: bool = False,
    progress: Callable[[int, int], None] | None = None,
    extra_files: dict[str, str] | None = None,
    routing: dict[str, int | None] | None = None,
) -> ExportResult:
    """Write the Hugging Face folder `out_dir` for the DCP checkpoint `checkpoint_dir` (a complete
    `<run>/pretrain/checkpoints/step-N/`) of `flavor` trained with the tokenizer's `vocab_size` (None: the
    flavor's default).

    `dtype`: "bf16" (the published form; the routers stay fp32, as transformers keeps them) or "fp32"
    (exact). `tokenizer_dir`: the run's `tokenizer/` folder; without it the folder has no tokenizer and
    config.json no BOS/EOS ids. `progress(bytes_written, total_bytes)` is called after each checkpoint tensor.
    `extra_files`: name -> UTF-8 text written into the folder (and SHA256SUMS), e.g. the model card README.md.
    `routing`: the node-limited routing the checkpoint was trained with (its job_info.json:
    europa_model.checkpoints.ModelInfo.routing; config.json then says n_group / topk_group).
    Raises ExportError (or its CheckpointError/ExportPlanError kin, all ValueError) with a one-line reason."""
    from europa_model.flavors import build_model_args

    if dtype not in DTYPES:
        raise ExportError(f"dtype {dtype!r}: choose one of {sorted(DTYPES)}")
    if max_shard_bytes < 1:
        raise ExportError(f"max_shard_bytes must be positive, got {max_shard_bytes}")
    out_dtype = DTYPES[dtype]
    out_dir = Path(out_dir)
    if out_dir.exists() and not overwrite and (not out_dir.is_dir() or any(out_dir.iterdir())):
        raise ExportError(f"{out_dir} already exists; choose another folder or pass overwrite=True")
    try:
        model_config = build_model_args(flavor, vocab_size, **(routing or {}))
    except ValueError as e:
        raise ExportError(str(e)) from None
    special = _special_ids(Path(tokenizer_dir), model_config.vocab_size) if tokenizer_dir is not None else {}

    ckpt = DCPCheckpoint(checkpoint_dir)
    where = f"checkpoint {ckpt.path}"
    stray = [k for k in ckpt.other_keys if not k.startswith(TRAINING_STATE_PREFIXES)]
    if stray:
        raise ExportPlanError(f"{where}: key {stray[0]!r} is not part of this model (a non-tensor entry outside "
                              "the training state); teach europa_model/hf/names.py or check the checkpoint")
    stored = {k: shape for k, (shape, _) in ckpt.tensors.items() if not k.startswith(TRAINING_STATE_PREFIXES)}
    tensors = plan(model_config, stored, dtype=out_dtype, where=where)
    config = hf_config(model_config, dtype=_HF_DTYPE[out_dtype], **special)
    groups = _shards(tensors, max_shard_bytes)
    names = [f"model-{i + 1:05d}-of-{len(groups):05d}.safetensors" for i in range(len(groups))]
    total = sum(t.nbytes for t in tensors)

    with atomic_dir(out_dir, replace=True) as work:  # an existing folder (empty, or overwrite) is swapped out
        sha = _write_shards(ckpt, adapter_for(model_config), groups, names, work, total, progress)
        weight_map = {t.name: n for g, n in zip(groups, names, strict=True) for t in g}
        index = {"metadata": {"total_size": total}, "weight_map": weight_map}
        (work / "model.safetensors.index.json").write_text(json.dumps(index, indent=2, sort_keys=True) + "\n")
        config.save_pretrained(work)
        generation_config(config).save_pretrained(work)
        if tokenizer_dir is not None:
            for name in TOKENIZER_FILES + TOKENIZER_OPTIONAL:
                if (Path(tokenizer_dir) / name).is_file():
                    shutil.copyfile(Path(tokenizer_dir) / name, work / name)
        parameters = sum(math.prod(t.shape) for t in tensors if t.parameter)
        step = re.fullmatch(r"step-(\d+)", ckpt.path.name)
        info = {"checkpoint": str(ckpt.path.resolve()), "step": int(step.group(1)) if step else None, "flavor": flavor, "vocab_size": model_config.vocab_size,
                "dtype": _HF_DTYPE[out_dtype], "parameters": parameters, "tensors": len(tensors),
                "known_differences": known_differences(model_config), "versions": _versions()}
        (work / "europa_export.json").write_text(json.dumps(info, indent=2) + "\n")
        for name, text in (extra_files or {}).items():
            if "/" in name or name in sha or (work / name).exists():
                raise ExportError(f"extra file {name!r}: not a plain new file name of the export folder")
            (work / name).write_text(text, encoding="utf-8")
        for p in sorted(work.iterdir()):
            if p.name not in sha:
                sha[p.name] = sha256_file(p)
        (work / "SHA256SUMS").write_text("".join(f"{sha[n]}  {n}\n" for n in sorted(sha)))
    return ExportResult(out_dir=out_dir, shards=names, tensors=len(tensors), parameters=parameters,
                        total_bytes=total, sha256=sha)


def _write_shards(ckpt: DCPCheckpoint, adapter, groups, names, work: Path, total: int, progress) -> dict[str, str]:
    sha: dict[str, str] = {}
    current: tuple[str, dict[str, torch.Tensor]] | None = None
    written = 0
    for group, name in zip(groups, names, strict=True):
        shard = StreamingShard(work / name, [(t.name, t.dtype, t.shape) for t in group])
        try:
            for t in group:
                if current is None or current[0] != t.source:
                    if current is not None and progress:
                        progress(written, total)
                    current = None  # drop the previous tensor before reading the next one
                    loaded = ckpt.load(t.source, t.dtype)
                    current = (t.source, adapter.to_hf({t.source: loaded}))
                    del loaded
                shard.write(t.name, current[1][t.name])
                written += t.nbytes
        except BaseException:
            shard.abort()
            raise
        sha[name] = shard.close()
    if progress:
        progress(written, total)
    return sha


# Re-exported so callers catch one family of errors from one module.
__all__ += ["CheckpointError", "ExportPlanError"]
