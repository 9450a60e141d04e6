"""Settings of the shards stage: `[shards]` and `[shards.mixture]`."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from pipeline.config import StrictModel


class MixtureConfig(StrictModel):
    """Per-language sampling weights for training (written to mixture.json)."""

    policy: Literal["unimax", "temperature"] = "unimax"
    total_tokens: int | None = Field(None, ge=1, description="Planned training tokens; default: all training tokens once.")
    max_epochs: float = Field(4.0, gt=0, description="At most this many passes over one language's training tokens.")
    temperature: float = Field(3.33, ge=1.0, description="For policy temperature: 1 = proportional, larger = flatter.")


class ShardsConfig(StrictModel):
    val_fraction: float = Field(0.01, ge=0.0, lt=0.5, description="Share of each language's documents held out for validation.")
    shard_bytes: int = Field(
        2 << 30, ge=2048, description="Size of a shard's token file (.bin) at most; units group a language's ingest files to "
        "fill about one. 1-4 GiB at full scale keeps the corpus at tens of thousands of shards.")
    mixture: MixtureConfig = Field(default_factory=MixtureConfig)
