"""One checkpoint's evaluation figures, as `eval/step-<N>/metrics.json` (and a distributed job's result.json)
hold them: typed, so a reader names a figure instead of spelling its key.

Written with the keys it was given (`to_json`): a file written before a key existed (`evaluated_with`, the
downstream tasks) is read with that key's default and stays without it.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel


class SetFigures(BaseModel):
    """Bits per byte and more of one (set, language): totals over its documents (scoring.Score.figures)."""

    loss: float  # mean NLL per token, nats
    bits_per_byte: float
    bits_per_byte_stderr: float | None = None  # over documents (ratio estimator); None with fewer than 2
    token_accuracy: float
    tokens: int
    bytes: int
    documents: int | None = None


class TaskFigures(BaseModel):
    """One downstream task in one language (lm-evaluation-harness on the Hugging Face export)."""

    metric: str
    value: float
    stderr: float | None = None  # lm-eval's, per example
    examples: int
    lm_eval_task: str
    num_fewshot: int | None = None


class DocumentFigures(BaseModel):
    """Per document of one (set, language), in scoring order: what a paired standard error needs."""

    bits: list[float]
    bytes: list[int]


class EvalJob(BaseModel):
    """Where the figures were computed."""

    launcher: str
    ranks: int
    expert_parallel: int
    precision: str
    device: str


class Coverage(BaseModel):
    """The sets and tasks a checkpoint was evaluated for (a configuration that adds one evaluates again)."""

    sets: list[str]
    tasks: list[str]


class CheckpointMetrics(BaseModel):
    step: int
    checkpoint: str
    checkpoint_id: str  # the checksum of the checkpoint's DCP metadata: a retrained step-N differs
    flavor: str
    seq_len: int
    evaluated_at: str
    job: EvalJob
    sets: dict[str, dict[str, SetFigures]]  # set -> language -> figures
    missing: dict[str, list[str]]  # set -> languages it has no text for
    sources: dict[str, dict[str, str]]  # set -> language -> the file or folder scored
    documents: dict[str, dict[str, DocumentFigures]]
    evaluated_with: Coverage | None = None
    tasks: dict[str, dict[str, TaskFigures]] = {}  # task -> language -> figures
    tasks_missing: dict[str, list[str]] = {}
    task_reasons: dict[str, dict[str, str]] = {}  # task -> language (or "all") -> why it has no figure

    def coverage(self) -> Coverage:
        """What it was evaluated for; a file from before that was recorded covers its sets and no task."""
        return self.evaluated_with or Coverage(sets=list(self.sets), tasks=[])

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(exclude_unset=True)

    def to_json(self, indent: int | None = None) -> str:
        return json.dumps(self.to_dict(), indent=indent, ensure_ascii=False)
