"""Settings of the shards stage: `[shards]` and `[shards.mixture]`."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from pipeline.config import StrictModel


# FineWeb-2's rehydration (its README): copies of a kept document by the size of its duplicate cluster, as rows
# (smallest cluster size, copies): 1 -> 1, 2 -> 2, 3-4 -> 3, 5-99 -> 5, 100-999 -> 8, >= 1000 -> 1.
FINEWEB2_REHYDRATION: tuple[tuple[int, int], ...] = ((1, 1), (2, 2), (3, 3), (5, 5), (100, 8), (1000, 1))


class MixtureConfig(StrictModel):
    """Per-language sampling weights for training (written to mixture.json)."""

    policy: Literal["unimax", "temperature"] = "unimax"
    total_tokens: int | None = Field(None, ge=1, description="Planned training tokens; default: all training tokens once.")
    max_epochs: float = Field(4.0, gt=0, description="At most this many passes over one language's training tokens.")
    temperature: float = Field(3.33, ge=1.0, description="For policy temperature: 1 = proportional, larger = flatter.")
    rehydration: str | list[list[int]] | None = Field(
        None, description="Upsample the training split by each document's duplicate cluster size (ingest's cluster_size): "
        "\"fineweb-2\" (FineWeb-2's table: 1 -> 1 copy, 2 -> 2, 3-4 -> 3, 5-99 -> 5, 100-999 -> 8, >= 1000 -> 1) or rows "
        "[smallest cluster size, copies] with sizes increasing from 1. Unset: every document once.")

    @field_validator("rehydration")
    @classmethod
    def _table(cls, v):
        if v is None or v == "fineweb-2":
            return v
        if isinstance(v, str):
            raise ValueError(f"{v!r}: use \"fineweb-2\" or a table of rows [smallest cluster size, copies]")
        if any(len(row) != 2 for row in v):
            raise ValueError("each row is [smallest cluster size, copies], e.g. [[1, 1], [2, 2], [5, 3]]")
        if not v or v[0][0] != 1:
            raise ValueError("the first row must start at cluster size 1, e.g. [[1, 1], [2, 2], [5, 3]]")
        for i, ((lo, copies), (prev, _)) in enumerate(zip(v[1:], v), start=2):
            if lo <= prev:
                raise ValueError(f"row {i}: cluster size {lo} after {prev}: the sizes must increase (rows are "
                                 "[smallest cluster size, copies])")
        bad = [c for _, c in v if c < 1]
        if bad:
            raise ValueError(f"copies must be at least 1 (got {bad[0]}): a kept document is trained at least once")
        return v

    def rehydration_table(self) -> tuple[tuple[int, int], ...] | None:
        return FINEWEB2_REHYDRATION if self.rehydration == "fineweb-2" else (
            tuple((int(a), int(b)) for a, b in self.rehydration) if self.rehydration else None)


class ShardsConfig(StrictModel):
    val_fraction: float = Field(0.01, ge=0.0, lt=0.5, description="Share of each language's documents held out for validation.")
    shard_bytes: int = Field(
        2 << 30, ge=2048, description="Size of a shard's token file (.bin) at most; units group a language's ingest files to "
        "fill about one. 1-4 GiB at full scale keeps the corpus at tens of thousands of shards.")
    mixture: MixtureConfig = Field(default_factory=MixtureConfig)
