"""A training job's folder, read back: checkpoints, metrics, segments; what the manifest and evaluation need.

Layout written by the training processes (stages/pretrain/entry.py and torchtitan):
    <job>/checkpoints/step-<N>/   DCP checkpoint; complete once `.metadata` exists (DCP writes it last)
    <job>/metrics.jsonl           one line per logged step (europa_model/metrics.py)
    <job>/segments.jsonl          start / end events of each training process (time, step, devices)
    <job>/job_info.json           model size, FLOPs per token, device, peak FLOP/s (rank 0, at start)
    <job>/train.log               the processes' output
    <job>/tb/                     TensorBoard events
While a job runs it lives in the run's job folder for the stage (RunDir.job_dir: it survives crashes; a rerun
resumes from its newest complete checkpoint); when it ends the stage publishes it as <run>/pretrain/.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from europa_model.checkpoints import JOB_INFO
from pipeline.fsutil import read_jsonl


@dataclass(frozen=True)
class StepMetrics:
    """The figures of a logged step the pipeline reads (metrics.jsonl carries more: `metrics` gives the rows)."""

    step: int
    time: float = 0.0  # when it was logged, seconds since the epoch
    loss: float = math.nan
    tokens_per_s_per_device: float | None = None
    memory_gib: float = 0.0

    @classmethod
    def of(cls, row: dict[str, Any]) -> StepMetrics:
        return cls(row["step"], row.get("time", 0.0), row.get("loss", math.nan), row.get("tokens_per_s_per_device"),
                   row.get("memory_gib", 0.0))


@dataclass(frozen=True)
class Segment:
    """One training process's lifetime."""

    start: float  # seconds since the epoch
    end: float
    start_step: int
    end_step: int
    world_size: int
    device_type: str
    ended: bool  # it wrote its end event (False: killed; its end is its last logged step)

    @property
    def seconds(self) -> float:
        return self.end - self.start


class JobInfo(BaseModel):
    """What rank 0 records about the job when it starts (job_info.json); the record reads these figures."""

    vocab_size: int
    device_type: str
    device_name: str
    world_size: int
    nodes: int = 1
    peak_flops_per_device: float | None = None  # theoretical (stages/pretrain/peak_flops.py); None: unknown device
    peak_flops_source: str | None = None
    peak_flops_inputs: dict[str, Any] | None = None  # absent in folders written before the peak was recorded
    torch_version: str | None = None
    torchtitan_version: str | None = None


def metrics(job_dir: Path) -> list[dict[str, Any]]:
    """Logged steps as metrics.jsonl has them, the last logged row per step (a resumed job logs the steps after
    its checkpoint again)."""
    by_step: dict[int, dict[str, Any]] = {}
    for row in read_jsonl(Path(job_dir) / "metrics.jsonl"):
        by_step[row["step"]] = row
    return [by_step[s] for s in sorted(by_step)]


def steps(job_dir: Path) -> list[StepMetrics]:
    """`metrics`, typed: the figures the stage reads."""
    return [StepMetrics.of(row) for row in metrics(job_dir)]


def last_metrics(job_dir: Path) -> StepMetrics | None:
    """The last logged step, read from the end of metrics.jsonl (it grows for weeks: never read it whole to
    show progress); None before the first step."""
    path = Path(job_dir) / "metrics.jsonl"
    try:
        with open(path, "rb") as f:
            f.seek(max(0, f.seek(0, 2) - 8192))
            lines = f.read().splitlines()
    except FileNotFoundError:
        return None
    for line in reversed(lines):
        try:
            return StepMetrics.of(json.loads(line))
        except (ValueError, KeyError, TypeError):  # a torn last line, or the cut first one
            continue
    return None


def segments(job_dir: Path) -> list[Segment]:
    """Process lifetimes, from their start and end events.

    A process killed without warning (SIGKILL, node failure, Slurm time limit) writes no end event; its end is
    the time of its last logged step, so its training time still counts and nothing is invented."""
    events = read_jsonl(Path(job_dir) / "segments.jsonl")
    logged = [(r["time"], r["step"]) for r in read_jsonl(Path(job_dir) / "metrics.jsonl")]
    out: list[Segment] = []
    starts = [e for e in events if e.get("event") == "start"]
    for i, st in enumerate(starts):
        nxt = starts[i + 1]["time"] if i + 1 < len(starts) else float("inf")
        end = next((e for e in events if e.get("event") == "end" and st["time"] <= e["time"] < nxt), None)
        if end is not None:
            t_end, s_end = end["time"], end["step"]
        else:
            inside = [(t, s) for t, s in logged if st["time"] <= t < nxt]
            t_end, s_end = inside[-1] if inside else (st["time"], st["step"])
        out.append(Segment(st["time"], t_end, st["step"], s_end, st["world_size"], st["device_type"], end is not None))
    return out


def job_info(job_dir: Path) -> JobInfo | None:
    path = Path(job_dir) / JOB_INFO
    return JobInfo.model_validate_json(path.read_text()) if path.exists() else None
