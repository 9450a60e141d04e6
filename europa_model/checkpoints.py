"""torchtitan's checkpoint folder, read without loading anything: which DCP checkpoints are complete.

torchtitan saves step N into `<folder>/checkpoints/step-N/` through torch.distributed.checkpoint, which writes
the `.metadata` file last: a step folder without it is still being written (or was cut off) and is never
listed. Training resumes from, evaluation reads and the pretrain stage publishes only complete checkpoints.
Beside `checkpoints/`, the training process writes `job_info.json` (JOB_INFO): which model the checkpoints hold
(flavor, vocabulary size), so a reader needs no settings to load them.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

CHECKPOINTS = "checkpoints"
METADATA = ".metadata"
JOB_INFO = "job_info.json"
_STEP = re.compile(r"^step-(\d+)$")


@dataclass(frozen=True)
class Checkpoint:
    step: int
    path: Path

    @property
    def name(self) -> str:
        return f"step-{self.step}"


def complete_checkpoints(folder: Path) -> list[Checkpoint]:
    """The complete checkpoints under `folder`/checkpoints, by step."""
    root = Path(folder) / CHECKPOINTS
    if not root.is_dir():
        return []
    out = []
    for p in root.iterdir():
        m = _STEP.match(p.name)
        if m and (p / METADATA).is_file():
            out.append(Checkpoint(int(m.group(1)), p))
    return sorted(out, key=lambda c: c.step)


def incomplete_checkpoints(folder: Path) -> list[Checkpoint]:
    """Step folders without their `.metadata`: being written (a live job), or damaged (a finished one)."""
    root = Path(folder) / CHECKPOINTS
    if not root.is_dir():
        return []
    out = [Checkpoint(int(m.group(1)), p) for p in root.iterdir()
           if (m := _STEP.match(p.name)) and p.is_dir() and not (p / METADATA).is_file()]
    return sorted(out, key=lambda c: c.step)


def model_info(ckpt: Checkpoint) -> dict | None:
    """What the training folder of `ckpt` says about its model (flavor, vocab_size, ...), or None when absent."""
    path = ckpt.path.parent.parent / JOB_INFO
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else None
