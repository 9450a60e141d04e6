#!/usr/bin/env python3
"""The GPU check: the `small` flavor through the real pretrain stage on one GPU, measured against the planner.

One command on a machine with one H200 / GH200 (no network needed, under 5 minutes):

    python bench/gpu_check.py                      # -> bench/results/gpu_check.json
    python bench/gpu_check.py --dry-run            # the same plumbing on CPU with `tiny` (no GPU needed)

What it does: (1) probes the environment (torch, CUDA device, the modules the training path imports) and stops
with status "missing_prerequisites" naming them if any is absent; (2) uses the prepared data in --data-dir (a run
directory with the tokenizer and shards stages done, from the UDHR demo corpus), preparing it first where the
data stages can run (`--prepare-only` does just that, e.g. on a login node, so that the GPU machine only trains);
(3) writes a config for one GPU: flavor small, bfloat16, `unshard_async_op = true`, activation checkpointing
`offload` (torchtitan's graph_trainer: torch.compile, SAC, saved activations to host memory), a final checkpoint
(hashed on the rank while saved); (4) runs the real pretrain stage (`PretrainStage.run`: the training process
`stages.pretrain.entry`, torchtitan's trainer, publication of the record) in a scratch folder; (5) writes JSON:
tokens/s per GPU (median of the logged steps after warm-up), MFU against the device's bf16 dense peak, peak memory
(torch's max reserved), next to the planner's prediction for the same layout (`europa plan`'s throughput model
and memory estimate) and their ratios. A time limit (--timeout, default 270 s) stops training cleanly; what was
measured until then is still reported (status "timeout").

torchtitan applies FSDP2 to the model even on one GPU (a mesh of one), so `unshard_async_op` and the explicit
prefetching it needs are exercised; the JSON quotes train.log's line. The offload path needs CUDA and
torch.compile (job_info.json names the trainer that ran); the dry run builds its config (without running it) and
trains with selective AC instead. The planner's prediction for one GPU has no expert or FSDP traffic: compute,
the offload copies over the host link (NVLink-C2C on GH200, PCIe on H200) and the optimizer step.

This script itself uses only torch APIs older than torch 2.11 (torch.cuda device queries); the training path is
the project's and needs its pinned torchtitan and dependencies (pyproject.toml).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
DEFAULT_DATA = ROOT / "bench" / "results" / "gpu_check"
DEFAULT_OUT = ROOT / "bench" / "results" / "gpu_check.json"
UDHR = ROOT / ".cache" / "udhr" / "package" / "declaration"
LANGS = ("de", "el", "ga", "mt", "bg", "fi", "en", "fr")
WARMUP_STEPS = 3
# what the training path imports (pyproject.toml pins them); checked before anything runs
REQUIRED = ("torch", "torchtitan", "pydantic", "numpy", "pyarrow", "datasets", "tokenizers", "tyro", "tensorboard",
            "torchdata", "safetensors")

DATA_CONFIG = """
[run]
name = "gpu-check"
languages = {langs}
seed = 11
[orchestration]
engine = "local"
max_workers = 2
[[ingest.sources]]
name = "udhr"
kind = "udhr"
path = "udhr"
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
shard_bytes = 524288
"""


def probe() -> dict:
    env = {"python": platform.python_version(), "machine": platform.machine(),
           "missing_modules": [m for m in REQUIRED if importlib.util.find_spec(m) is None]}
    try:
        import torch

        env["torch"] = torch.__version__
        env["cuda_available"] = bool(torch.cuda.is_available())
        if env["cuda_available"]:
            props = torch.cuda.get_device_properties(0)
            env.update(device_name=torch.cuda.get_device_name(0), device_capability=list(torch.cuda.get_device_capability(0)),
                       device_memory_gib=round(props.total_memory / 2**30, 1), cuda=torch.version.cuda,
                       devices=torch.cuda.device_count())
    except Exception as e:  # a broken torch is a finding, not a crash
        env["torch_error"] = f"{type(e).__name__}: {e}"
    if importlib.util.find_spec("torchtitan") is not None:
        try:
            from importlib.metadata import version

            env["torchtitan"] = version("torchtitan")
        except Exception:
            env["torchtitan"] = "unknown"
    return env


def prepare(data_dir: Path) -> Path:
    """Ingest, tokenizer and shards of 8 UDHR languages into data_dir/run (seconds); data_dir holds its inputs."""
    run = data_dir / "run"
    if (run / "shards" / "manifest.json").exists() and (run / "tokenizer" / "manifest.json").exists():
        return run
    if not (UDHR / "eng.html").exists():
        raise SystemExit(f"gpu_check: no prepared data in {data_dir} and no demo corpus at {UDHR} to prepare it "
                         "(make demo-data, or run --prepare-only where the project is installed and copy the folder)")
    (data_dir / "udhr").mkdir(parents=True, exist_ok=True)
    from pipeline.languages import language

    for lang in LANGS:  # the inputs travel with the data (a few hundred KB)
        name = f"{language(lang).udhr}.html"
        shutil.copy2(UDHR / name, data_dir / "udhr" / name)
    cfg = data_dir / "data.toml"
    cfg.write_text(DATA_CONFIG.format(langs=json.dumps(list(LANGS))))
    with open(data_dir / "prepare.log", "w") as log:
        code = subprocess.call([sys.executable, "-m", "pipeline.cli", "run", "--config", str(cfg), "--run-dir", str(run),
                                "--to", "shards"], cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    if code:
        raise SystemExit(f"gpu_check: preparing the data failed (exit {code}); see {data_dir / 'prepare.log'}")
    return run


def check_config(run: Path, dry_run: bool, steps: int, seq_len: int, batch: int, peak: float | None, budget: float) -> Path:
    if dry_run:
        pretrain = f"""
