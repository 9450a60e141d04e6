"""The compliance stage's record (manifest `statistics`): which documents were written, what is still open, the
contradictions between declarations and records, and the systemic-risk check. Nothing downstream reads it;
`europa status` shows its counts."""

from __future__ import annotations

from pydantic import Field

from pipeline.records import Record


class OpenItem(Record):
    need: str = Field(description="What would provide the value (a setting, a record field).")
    used_by: list[str] = Field(description="Documents that show it.")


class Contradiction(Record):
    check: str = Field(description="Stable id of the cross-check (stages/compliance/contradictions.py).")
    message: str
    fix: str


class ComputeCheck(Record):
    training_flops: int | float | None
    projected_flops: int | float | None
    threshold: float
    presumed_systemic_risk: bool
    reason: str


class ComplianceRecord(Record):
    documents: list[str]
    files: list[str]
    open_items: list[OpenItem]
    contradictions: list[Contradiction] = Field(description="Declarations that contradict the records; --strict fails on them.")
    compute: ComputeCheck
    strict: bool
