"""A training job's folder, read back: checkpoints, metrics, segments; what the manifest and evaluation need.

Layout written by the training processes (stages/pretrain/entry.py and torchtitan):
    <job>/checkpoints/step-<N>/   DCP checkpoint; complete once `.metadata` exists (DCP writes it last)
    <job>/metrics.jsonl           one line per logged step (europa_model/metrics.py)
    <job>/segments.jsonl          start / end events of each training process (time, step, devices)
    <job>/job_info.json           model size, FLOPs per token, device, peak FLOP/s (rank 0, at start)
    <job>/train.log               the processes' output
    <job>/tb/                     TensorBoard events
While a job runs it lives in <run>/.work/pretrain/<fingerprint>/job (it survives crashes; a rerun resumes
from its newest complete checkpoint); when it ends the stage publishes it as <run>/pretrain/.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from pipeline.rundir import RunDir

CHECKPOINTS = "checkpoints"
_STEP = re.compile(r"^step-(\d+)$")


@dataclass(frozen=True)
class Checkpoint:
    step: int
    path: Path

    @property
    def name(self) -> str:
        return f"step-{self.step}"


def complete_checkpoints(job_dir: Path) -> list[Checkpoint]:
    """Checkpoints whose DCP metadata is written, by step; one still being written is not listed."""
    root = Path(job_dir) / CHECKPOINTS
    if not root.is_dir():
        return []
    out = []
    for p in root.iterdir():
        m = _STEP.match(p.name)
        if m and (p / ".metadata").is_file():
            out.append(Checkpoint(int(m.group(1)), p))
    return sorted(out, key=lambda c: c.step)


def live_job_dir(run_dir: RunDir) -> Path | None:
    """The job folder of a pretrain attempt that has not been published (running, interrupted or failed)."""
    state = run_dir.read_state("pretrain")
    if not state or not state.get("fingerprint"):
        return None
    job = run_dir.work_dir("pretrain", state["fingerprint"]) / "job"
    return job if job.is_dir() else None


def run_checkpoints(run_dir: RunDir) -> list[Checkpoint]:
    """Every complete checkpoint of the run: the published stage's and those of a job still training.

    Steps present in both (cannot happen with one fingerprint, but can after a settings change) resolve to
    the live job, which is what training is writing now."""
    by_step = {c.step: c for c in complete_checkpoints(run_dir.stage_dir("pretrain"))}
    live = live_job_dir(run_dir)
    if live is not None:
        by_step.update({c.step: c for c in complete_checkpoints(live)})
    return [by_step[s] for s in sorted(by_step)]


def read_jsonl(path: Path) -> list[dict]:
    """Rows of a JSON-lines file; a torn last line (a crash mid-write) is ignored, any other bad line is an error."""
    if not path.exists():
        return []
    rows, lines = [], path.read_text(encoding="utf-8").splitlines()
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            if i == len(lines) - 1:
                break
            raise ValueError(f"{path}:{i + 1}: not JSON; the file is damaged") from None
    return rows


def metrics(job_dir: Path) -> list[dict]:
    """Logged steps, the last logged value per step (a resumed job logs the steps after its checkpoint again)."""
    by_step: dict[int, dict] = {}
    for row in read_jsonl(Path(job_dir) / "metrics.jsonl"):
        by_step[row["step"]] = row
    return [by_step[s] for s in sorted(by_step)]


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
