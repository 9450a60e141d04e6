"""Following the training job on Slurm: the cluster's follower (state and pending reason, stages/cluster/follow.py)
plus, at every poll, the job's new complete checkpoints and its latest logged step and loss.

Step lines come only from metrics logged since this job was submitted, so a new job's id never stands beside
the previous job's step and loss.
"""

from __future__ import annotations

from pathlib import Path

from europa_model.checkpoints import complete_checkpoints
from pipeline import progress
from stages.cluster import slurm
from stages.cluster.follow import JobFollower
from stages.cluster.slurm import JobStatus
from stages.pretrain import job as jobdir


class TrainingFollower(JobFollower):
    def __init__(self, stage: str, job: Path, poll_s: float):
        super().__init__(stage, poll_s)
        self.job = job
        self._seen = {c.step for c in complete_checkpoints(job)}
        self._since, self._last_step = 0.0, None

    def until_finished(self, job_id: str) -> JobStatus:
        record = next((r for r in reversed(slurm.submitted_jobs(self.job)) if r.job_id == job_id), None)
        self._since, self._last_step = (record.submitted_at_s if record else 0.0), None
        return super().until_finished(job_id)

    def progress(self, job_id: str, status: JobStatus) -> None:
        for c in complete_checkpoints(self.job):
            if c.step not in self._seen:
                self._seen.add(c.step)
                progress.note(self.who, f"Slurm job {job_id}: new checkpoint {c.name}")
        rows = [r for r in jobdir.steps(self.job) if r.time >= self._since]
        if rows and rows[-1].step != self._last_step:
            r = rows[-1]
            self._last_step = r.step
            progress.note(self.who, f"Slurm job {job_id} {status.state}: step {r.step} loss {r.loss:.4f}, "
                                    f"{r.tokens_per_s_per_device or 0:,.0f} tokens/s per rank")
