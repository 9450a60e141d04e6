"""The evaluate stage's record (manifest `statistics`): the figures of the latest evaluated checkpoint per
language, which checkpoints were evaluated, and which languages regressed. Compliance reports the results."""

from __future__ import annotations


from pydantic import Field

from pipeline.records import Record


class SkippedCheckpoint(Record):
    step: int
    path: str
    reason: str


class EvaluateRecord(Record):
    latest_step: int
    checkpoints_evaluated: list[int]
    eval_sets: list[str] = Field(description="val (the shards' held-out documents) and the configured [[evaluate.sets]].")
    per_language: dict[str, dict[str, float]] = Field(
        description="Per language: <set>_bits_per_byte, <set>_loss, <set>_token_accuracy for every set "
        "(val_* for the held-out split) at the latest step.")
    missing: dict[str, list[str]] = Field(description="Per set, the languages it has no text for.")
    sources: dict[str, dict[str, str]] = Field(description="Per set and language, the file or folder scored.")
    flagged: list[str] = Field(description="Languages whose bits per byte worsened beyond regression_threshold.")
    regression_threshold: float
    method: str
    skipped: list[SkippedCheckpoint] = Field(description="Damaged checkpoints that could not be evaluated.")
