"""The evaluate stage's record (manifest `statistics`): the figures of the latest evaluated checkpoint per
language (bits per byte per set, downstream task accuracies, each with its standard error), which checkpoints
were evaluated, and which languages regressed. Compliance and the model card (`europa export hf`) report it."""

from __future__ import annotations


from pydantic import Field

from pipeline.records import Record


class SkippedCheckpoint(Record):
    step: int
    path: str
    reason: str


class TaskSummary(Record):
    name: str = Field(description="The [[evaluate.tasks]] name.")
    metric: str = Field(description="The lm-eval metric reported (acc, acc_norm, ...).")
    num_fewshot: int
    lm_eval_tasks: dict[str, str] = Field(description="Per language, the lm-eval task that was run.")
    missing: list[str] = Field(description="Languages lm-eval has no such task for (or whose task could not be loaded).")


class SetContamination(Record):
    texts: int = Field(description="Evaluated texts of the set in the language.")
    short: int = Field(description="Of them, texts under 13 words (they cannot match).")
    contaminated: int = Field(description="Of them, texts sharing a word 13-gram with the training split.")
    training_documents: int = Field(description="Training documents sharing a 13-gram with any evaluated text of the set.")


class LanguageGapRecord(Record):
    best: str
    worst: str
    gap: float = Field(description="Worst minus best bits per byte (best minus worst value for a task): positive.")
    gap_stderr: float | None = Field(description="The two languages' standard errors combined.")
    languages: int


class EvaluateRecord(Record):
    latest_step: int
    checkpoints_evaluated: list[int]
    eval_sets: list[str] = Field(description="val (the shards' held-out documents) and the configured [[evaluate.sets]].")
    per_language: dict[str, dict[str, float]] = Field(
        description="Per language at the latest step: for every set <set>_bits_per_byte, <set>_bits_per_byte_stderr, "
        "<set>_loss, <set>_token_accuracy, <set>_tokens, <set>_documents (val_* for the held-out split); for every "
        "task <task>_<metric>, <task>_<metric>_stderr and <task>_examples.")
    tasks: list[TaskSummary] = Field(description="The downstream tasks (lm-evaluation-harness on the export) at the latest step.")
    missing: dict[str, list[str]] = Field(description="Per set, the languages it has no text for.")
    sources: dict[str, dict[str, str]] = Field(description="Per set and language, the file or folder scored.")
    flagged: list[str] = Field(description="Languages with a regression: bits per byte (or a task's accuracy) worse "
                               "beyond regression_threshold and regression_sigma standard errors of the change.")
    regression_threshold: float
    regression_sigma: float
    method: str
    skipped: list[SkippedCheckpoint] = Field(description="Damaged checkpoints that could not be evaluated.")
    language_gap: dict[str, LanguageGapRecord] | None = Field(
        None, description="Per set and task, the best and the worst language at the latest step and the gap between them.")
    contamination: dict[str, dict[str, SetContamination]] | None = Field(
        None, description="Per set (and per downstream task, as `task:<name>`) and language, evaluated texts that "
        "share a word 13-gram with the training split (stages/evaluate/contamination.py); absent in records written "
        "before it.")
    contamination_method: str | None = None
