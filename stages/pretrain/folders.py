"""Which job folder a training continues in: its own, or an existing folder of the same training.

A job folder is `<run>/.work/pretrain/<fingerprint>/job` (RunDir.job_dir), so its name changes whenever the
fingerprint's recipe does (a key becomes launch-only, the digest changes) while the training in it stays the
same: the stage must continue those checkpoints, not start at step 0 beside them. So every job folder records
what it trains, `training.json` (the fingerprint's inputs, pipeline/status.py), written when the stage starts
it and when `europa launch --submit` submits into it; a stage whose own folder holds no training yet adopts a
folder whose recorded training is this one, with the keys that are launch-only now left out on both sides.
Adopting renames the folder into place, or, while a Slurm job of it is queued or running (it writes to the old
path), links the new name to it.

Job folders with checkpoints are never deleted without --force (PretrainStage.keep_work); one of other settings
is named when a new folder starts at step 0, and one written before training.json existed, which cannot be
told apart, stops the stage with the command that continues it and the way to start afresh instead.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

from europa_model.checkpoints import CHECKPOINTS, complete_checkpoints
from pipeline import progress
from pipeline.fsutil import atomic_write_text
from pipeline.stage import StageError
from stages.cluster import slurm
from stages.pretrain.damaged import DAMAGED

if TYPE_CHECKING:
    from pipeline.stage import BaseStage, StageContext

TRAINING = "training.json"


def _comparable(inputs: dict[str, Any], launch_only: tuple[str, ...]) -> dict[str, Any]:
    """The inputs as JSON would hold them, without the keys that are launch-only now."""
    data = json.loads(json.dumps(inputs, sort_keys=True, default=str))
    data["config"] = {k: v for k, v in (data.get("config") or {}).items() if k not in launch_only}
    return data


def current_training(ctx: StageContext, stage: BaseStage) -> dict[str, Any]:
    """What `stage` (the one `ctx` is for) trains now, as a job folder records it."""
    from pipeline.status import fingerprint_inputs

    return _comparable(fingerprint_inputs(stage, ctx), stage.launch_only_settings)


def recorded_training(job: Path, launch_only: tuple[str, ...]) -> dict[str, Any] | None:
    try:
        data = json.loads((job / TRAINING).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return _comparable(data.get("inputs") or {}, launch_only)


def settle_job_folder(ctx: StageContext, stage: BaseStage) -> Path:
    """The job folder `stage` continues its training in (always `ctx.job_dir`, by then holding the training's
    earlier checkpoints if any folder had them), with its training.json written."""
    job = ctx.job_dir
    launch_only = stage.launch_only_settings
    mine = current_training(ctx, stage)
    if not _started(job):
        others = [f for f in ctx.run_dir.job_dirs(ctx.stage)
                  if f.parent != job.parent and not f.parent.is_symlink() and _started(f)]
        same = [f for f in others if recorded_training(f, launch_only) == mine]
        legacy = [f for f in others if not (f / TRAINING).exists() and complete_checkpoints(f)]
        recovered = _recover_published(ctx, stage, job, mine) if not same and not ctx.from_scratch else None
        if recovered is not None:
            progress.note(ctx.stage, f"the published stage's outputs are damaged; continuing its training from "
                                     f"{recovered} (its checkpoints linked into {job}, not retrained)")
        elif same:
            source = max(same, key=_newest_step)
            _adopt(source, job)
            done = complete_checkpoints(job)
            progress.note(ctx.stage, f"continuing the same training in {source}"
                          + (f" (newest checkpoint {done[-1].name})" if done else "") + f"; its folder is now {job}")
        elif legacy:
            old = legacy[0]
            raise StageError(
                f"stage {ctx.stage}: {old} holds checkpoints (newest {complete_checkpoints(old)[-1].name}) written before "
                f"job folders recorded what they train, so whether they are this training cannot be told; to "
                f"continue them: `mv {old.parent} {job.parent}` and rerun; to start afresh: move or delete "
                f"{old.parent} (or rerun with --force, which deletes every pretrain work folder)")
        else:
            kept = [f for f in others if complete_checkpoints(f)]
            if kept:
                listed = "; ".join(f"{f} (newest {complete_checkpoints(f)[-1].name})" for f in kept)
                progress.note(ctx.stage, f"starting a new job folder {job} at step 0: the checkpoints in {listed} are "
                                         "of other settings and are kept")
    job.mkdir(parents=True, exist_ok=True)
    record = {"fingerprint": ctx.fingerprint, "inputs": mine}
    path = job / TRAINING
    if not path.exists() or json.loads(path.read_text(encoding="utf-8")) != record:
        atomic_write_text(path, json.dumps(record, indent=2, sort_keys=True) + "\n")
    return job


def _recover_published(ctx: StageContext, stage: BaseStage, job: Path, mine: dict[str, Any]) -> Path | None:
    """Bring the published stage's training back into the empty job folder `job` when it is this training: the
    stage reruns because a published file is damaged (the job folder went when it was published), and a missing
    `.metadata` of one checkpoint must not cost the whole training. Checkpoint files are hard-linked (no copy of
    terabytes; DCP never rewrites a saved file); the small files are copied, since a resumed job appends to them
    and the published folder stays as it was until the new publish replaces it. Returns the published folder, or
    None when it holds no training or another one."""
    from pipeline.manifest import ManifestDamaged
    from stages.pretrain.publish import PUBLISHED

    published = ctx.run_dir.stage_dir(ctx.stage)
    if not (published / CHECKPOINTS).is_dir():
        return None
    recorded = recorded_training(published, stage.launch_only_settings)
    if recorded is None:  # published before the stage folder kept training.json: its manifest says
        try:
            manifest = ctx.run_dir.manifest(ctx.stage)
        except ManifestDamaged:
            return None
        if manifest is None or manifest.fingerprint != ctx.fingerprint:
            return None
    elif recorded != mine:
        return None
    if job.parent.is_symlink():
        job.parent.unlink()
    job.mkdir(parents=True, exist_ok=True)
    for pattern in PUBLISHED:
        for src in sorted(published.glob(pattern)):
            if src.is_dir():
                link = _link_unless_appended if src.name in (CHECKPOINTS, DAMAGED) else shutil.copy2
                shutil.copytree(src, job / src.name, copy_function=link, dirs_exist_ok=True)
            elif src.is_file():
                shutil.copy2(src, job / src.name)
    return published


def _link_unless_appended(src: str, dst: str) -> None:
    """Saved checkpoint files are never rewritten: a hard link; the set-aside log is appended to: a copy."""
    if Path(src).name.endswith(".jsonl"):
        shutil.copy2(src, dst)
    else:
        os.link(src, dst)


def holds_training(work_folder: Path) -> bool:
    """Whether a stage work folder holds a job's checkpoints (what only --force may delete)."""
    return bool(complete_checkpoints(work_folder / "job"))


def _started(job: Path) -> bool:
    return job.is_dir() and (bool(complete_checkpoints(job)) or (job / "jobs.jsonl").exists()
                             or (job / "segments.jsonl").exists())


def _newest_step(job: Path) -> int:
    done = complete_checkpoints(job)
    return done[-1].step if done else -1


def _adopt(source: Path, job: Path) -> None:
    """Make `job` the folder `source` is: rename it (its work folder) into place, or link to it while a Slurm job
    of it may still write to the old path."""
    old, new = source.parent, job.parent
    if new.is_symlink():
        new.unlink()
    elif new.exists():
        shutil.rmtree(new)  # nothing trained in it yet (_started was false): at most a rendered script
    last = slurm.last_job(source)
    busy = last is not None and _may_be_running(last.job_id)
    if busy:
        os.symlink(old.name, new)  # relative: the run directory may move
    else:
        os.rename(old, new)


def _may_be_running(job_id: str) -> bool:
    if shutil.which("squeue") is None:
        return False  # no Slurm here: nothing can be running for it
    return slurm.job_status(job_id).active
