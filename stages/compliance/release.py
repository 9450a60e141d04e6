"""The released form of the model: the Hugging Face export of the final checkpoint, whose files the documents'
authenticity digests (released_files.sha256) describe.

Why the compliance stage writes it when it is missing: the documents must hash the files that are distributed
(the export: weights, config, tokenizer, model card), not the training checkpoint (torchtitan DCP with the
optimizer state). `[compliance.model] release_export = "bf16"` names the form; the stage reuses
`export/step-<N>-<dtype>/` when `europa export hf` already wrote it for the final checkpoint, and otherwise writes
it there the same way. The digests are the export's own SHA256SUMS, written while its files were written.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pipeline.rundir import RunDir
from pipeline.stage import InputError, StageContext
from stages.export import SHA256SUMS, complete_export, default_folder


@dataclass(frozen=True)
class ReleasedExport:
    folder: str  # relative to the run directory, e.g. export/step-100-bf16
    step: int
    dtype: str
    files: tuple[tuple[str, str, int], ...]  # (name, sha256, bytes), by name

    @property
    def sums(self) -> str:
        return f"{self.folder}/{SHA256SUMS}"


def final_step(pretrain_record) -> int | None:
    return None if pretrain_record is None else pretrain_record.checkpoint.final_step


def load(run_dir: RunDir, dtype: str | None, pretrain_record) -> ReleasedExport | None:
    """The finished export of the final checkpoint in `dtype`, or None (not declared, not trained, not written)."""
    step = final_step(pretrain_record)
    if dtype is None or step is None:
        return None
    folder = default_folder(run_dir, step, dtype)
    checkpoint = run_dir.stage_dir("pretrain") / pretrain_record.checkpoint.path
    sums = complete_export(folder, checkpoint, dtype)
    if sums is None:
        return None
    files = tuple((n, sums[n], (folder / n).stat().st_size) for n in sorted(sums))
    return ReleasedExport(folder.relative_to(run_dir.path).as_posix(), step, dtype, files)


def ensure(ctx: StageContext) -> None:
    """Write the declared export of the final checkpoint unless a finished one is there (InputError when the final
    checkpoint is not on disk or cannot be exported)."""
    from europa_model.checkpoints import model_info
    from stages.checkpoints import run_checkpoints

    dtype, record = ctx.settings.model.release_export, ctx.records.get("pretrain")
    if dtype is None or record is None or load(ctx.run_dir, dtype, record) is not None:
        return
    step = record.checkpoint.final_step
    ckpt = next((c for c in run_checkpoints(ctx.run_dir, published_only=True) if c.step == step), None)
    info = model_info(ckpt) if ckpt is not None else None
    if ckpt is None or info is None:
        raise InputError(f"stage compliance: [compliance.model] release_export = {dtype!r}: the final checkpoint "
                         f"step-{step} of {ctx.run_dir.stage_dir('pretrain')} is not on disk (or has no job info); "
                         "rerun the pretrain stage, or remove release_export")
    from stages.export import export_run_checkpoint, stderr_progress

    out = default_folder(ctx.run_dir, step, dtype)
    try:
        export_run_checkpoint(ctx.run_dir, ctx.config, ckpt, info, dtype, Path(out), overwrite=True,
                              progress=stderr_progress("compliance: release export"))
    except ValueError as e:
        raise InputError(f"stage compliance: release export of step-{step} to {out}: {e}") from None
