"""The Slurm client (stages/cluster/slurm.py): a job's state as a real Slurm answers it, sbatch's refusal, the
submissions a job folder records, the tail of a job's output, and the missing tools named."""

from __future__ import annotations

import json
import time

import pytest

from stages.cluster import slurm
from stages.cluster.errors import LaunchError
from stages.cluster.slurm import ENDED, UNREACHABLE, job_status, submit


def wait_for(what: str, check, timeout: float = 120, every: float = 0.1):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"{what}: not within {timeout:.0f} s")


def test_job_status_as_a_real_slurm_answers(slurm_cluster_factory, tmp_path):
    """squeue -t all while slurmctld knows the job (with the pending reason), ENDED once it has forgotten it and
    there is no accounting, UNREACHABLE (not an end) when the controller does not answer; sbatch's refusal."""
    c = slurm_cluster_factory(settings={"MinJobAge": "2", "MessageTimeout": "3"})
    with c.activate():
        script = tmp_path / "job.sbatch"
        script.write_text(f"#!/bin/bash\n#SBATCH --output={tmp_path}/slurm-%j.out\ntrue\n")
        done = submit(script)
        c.wait_state(done, {"COMPLETED"})
        assert job_status(done).state == "COMPLETED" and job_status(done).finished
        wait_for("the job to be forgotten", lambda: job_status(done).state == ENDED, timeout=60, every=0.3)
        assert "accounting storage is disabled" in job_status(done).reason
        waiting = submit(script, after=c.sbatch("#!/bin/bash\nsleep 300\n"))  # --dependency=afterany
        pending = wait_for("a reason", lambda: (st := job_status(waiting)).reason == "Dependency" and st)
        assert (pending.state, pending.active, pending.describe()) == ("PENDING", True, "PENDING (Dependency)")
        script.write_text("#!/bin/bash\n#SBATCH --partition=nosuchpartition\ntrue\n")
        with pytest.raises(LaunchError, match="sbatch refused .*Invalid partition name specified"):
            submit(script)
        ctld = c.procs["slurmctld"]
        ctld.terminate()
        ctld.wait(timeout=15)
        gone = job_status(waiting)
        assert gone.state == UNREACHABLE and gone.active and "Unable to contact slurm controller" in gone.reason


def test_missing_slurm_tools_are_named(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(LaunchError, match="squeue not found"):
        job_status("1")
    with pytest.raises(LaunchError, match="sbatch not found: --submit must run on a login node of the cluster"):
        submit(tmp_path / "job.sbatch")


def test_submissions_are_recorded_one_line_each_and_read_back(tmp_path):
    script = tmp_path / "job.sbatch"
    script.write_text("#!/bin/bash\ntrue\n")
    assert slurm.last_job(tmp_path) is None
    slurm.record_submission(tmp_path, "17", script)
    slurm.record_submission(tmp_path, "18", script)
    rows = [json.loads(line) for line in (tmp_path / "jobs.jsonl").read_text().splitlines()]
    assert [list(r) for r in rows] == [["job_id", "submitted_at", "script", "script_sha256"]] * 2  # the file's format
    first, last = slurm.submitted_jobs(tmp_path)
    assert (first.job_id, last.job_id, slurm.last_job(tmp_path)) == ("17", "18", last)
    assert last.script == str(script) and len(last.script_sha256) == 64
    assert abs(last.submitted_at_s - time.time()) < 60


def test_output_tail_keeps_slurms_verdict_above_the_last_lines(tmp_path):
    lines = ["start", "slurmstepd: error: *** JOB 7 ON n1 CANCELLED AT 2025 DUE TO TIME LIMIT ***",
             *[f"traceback line {i}" for i in range(20)]]
    (tmp_path / "slurm-7.out").write_text("\n".join(lines) + "\n")
    tail = slurm.output_tail(tmp_path, "7", lines=3).splitlines()
    assert tail == [lines[1], "...", "traceback line 17", "traceback line 18", "traceback line 19"]
    assert slurm.output_tail(tmp_path, "8") == ""  # no output file
