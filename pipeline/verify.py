"""Whether a run's published files are still what their manifests say: every stage, every file, named.

A manifest lists each output with its size and sha256, computed once, when the stage published (the shards
stage computes them while writing). Nothing re-checks them on its own afterwards: training trusts the
manifest and reads terabytes without hashing them, `europa status` cannot afford to. This module is the one
place that compares the files with their manifests, at two depths:
- `checksums=False`: each file exists and has its size (a stat per file; cheap enough for `europa status`);
- `checksums=True`: and its bytes hash to the manifest's sha256 (reads everything, on up to 8 threads, with
  progress: a full run's checkpoints and shards are terabytes; `europa verify`).
It reads only: it takes no lock, so it can check a run that a training job holds for weeks.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable

from pipeline.fsutil import sha256_file
from pipeline.manifest import OutputFile
from pipeline.rundir import RunDir

CHUNK = 8 << 20
MAX_THREADS = 8
UNREADABLE = "unreadable"

# progress(stage, bytes checked so far, bytes to check): called from the hashing threads, often; throttle it
Progress = Callable[[str, int, int], None]


@dataclass(frozen=True)
class Damage:
    path: str  # relative to the stage folder
    problem: str  # "missing" | "size" | "checksum" | "manifest"
    detail: str

    def describe(self, stage: str) -> str:
        return f"{stage}/{self.path}: {self.detail}"


@dataclass
class StageCheck:
    stage: str
    checksums: bool  # whether the bytes were hashed (else existence and sizes only)
    files: int = 0
    bytes: int = 0
    damage: list[Damage] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.damage


def check_stage(run_dir: RunDir, stage: str, *, checksums: bool = True, progress: Progress | None = None) -> StageCheck | None:
    """The stage's published outputs against its manifest; None when the stage has no published manifest."""
    folder = run_dir.stage_dir(stage)
    try:
        manifest = run_dir.manifest(stage)
    except ValueError as e:  # unreadable manifest.json: the stage's record itself is damaged
        return StageCheck(stage, checksums, damage=[Damage("manifest.json", "manifest", str(e))])
    if manifest is None:
        return None
    result = StageCheck(stage, checksums, files=len(manifest.outputs), bytes=sum(o.bytes for o in manifest.outputs))
    to_hash: list[OutputFile] = []
    for out in manifest.outputs:
        try:
            size = (folder / out.path).stat().st_size
        except FileNotFoundError:
            result.damage.append(Damage(out.path, "missing", "missing"))
            continue
        if size != out.bytes:
            result.damage.append(Damage(out.path, "size", f"size mismatch: {size:,} bytes, the manifest says {out.bytes:,}"))
        elif checksums:
            to_hash.append(out)
    if to_hash:
        counter = _Counter(stage, sum(o.bytes for o in to_hash), progress)
        digests = _hash_all([str(folder / o.path) for o in to_hash], counter)
        for out, actual in zip(to_hash, digests):
            if actual.startswith(UNREADABLE):
                result.damage.append(Damage(out.path, "missing", actual))
            elif actual != out.sha256:
                result.damage.append(Damage(out.path, "checksum", f"checksum mismatch: sha256 {actual[:16]}..., "
                                                                 f"the manifest says {out.sha256[:16]}..."))
    result.damage.sort(key=lambda d: d.path)
    return result


class _Counter:
    def __init__(self, stage: str, total: int, progress: Progress | None):
        self.stage, self.total, self.progress = stage, total, progress
        self.done = 0
        self._lock = threading.Lock()

    def add(self, n: int) -> None:
        if self.progress is None:
            return
        with self._lock:
            self.done += n
            done = self.done
        self.progress(self.stage, done, self.total)


def _hash_all(paths: list[str], counter: _Counter) -> list[str]:
    """sha256 of each file on a few threads (hashlib and reads release the GIL); a file that vanished or became
    unreadable since it was stat'ed reports as such instead of aborting the whole check."""
    def one(path: str) -> str:
        try:
            return sha256_file(path, CHUNK, on_read=counter.add)
        except OSError as e:
            return f"{UNREADABLE} ({e.strerror or e})"

    workers = min(MAX_THREADS, os.cpu_count() or 1, len(paths))
    if workers <= 1:
        return [one(p) for p in paths]
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(one, paths))


def human_bytes(n: int) -> str:
    for unit, size in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n >= size:
            return f"{n / size:,.1f} {unit}"
    return f"{n} bytes"


class ProgressLines:
    """A `Progress` that prints a line on stderr at most every few seconds once a check runs long (plain lines:
    they survive log files and Slurm output)."""

    INTERVAL_S = 5.0

    def __init__(self) -> None:
        self._started: dict[str, float] = {}
        self._last = 0.0

    def __call__(self, stage: str, done: int, total: int) -> None:
        now = time.monotonic()
        start = self._started.setdefault(stage, now)
        if now - self._last < self.INTERVAL_S or now - start < self.INTERVAL_S:
            return
        self._last = now
        rate = done / (now - start)
        left = (total - done) / rate if rate else 0.0
        print(f"[verify] {stage}: {human_bytes(done)} of {human_bytes(total)} checked ({done / max(total, 1):.0%}), "
              f"{rate / 1e6:,.0f} MB/s, ~{left:,.0f}s left", file=sys.stderr, flush=True)

    def finish(self, stage: str) -> None:
        self._started.pop(stage, None)
