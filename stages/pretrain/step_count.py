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

COUNT_FILE = "flop_count.json"


def install(trainer, job_dir: Path, *, tokens_per_step: int, activation_checkpoint: str, compiled: bool) -> bool:
    """Count the next train_step of `trainer`; False when this job has a count already."""
    if (job_dir / COUNT_FILE).exists():
        return False
    if compiled or activation_checkpoint == "offload":
        if int(os.environ.get("RANK", "0")) == 0:
            _save(job_dir, {"skipped": "the model was compiled (torch.compile, or activation offload through graph_trainer): "
                                       "operations inside compiled graphs are not counted; count this configuration in a "
                                       "short run with compile = false and activation_checkpoint mode selective or full"})
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
    row = {
        "step": step,
        "flops_per_step": sum(counted.values()),
        "by_operation": counted,
        "recomputed_flops_per_step": sum(recomputed.values()),
        "tokens_per_step": tokens_per_step,
        "ranks": int(os.environ.get("WORLD_SIZE", "1")),
        "activation_checkpoint": activation_checkpoint,
        "compiled": compiled,
        "counter": f"torch.utils.flop_counter.FlopCounterMode (torch {torch.__version__}) with a torch._grouped_mm formula "
                   "(europa_model/flop_count.py)",
    }
    _save(job_dir, row)


def _save(job_dir: Path, row: dict) -> None:
    job_dir.mkdir(parents=True, exist_ok=True)
    tmp = job_dir / f".{COUNT_FILE}.tmp"
    tmp.write_text(json.dumps(row, indent=2) + "\n")
    os.replace(tmp, job_dir / COUNT_FILE)


def read(job_dir: Path) -> dict | None:
    path = Path(job_dir) / COUNT_FILE
    return json.loads(path.read_text()) if path.exists() else None
