"""Progress on the terminal for long work, the same whichever engine runs the units.

Plain lines on stderr (they survive log files, CI and Slurm output, where a redrawn bar does not): one when a
stage starts, one per finished unit at most every couple of seconds, one when it ends. Stage code reports
progress inside a unit with `note(...)`.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pipeline.manifest import Manifest

_lock = threading.Lock()
_last: dict[str, float] = {}
_started: dict[str, float] = {}
quiet = False
MIN_INTERVAL_S = 2.0


def _emit(line: str) -> None:
    if not quiet:
        print(line, file=sys.stderr, flush=True)


def stage_started(stage: str, units: int | None, step: str | None = None) -> None:
    """A stage (or one step of it) begins; `units` None for a stage that runs as one piece."""
    _started[stage] = time.monotonic()
    _last.pop(stage, None)
    if units is None:
        _emit(f"[{stage}] started")
    else:
        _emit(f"[{stage}] {'step ' + step + ' ' if step else ''}started: {units} unit(s)")


def unit_done(stage: str, done: int, total: int, unit_id: str) -> None:
    with _lock:
        now = time.monotonic()
        if done != total and now - _last.get(stage, 0.0) < MIN_INTERVAL_S:
            return
        _last[stage] = now
        elapsed = now - _started.get(stage, now)
        eta = elapsed / done * (total - done) if done else 0.0
        _emit(f"[{stage}] {done}/{total} units ({done / total:.0%}), last {unit_id}, {elapsed:.0f}s elapsed, ~{eta:.0f}s left")


def note(stage: str, message: str) -> None:
    _emit(f"[{stage}] {message}")


def stage_finished(stage: str, manifest: Manifest) -> None:
    counts = ", ".join(f"{k} {v:,}" if isinstance(v, int) else f"{k} {v}" for k, v in manifest.summary.items())
    _emit(f"[{stage}] done in {manifest.duration_s:.1f}s: {counts}")
