"""Submitting the training job: the one function `europa launch --submit` and the stage both use.

The job trains in the pretrain stage's job folder (RunDir.job_dir, or the folder of the same training it
adopts: stages/pretrain/folders.py), so whoever submitted it, the stage follows it there, evaluation finds its
checkpoints there and a resubmission resumes from them. One job per folder at a time: two would train into
the same checkpoints, so a submit is refused while the folder's last job may still be queued or running.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pathlib import Path

from stages.pretrain.folders import settle_job_folder
from stages.pretrain.launch import slurm
from stages.pretrain.launch.checks import LaunchError
from stages.pretrain.launch.sbatch import SCRIPT_NAME, RenderedJob, render_job, render_sbatch
from stages.pretrain.launch.slurm import is_finished, job_state  # noqa: F401 - the launcher plug-in's interface

if TYPE_CHECKING:
    from pipeline.stage import StageContext

LAUNCH_DIR = "pretrain-launch"  # <run>/pretrain-launch/: a job rendered for review, without --submit


def refuse_second_job(ctx: StageContext) -> None:
    """LaunchError when the job folder's last job is (or may be) queued or running, naming it and the way out."""
    last = slurm.last_job(ctx.job_dir)
    if last is None:
        return
    status = slurm.job_status(last["job_id"])
    if status.active:
        job_id = last["job_id"]
        raise LaunchError(
            f"Slurm job {job_id} of {ctx.job_dir} is {status.describe()}: a second job would train into the same "
            f"checkpoints; `europa stage {ctx.stage} --run-dir {ctx.run_dir.path}` follows it, or cancel it with "
            f"`scancel {job_id}` and submit again")


def submit_training_job(ctx: StageContext, *, record_attempt: bool) -> tuple[str, RenderedJob]:
    """Render the job into the training's job folder, sbatch it and record it in the folder's jobs.jsonl;
    returns (job id, the rendered job). Refused while a job of that folder may be queued or running.
    `record_attempt`: also record the stage's attempt as submitted (when no stage run is in progress to record
    it: `europa launch --submit`)."""
    job_dir = settle_job_folder(ctx)
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


def submit_job(config, run_dir: Path, job_dir: Path, *, entry: list[str], nodes: int, time_limit: str, name: str,
               title: str) -> tuple[str, Path]:
    """Another job of the run on the training's machine and Slurm settings ([pretrain.machine]: partition,
    GPUs, cores, interfaces, binding; [pretrain.slurm]: account, setup, environment), running `python -m <entry>`
    on every rank of `nodes` nodes x [pretrain.parallelism] processes_per_node: the launcher plug-in other stages reach through pipeline.registry.JOB_LAUNCHERS
    (the distributed evaluation). Rendered into `job_dir`, submitted, recorded in its jobs.jsonl; returns
    (job id, script path). Not checked against training's memory plan: the job is not training."""
    settings = config.section("pretrain")
    settings = settings.model_copy(update={
        "parallelism": settings.parallelism.model_copy(update={"nodes": nodes}),
        "slurm": settings.slurm.model_copy(update={"time_limit": time_limit, "job_name": name})})
    job_dir = Path(job_dir).resolve()
    job_dir.mkdir(parents=True, exist_ok=True)
    script = job_dir / SCRIPT_NAME
    script.write_text(render_sbatch(settings, config, Path(run_dir).resolve(), job_dir, [f"job dir  {job_dir}"],
                                    entry=entry, title=title))
    script.chmod(0o755)
    job_id = slurm.submit(script)
    slurm.record_submission(job_dir, job_id, script)
    return job_id, script
