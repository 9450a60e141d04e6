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
from pathlib import Path

from pipeline.fsutil import read_jsonl


def metrics(job_dir: Path) -> list[dict]:
    """Logged steps, the last logged value per step (a resumed job logs the steps after its checkpoint again)."""
    by_step: dict[int, dict] = {}
    for row in read_jsonl(Path(job_dir) / "metrics.jsonl"):
        by_step[row["step"]] = row
    return [by_step[s] for s in sorted(by_step)]


def last_metrics(job_dir: Path) -> dict | None:
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
            return json.loads(line)
        except ValueError:  # a torn last line, or the cut first one
            continue
    return None


def segments(job_dir: Path) -> list[dict]:
    """Process lifetimes: [{start, end, start_step, end_step, world_size, device_type, ended}].

    A process killed without warning (SIGKILL, node failure, Slurm time limit) writes no end event; its end is
    the time of its last logged step, so its training time still counts and nothing is invented."""
    events = read_jsonl(Path(job_dir) / "segments.jsonl")
    logged = [(r["time"], r["step"]) for r in read_jsonl(Path(job_dir) / "metrics.jsonl")]
    out: list[dict] = []
    starts = [e for e in events if e.get("event") == "start"]
    for i, st in enumerate(starts):
        nxt = starts[i + 1]["time"] if i + 1 < len(starts) else float("inf")
        end = next((e for e in events if e.get("event") == "end" and st["time"] <= e["time"] < nxt), None)
        if end is not None:
            t_end, s_end = end["time"], end["step"]
        else:
            inside = [(t, s) for t, s in logged if st["time"] <= t < nxt]
            t_end, s_end = inside[-1] if inside else (st["time"], st["step"])
        out.append({"start": st["time"], "end": t_end, "start_step": st["step"], "end_step": s_end,
                    "world_size": st["world_size"], "device_type": st["device_type"], "ended": end is not None})
    return out


def job_info(job_dir: Path) -> dict:
    path = Path(job_dir) / "job_info.json"
    return json.loads(path.read_text()) if path.exists() else {}
