"""torchtitan's checkpoint folder, read without loading anything: which DCP checkpoints are complete.

torchtitan saves step N into `<folder>/checkpoints/step-N/` through torch.distributed.checkpoint, which writes
the `.metadata` file last: a step folder without it is still being written (or was cut off) and is never
listed. Training resumes from, evaluation reads and the pretrain stage publishes only complete checkpoints.
Beside `checkpoints/`, the training process writes `job_info.json` (JOB_INFO): which model the checkpoints hold
(flavor, vocabulary size, routing), so a reader needs no settings to load them. Inside each step folder every
rank writes `checksums-rank<R>.json`, the sha256 of the files it saved (europa_model/checkpoint_digests.py);
`recorded_digests` reads them without touching the checkpoint data.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

CHECKPOINTS = "checkpoints"
METADATA = ".metadata"
JOB_INFO = "job_info.json"
_STEP = re.compile(r"^step-(\d+)$")
RANK_CHECKSUMS_GLOB = "checksums-rank*.json"


def rank_checksums_name(rank: int) -> str:
    return f"checksums-rank{rank}.json"


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


@dataclass(frozen=True)
class ModelInfo:
    """The model a training folder's checkpoints hold, as its JOB_INFO records it."""

    flavor: str
    vocab_size: int
    num_expert_groups: int | None = None  # node-limited routing (absent: not limited)
    num_limited_groups: int | None = None

    @property
    def routing(self) -> dict[str, int | None]:
        """The routing arguments of `europa_model.flavors.build_model_args`."""
        return {"num_expert_groups": self.num_expert_groups, "num_limited_groups": self.num_limited_groups}


def folder_model_info(folder: Path) -> ModelInfo | None:
    """What the training folder `folder` says about its model, or None when it has no JOB_INFO."""
    path = Path(folder) / JOB_INFO
    if not path.exists():
        return None
    data = json.loads(path.read_text(encoding="utf-8"))
    return ModelInfo(data["flavor"], data["vocab_size"], data.get("num_expert_groups"), data.get("num_limited_groups"))


def model_info(ckpt: Checkpoint) -> ModelInfo | None:
    """What the training folder of `ckpt` says about its model, or None when absent."""
    return folder_model_info(ckpt.path.parent.parent)


def recorded_digests(step_folder: Path) -> tuple[dict[str, tuple[str, int]], list[Path]]:
    """({file name: (sha256, bytes)} the ranks recorded for a checkpoint's files, [files not covered]).

    Only names, sizes and the small JSON files are read: a recorded file whose size changed counts as not
    covered, as does a file no rank recorded. The checksums files themselves are not checkpoint data."""
    step_folder = Path(step_folder)
    recorded: dict[str, tuple[str, int]] = {}
    for path in sorted(step_folder.glob(RANK_CHECKSUMS_GLOB)):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            for name, f in data["files"].items():
                recorded[name] = (f["sha256"], int(f["bytes"]))
        except (OSError, ValueError, KeyError, TypeError):
            continue  # a damaged checksums file: its files are hashed again
    covered, missing = {}, []
    for p in sorted(step_folder.iterdir()):
        if not p.is_file() or p.match(RANK_CHECKSUMS_GLOB):
            continue
        digest = recorded.get(p.name)
        if digest is not None and digest[1] == os.stat(p).st_size:
            covered[p.name] = digest
        else:
            missing.append(p)
    return covered, missing


def checkpoint_damage(step_folder: Path) -> str | None:
    """Why the checkpoint in `step_folder` cannot be loaded, or None when every file it needs is there at full length.

    The check reads names, sizes and the DCP `.metadata` (the list of every file and byte range a load reads), never
    the tensors: it runs before every resume, and a europa-1t checkpoint is terabytes. A file whose bytes changed at
    the same length passes; `europa verify` compares checksums. Imports torch (to read `.metadata`)."""
    step_folder = Path(step_folder)
    if not (step_folder / METADATA).is_file():
        return f"no {METADATA} (cut off while saving, or deleted)"
    for path in sorted(step_folder.glob(RANK_CHECKSUMS_GLOB)):
        try:
            files = json.loads(path.read_text(encoding="utf-8"))["files"]
            recorded = {name: int(f["bytes"]) for name, f in files.items()}
        except (OSError, ValueError, KeyError, TypeError):
            continue  # the checksums are a record for verify, not a part of the checkpoint
        for name, size in sorted(recorded.items()):
            f = step_folder / name
            if not f.is_file():
                return f"{name} missing (rank checksums {path.name} lists it)"
            if f.stat().st_size != size:
                return f"{name} is {f.stat().st_size:,} bytes, {size:,} when saved"
    from torch.distributed.checkpoint import FileSystemReader

    try:
        storage = FileSystemReader(str(step_folder)).read_metadata().storage_data
    except Exception as e:  # a truncated or foreign .metadata: whatever unpickling raises
        return f"unreadable {METADATA} ({type(e).__name__}: {str(e)[:120]})"
    needed: dict[str, int] = {}
    for info in (storage or {}).values():
        end = int(getattr(info, "offset", 0) or 0) + int(getattr(info, "length", 0) or 0)
        needed[info.relative_path] = max(needed.get(info.relative_path, 0), end)
    for name, end in sorted(needed.items()):
        f = step_folder / name
        if not f.is_file():
            return f"{name} missing ({METADATA} lists it)"
        if f.stat().st_size < end:
            return f"{name} is {f.stat().st_size:,} bytes, {METADATA} reads up to {end:,}"
    return None
