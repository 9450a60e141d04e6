"""A step's output folder appears whole or not at all, and a finished step is never redone.

Why: every step runs as a unit on a task runner that may kill or retry it (a lost Dask worker, a Slurm
pre-emption). The step writes into a hidden sibling `.<name>.tmp-<pid>-<random>/`, puts `stats.json` in last
and renames the folder into place: a reader that sees the folder sees all of it, a rerun after a kill finds
no folder and redoes the step, and a rerun after success returns the recorded statistics without reading any
input. Leftover tmp folders of killed attempts are hidden and left alone (a second attempt of the same unit
may still be running elsewhere); they go with the work directory.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from pathlib import Path
from typing import Any, Callable

STATS = "stats.json"


def finished(out_dir: Path) -> dict[str, Any] | None:
    """The recorded statistics of a finished step, or None when it has not finished."""
    path = Path(out_dir) / STATS
    return json.loads(path.read_text()) if path.exists() else None


def run_in(folder: Path, body: Callable[[Path], dict[str, Any]]) -> dict[str, Any]:
    """Run `body(folder)` in a folder someone else publishes atomically (the executor's unit folder); `stats.json`
    last, as `run_once` writes it, so the next step reads either the same way."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    stats = body(folder)
    (folder / STATS).write_text(json.dumps(stats, sort_keys=True, indent=1))
    return stats


def run_step(out_dir: Path, body: Callable[[Path], dict[str, Any]], atomic: bool) -> dict[str, Any]:
    return run_once(out_dir, body) if atomic else run_in(out_dir, body)


def run_once(out_dir: Path, body: Callable[[Path], dict[str, Any]]) -> dict[str, Any]:
    """Run `body(tmp_folder) -> statistics` unless `out_dir` is finished; publish atomically."""
    out_dir = Path(out_dir)
    done = finished(out_dir)
    if done is not None:
        return done
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = out_dir.parent / f".{out_dir.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    try:
        stats = body(tmp)
        (tmp / STATS).write_text(json.dumps(stats, sort_keys=True, indent=1))
        try:
            tmp.rename(out_dir)
        except OSError:  # another attempt of the same step published first; its output is identical
            shutil.rmtree(tmp, ignore_errors=True)
            done = finished(out_dir)
            if done is None:
                raise
            return done
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return stats
