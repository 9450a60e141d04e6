"""The run directory: one folder per stage, published atomically, guarded by a lock.

Layout (see docs/architecture.md):
    <run>/run.toml                the resolved configuration
    <run>/<stage>/manifest.json   a published stage (complete, or absent: never half-written)
    <run>/.work/<stage>/<fp>/     finished units of an unfinished stage run (survive a crash)
    <run>/.staging/<stage>/       the stage folder being assembled by finalize
    <run>/.state/<stage>.json     the last attempt's outcome (e.g. failed, with its error)
    <run>/.lock                   held (flock) by the one process writing this run
"""

from __future__ import annotations

import datetime as dt
import fcntl
import json
import os
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from pipeline.manifest import Manifest, read_manifest
from pipeline.secrets import redact


class RunDirLocked(RuntimeError):
    pass


def utc_now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


class RunDir:
    def __init__(self, path: Path | str):
        self.path = Path(path).resolve()

    # --- layout -------------------------------------------------------------------------------------
    def stage_dir(self, stage: str) -> Path:
        return self.path / stage

    def staging_dir(self, stage: str) -> Path:
        return self.path / ".staging" / stage

    def work_dir(self, stage: str, fingerprint: str) -> Path:
        return self.path / ".work" / stage / fingerprint[:16]

    @property
    def config_path(self) -> Path:
        return self.path / "run.toml"

    def manifest(self, stage: str) -> Manifest | None:
        return read_manifest(self.stage_dir(stage))

    # --- attempt state (failures are recorded beside, never inside, the published folder) -------------
    def _state_path(self, stage: str) -> Path:
        return self.path / ".state" / f"{stage}.json"

    def write_state(self, stage: str, **state: Any) -> None:
        path = self._state_path(stage)
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, json.dumps(redact(state), indent=2, ensure_ascii=False) + "\n")

    def read_state(self, stage: str) -> dict[str, Any] | None:
        path = self._state_path(stage)
        return json.loads(path.read_text()) if path.exists() else None

    def clear_state(self, stage: str) -> None:
        self._state_path(stage).unlink(missing_ok=True)

    # --- publishing ---------------------------------------------------------------------------------
    def fresh_staging(self, stage: str) -> Path:
        staging = self.staging_dir(stage)
        if staging.exists():
            shutil.rmtree(staging)
        staging.mkdir(parents=True)
        return staging

    def publish(self, stage: str) -> Path:
        """Swap the staging folder in as the stage folder.

        Two renames on one filesystem: readers see the old complete folder, briefly no folder, then the new
        complete folder; never a partial one. The old folder is deleted only after the swap.
        """
        staging, final = self.staging_dir(stage), self.stage_dir(stage)
        trash = self.path / ".trash" / f"{stage}-{os.getpid()}"
        if trash.exists():
            shutil.rmtree(trash)
        if final.exists():
            trash.parent.mkdir(parents=True, exist_ok=True)
            final.rename(trash)
        staging.rename(final)
        if trash.exists():
            shutil.rmtree(trash)
        return final

    def remove_work(self, stage: str) -> None:
        shutil.rmtree(self.path / ".work" / stage, ignore_errors=True)

    # --- the lock -----------------------------------------------------------------------------------
    def is_locked(self) -> bool:
        lock_path = self.path / ".lock"
        if not lock_path.exists():
            return False
        fd = os.open(lock_path, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            return False
        except BlockingIOError:
            return True
        finally:
            os.close(fd)

    @contextmanager
    def lock(self, what: str) -> Iterator[None]:
        """Exclusive writer lock. flock is released by the kernel when the holder dies, so a crash never
        leaves the run directory locked."""
        self.path.mkdir(parents=True, exist_ok=True)
        lock_path = self.path / ".lock"
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.pread(fd, 512, 0).decode(errors="replace").strip() or "another process"
                raise RunDirLocked(
                    f"{self.path}: run directory is in use by {holder}; wait for it to finish "
                    f"(two writers would corrupt the run)"
                ) from None
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"pid {os.getpid()} ({what}, since {utc_now()})".encode(), 0)
            yield
        finally:
            os.close(fd)


def atomic_write_text(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
