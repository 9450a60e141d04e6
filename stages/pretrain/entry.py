"""The training process: `python -m stages.pretrain.entry --run-dir R --job-dir J` (under torchrun or srun).

Every rank runs this. It reads the run's resolved config (R/run.toml), the tokenizer and shards stages'
outputs, builds torchtitan's Trainer.Config (stages/pretrain/trainer_config.py) and trains with torchtitan's
own Trainer, which resumes from the newest complete checkpoint in J/checkpoints by itself. Rank 0 also appends
a start and an end event per process lifetime to J/segments.jsonl (a killed process leaves no end event: its
last logged step stands in), which is how the stage adds up wall time and device-hours over restarts, and
writes J/job_info.json (model size, FLOPs per token, the device's peak theoretical FLOP/s:
stages/pretrain/peak_flops.py) for the manifest. The job's first optimizer step is counted as it runs
(stages/pretrain/step_count.py -> J/flop_count.json).

`--seed-checkpoint`: initialise the model in this one process and save it as J/seed/checkpoints/step-0.
Multi-rank CPU runs start from it because DTensor's random generator is off on CPU meshes (every rank would
otherwise initialise identical expert shards).

A rank that fails records why in J/failures/rank-<R>.json (stages/pretrain/failure.py): diverged, bad input,
or an error; the stage reads that, not the log.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from europa_model.checkpoints import JOB_INFO, folder_model_info
from europa_model.devices import resolve_device
from pipeline.fsutil import Locked, append_jsonl, atomic_write_text, exclusive_lock
from pipeline.rundir import JOB_LOCK
from stages.pretrain import step_count
from stages.pretrain.failure import Failure, write_failure
from stages.pretrain.peak_flops import Peak, device_peak


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def single_process_env() -> None:
    """torchtitan always initialises torch.distributed; a plain `python -m` run is a world of one."""
    if "RANK" not in os.environ:
        os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", LOCAL_WORLD_SIZE="1",
                          MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m stages.pretrain.entry")
    ap.add_argument("--run-dir", required=True, type=Path)
    ap.add_argument("--job-dir", required=True, type=Path)
    ap.add_argument("--seed-checkpoint", action="store_true")
    args = ap.parse_args(argv)
    rank = int(os.environ.get("RANK", "0"))
    progress = _Progress()
    try:
        with trainer_lock(args.job_dir, rank):
            return _train(args, progress)
    except TrainerRunning as e:  # not this trainer's failure: the job folder's record stays the other's
        print(f"europa pretrain: {e}", file=sys.stderr)
        return TrainerRunning.exit_code
    except SystemExit as e:
        if isinstance(e.code, str):  # a problem with the run's inputs, phrased for the user
            write_failure(args.job_dir, Failure("input", e.code.removeprefix("europa pretrain: "), rank, progress.step))
        raise
    except Exception as e:
        write_failure(args.job_dir, _failure(e, rank, progress.step))
        raise


TRAINER_LOCK = JOB_LOCK


class TrainerRunning(Locked):
    """Another trainer holds this job folder: two would write one run's checkpoints and metrics."""

    exit_code = 3


@contextlib.contextmanager
def trainer_lock(job_dir: Path, rank: int) -> Iterator[None]:
    """Rank 0 holds the job folder's lock for the trainer's life (the kernel drops it when the process dies, so
    a killed trainer never blocks the next); the other ranks follow rank 0, which a second trainer never gets."""
    if rank != 0:
        yield
        return
    with exclusive_lock(Path(job_dir) / TRAINER_LOCK, "training", error=TrainerRunning,
                        busy=f"{job_dir}: another trainer is running in this job folder ({{holder}}); wait for it "
                             "to end or stop it, then run again"):
        yield


class _Progress:
    """The step training reached, for the failure record (the trainer may not exist yet when something fails)."""

    trainer = None

    @property
    def step(self) -> int | None:
        return getattr(self.trainer, "step", None)


