"""Running the training job of one stage run until it has reached `steps`: as a subprocess here (`launcher =
"local"`: one process; `"torchrun"`: N ranks on this machine) or as a Slurm job (`"slurm"`: the machine of
[pretrain.machine]) that it submits, or finds submitted, and follows, showing its state, steps, loss and new
checkpoints.

The job writes into the stage's job folder (RunDir.job_dir, or the folder of the same training it adopts:
folders.py), which survives crashes; running the stage again resumes from its newest complete checkpoint.
Why a training process stopped comes from the failure file it writes (failure.py), not from its log.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections import deque
from pathlib import Path

from europa_model.checkpoints import complete_checkpoints
from europa_model.devices import resolve_device
from pipeline import progress
from pipeline.children import die_with_parent
from pipeline.config import REPO_ROOT
from pipeline.fsutil import is_locked
from pipeline.rundir import JOB_LOCK
from pipeline.stage import BaseStage, Detached, StageContext, StageError
from stages.cluster import slurm
from stages.pretrain import job as jobdir
from stages.pretrain.config import PretrainConfig
from stages.pretrain.damaged import set_aside_damaged
from stages.pretrain.failure import clear_failures, read_failure
from stages.pretrain.folders import settle_job_folder
from stages.pretrain.follow import TrainingFollower

Ctx = StageContext[PretrainConfig]


class TrainingJob:
    """The training of `stage` (the pretrain stage) for the run of `ctx`."""

    def __init__(self, stage: BaseStage[PretrainConfig], ctx: Ctx):
        self.stage, self.ctx, self.name = stage, ctx, ctx.stage

    def run(self) -> Path:
        """Train until the job folder holds the checkpoint of the last step; returns the job folder."""
        settings = self.ctx.settings
        job = settle_job_folder(self.ctx, self.stage)
        if settings.launcher != "slurm" or slurm.last_job(job) is None:  # else: when no Slurm job of it runs
            self._set_aside_damaged(job)
        done = complete_checkpoints(job)
        if done and done[-1].step >= settings.steps:
            progress.note(self.name, f"job already reached step {done[-1].step}; nothing to train")
        elif settings.launcher == "slurm":
            self._follow_slurm(job)
        else:
            if done:
                progress.note(self.name, f"resuming from {done[-1].name} of {job}")
            self._run_local(job)
        final = complete_checkpoints(job)
        if not final or final[-1].step < settings.steps:
            reached = final[-1].step if final else 0
            raise StageError(
                f"stage pretrain: training ended at step {reached} of {settings.steps} without an error exit "
                f"(ran out of data or was stopped); see {job / 'train.log'}; rerun to resume from the last checkpoint")
        return job

    def _set_aside_damaged(self, job: Path) -> None:
        """Move damaged checkpoints out of the way (damaged.py) unless a trainer holds the job folder: an orphan
        may still be saving, and it will refuse the trainer this stage starts anyway."""
        if is_locked(job / JOB_LOCK):
            return
        for row in set_aside_damaged(job):
            progress.note(self.name, f"checkpoint step-{row.step} is damaged ({row.reason}); set aside as "
                                     f"{job / row.path}; training resumes from the newest intact checkpoint")

    # --- on this machine ----------------------------------------------------------------------------------
    def _command(self, job: Path, *extra: str) -> list[str]:
        return [sys.executable, "-m", "stages.pretrain.entry", "--run-dir", str(self.ctx.run_dir.path), "--job-dir",
                str(job), *extra]

    def _run_local(self, job: Path) -> None:
        settings = self.ctx.settings
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        world = settings.parallelism.world_size
        if settings.launcher == "torchrun":
            if resolve_device(settings.device) == "cpu" and not complete_checkpoints(job) \
                    and not (job / "seed" / "checkpoints" / "step-0" / ".metadata").exists():
                progress.note(self.name, "writing a seed checkpoint (CPU ranks cannot initialise sharded experts differently)")
                self._stream(self._command(job, "--seed-checkpoint"), env, job, "seed", 0)
            cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={world}",
                   "-m", "stages.pretrain.entry", "--run-dir", str(self.ctx.run_dir.path), "--job-dir", str(job)]
        else:
            cmd = self._command(job)
        progress.note(self.name, f"training {settings.flavor} for {settings.steps} steps on {world} process(es); log {job / 'train.log'}")
        self._stream(cmd, env, job, "train", settings.steps)

    def _stream(self, cmd: list[str], env: dict, job: Path, what: str, steps: int) -> None:
        """Run a training process, keep its output in train.log, show the training's live line (step, loss,
        tokens/s, ETA) from the metrics it records whenever it logs a step."""
        clear_failures(job)
        tail: deque[str] = deque(maxlen=15)
        first: tuple[int, float] | None = None  # the first step seen and when: the ETA leaves start-up out
        with open(job / "train.log", "a", encoding="utf-8") as log:
            log.write(f"\n=== {time.strftime('%Y-%m-%d %H:%M:%S')} {' '.join(cmd)}\n")
            proc = subprocess.Popen(cmd, cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    text=True, errors="replace", preexec_fn=die_with_parent())  # this thread follows it
            try:
                for line in proc.stdout:
                    log.write(line)
                    tail.append(line.rstrip())
                    if " step: " in line and (row := jobdir.last_metrics(job)) is not None:
                        first = first or (row.step, time.monotonic())
                        progress.training(self.name, row.step, steps, row.loss, row.tokens_per_s_per_device, since=first)
                code = proc.wait()
            except BaseException:
                proc.terminate()
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                raise
        if code != 0:
            raise failed(job, f"{what} process exited with {code}", tail[-1] if tail else "")

    # --- on Slurm -----------------------------------------------------------------------------------------
    def _follow_slurm(self, job: Path) -> None:
        """Follow the job already submitted for this job folder (by `europa launch --submit` or an earlier run of
        this stage) while it is queued or running; otherwise submit one, which resumes from the newest
        checkpoint. Whether training is done is the checkpoints' say, not the job's end state (a job that
        reached the last step and then ran out of time trained everything; one Slurm has forgotten without
        accounting may have too)."""
        from stages.pretrain.launch.submit import submit_training_job

        ctx = self.ctx
        follow = TrainingFollower(self.name, job, ctx.settings.slurm.poll_interval_s)
        last = slurm.last_job(job)
        following = last.job_id if last else None  # a job that may be queued or running
        try:
            status = follow.wait_until_known(following) if following else None
            if status is None or status.finished:
                following = None
                if status is not None:
                    progress.note(self.name, f"Slurm job {status.job_id} {status.describe()}; submitting a new job, "
                                             "which resumes from the newest checkpoint")
                clear_failures(job)
                self._set_aside_damaged(job)
                following, rendered = submit_training_job(ctx, self.stage, record_attempt=False)
                progress.note(self.name, f"submitted Slurm job {following} ({rendered.script_path}); following it")
            else:
                progress.note(self.name, f"following Slurm job {following}, submitted earlier for {job}")
            status = follow.until_finished(following)
        except KeyboardInterrupt:
            if following is None:
                raise
            state = follow.last.describe() if follow.last and follow.last.job_id == following else "state unknown"
            raise Detached(
                f"stopped following Slurm job {following}, which keeps running ({state}); follow it again with "
                f"`europa stage {self.name} --run-dir {ctx.run_dir.path}`, cancel it with `scancel {following}`") from None
        job_id = following
        self._set_aside_damaged(job)  # the job has ended: nothing writes to its folder
        done = complete_checkpoints(job)
        if done and done[-1].step >= ctx.settings.steps:
            if status.state != "COMPLETED":
                progress.note(self.name, f"Slurm job {job_id} {status.describe()}, after its checkpoints reached the "
                                         f"final step {done[-1].step}: training is complete")
            return
        failure = read_failure(job)
        if failure is not None and failure.kind == "diverged":
            raise failed(job, f"Slurm job {job_id} ended {status.state}", "")
        ended = status.describe() if status.state == slurm.ENDED else f"ended {status.state}"
        cause = f" ({failure.message[:300]})" if failure else ""
        reached = f"newest checkpoint {done[-1].name}" if done else "no checkpoint yet"
        hint = ("raise [pretrain.slurm] time_limit (it does not change what is trained) or rerun the stage to "
                "continue" if status.state == "TIMEOUT" else "rerun the stage to resubmit")
        tail = slurm.output_tail(job, job_id)
        raise StageError(f"stage pretrain: Slurm job {job_id} {ended}{cause}; {reached}; {hint} (it resumes from "
                         f"the newest checkpoint); {job}/slurm-{job_id}.out ends:\n{tail or '(no output)'}")


def failed(job: Path, what: str, last_line: str) -> StageError:
    """The stage's error for processes that ended badly, from the failure they recorded (or, when they died
    without a word, e.g. killed by a signal, the last line they printed)."""
    failure = read_failure(job)
    log = f"(full output: {job / 'train.log'})"
    if failure is not None and failure.kind == "diverged":
        good = [c for c in complete_checkpoints(job) if failure.step is None or c.step < failure.step]
        last = f"last good checkpoint {good[-1].path}" if good else "no checkpoint before it"
        return StageError(
            f"stage pretrain: training diverged at step {failure.step} ({failure.message}); {last}; "
            f"lower [pretrain.optimizer] lr or lengthen [pretrain.schedule] warmup_steps {log}")
    cause = failure.message if failure is not None else last_line.strip()
    return StageError(f"stage pretrain: {what}: {cause[:300]} {log}")
