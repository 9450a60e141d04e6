"""Submitting the training job: the one function `europa launch jupiter --submit` and the stage both use.

The job trains in the pretrain stage's job folder (RunDir.job_dir), so whoever submitted it, the stage
follows it there, evaluation finds its checkpoints there and a resubmission resumes from them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from stages.pretrain.launch import slurm
from stages.pretrain.launch.sbatch import RenderedJob, render_job

if TYPE_CHECKING:
    from pipeline.stage import StageContext

LAUNCH_DIR = "pretrain-launch"  # <run>/pretrain-launch/: a job rendered for review, without --submit


def submit_training_job(ctx: StageContext, *, record_attempt: bool) -> tuple[str, RenderedJob]:
    """Render the job into `ctx.job_dir`, sbatch it and record it in the folder's jobs.jsonl; returns (job id,
    the rendered job). `record_attempt`: also record the stage's attempt as submitted (when no stage run is
    in progress to record it: `europa launch jupiter --submit`)."""
    rendered = render_job(ctx.config, ctx.run_dir.path, ctx.job_dir, require_account=True)
    script = rendered.write()
    job_id = slurm.submit(script)
    slurm.record_submission(ctx.job_dir, job_id, script)
    if record_attempt:
        ctx.run_dir.record_attempt(
            ctx.stage, "submitted", ctx.fingerprint, job_dir=ctx.job_dir, job_id=job_id,
            detail=f"Slurm job {job_id}; `europa stage {ctx.stage}` follows it and publishes the result")
    return job_id, rendered
