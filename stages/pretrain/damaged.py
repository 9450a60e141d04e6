"""Damaged checkpoints set aside before training resumes, so it resumes from the newest intact one.

torchtitan resumes from the highest `step-N` folder that holds a `.metadata`, and a load that then misses a file
fails (the stage would stop there for good); a step folder without `.metadata` in a job no trainer runs is a save
that was cut off or a file someone deleted. Each such checkpoint (europa_model.checkpoints.checkpoint_damage) is
moved to `<job>/damaged-checkpoints/step-N` with its reason in `damaged-checkpoints/set-aside.jsonl`: named and
kept, never deleted, and outside `checkpoints/`, where torchtitan's keep-latest purge would match any name that
contains `step-N`. The pretrain stage publishes the folder with the job, and its record lists what was set aside.

Only call it while no trainer can write to the job folder: a live one may be saving its newest step right now.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from europa_model.checkpoints import checkpoint_damage, complete_checkpoints, incomplete_checkpoints
from pipeline.fsutil import read_jsonl
from stages.pretrain.record import SetAsideCheckpoint

DAMAGED = "damaged-checkpoints"
LOG = "set-aside.jsonl"


SetAside = SetAsideCheckpoint  # a checkpoint moved out of the way: its step, where it is now, why


def set_aside_damaged(job: Path) -> list[SetAside]:
    """Move every damaged checkpoint of `job` to DAMAGED; returns what was moved now."""
    job = Path(job)
    candidates = sorted(complete_checkpoints(job) + incomplete_checkpoints(job), key=lambda c: c.step)
    moved = []
    for ckpt in candidates:
        reason = checkpoint_damage(ckpt.path)
        if reason is None:
            continue
        target = _free_name(job / DAMAGED / ckpt.name)
        target.parent.mkdir(parents=True, exist_ok=True)
        ckpt.path.rename(target)
        row = SetAside(step=ckpt.step, path=target.relative_to(job).as_posix(), reason=reason,
                       time=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
        with open(job / DAMAGED / LOG, "a", encoding="utf-8") as f:
            f.write(row.model_dump_json() + "\n")
        moved.append(row)
    return moved


def set_aside(folder: Path) -> list[SetAside]:
    """Everything ever set aside in `folder` (a job folder or the published stage folder), oldest first."""
    path = Path(folder) / DAMAGED / LOG
    return [SetAside.model_validate(r) for r in read_jsonl(path)] if path.exists() else []


def _free_name(path: Path) -> Path:
    """`path`, or `path.2`, `path.3`...: a step damaged twice keeps both copies."""
    n, candidate = 1, path
    while candidate.exists():
        n += 1
        candidate = path.with_name(f"{path.name}.{n}")
    return candidate

