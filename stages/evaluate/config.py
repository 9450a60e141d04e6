"""Settings of the evaluate stage, `europa evaluate` and the scheduled evaluation: `[evaluate]`."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, ValidationInfo, field_validator

from pipeline.config import StrictModel, resolve_config_path


class EvalSetConfig(StrictModel):
    """An external evaluation set in the FLORES-200 layout: one file per language, one sentence per line."""

    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$", description="Short name used in the metrics, e.g. flores-devtest.")
    path: str = Field(description="Folder of the files; relative to the config file.")
    pattern: str = Field("{flores}.devtest", description="File name per language; placeholders {lang}, {iso3}, {flores}.")

    @field_validator("path")
    @classmethod
    def _resolve(cls, v: str, info: ValidationInfo) -> str:
        return resolve_config_path(v, info)

    @field_validator("pattern")
    @classmethod
    def _known_placeholders(cls, v: str) -> str:
        try:
            v.format(lang="x", iso3="x", flores="x")
        except (KeyError, IndexError, ValueError) as e:
            raise ValueError(f"pattern {v!r} uses an unknown placeholder ({e}); use {{lang}}, {{iso3}} or {{flores}}") from None
        return v


class EvaluateConfig(StrictModel):
    sets: list[EvalSetConfig] = Field(default_factory=list, description="External sets besides the shards' validation split.")
    validation_split: bool = Field(True, description="Evaluate the shards stage's held-out documents per language.")
    batch_size: int = Field(8, ge=1, description="Sequences per forward pass (memory: batch x seq_len x vocab logits).")
    seq_len: int | None = Field(None, ge=8, description="Tokens per sequence; default: [pretrain] seq_len.")
    max_tokens_per_language: int = Field(200_000, ge=1, description="Bound on evaluated tokens per language and set (time and memory).")
    regression_threshold: float = Field(
        0.02, ge=0, description="Flag a language whose bits per byte worsen by more than this fraction since the previous checkpoint.")
    device: Literal["auto", "cpu", "cuda"] = "auto"
    cron: str = Field("*/30 * * * *", description="Default schedule of `europa eval-schedule` (cron, UTC).")
