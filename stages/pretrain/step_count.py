"""The operations one real training step executes, counted inside the training process (J/flop_count.json).

Why in the training process and on the first step: it is the run's own model, parallel layout, batch and data,
so the count checks the architecture-based estimate against what actually ran, not against a second formula.
The count wraps torchtitan's `forward_backward_step` during the job's first optimizer step only (every micro-batch
of it; the optimizer is not counted, as in the formula), summed over all ranks; it changes no tensor and no
state, so training and resuming are undisturbed. A job resumed later finds the file and does not count again.
Every step has the same shapes (sequences packed to seq_len), so the stage multiplies the count by the steps.
A compiled model (`compile = true`, or activation offload, which compiles through torchtitan's graph_trainer) is
not counted: a dispatch mode inside compiled graphs is neither reliable nor verified here, and a failure there
would cost the first step of a large job; the file then records why, and the documents show (b) as open.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from pipeline.fsutil import atomic_write_text

COUNT_FILE = "flop_count.json"


class CountedStep(BaseModel):
    """flop_count.json of a counted step: its FLOPs over all ranks, per aten operation."""

    step: int
    flops_per_step: int
    by_operation: dict[str, int]
    recomputed_flops_per_step: int  # activation recomputation, counted apart (excluded from the figure)
    tokens_per_step: int
    ranks: int | None = None
    activation_checkpoint: str | None = None
    compiled: bool | None = None
    counter: str | None = None  # what counted, with the torch version


class SkippedCount(BaseModel):
    """flop_count.json of a job whose step was not counted, and why."""

    skipped: str


def install(trainer, job_dir: Path, *, tokens_per_step: int, activation_checkpoint: str, compiled: bool) -> bool:
    """Count the next train_step of `trainer`; False when this job has a count already."""
    if (job_dir / COUNT_FILE).exists():
        return False
    if compiled or activation_checkpoint == "offload":
        if int(os.environ.get("RANK", "0")) == 0:
            _save(job_dir, SkippedCount(skipped=(
                "the model was compiled (torch.compile, or activation offload through graph_trainer): operations inside "
                "compiled graphs are not counted; count this configuration in a short run with compile = false and "
                "activation_checkpoint mode selective or full")))
        return False
    from europa_model.flop_count import TrainingFlopCounter, merge

    counted: dict[str, int] = {}
    recomputed: dict[str, int] = {}
    original_fb = trainer.forward_backward_step

    def counted_forward_backward(*args, **kwargs):
        counter = TrainingFlopCounter()
        with counter:
            out = original_fb(*args, **kwargs)
        merge(counted, counter.by_operation())
        merge(recomputed, counter.recomputed)
        return out

    def first_step(*args, **kwargs):
        del trainer.train_step  # later steps run torchtitan's method directly
        trainer.forward_backward_step = counted_forward_backward
        try:
            out = trainer.train_step(*args, **kwargs)
        finally:
            del trainer.forward_backward_step
        _write(job_dir, trainer.step, _summed(counted), _summed(recomputed), tokens_per_step, activation_checkpoint, compiled)
        return out

    trainer.train_step = first_step
    return True


def _summed(counts: dict[str, int]) -> dict[str, int]:
    """Per-op counts summed over all ranks (each rank counted its own share of the step)."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return dict(sorted(counts.items()))
    gathered: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, counts)
    total: dict[str, int] = {}
    for c in gathered:
        for k, v in c.items():
            total[k] = total.get(k, 0) + int(v)
    return dict(sorted(total.items()))


def _write(job_dir: Path, step: int, counted: dict[str, int], recomputed: dict[str, int], tokens_per_step: int,
           activation_checkpoint: str, compiled: bool) -> None:
    import torch

    if int(os.environ.get("RANK", "0")) != 0:
        return
    _save(job_dir, CountedStep(
        step=step, flops_per_step=sum(counted.values()), by_operation=counted,
        recomputed_flops_per_step=sum(recomputed.values()), tokens_per_step=tokens_per_step,
        ranks=int(os.environ.get("WORLD_SIZE", "1")), activation_checkpoint=activation_checkpoint, compiled=compiled,
        counter=f"torch.utils.flop_counter.FlopCounterMode (torch {torch.__version__}) with a torch._grouped_mm formula "
                "(europa_model/flop_count.py)"))


def _save(job_dir: Path, count: CountedStep | SkippedCount) -> None:
    job_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_text(job_dir / COUNT_FILE, json.dumps(count.model_dump(exclude_unset=True), indent=2) + "\n")


def read(job_dir: Path) -> CountedStep | SkippedCount | None:
    path = Path(job_dir) / COUNT_FILE
    if not path.exists():
        return None
    data = json.loads(path.read_text())
    return SkippedCount.model_validate(data) if "skipped" in data else CountedStep.model_validate(data)