[pretrain]
flavor = "tiny"
seq_len = 64
local_batch_size = 4
steps = {steps}
device = "cpu"
log_every = 1
[pretrain.schedule]
warmup_steps = 2
[pretrain.parallelism]
unshard_async_op = true
[pretrain.activation_checkpoint]
mode = "selective"
[pretrain.checkpoint]
interval = {steps}
"""
    else:
        pretrain = f"""
[pretrain]
flavor = "small"
seq_len = {seq_len}
local_batch_size = {batch}
steps = {steps}
precision = "bfloat16"
device = "cuda"
log_every = 1
{f"peak_flops_per_device = {peak:.6g}" if peak else ""}
[pretrain.schedule]
warmup_steps = 5
[pretrain.parallelism]
unshard_async_op = true
[pretrain.activation_checkpoint]
mode = "offload"
offload_budget_gb = {budget:g}
offload_prefetch_layers = 1
[pretrain.checkpoint]
interval = {steps}
"""
    cfg = run.parent / "check.toml"
    cfg.write_text(f'[run]\nname = "gpu-check"\nlanguages = {json.dumps(list(LANGS))}\nseed = 11\n'
                   '[orchestration]\nengine = "local"\n' + pretrain)
    return cfg


class _Timeout(Exception):
    pass


def _on_alarm(signum, frame):
    raise _Timeout()


def run_stage(run: Path, cfg: Path, scratch: Path, timeout_s: int) -> tuple[object | None, Path, str | None]:
    """The real pretrain stage on `run` with `cfg`, publishing into `scratch` (not the run: nothing to clean up)."""
    from pipeline.config import load_config
    from pipeline.status import build_context
    from pipeline.rundir import RunDir
    from pipeline.runconfig import save_run_config
    from stages.pretrain.stage import PretrainStage

    rd = RunDir(run)
    config = load_config(cfg)
    save_run_config(rd, config)  # the training process reads the run's run.toml
    # the data stages were prepared by another config (and maybe on another machine): their outputs are what
    # matters, so upstream freshness against this config is not required
    ctx = build_context(rd, config, "pretrain", require_fresh_upstream=False)
    job = ctx.job_dir
    if job.exists():
        shutil.rmtree(job)  # a fresh measurement, not a resumed one
    old = signal.signal(signal.SIGALRM, _on_alarm)
    signal.alarm(timeout_s)
    error = None
    outcome = None
    try:
        outcome = PretrainStage().run(ctx, scratch)
    except _Timeout:
        error = f"timeout: stopped after {timeout_s} s (what was logged until then is reported)"
    except Exception as e:
        error = f"{type(e).__name__}: {e}"
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    return outcome, job, error


def measured(job: Path, flops_per_token: float, peak: float | None) -> dict:
    from stages.pretrain import job as jobdir

    rows = jobdir.metrics(job)
    steady = [r for r in rows if r["step"] > WARMUP_STEPS] or rows[1:] or rows
    out: dict = {"steps_logged": len(rows), "steps_used": [r["step"] for r in steady][:1] + [r["step"] for r in steady][-1:]}
    if not steady:
        return out
    tps = statistics.median(r["tokens_per_s_per_device"] for r in steady)
    out.update(tokens_per_s_per_gpu=tps, step_time_s=statistics.median(r.get("step_time_s") or 0.0 for r in steady),
               peak_memory_gib=max(r.get("memory_gib", 0.0) for r in rows),
               torchtitan_mfu_pct=statistics.median(r.get("mfu_pct") or 0.0 for r in steady),
               final_loss=rows[-1]["loss"], first_loss=rows[0]["loss"])
    if peak:
        out.update(flops_per_token=flops_per_token, peak_bf16_flops=peak, mfu_vs_bf16_dense_peak=tps * flops_per_token / peak)
    return out


def applied(job: Path) -> dict:
    """Whether the two paths the check is for really ran (train.log, job_info.json)."""
    log = (job / "train.log").read_text(errors="replace") if (job / "train.log").exists() else ""
    info = json.loads((job / "job_info.json").read_text()) if (job / "job_info.json").exists() else {}
    if "unshard_async_op on" in log:
        async_op = next(line.split(" - INFO - ")[-1] for line in log.splitlines() if "unshard_async_op on" in line)
    elif "unshard_async_op requested but the model is not FSDP-sharded" in log:
        async_op = "requested, but the model was not FSDP-sharded: nothing applied"
    else:
        async_op = "not seen in train.log"
    trainer = info.get("trainer")
    offload = (f"{trainer} with activation_checkpoint {info.get('activation_checkpoint')!r}" if trainer
               else "the training process did not start (no job_info.json)")
    return {"unshard_async_op": async_op, "activation_offload": offload}


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    report: dict = {"check": "gpu_check", "version": 1, "dry_run": args.dry_run,
                    "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "notes": []}
    t0 = time.monotonic()

    def finish(status: str, code: int) -> int:
        report.update(status=status, wall_s=round(time.monotonic() - t0, 1))
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=2, default=str) + "\n")
        print(json.dumps({k: report.get(k) for k in ("status", "measured", "predicted", "measured_over_predicted",
                                                      "error")}, indent=1, default=str))
        print(f"gpu_check: {status}; full report {args.out}")
        return code

    try:
        return _check(args, report, finish)
    except SystemExit as e:  # a problem phrased for the user (no data, a failed preparation)
        report["error"] = str(e.code)
        return finish("failed", 1)
    except Exception:  # even a crash leaves a report
        report["error"] = traceback.format_exc()
        return finish("crashed", 1)


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dry-run", action="store_true", help="CPU, tiny flavor, selective AC: the plumbing only")
    ap.add_argument("--prepare-only", action="store_true", help="prepare --data-dir (data stages) and stop")
    ap.add_argument("--data-dir", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--out", "--json", dest="out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--steps", type=int, default=None, help="default 30 (dry run 6)")
    ap.add_argument("--seq-len", type=int, default=2048)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--offload-budget-gb", type=float, default=16.0)
    ap.add_argument("--timeout", type=int, default=270, help="seconds of training before it is stopped")
    ap.add_argument("--data", type=Path, default=None, help=argparse.SUPPRESS)  # bench/summary.py passes it
    return ap


def _check(args: argparse.Namespace, report: dict, finish) -> int:
    report["environment"] = env = probe()
    if env["missing_modules"]:
        report["error"] = (f"missing modules {', '.join(env['missing_modules'])}: install the project "
                           "(pip install -e . with its pins: torch, torchtitan 0.3.0, ...) on this machine")
        return finish("missing_prerequisites", 2)
    if args.prepare_only:
        prepare(args.data_dir)
        report["notes"].append(f"data prepared in {args.data_dir}")
        return finish("prepared", 0)
    if not args.dry_run and not env.get("cuda_available"):
        report["error"] = "no CUDA device visible (torch.cuda.is_available() is False); --dry-run checks the plumbing on CPU"
        return finish("no_gpu", 2)

    from stages.cluster.machine import JUPITER_BOOSTER
    from stages.pretrain.hardware import hardware_for

    hardware = JUPITER_BOOSTER if args.dry_run else hardware_for(env.get("device_name", ""))
    if hardware is None:
        report["notes"].append(f"{env.get('device_name')} is not described in stages/pretrain/hardware.py: the "
                               "prediction uses GH200's figures and MFU uses torchtitan's own peak table")
    peak = None if args.dry_run else (hardware.peak_bf16_flops if hardware else None)
    hardware = hardware or JUPITER_BOOSTER
    run = prepare(args.data_dir)
    steps = args.steps or (6 if args.dry_run else 30)
    cfg = check_config(run, args.dry_run, steps, args.seq_len, args.batch, peak, args.offload_budget_gb)

    from pipeline.config import load_config
    from stages.pretrain.planner.report import plan

    settings = load_config(cfg).section("pretrain")
    tokenizer = json.loads((run / "tokenizer" / "manifest.json").read_text())["statistics"]["model"]["vocab_size"]
    pl = plan(settings, tokenizer, hardware=hardware)
    rate = pl.prediction.tokens_per_s
    report["layout"] = {"flavor": settings.flavor, "vocab_size": tokenizer, "seq_len": settings.seq_len,
                        "local_batch_size": settings.local_batch_size, "steps": steps, "precision": settings.precision,
                        "activation_checkpoint": settings.activation_checkpoint.mode,
                        "offload_budget_gb": settings.activation_checkpoint.offload_budget_gb,
                        "unshard_async_op": settings.parallelism.unshard_async_op, "gpus": 1}
    report["predicted"] = {"hardware": hardware.name, "tokens_per_s_per_gpu": {"pessimistic": rate.pessimistic,
                           "expected": rate.expected, "optimistic": rate.optimistic},
                           "bottleneck": pl.prediction.expected.bottleneck, "memory_gib": pl.memory.total_gib,
                           "memory_verdict": pl.memory.verdict, "offload_host_gib": pl.memory.offload_host_gib,
                           "flops_per_token": pl.throughput.flops_per_token}
    if args.dry_run:  # the offload path's config builds (it cannot run on CPU)
        from stages.pretrain.trainer_config import build_trainer_config

        offload = settings.model_copy(update={"activation_checkpoint": settings.activation_checkpoint.model_copy(
            update={"mode": "offload"})})
        built = build_trainer_config(offload, shards_dir=run / "shards", tokenizer_dir=run / "tokenizer",
                                     job_dir=Path(tempfile.mkdtemp()), vocab_size=tokenizer, device_type="cuda", seed=1)
        report["notes"].append(f"dry run: the offload config builds {type(built).__qualname__} with memory_policy "
                               f"{built.compile.memory_policy!r}; training ran with selective AC on CPU")

    scratch = Path(tempfile.mkdtemp(prefix="gpu-check-publish-"))
    outcome, job, error = run_stage(run, cfg, scratch, args.timeout)
    report["measured"] = m = measured(job, pl.throughput.flops_per_token, peak)
    report["paths"] = applied(job)
    if outcome is not None:
        ck = outcome.statistics.checkpoint
        m["final_checkpoint"] = {"files": len(ck.files), "bytes": sum(f.bytes for f in ck.files),
                                 "hashed_on_ranks": ck.kept[-1].hashed_on_ranks, "hashed_at_publish": ck.kept[-1].hashed_at_publish}
    if m.get("tokens_per_s_per_gpu"):
        report["measured_over_predicted"] = {"tokens_per_s": m["tokens_per_s_per_gpu"] / rate.expected,
                                             "peak_memory": m["peak_memory_gib"] / pl.memory.total_gib}
    if error:
        report["error"] = error
        tail = (job / "train.log").read_text(errors="replace")[-4000:] if (job / "train.log").exists() else ""
        report["log_tail"] = tail
        return finish("timeout" if error.startswith("timeout") else "failed", 1 if not error.startswith("timeout") else 0)
    shutil.rmtree(scratch, ignore_errors=True)
    return finish("ok", 0)


if __name__ == "__main__":
    sys.exit(main())
