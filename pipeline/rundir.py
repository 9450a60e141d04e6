"""The run directory: one folder per stage, published atomically, guarded by a lock; and the places that are
not stage folders but that more than one part reads (a long job's folder, the evaluation store).

Layout (see docs/architecture.md):
    <run>/run.toml                  the resolved configuration
    <run>/<stage>/manifest.json     a published stage (complete, or absent: never half-written)
    <run>/.work/<stage>/<fp>/       finished units of an unfinished stage run (survive a crash)
    <run>/.work/<stage>/<fp>/job/   the folder of a long job (training) while it runs: `job_dir`; its process
                                    holds the flock `job/.trainer.lock` (JOB_LOCK) for its whole life
    <run>/.staging/<stage>/         the stage folder being assembled
    <run>/.state/<stage>.json       the last unpublished attempt (running, failed, submitted): `attempt`
    <run>/eval/                     a results store that grows while training runs: `store_dir("eval")`
    <run>/eval/jobs/<name>/         a job's folder inside a results store: `store_job_dir`
    <run>/<stage>-launch/           a long job rendered for review, not submitted: `launch_dir`
    <run>/export/<name>/            a model export written without an explicit destination: `export_dir`
    <run>/.lock                     held (flock) by the one process writing this run

Every path another part of the project needs is a method here, so nobody rebuilds another part's private
layout (evaluation finds a live training job through `live_attempt`, not by re-deriving a folder name).
"""

from __future__ import annotations

import datetime as dt
import os
import shutil
import time
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from pipeline import fsutil
from pipeline.manifest import Manifest, ManifestDamaged, read_manifest
from pipeline.secrets import redact

# The flock a long job's process holds in its job folder: taken, a job runs there (perhaps without any europa).
JOB_LOCK = ".trainer.lock"

# Results stores: folders that are appended to under their own lock instead of being published whole.
STORES = {"eval": "evaluation"}  # name -> what holds its lock, for the message when it is taken


class RunDirLocked(fsutil.Locked):
    """Another process is writing this run directory."""


class StoreLocked(fsutil.Locked):
    """Another process is adding to this results store."""


def utc_now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


@dataclass(frozen=True)
class Attempt:
    """A stage's last attempt that has not been published: running (or interrupted), failed, or submitted to
    a scheduler. Read from <run>/.state/<stage>.json; absent once the stage publishes."""

    stage: str
    status: str  # running | failed | submitted
    at: str
    fingerprint: str
    job_dir: Path | None = None  # the attempt's long-job folder, when the stage runs one
    detail: str = ""  # the error of a failed attempt ("error" in the file); what was submitted for a submitted one
    data: dict[str, Any] = field(default_factory=dict)  # everything recorded (e.g. job_id, traceback)


