#!/usr/bin/env python3
"""The project's training steps against torchtitan's own Trainer: same model, batch, threads, machine, run.

Both sides train the same `tiny` EUROPA model config (torchtitan's DeepSeek-V3 layers) with the same batch,
sequence length, optimizer, schedule, loss, precision and threads, each in a fresh process, alternating
(ours, torchtitan, ours, torchtitan, ...), on the UDHR demo corpus:
  ours        stages.pretrain.trainer_config.build_trainer_config: our shards dataloader (pre-tokenized shards,
              mixture weights), EuropaMetricsProcessor (metrics.jsonl, divergence check), our parallelize wrapper,
              EuropaCheckpointManager (sha256 while saving)
  torchtitan  torchtitan's Trainer with its own components: ModelSpec with `parallelize_deepseekv3`, the
              HuggingFaceTextDataLoader over the same documents (tokenized as it reads), MetricsProcessor,
              CheckpointManager
Both need the same CPU adaptations (europa_model/train_compat.py), applied in both. Timed: every training step
(`Trainer.train_step`, data loading included) after the first 3 (warm-up), in CPU seconds of the process (the
machine is shared: wall time swings 2x with the neighbours' load; it is reported too), median per process, then
the median over processes; and the final checkpoint save (full training state; ours also hashes it). Goal
(issue 17): the training-step ratio ours / torchtitan <= 1.05. Run it under the benchmark lock:

    flock /work/bench.lock .venv/bin/python bench/train_bench.py [--steps 40] [--repeats 3] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
RESULTS = ROOT / "bench" / "results"
UDHR = ROOT / ".cache" / "udhr" / "package" / "declaration"
GOAL = 1.05
WARMUP = 3

CONFIG = """
[run]
name = "train-bench"
languages = ["de", "el", "ga", "mt", "bg", "fi", "en", "fr"]
seed = 7
[orchestration]
engine = "local"
max_workers = 1
[[ingest.sources]]
name = "udhr"
kind = "udhr"
path = "{udhr}"
licence = "public-domain-text"
homepage = "https://www.unicode.org/udhr/"
domain = "unicode.org"
collected = "2024-05"
[ingest.quality]
min_words = 10
[tokenizer]
vocab_size = 1000
reserved_tokens = 2
[shards]
val_fraction = 0.05
shard_bytes = 131072
[pretrain]
flavor = "tiny"
seq_len = {seq_len}
local_batch_size = {batch}
steps = {steps}
log_every = 1
data_order = "per_rank"
[pretrain.schedule]
warmup_steps = 2
[pretrain.checkpoint]
interval = {steps}
"""


def prepare(work: Path, steps: int, seq_len: int, batch: int) -> Path:
    """A run directory with ingest, tokenizer and shards done, and the documents as JSON for torchtitan's loader."""
    cfg = work / "config.toml"
    cfg.write_text(CONFIG.format(udhr=UDHR, steps=steps, seq_len=seq_len, batch=batch))
    run = work / "run"
    with open(work / "prepare.log", "w") as log:
        code = subprocess.call([sys.executable, "-m", "pipeline.cli", "run", "--config", str(cfg), "--run-dir", str(run),
                                "--to", "shards"], cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    if code:
        raise SystemExit(f"train_bench: preparing the data failed (exit {code}); see {work / 'prepare.log'}")
    import pyarrow.parquet as pq

    texts = work / "texts"
    texts.mkdir()
    with open(texts / "data.json", "w", encoding="utf-8") as out:
        for part in sorted((run / "ingest" / "data").rglob("*.parquet")):
            for text in pq.read_table(part, columns=["text"]).column("text").to_pylist():
                out.write(json.dumps({"text": text}, ensure_ascii=False) + "\n")
    return run


def _reference_config(settings, run: Path, job: Path, vocab_size: int, seed: int):
    """torchtitan's Trainer.Config with torchtitan's own components on the same model, batch and optimizer."""
    from europa_model import cpu_compat

    cpu_compat.apply()
    from torchtitan.components.checkpoint import CheckpointManager
    from torchtitan.components.loss import ChunkedLossWrapper, CrossEntropyLoss
    from torchtitan.components.metrics import MetricsProcessor
    from torchtitan.components.optimizer import (LRSchedulersContainer, OptimizersContainer,
                                                 register_moe_load_balancing_hook)
    from torchtitan.components.optimizer.optimizer import ParamGroupConfig
    from torchtitan.config import ParallelismConfig, TrainingConfig
    from torchtitan.config.configs import DebugConfig
    from torchtitan.distributed.pipeline_parallel import pipeline_llm
    from torchtitan.hf_datasets.text_datasets import HuggingFaceTextDataLoader
    from torchtitan.models.common.config_utils import decoder_vocab_size
    from torchtitan.models.deepseek_v3.parallelize import parallelize_deepseekv3
    from torchtitan.models.deepseek_v3.state_dict_adapter import DeepSeekV3StateDictAdapter
    from torchtitan.protocols.model_spec import ModelSpec
    from torchtitan.trainer import Trainer

    from europa_model.flavors import build_model_args

    o = settings.optimizer
    spec = ModelSpec(name="deepseek_v3", flavor=settings.flavor, model=build_model_args(settings.flavor, vocab_size),
                     parallelize_fn=parallelize_deepseekv3, pipelining_fn=pipeline_llm,
                     post_optimizer_build_fn=register_moe_load_balancing_hook,
                     state_dict_adapter=DeepSeekV3StateDictAdapter)
    return Trainer.Config(
        model_spec=spec, hf_assets_path=str(run / "tokenizer"), dump_folder=str(job),
        loss=ChunkedLossWrapper.Config(loss_fn=CrossEntropyLoss.Config(global_vocab_size=decoder_vocab_size(spec))),
        metrics=MetricsProcessor.Config(log_freq=settings.log_every, disable_color_printing=True),
        dataloader=HuggingFaceTextDataLoader.Config(dataset="c4_test", dataset_path=str(run.parent / "texts")),
        optimizer=OptimizersContainer.Config(param_groups=[ParamGroupConfig(
            pattern=r".*", optimizer_name="AdamW", optimizer_kwargs={
                "lr": o.lr, "betas": (o.beta1, o.beta2), "eps": o.eps, "weight_decay": o.weight_decay})]),
        lr_scheduler=LRSchedulersContainer.Config(
            warmup_steps=settings.schedule.warmup_steps, decay_ratio=settings.schedule.decay_ratio,
            decay_type=settings.schedule.decay_type, min_lr_factor=settings.schedule.min_lr_factor),
        training=TrainingConfig(local_batch_size=settings.local_batch_size, seq_len=settings.seq_len,
                                steps=settings.steps, max_norm=settings.max_norm,
                                mixed_precision_param=settings.precision, disable_cuda_graphs=True),
        parallelism=ParallelismConfig(),
        checkpoint=CheckpointManager.Config(enable=True, folder="checkpoints", interval=settings.checkpoint.interval,
                                            last_save_model_only=False),
        activation_checkpoint=None, debug=DebugConfig(seed=seed),
    )


def worker(side: str, run: Path, out: Path) -> None:
    """One timed training run in this (fresh) process; writes {"steps_s": [...], "checkpoint_s": x} to `out`."""
    import torch

    from pipeline.config import load_config
    from pipeline.records import load_record
    from pipeline.rundir import RunDir
    from stages.pretrain.entry import single_process_env

    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    rd = RunDir(run)
    config = load_config(rd.config_path)
    settings = config.section("pretrain")
    vocab = load_record(rd, "tokenizer", rd.manifest("tokenizer"), "pretrain").model.vocab_size
    single_process_env()
    from europa_model.train_compat import apply_for_training

    apply_for_training("cpu")
    job = Path(tempfile.mkdtemp(prefix=f"{side}-", dir=run.parent))
    if side == "ours":
        from stages.pretrain.trainer_config import build_trainer_config

        trainer_config = build_trainer_config(settings, shards_dir=rd.stage_dir("shards"),
                                              tokenizer_dir=rd.stage_dir("tokenizer"), job_dir=job, vocab_size=vocab,
                                              device_type="cpu", seed=config.run.seed, peak_flops_per_device=1e11)
    else:
        trainer_config = _reference_config(settings, run, job, vocab, config.run.seed)
    trainer = trainer_config.build()
    steps_s: list[float] = []
    steps_cpu_s: list[float] = []
    saves: list[float] = []
    step, save = trainer.train_step, trainer.checkpointer.save

    def timed_step(*a, **k):
        t0, c0 = time.perf_counter(), time.process_time()
        try:
            return step(*a, **k)
        finally:
            steps_s.append(time.perf_counter() - t0)
            steps_cpu_s.append(time.process_time() - c0)

    def timed_save(curr_step, last_step=False):
        t0 = time.perf_counter()
        wrote = save(curr_step, last_step=last_step)
        if last_step:
            saves.append(time.perf_counter() - t0)
        return wrote

    trainer.train_step, trainer.checkpointer.save = timed_step, timed_save
    try:
        trainer.train()
    finally:
        trainer.close()
        if torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()
    ckpts = list((job / "checkpoints").glob("step-*/.metadata"))
    out.write_text(json.dumps({"side": side, "steps_s": steps_s, "steps_cpu_s": steps_cpu_s, "checkpoint_s": saves[-1] if saves else None,
                               "checkpoints": len(ckpts),
                               "rank_checksums": len(list((job / "checkpoints").glob("step-*/checksums-rank*.json")))}))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--repeats", type=int, default=3, help="processes per side, alternating")
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--json", type=Path, default=RESULTS / "train_bench.json")
    ap.add_argument("--data", type=Path, default=None, help="unused (the UDHR demo corpus is the data)")
    ap.add_argument("--worker", choices=["ours", "torchtitan"], help=argparse.SUPPRESS)
    ap.add_argument("--run", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        worker(args.worker, args.run, args.out)
        return 0
    if not (UDHR / "eng.html").exists():
        print(f"train_bench: skipped: the demo corpus is missing at {UDHR} (make demo-data)")
        return 0
    threads = os.environ["OMP_NUM_THREADS"]
    with tempfile.TemporaryDirectory(prefix="train-bench-") as tmp:
        work = Path(tmp)
        t0 = time.monotonic()
        run = prepare(work, args.steps, args.seq_len, args.batch)
        print(f"data prepared in {time.monotonic() - t0:.0f} s (UDHR, 8 languages, tokenizer 1,000 pieces)", flush=True)
        results: dict[str, list[dict]] = {"ours": [], "torchtitan": []}
        for i in range(args.repeats):
            for side in ("ours", "torchtitan"):
                out = work / f"{side}-{i}.json"
                log = work / f"{side}-{i}.log"
                with open(log, "w") as f:
                    code = subprocess.call([sys.executable, __file__, "--worker", side, "--run", str(run), "--out", str(out)],
                                           cwd=ROOT, stdout=f, stderr=subprocess.STDOUT,
                                           env={**os.environ, "OMP_NUM_THREADS": threads})
                if code:
                    print(log.read_text()[-3000:], file=sys.stderr)
                    raise SystemExit(f"train_bench: the {side} run failed (exit {code})")
                r = json.loads(out.read_text())
                r["median_step_cpu_s"] = statistics.median(r["steps_cpu_s"][WARMUP:])
                r["median_step_s"] = statistics.median(r["steps_s"][WARMUP:])
                results[side].append(r)
                print(f"  {side:<10} run {i + 1}: median step {r['median_step_cpu_s'] * 1e3:7.1f} ms CPU "
                      f"({r['median_step_s'] * 1e3:.1f} ms wall) over {len(r['steps_s']) - WARMUP} steps; final "
                      f"checkpoint save {r['checkpoint_s']:.3f} s", flush=True)
    step = {s: statistics.median(r["median_step_cpu_s"] for r in rs) for s, rs in results.items()}
    wall = {s: statistics.median(r["median_step_s"] for r in rs) for s, rs in results.items()}
    save = {s: statistics.median(r["checkpoint_s"] for r in rs) for s, rs in results.items()}
    ratio = step["ours"] / step["torchtitan"]
    summary = {
        "setup": {"flavor": "tiny", "seq_len": args.seq_len, "local_batch_size": args.batch, "steps": args.steps,
                  "warmup_steps_dropped": WARMUP, "repeats": args.repeats, "threads": int(threads), "goal": GOAL},
        "ours_step_cpu_s": step["ours"], "torchtitan_step_cpu_s": step["torchtitan"], "step_ratio": ratio,
        "ours_step_wall_s": wall["ours"], "torchtitan_step_wall_s": wall["torchtitan"],
        "wall_ratio": wall["ours"] / wall["torchtitan"],
        "ours_checkpoint_s": save["ours"], "torchtitan_checkpoint_s": save["torchtitan"],
        "checkpoint_ratio": save["ours"] / save["torchtitan"],
        "ours_rank_checksum_files": results["ours"][0]["rank_checksums"], "runs": results,
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(summary, indent=2) + "\n")
    print(f"training step (CPU time): ours {step['ours'] * 1e3:.1f} ms, torchtitan {step['torchtitan'] * 1e3:.1f} ms: "
          f"ratio {ratio:.3f} (goal <= {GOAL}); wall-clock ratio {wall['ours'] / wall['torchtitan']:.3f}; final checkpoint save (ours hashes it): ours {save['ours']:.3f} s, "
          f"torchtitan {save['torchtitan']:.3f} s, ratio {save['ours'] / save['torchtitan']:.2f}")
    return 0 if ratio <= GOAL else 1


if __name__ == "__main__":
    sys.exit(main())
