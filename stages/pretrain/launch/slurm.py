"""The Slurm client of the pretrain stage: submit a job script, read a job's state, record submissions.

Thin on purpose: `sbatch`, `squeue` and `sacct` are run as commands (a login node has them; nothing else is
needed), and every submission is appended to <job dir>/jobs.jsonl, which is what the stage follows.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from datetime import datetime, timezone
from pathlib import Path

from pipeline.fsutil import append_jsonl, read_jsonl, sha256_file
from stages.pretrain.launch.checks import LaunchError

TERMINAL_STATES = frozenset({"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY",
                             "PREEMPTED", "BOOT_FAIL", "DEADLINE", "REVOKED"})


def _need(tool: str, what: str) -> str:
    path = shutil.which(tool)
    if path is None:
        raise LaunchError(f"{tool} not found: {what} must run on a JUPITER login node")
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


def record_submission(job_dir: Path, job_id: str, script_path: Path) -> None:
    """Append the submission to <job dir>/jobs.jsonl (what the flow follows)."""
    append_jsonl(Path(job_dir) / "jobs.jsonl", {
        "job_id": job_id, "submitted_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "script": str(script_path), "script_sha256": sha256_file(Path(script_path))})


def submitted_jobs(job_dir: Path) -> list[dict]:
    return read_jsonl(Path(job_dir) / "jobs.jsonl")


def job_state(job_id: str) -> str:
    """PENDING / RUNNING / COMPLETED / FAILED / ... from squeue while the job is queued or running, else from
    sacct (accounting); UNKNOWN when neither knows the id."""
    squeue, sacct = shutil.which("squeue"), shutil.which("sacct")
    if squeue is None and sacct is None:
        raise LaunchError("squeue not found: job states can only be read on a JUPITER login node")
    if squeue:
        r = subprocess.run([squeue, "-h", "-j", str(job_id), "-o", "%T"], capture_output=True, text=True, timeout=60)
        state = r.stdout.strip().splitlines()[0].strip() if r.returncode == 0 and r.stdout.strip() else ""
        if state:
            return state
    if sacct:
        r = subprocess.run([sacct, "-n", "-X", "-P", "-j", str(job_id), "-o", "State"],
                           capture_output=True, text=True, timeout=60)
        for line in r.stdout.splitlines():
            if line.strip():
                return line.split()[0].strip().rstrip("+")  # "CANCELLED by 123" -> CANCELLED
    return "UNKNOWN"


def is_finished(state: str) -> bool:
    return state in TERMINAL_STATES
