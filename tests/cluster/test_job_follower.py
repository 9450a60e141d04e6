"""Following a job (stages/cluster/follow.py) against a stand-in squeue that answers a scripted sequence of
states: a line only when the state (or a pending job's reason) changes, one line while Slurm does not answer,
the job's own progress once per poll."""

from __future__ import annotations

import os
from pathlib import Path

from stages.cluster.follow import JobFollower
from stages.cluster.slurm import UNREACHABLE


def fake_squeue(tmp_path: Path, answers: list[str]) -> Path:
    """squeue that prints the next of `answers` per call ("FAIL" answers as an unreachable controller does)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (tmp_path / "answers").write_text("\n".join(answers) + "\n")
    (bin_dir / "squeue").write_text(
        "#!/bin/sh\n"
        f'line=$(head -n1 "{tmp_path}/answers"); sed -i 1d "{tmp_path}/answers"\n'
        'if [ "$line" = FAIL ]; then echo "squeue: error: Unable to contact slurm controller" >&2; exit 1; fi\n'
        'echo "$line"\n')
    (bin_dir / "squeue").chmod(0o755)
    return bin_dir


class Counting(JobFollower):
    def __init__(self):
        super().__init__("test", 0.0)
        self.polls = 0

    def progress(self, job_id, status):
        self.polls += 1


def test_states_are_shown_when_they_change(tmp_path, monkeypatch, capsys):
    answers = ["PENDING|Priority", "PENDING|Priority", "PENDING|Resources", "RUNNING|None", "RUNNING|None",
               "COMPLETED|None"]
    monkeypatch.setenv("PATH", f"{fake_squeue(tmp_path, answers)}:{os.environ['PATH']}")
    follower = Counting()
    status = follower.until_finished("5")
    assert (status.state, status.finished, follower.polls, follower.last) == ("COMPLETED", True, 6, status)
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("[test]")]
    assert lines == ["[test] Slurm job 5 PENDING (Priority)", "[test] Slurm job 5 PENDING (Resources)",
                     "[test] Slurm job 5 RUNNING", "[test] Slurm job 5 COMPLETED"]


def test_an_unanswered_question_is_said_once_and_never_taken_for_an_end(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PATH", f"{fake_squeue(tmp_path, ['FAIL', 'FAIL', 'RUNNING|None'])}:{os.environ['PATH']}")
    status = JobFollower("test", 0.0).wait_until_known("5")
    assert status.state == "RUNNING"
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("[test]")]
    assert len(lines) == 1 and "cannot ask Slurm about job 5" in lines[0] and UNREACHABLE not in lines[0]
