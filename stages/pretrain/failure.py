"""How a training process reports why it stopped: a small JSON file per rank in the job folder.

Why a file and not the log: the stage must tell a divergence (lower the learning rate) from bad input (rerun
the shards stage) from a crash, on any launcher, including a Slurm job whose output the stage never streams.
Each rank that fails writes <job>/failures/rank-<R>.json once, atomically; the stage clears the folder before
it starts (or submits) processes, so what it finds afterwards is about them.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path

from pipeline.fsutil import atomic_write_text

FAILURES = "failures"
KINDS = ("diverged", "input", "error")  # diverged: the loss; input: the run's data or settings; error: anything else


@dataclass(frozen=True)
class Failure:
    kind: str
    message: str
    rank: int
    step: int | None = None  # the training step it happened at, when training had started
    exception: str = ""  # the exception's type, for errors


def write_failure(job_dir: Path, failure: Failure) -> None:
    folder = Path(job_dir) / FAILURES
    folder.mkdir(parents=True, exist_ok=True)
    atomic_write_text(folder / f"rank-{failure.rank}.json", json.dumps(asdict(failure), indent=2) + "\n")


def read_failure(job_dir: Path) -> Failure | None:
    """The failure that explains the processes' end: a divergence if any rank saw one (it is the cause, the other
    ranks' errors follow from it), else the lowest rank's."""
    folder = Path(job_dir) / FAILURES
    found = [Failure(**json.loads(p.read_text(encoding="utf-8"))) for p in sorted(folder.glob("rank-*.json"))]
    if not found:
        return None
    return min(found, key=lambda f: (f.kind != "diverged", f.kind != "input", f.rank))


def clear_failures(job_dir: Path) -> None:
    shutil.rmtree(Path(job_dir) / FAILURES, ignore_errors=True)
