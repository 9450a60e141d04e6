"""The Slurm client: submit a job script, read a job's state, record the submissions of a job folder.

Thin on purpose: `sbatch`, `squeue` and `sacct` are run as commands (a login node has them; nothing else is
needed), and every submission is appended to <job dir>/jobs.jsonl, which is what a follower follows.

How a job's state is read, as a real Slurm answers (tests/slurm/test_cluster.py shows each answer): `squeue
-t all` knows a job while it is queued or running and, once it has ended, its final state until MinJobAge
(300 s by default); after that squeue says "Invalid job id specified" and only accounting (`sacct`) can tell,
which fails where there is no slurmdbd (test clusters, some sites, a slurmdbd outage). A job neither knows
has ENDED, how is unknown: the caller then decides from what the job left (training: its checkpoints). Any
other squeue failure (the controller does not answer) says nothing about the job: UNREACHABLE, which is not
an end; a follower keeps polling and never resubmits on it.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path

from pipeline.fsutil import append_jsonl, read_jsonl, sha256_file
from stages.cluster.errors import LaunchError

ENDED = "ENDED"              # Slurm no longer knows the job and there is no accounting to ask
UNREACHABLE = "UNREACHABLE"  # squeue failed for another reason: the job may well be running
TERMINAL_STATES = frozenset({"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY",
                             "PREEMPTED", "BOOT_FAIL", "DEADLINE", "REVOKED", "SPECIAL_EXIT", ENDED})


@dataclass(frozen=True)
class JobStatus:
    job_id: str
    state: str           # a Slurm state (PENDING, RUNNING, COMPLETED, ...), ENDED or UNREACHABLE
    reason: str = ""     # squeue's reason (PENDING: Priority, Resources, PartitionConfig, ...) or what failed

    @property
    def finished(self) -> bool:
        return self.state in TERMINAL_STATES

    @property
    def active(self) -> bool:
        """Queued, running or (as far as anyone can tell) possibly so: a job its folder must not get a twin of."""
        return not self.finished

    def describe(self) -> str:
        if self.state == UNREACHABLE:
            return f"unknown (Slurm did not answer: {self.reason})"
        if self.state == ENDED:
            return "ended; Slurm no longer knows how (no accounting)"
        if self.finished or not self.reason or self.reason == "None":
            return self.state
        return f"{self.state} ({self.reason})"  # why it waits: Priority, Resources, PartitionConfig, ...


def _need(tool: str, what: str) -> str:
    path = shutil.which(tool)
    if path is None:
        raise LaunchError(f"{tool} not found: {what} must run on a login node of the cluster (where Slurm's commands are)")
    return path


def require_sbatch() -> str:
    return _need("sbatch", "--submit")


def submit(script_path: Path | str, *, after: str | None = None) -> str:
    """`sbatch --parsable` the script; returns the job id. `after`: start only once that job has ended
    (`--dependency=afterany:`), to chain 24-hour jobs that resume from the latest checkpoint."""
    sbatch = require_sbatch()
    cmd = [sbatch, "--parsable", *([f"--dependency=afterany:{after}"] if after else []), str(script_path)]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        raise LaunchError(f"sbatch did not answer within 120 s for {script_path}; check `squeue --me` before retrying") from None
    if r.returncode != 0:
        why = (r.stderr.strip().splitlines() or [f"exit status {r.returncode}"])[-1]
        raise LaunchError(f"sbatch refused {script_path}: {why}")
    lines = r.stdout.strip().splitlines()
    job_id = lines[-1].split(";")[0].strip() if lines else ""
    if not re.fullmatch(r"\d+(_\d+)?", job_id):
        raise LaunchError(f"sbatch answered {r.stdout.strip()!r} instead of a job id for {script_path}")
    return job_id


@dataclass(frozen=True)
class Submission:
    """One line of <job dir>/jobs.jsonl: a job submitted from that folder."""

    job_id: str
    submitted_at: str  # ISO 8601, UTC
    script: str
    script_sha256: str

    @property
    def submitted_at_s(self) -> float:
        """The submission time, seconds since the epoch."""
        return datetime.fromisoformat(self.submitted_at).timestamp()


def record_submission(job_dir: Path, job_id: str, script_path: Path) -> None:
    """Append the submission to <job dir>/jobs.jsonl (what a follower follows)."""
    append_jsonl(Path(job_dir) / "jobs.jsonl", asdict(Submission(
        job_id, datetime.now(timezone.utc).isoformat(timespec="seconds"), str(script_path),
        sha256_file(Path(script_path)))))


def submitted_jobs(job_dir: Path) -> list[Submission]:
    return [Submission(**row) for row in read_jsonl(Path(job_dir) / "jobs.jsonl")]


def job_status(job_id: str) -> JobStatus:
    """The job's state as Slurm knows it now (see the module docstring for the order of questions)."""
    squeue, sacct = shutil.which("squeue"), shutil.which("sacct")
    if squeue is None:
        raise LaunchError("squeue not found: job states can only be read where Slurm's commands are (a login node)")
    try:
        r = subprocess.run([squeue, "-h", "-j", str(job_id), "-t", "all", "-o", "%T|%r"],
                           capture_output=True, text=True, timeout=90)
    except subprocess.TimeoutExpired:
        return JobStatus(job_id, UNREACHABLE, "squeue did not answer within 90 s")
    lines = [line for line in r.stdout.splitlines() if line.strip()]
    if r.returncode == 0 and lines:
        state, _, reason = lines[0].strip().partition("|")
        return JobStatus(job_id, state.strip(), reason.strip())
    error = (r.stderr.strip().splitlines() or [f"exit status {r.returncode}"])[-1]
    if r.returncode != 0 and "Invalid job id" not in r.stderr:
        return JobStatus(job_id, UNREACHABLE, error)
    # slurmctld has forgotten the job (MinJobAge): only accounting knows how it ended
    why = "sacct not found"
    if sacct:
        try:
            a = subprocess.run([sacct, "-n", "-X", "-P", "-j", str(job_id), "-o", "State"],
                               capture_output=True, text=True, timeout=90)
        except subprocess.TimeoutExpired:
            a = None
            why = "sacct did not answer within 90 s"
        if a is not None:
            for line in a.stdout.splitlines():
                if line.strip():
                    return JobStatus(job_id, line.split()[0].strip().rstrip("+"))  # "CANCELLED by 123" -> CANCELLED
            why = "sacct: " + ((a.stderr.strip().splitlines() or ["no record of the job"])[-1])
    return JobStatus(job_id, ENDED, why)


def last_job(job_dir: Path) -> Submission | None:
    """The newest submission recorded in the folder (one job per folder is submitted at a time)."""
    jobs = submitted_jobs(job_dir)
    return jobs[-1] if jobs else None


def output_tail(job_dir: Path, job_id: str, lines: int = 8) -> str:
    """Why the job ended, from its slurm-<id>.out: Slurm's own verdict (`*** JOB ... CANCELLED ... DUE TO TIME
    LIMIT ***`, which the ranks' shutdown tracebacks bury) and the last lines; "" without an output file."""
    path = Path(job_dir) / f"slurm-{job_id}.out"
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    kept = [line.rstrip() for line in text.splitlines() if line.strip()]
    tail = kept[-lines:]
    verdict = [line for line in kept[:-lines] if "*** JOB " in line]
    return "\n".join([*verdict, *(["..."] if verdict else []), *tail])
