"""Submitting the training job: the one function `europa launch --submit` and the stage both use.

The job trains in the pretrain stage's job folder (RunDir.job_dir, or the folder of the same training it
adopts: stages/pretrain/folders.py), so whoever submitted it, the stage follows it there, evaluation finds its
checkpoints there and a resubmission resumes from them. One job per folder at a time: two would train into
the same checkpoints, so a submit is refused while the folder's last job may still be queued or running.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from stages.cluster import slurm
from stages.cluster.errors import LaunchError
from stages.pretrain.folders import settle_job_folder
from stages.pretrain.launch.sbatch import RenderedJob, render_job

if TYPE_CHECKING:
    from pipeline.stage import BaseStage, StageContext


def refuse_second_job(ctx: StageContext) -> None:
    """LaunchError when the job folder's last job is (or may be) queued or running, naming it and the way out."""
    last = slurm.last_job(ctx.job_dir)
    if last is None:
        return
    status = slurm.job_status(last.job_id)
    if status.active:
        raise LaunchError(
            f"Slurm job {last.job_id} of {ctx.job_dir} is {status.describe()}: a second job would train into the same "
            f"checkpoints; `europa stage {ctx.stage} --run-dir {ctx.run_dir.path}` follows it, or cancel it with "
            f"`scancel {last.job_id}` and submit again")


def submit_training_job(ctx: StageContext, stage: BaseStage, *, record_attempt: bool) -> tuple[str, RenderedJob]:
    """Render the job into the training's job folder, sbatch it and record it in the folder's jobs.jsonl;
    returns (job id, the rendered job). Refused while a job of that folder may be queued or running.
    `stage`: the pretrain stage (what its job folder records it trains). `record_attempt`: also record the
    stage's attempt as submitted (when no stage run is in progress to record it: `europa launch --submit`)."""
    job_dir = settle_job_folder(ctx, stage)
    refuse_second_job(ctx)
    rendered = render_job(ctx.config, ctx.run_dir.path, job_dir, require_account=True)
    script = rendered.write()
    job_id = slurm.submit(script)
    slurm.record_submission(job_dir, job_id, script)
    if record_attempt:
        ctx.run_dir.record_attempt(
            ctx.stage, "submitted", ctx.fingerprint, job_dir=job_dir, job_id=job_id,
            detail=f"Slurm job {job_id}; `europa stage {ctx.stage}` follows it and publishes the result")
    return job_id, rendered