class RunDir:
    def __init__(self, path: Path | str):
        self.path = Path(path).resolve()
        self._path_str = str(self.path)

    # --- layout -------------------------------------------------------------------------------------
    def stage_dir(self, stage: str) -> Path:
        return self.path / stage

    def staging_dir(self, stage: str) -> Path:
        return self.path / ".staging" / stage

    def work_dir(self, stage: str, fingerprint: str) -> Path:
        return Path(self.work_path(stage, fingerprint))

    def work_path(self, stage: str, fingerprint: str) -> str:
        """work_dir as a string (what per-unit paths are joined to)."""
        return os.path.join(self._path_str, ".work", stage, fingerprint[:16])

    def job_dir(self, stage: str, fingerprint: str) -> Path:
        """Where a stage's long job (training: weeks on JUPITER) writes while it runs. It survives crashes and
        failed attempts (a rerun with the same fingerprint resumes in it) and is readable by others while the
        stage is unpublished; the stage publishes its content into the stage folder when the job is done."""
        return self.work_dir(stage, fingerprint) / "job"

    def job_dirs(self, stage: str) -> list[Path]:
        """The long-job folders of every work folder of the stage (its fingerprints, old ones included), by name:
        a job of the same training under an older fingerprint is found among them."""
        return sorted((self.path / ".work" / stage).glob("*/job"))

    def launch_dir(self, stage: str) -> Path:
        """Where a stage's long job is rendered for review without being submitted (`europa launch`)."""
        return self.path / f"{stage}-launch"

    def export_dir(self, name: str) -> Path:
        """Where a model export goes when no destination is given (`europa export hf`)."""
        return self.path / "export" / name

    def logs_dir(self) -> Path:
        """<run>/logs/: the full log of each command."""
        return self.path / "logs"

    def store_dir(self, name: str) -> Path:
        if name not in STORES:
            raise KeyError(f"unknown results store {name!r}; stores: {', '.join(STORES)}")
        return self.path / name

    def store_job_dir(self, store: str, name: str) -> Path:
        """The folder of a job that adds to a results store (a distributed evaluation of one checkpoint)."""
        return self.store_dir(store) / "jobs" / name

    @contextmanager
    def store_lock(self, name: str, what: str, *, waiting: Callable[[str], None] | None = None,
                   poll_s: float = 2.0) -> Iterator[Path]:
        """Exclusive lock of one results store, never the run's lock: evaluation adds results while training
        holds the run for weeks. Taken by another process: StoreLocked, or, with `waiting`, wait for it
        (`waiting(message)` on every try that finds it taken), since what the other adds is then not redone."""
        root = self.store_dir(name)
        busy = f"{root}: {STORES[name]} in progress by {{holder}}; try again when it ends"
        with ExitStack() as held:
            while True:
                try:
                    held.enter_context(fsutil.exclusive_lock(root / ".lock", what, error=StoreLocked, busy=busy))
                    break
                except StoreLocked as e:
                    if waiting is None:
                        raise
                    waiting(str(e))
                    time.sleep(poll_s)
            yield root

    @property
    def config_path(self) -> Path:
        return self.path / "run.toml"

    def manifest(self, stage: str) -> Manifest | None:
        return read_manifest(self.stage_dir(stage))

    # --- attempts (failures are recorded beside, never inside, the published folder) ------------------
    def _state_path(self, stage: str) -> Path:
        return self.path / ".state" / f"{stage}.json"

    def record_attempt(self, stage: str, status: str, fingerprint: str, *, job_dir: Path | None = None,
                       detail: str = "", **data: Any) -> None:
        import json

        path = self._state_path(stage)
        path.parent.mkdir(parents=True, exist_ok=True)
        at = dt.datetime.now(dt.timezone.utc).isoformat(timespec="microseconds")  # orders after a same-second publish
        record = {"status": status, "at": at, "fingerprint": fingerprint,
                  "job_dir": str(job_dir) if job_dir else None, **({"detail": detail} if detail else {}), **data}
        fsutil.atomic_write_text(path, json.dumps(redact(record), indent=2, ensure_ascii=False) + "\n")

    def attempt(self, stage: str) -> Attempt | None:
        """The stage's recorded attempt, published or not (see live_attempt)."""
        import json

        path = self._state_path(stage)
        if not path.exists():
            return None
        d = json.loads(path.read_text(encoding="utf-8"))
        return Attempt(stage, d.get("status", ""), d.get("at", ""), d.get("fingerprint", ""),
                       Path(d["job_dir"]) if d.get("job_dir") else None, d.get("error") or d.get("detail") or "", d)

    def live_attempt(self, stage: str) -> Attempt | None:
        """The attempt that is newer than the published stage (running, interrupted, failed or submitted)."""
        a = self.attempt(stage)
        if a is None:
            return None
        try:
            manifest = self.manifest(stage)
        except ManifestDamaged:
            return a
        return a if manifest is None or a.at > manifest.finished_at else None

    def clear_attempt(self, stage: str) -> None:
        self._state_path(stage).unlink(missing_ok=True)

    # --- publishing ---------------------------------------------------------------------------------
    def fresh_staging(self, stage: str) -> Path:
        staging = self.staging_dir(stage)
        if staging.exists():
            shutil.rmtree(staging)
        staging.mkdir(parents=True)
        return staging

    def remove_trash(self, stage: str) -> None:
        """Old stage folders a publish swapped out and a crash left behind."""
        for trash in self.path.glob(f".trash/{stage}-*"):
            shutil.rmtree(trash, ignore_errors=True)

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

    def remove_work(self, stage: str, *, keep: Callable[[Path], bool] | None = None,
                    published: Path | None = None) -> list[Path]:
        """Delete the stage's work folders (all of them, or all but those `keep` says must stay; `published`, the
        one just published, always goes); links between them (an adopted job folder) are unlinked, never
        followed. Returns the folders kept."""
        root = self.path / ".work" / stage
        if keep is None:
            fsutil.remove_tree(root)
            return []
        current = published.resolve() if published is not None else None
        kept = []
        for folder in sorted(root.iterdir()) if root.is_dir() else []:
            if folder.is_symlink():
                folder.unlink()
            elif folder.resolve() != current and keep(folder):
                kept.append(folder)
            else:
                fsutil.remove_tree(folder)
        if not kept:
            fsutil.remove_tree(root)
        return kept

    # --- the lock -----------------------------------------------------------------------------------
    def is_locked(self) -> bool:
        return fsutil.is_locked(self.path / ".lock")

    @contextmanager
    def lock(self, what: str) -> Iterator[None]:
        """Exclusive writer lock (released by the kernel when the holder dies, so a crash never leaves the run
        directory locked)."""
        self.path.mkdir(parents=True, exist_ok=True)
        with fsutil.exclusive_lock(self.path / ".lock", what, error=RunDirLocked, busy=f"{self.path}: run directory "
                                   "is in use by {holder}; wait for it to finish (two writers would corrupt the run)"):
            yield