def _failure(e: Exception, rank: int, step: int | None) -> Failure:
    from europa_model.metrics import TrainingDiverged

    if isinstance(e, TrainingDiverged):
        return Failure("diverged", e.detail, rank, e.step, type(e).__name__)
    # torchtitan's own check raises a plain RuntimeError: "Loss is not finite (global_avg_loss=nan) at step N."
    nonfinite = re.match(r"Loss is not finite \((.*?)\) at step (\d+)", str(e))
    if nonfinite:
        return Failure("diverged", nonfinite.group(1), rank, int(nonfinite.group(2)), type(e).__name__)
    return Failure("error", f"{type(e).__name__}: {e}".strip(), rank, step, type(e).__name__)


def _train(args: argparse.Namespace, progress: _Progress) -> int:
    from pipeline.config import load_config
    from pipeline.rundir import RunDir

    run_dir, job_dir = RunDir(args.run_dir), args.job_dir.resolve()
    config = load_config(run_dir.config_path)
    settings = config.section("pretrain")
    tokenizer = run_dir.manifest("tokenizer")
    if tokenizer is None or run_dir.manifest("shards") is None:
        raise SystemExit(f"europa pretrain: {run_dir.path} has no tokenizer or shards output; run those stages first")
    from pipeline.records import load_record

    vocab_size = load_record(run_dir, "tokenizer", tokenizer, "pretrain").model.vocab_size
    check_inputs(run_dir, job_dir, settings.flavor, vocab_size, _routing(settings))
    try:
        device = resolve_device(settings.device)
    except ValueError as e:
        raise SystemExit(f"europa pretrain: [pretrain] {e}") from None
    single_process_env()

    from europa_model.train_compat import apply_for_training

    apply_for_training(device)
    import torch
    import torchtitan
    from torchtitan.tools.logging import init_logger, logger

    from stages.pretrain.trainer_config import build_trainer_config

    init_logger()
    seed = settings.seed if settings.seed is not None else config.run.seed
    world = int(os.environ.get("WORLD_SIZE", "1"))
    peak = device_peak(device, torch.cuda.get_device_name() if device == "cuda" else "cpu", declared=settings.peak_flops_per_device,
                       local_ranks=int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    seed_dir = job_dir / "seed"
    initial = seed_dir / "checkpoints" / "step-0"
    if args.seed_checkpoint:  # only the model is saved and loaded; DistMuon needs sharded parameters to exist
        settings = settings.model_copy(update={"optimizer": settings.optimizer.model_copy(update={"name": "adamw"})})
    trainer_config = build_trainer_config(
        settings,
        shards_dir=run_dir.stage_dir("shards"),
        tokenizer_dir=run_dir.stage_dir("tokenizer"),
        job_dir=seed_dir if args.seed_checkpoint else job_dir,
        vocab_size=vocab_size,
        device_type=device,
        seed=seed,
        peak_flops_per_device=peak.flops,
        initial_load_path=str(initial) if (initial / ".metadata").exists() and not args.seed_checkpoint else None,
        seed_checkpoint=args.seed_checkpoint,
    )
    if args.seed_checkpoint:
        trainer_config.parallelism.data_parallel_shard_degree = 1  # one process, unsharded
        trainer_config.parallelism.expert_parallel_degree = 1
        trainer_config.parallelism.tensor_parallel_degree = 1
        trainer_config.parallelism.data_parallel_replicate_degree = 1

    rank = int(os.environ.get("RANK", "0"))
    trainer = None
    started = time.time()
    try:
        trainer = progress.trainer = trainer_config.build()
        if args.seed_checkpoint:
            trainer.checkpointer.save(curr_step=0, last_step=True)
            logger.info(f"seed checkpoint written to {initial}")
            return 0
        if rank == 0:
            _write_job_info(job_dir, trainer, settings, device, world, peak, vocab_size, torch, torchtitan)
        trainer.checkpointer.load(step=trainer_config.checkpoint.load_step)
        start_step = trainer.step
        step_count.install(trainer, job_dir, tokens_per_step=settings.tokens_per_step,
                           activation_checkpoint=settings.activation_checkpoint.mode, compiled=settings.compile)
        if rank == 0:
            _append_segment(job_dir, event="start", time=round(started, 3), step=start_step, world_size=world,
                            device_type=device)
        _train_from_loaded(trainer)
        if rank == 0:
            _append_segment(job_dir, event="end", time=round(time.time(), 3), step=trainer.step)
    finally:
        if trainer is not None:
            trainer.close()
        if torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()
    return 0


def check_inputs(run_dir, job_dir: Path, flavor: str, vocab_size: int, routing: dict | None = None) -> None:
    """Refuse inputs that would fail deep inside torchtitan (or, worse, train on mismatched ids or resume a model
    with another routing)."""
    index = json.loads((run_dir.stage_dir("shards") / "index.json").read_text())
    if index.get("vocab_size") != vocab_size:
        raise SystemExit(f"europa pretrain: {run_dir.stage_dir('shards')}/index.json was tokenized with a "
                         f"{index.get('vocab_size')}-piece vocabulary but the tokenizer has {vocab_size}; rerun the "
                         "shards stage (europa run --from shards)")
    old = folder_model_info(job_dir)
    if old is not None and list((job_dir / "checkpoints").glob("step-*")):
        if (old.flavor, old.vocab_size) != (flavor, vocab_size):
            raise SystemExit(f"europa pretrain: the checkpoints in {job_dir / 'checkpoints'} hold a {old.flavor} "
                             f"model with a {old.vocab_size}-piece vocabulary, not {flavor} with {vocab_size}; "
                             "move them away or use another job folder")
        if routing is not None and old.routing != routing:
            raise SystemExit(f"europa pretrain: the checkpoints in {job_dir / 'checkpoints'} were trained with routing "
                             f"{old.routing}, not [pretrain.moe] {routing}: the router would compute another "
                             "function; restore the settings or use another job folder")


def _train_from_loaded(trainer) -> None:
    """torchtitan's Trainer.train() loads the checkpoint itself; we loaded it already to know the start step,
    and loading twice is harmless but slow at scale, so skip the second load."""
    checkpointer = trainer.checkpointer
    original = checkpointer.load
    checkpointer.load = lambda *a, **k: True
    try:
        trainer.train()
    finally:
        checkpointer.load = original


def _routing(settings) -> dict[str, int | None]:
    """The routing the model is built with, under the keys job_info.json records (europa_model.flavors)."""
    return {"num_expert_groups": settings.moe.num_expert_groups, "num_limited_groups": settings.moe.num_limited_groups}


def _write_job_info(job_dir, trainer, settings, device, world, peak: Peak, vocab_size, torch, torchtitan) -> None:
    mp = trainer.metrics_processor
    info = {
        "flavor": settings.flavor,
        "vocab_size": vocab_size,
        **_routing(settings),  # part of the model: evaluation and the HF export build the router with these
        "moe_comm_backend": settings.moe.comm_backend,
        "trainer": type(trainer).__qualname__,  # GraphTrainer: the compile-based path (activation offload)
        "activation_checkpoint": settings.activation_checkpoint.mode,
        "device_type": device,
        "device_name": mp.device_memory_monitor.device_name,
        "world_size": world,
        "nodes": settings.parallelism.nodes,
        "num_flops_per_token": int(mp.num_flops_per_token),
        "peak_flops_per_device": peak.flops,  # theoretical (stages/pretrain/peak_flops.py); None: unknown device
        "peak_flops_source": peak.source,
        "peak_flops_inputs": peak.inputs,
        "gradient_accumulation_steps": trainer.gradient_accumulation_steps,
        "torch_version": torch.__version__,
        "torchtitan_version": getattr(torchtitan, "__version__", "unknown"),
    }
    job_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_text(job_dir / JOB_INFO, json.dumps(info, indent=2) + "\n")


def _append_segment(job_dir, **row) -> None:
    append_jsonl(job_dir / "segments.jsonl", row)


if __name__ == "__main__":
    sys.exit(main())
