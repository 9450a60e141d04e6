"""Following a Slurm job of the pretrain stage until it ends: its state (and why it is pending), new complete
checkpoints, the latest logged step and loss, every `[pretrain.slurm] poll_interval_s`.

Each line says something new: the state is shown when it or its reason changes (a job that pends for
PartitionConfig, asking for more than a node has, says so once, not every minute), and step lines come only
from metrics logged since this job was submitted, so a new job's id never stands beside the previous job's
step and loss. When Slurm does not answer (the controller is down or slow) that is said once, and polling
goes on: it says nothing about the job, which may well be running (stages/pretrain/launch/slurm.py).
"""

from __future__ import annotations

import time
from pathlib import Path

from europa_model.checkpoints import complete_checkpoints
from pipeline import progress
from stages.pretrain import job as jobdir
from stages.pretrain.launch import slurm
from stages.pretrain.launch.slurm import UNREACHABLE, JobStatus


class SlurmFollower:
    def __init__(self, stage: str, job: Path, poll_s: float):
        self.stage, self.job, self.poll_s = stage, job, poll_s
        self.last: JobStatus | None = None  # the newest answer, for the caller's messages
        self._shown: tuple[str, str, str] | None = None
        self._seen = {c.step for c in complete_checkpoints(job)}

    def wait_until_known(self, job_id: str) -> JobStatus:
        """The job's status once Slurm answers about it (never a guess: no resubmission while it may run). Only
        an unanswered question is reported here; the state itself by whoever acts on it."""
        while True:
            status = self._poll(job_id, report=False)
            if status.state != UNREACHABLE:
                return status
            self._report(status)
            time.sleep(self.poll_s)

    def until_finished(self, job_id: str) -> JobStatus:
        record = next((r for r in reversed(slurm.submitted_jobs(self.job)) if r["job_id"] == job_id), None)
        since = slurm.submitted_at(record) if record else 0.0
        last_step = None
        while True:
            status = self._poll(job_id)
            for c in complete_checkpoints(self.job):
                if c.step not in self._seen:
                    self._seen.add(c.step)
                    progress.note(self.stage, f"Slurm job {job_id}: new checkpoint {c.name}")
            rows = [r for r in jobdir.metrics(self.job) if r.get("time", 0) >= since]
            if rows and rows[-1]["step"] != last_step:
                r, last_step = rows[-1], rows[-1]["step"]
                progress.note(self.stage, f"Slurm job {job_id} {status.state}: step {r['step']} loss "
                                          f"{r.get('loss', float('nan')):.4f}, "
                                          f"{r.get('tokens_per_s_per_device', 0):,.0f} tokens/s per rank")
            if status.finished:
                return status
            time.sleep(self.poll_s)

    def _poll(self, job_id: str, report: bool = True) -> JobStatus:
        status = slurm.job_status(job_id)
        self.last = status
        if report:
            self._report(status)
        return status

    def _report(self, status: JobStatus) -> None:
        """A line when the job's state (or, pending or unreachable, its reason) differs from the last one shown."""
        shown = (status.job_id, status.state, status.reason if status.state in ("PENDING", UNREACHABLE) else "")
        if shown == self._shown:
            return
        self._shown = shown
        if status.state == UNREACHABLE:
            progress.note(self.stage, f"cannot ask Slurm about job {status.job_id} ({status.reason}); the job may be "
                                      f"running: asking again every {self.poll_s:g} s")
        else:
            progress.note(self.stage, f"Slurm job {status.job_id} {status.describe()}")
