"""The run's training checkpoints, wherever they are: the published pretrain stage's and those of a training job
still running (RunDir.live_attempt), complete ones only (europa_model/checkpoints.py).

Shared by the evaluation (stages/evaluate/) and the export and generation commands (stages/pretrain/commands.py),
so "the checkpoints of this run" and "step-N" / "latest" mean the same thing to both.
"""

from __future__ import annotations

from europa_model.checkpoints import Checkpoint, complete_checkpoints
from pipeline.errors import UsageError
from pipeline.rundir import RunDir

TRAINING = "pretrain"  # the stage whose checkpoints these are


class NoSuchCheckpoint(UsageError):
    """A checkpoint asked for by name that does not exist (yet)."""


def run_checkpoints(run_dir: RunDir, *, published_only: bool = False) -> list[Checkpoint]:
    """Every complete checkpoint of the run, by step: the published stage's and, unless `published_only`,
    those of the live job (what training is writing now; a step in both is the live one's)."""
    by_step = {c.step: c for c in complete_checkpoints(run_dir.stage_dir(TRAINING))}
    live = None if published_only else run_dir.live_attempt(TRAINING)
    if live is not None and live.job_dir is not None:
        by_step.update({c.step: c for c in complete_checkpoints(live.job_dir)})
    return [by_step[s] for s in sorted(by_step)]


def find_checkpoint(checkpoints: list[Checkpoint], which: str) -> Checkpoint:
    """`which` ("latest" or "step-N") among `checkpoints`; NoSuchCheckpoint names the complete ones."""
    if not checkpoints:
        raise NoSuchCheckpoint("no complete checkpoint yet; the pretrain stage writes them (europa stage pretrain)")
    if which == "latest":
        return checkpoints[-1]
    by_name = {c.name: c for c in checkpoints}
    if which not in by_name:
        raise NoSuchCheckpoint(f"no complete checkpoint {which} (complete: {', '.join(by_name)}); one still being "
                               "written becomes complete when its .metadata file appears")
    return by_name[which]


def checkpoint_id(ckpt: Checkpoint) -> str:
    """The identity of a checkpoint's content: the checksum of its DCP metadata (a retrained step-N differs)."""
    from pipeline.fsutil import sha256_file

    return sha256_file(ckpt.path / ".metadata")
