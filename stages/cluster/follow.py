"""Following a submitted Slurm job until it ends: its state, and why it is pending, every `poll_s` seconds.

Each line says something new: the state is shown when it or its reason changes (a job that pends for
PartitionConfig, asking for more than a node has, says so once, not every minute). When Slurm does not answer
(the controller is down or slow) that is said once, and polling goes on: it says nothing about the job, which
may well be running (slurm.py). What a job's own progress looks like (training's steps and checkpoints) is
the caller's: a subclass reports it in `progress`, once per poll.
"""

from __future__ import annotations

import time

from pipeline import progress as notes
from stages.cluster import slurm
from stages.cluster.slurm import UNREACHABLE, JobStatus


class JobFollower:
    def __init__(self, who: str, poll_s: float):
        self.who, self.poll_s = who, poll_s  # who: the name the progress lines go under (a stage)
        self.last: JobStatus | None = None  # the newest answer, for the caller's messages
        self._shown: tuple[str, str, str] | None = None

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
        while True:
            status = self._poll(job_id)
            self.progress(job_id, status)
            if status.finished:
                return status
            time.sleep(self.poll_s)

    def progress(self, job_id: str, status: JobStatus) -> None:
        """What the job did since the last poll (nothing to say by default)."""

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
            notes.note(self.who, f"cannot ask Slurm about job {status.job_id} ({status.reason}); the job may be "
                                 f"running: asking again every {self.poll_s:g} s")
        else:
            notes.note(self.who, f"Slurm job {status.job_id} {status.describe()}")
