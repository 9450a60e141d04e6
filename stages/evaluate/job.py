"""Starting and following a distributed evaluation job (stages/evaluate/distributed.py) for one checkpoint.

Its folder is <run>/eval/jobs/step-<N>/ (RunDir.store_job_dir, in the evaluation store beside the results it
produces): eval.log, result.json (the checkpoint's metrics, written by rank 0), failures/rank-<R>.json, and for
Slurm job.sbatch, jobs.jsonl and slurm-<id>.out.
- `torchrun`: `torch.distributed.run --standalone --nproc_per_node=N` on this machine (gloo on CPU), waited for.
- `slurm`: submitted on the run's machine (stages/cluster: the same kind of script as training's, with the
  [pretrain.machine] profile, [pretrain.slurm] account/partition/setup and [pretrain.parallelism]
  processes_per_node, this entry point and [evaluate.job] nodes/time_limit), then followed. `europa evaluate`
  waits for it; the scheduled deployment does not block: a round submits the job, later rounds see it
  running, and the round after it ends collects the result. A failed job is reported (the scheduler skips the
  checkpoint, naming why) and submitted again only when asked for by name (`europa evaluate --checkpoint
  step-N`): a broken setting must not burn an allocation every 30 minutes.
A job is for one checkpoint content: its submissions.jsonl entry records the checkpoint id, so a retrained
step-N gets a new job.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from pipeline import progress
from pipeline.config import REPO_ROOT
from pipeline.errors import EuropaError
from pipeline.fsutil import append_jsonl, read_jsonl
from stages.cluster import sbatch, slurm
from stages.cluster.sbatch import JobScript
from stages.evaluate.distributed import FAILURES, RESULT
from stages.evaluate.metrics import CheckpointMetrics

ENTRY = "stages.evaluate.distributed"
SUBMISSIONS = "submissions.jsonl"  # what this module submitted: job id, checkpoint id
CONFIG = "config.toml"  # the resolved settings the job runs with


class EvalJobFailed(EuropaError):
    """The evaluation job of a checkpoint ended without a result; the message says why (its ranks' failures)."""


@dataclass
class JobState:
    done: bool
    metrics: CheckpointMetrics | None = None
    note: str = ""


@dataclass(frozen=True)
class EvalSubmission:
    """One line of submissions.jsonl: the job submitted for one checkpoint content."""

    job_id: str
    checkpoint_id: str
    checkpoint: str
    script: str


@dataclass(frozen=True)
class RankFailure:
    """failures/rank-<R>.json: why one rank of the job failed."""

    rank: int
    error: str  # the exception's type
    message: str


def _result(folder: Path, ckpt_id: str) -> CheckpointMetrics | None:
    path = folder / RESULT
    if not path.exists():
        return None
    metrics = CheckpointMetrics.model_validate_json(path.read_text())
    return metrics if metrics.checkpoint_id == ckpt_id else None


def _failure(folder: Path, what: str) -> EvalJobFailed:
    failures = [RankFailure(**json.loads(p.read_text())) for p in sorted((folder / FAILURES).glob("rank-*.json"))]
    if failures:
        first = failures[0]
        why = f"rank {first.rank}: {first.error}: {first.message}"
    else:
        log = folder / "eval.log"
        tail = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()][-1:] if log.exists() else []
        why = tail[0][:300] if tail else "no failure recorded"
    return EvalJobFailed(f"evaluation job {what} failed: {why} (full output: {folder})")


def _command(run_dir: Path, folder: Path, checkpoint: Path) -> list[str]:
    return [ENTRY, "--run-dir", str(run_dir), "--job-dir", str(folder), "--checkpoint", str(checkpoint),
            "--config", str(folder / CONFIG)]


def _write_config(folder: Path, config) -> None:
    """The settings the job evaluates with: this process's, which may differ from run.toml's (--config)."""
    from pipeline.config import dump_toml
    from pipeline.fsutil import atomic_write_text
    from pipeline.secrets import redact

    folder.mkdir(parents=True, exist_ok=True)
    atomic_write_text(folder / CONFIG, dump_toml(redact(config.to_dict())))


def run_torchrun(config, run_dir: Path, folder: Path, checkpoint: Path, ckpt_id: str, ranks: int) -> CheckpointMetrics:
    """Run the job on `ranks` local processes and return its metrics; EvalJobFailed when it fails."""
    import shutil

    shutil.rmtree(folder / FAILURES, ignore_errors=True)
    (folder / RESULT).unlink(missing_ok=True)
    _write_config(folder, config)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={ranks}",
           "-m", *_command(run_dir, folder, checkpoint)]
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    progress.note("evaluate", f"{checkpoint.name}: torchrun job on {ranks} ranks; log {folder / 'eval.log'}")
    with open(folder / "eval.log", "a", encoding="utf-8") as log:
        log.write(f"\n=== {time.strftime('%Y-%m-%d %H:%M:%S')} {' '.join(cmd)}\n")
        log.flush()
        code = subprocess.run(cmd, cwd=REPO_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT).returncode
    metrics = _result(folder, ckpt_id)
    if code != 0 or metrics is None:
        raise _failure(folder, f"of {checkpoint} (torchrun, exit {code})")
    return metrics


def job_script(config, run_dir: Path, folder: Path, checkpoint: Path) -> JobScript:
    """The Slurm job of one checkpoint: on the run's machine with its Slurm settings (declared under [pretrain]),
    [evaluate.job] nodes and time limit, the evaluation's entry point on every rank."""
    settings = config.section("evaluate").job
    pretrain = config.section("pretrain")  # the run's machine: [pretrain.machine], [pretrain.slurm], ranks per node
    name = f"europa-eval-{checkpoint.name}"
    job_dir = Path(folder).resolve()
    return JobScript(hardware=pretrain.machine.hardware(),
                     slurm=pretrain.slurm.model_copy(update={"time_limit": settings.time_limit, "job_name": name}),
                     job_name=name, nodes=settings.nodes, ranks_per_node=pretrain.parallelism.processes_per_node,
                     job_dir=job_dir, entry=_command(run_dir, folder, checkpoint),
                     title=f"EUROPA evaluation of {checkpoint}, rendered by `europa evaluate`",
                     header=[f"job dir  {job_dir}"])


def slurm_job(config, run_dir: Path, folder: Path, checkpoint: Path, ckpt_id: str, *, wait: bool,
              retry: bool) -> JobState:
    """Submit (or find) the Slurm job of this checkpoint and follow it: until it ends when `wait`, else one look.
    An earlier job that failed raises EvalJobFailed, unless `retry` (then a new one is submitted)."""
    settings = config.section("evaluate").job
    metrics = _result(folder, ckpt_id)
    if metrics is not None:
        return JobState(True, metrics)
    ours = [s for s in (EvalSubmission(**row) for row in read_jsonl(folder / SUBMISSIONS)) if s.checkpoint_id == ckpt_id]
    job_id = ours[-1].job_id if ours else None
    if job_id is not None and slurm.job_status(job_id).finished:
        metrics = _result(folder, ckpt_id)
        if metrics is not None:
            return JobState(True, metrics)
        failure = _failure(folder, f"{job_id} of {checkpoint}")
        if not retry:
            raise EvalJobFailed(f"{failure}; `europa evaluate --checkpoint {checkpoint.name}` submits it again")
        progress.note("evaluate", f"{checkpoint.name}: {failure}; submitting again")
        job_id = None
    if job_id is None:
        import shutil

        shutil.rmtree(folder / FAILURES, ignore_errors=True)
        _write_config(folder, config)
        job_id, script = sbatch.submit(job_script(config, run_dir, folder, checkpoint))
        append_jsonl(folder / SUBMISSIONS, asdict(EvalSubmission(job_id, ckpt_id, str(checkpoint), str(script))))
        progress.note("evaluate", f"{checkpoint.name}: submitted Slurm job {job_id} ({script})")
    while True:
        status = slurm.job_status(job_id)
        if status.finished:
            metrics = _result(folder, ckpt_id)
            if metrics is None:
                raise _failure(folder, f"{job_id} of {checkpoint} (Slurm {status.state})")
            return JobState(True, metrics)
        if not wait:
            return JobState(False, note=f"Slurm job {job_id} {status.state}")
        progress.note("evaluate", f"{checkpoint.name}: Slurm job {job_id} {status.state}")
        time.sleep(settings.poll_s)
