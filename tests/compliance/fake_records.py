"""Records for the compliance tests: a real ingest/tokenizer/shards run plus pretrain and evaluate manifests.

The pretrain and evaluate manifests are written here by hand (training takes minutes), with statistics that
must validate against the stages' record models (stages/pretrain/record.py, stages/evaluate/record.py), so
the fake cannot drift from the contract; tests/compliance/test_compliance_real_pretrain.py runs them for real.
"""

from __future__ import annotations

import json
import textwrap
import tomllib
from pathlib import Path
from typing import Any

from pipeline.config import REPO_ROOT
from pipeline.manifest import MANIFEST_NAME, Manifest
from pipeline.rundir import RunDir

LANGS = '["de", "mt", "fi"]'
UPSTREAM_BODY = """
[tokenizer]
vocab_size = 800
reserved_tokens = 2
[shards]
val_fraction = 0.1
[shards.mixture]
total_tokens = 204800  # the tokens the fake pretrain record trains (no language beyond the epoch cap)
max_epochs = 50
"""


def pretrain_statistics(*, flops: float | None = None, projected: float | None = None, counted_ratio: float = 0.99,
                        utilisation: float = 0.05) -> dict[str, Any]:
    """The contract's statistics for the tiny flavor, 100 steps on a CPU; `flops` sets (a), the count (b) is
    `counted_ratio` x (a), the hardware bound (c) is (a) / `utilisation`."""
    tokens = 100 * 8 * 256
    per_token = 2_495_232
    analytic = float(flops if flops is not None else per_token * tokens)
    per_token = round(analytic / tokens)  # the record's own arithmetic holds (contradictions.py checks it)
    return _validated("pretrain", {
        "model": {"flavor": "tiny", "architecture": "decoder-only transformer, Mixture-of-Experts (DeepSeek-V3 / Kimi-K2 layers: MLA attention, "
                                                    "8 routed experts top-2 + 1 shared, first 1 layers dense), built with torchtitan", "vocab_size": 800,
                  "total_params": 812_352, "active_params": 601_216, "active_matmul_params": 409_216, "dim": 64, "n_layers": 3,
                  "n_dense_layers": 1, "num_experts": 8, "top_k": 2, "num_shared_experts": 1, "context_length": 256},
        "training": {"steps": 100, "tokens_seen": tokens, "seq_len": 256, "global_batch_size": 8, "optimizer": "adamw", "lr": 0.003,
                     "wall_time_s": 95.25, "device_type": "cpu", "device_name": "cpu", "device_count": 1, "nodes": 1,
                     "device_hours": 95.25 / 3600, "launcher": "local", "final_loss": 5.125, "precision": "float32",
                     "torch_version": "2.13.0", "torchtitan_version": "0.3.0", "segments": 1, "first_loss": 8.75,
                     "tokens_per_s_per_device": 2150.5, "peak_memory_gib": 0.5},
        "compute": {
            "architecture": {"flops": analytic, "flops_per_token": per_token, "flops_per_token_matmul": 6 * 409_216,
                             "flops_per_token_attention": per_token - 6 * 409_216, "flops_attention": analytic * 0.02,
                             "tokens": tokens, "method": "6 x active matmul parameters x tokens + attention",
                             "uncertainty": "exact for what it counts"},
            "counted": {"flops": analytic * counted_ratio, "flops_per_step": int(analytic * counted_ratio / 100), "counted_step": 1,
                        "steps": 100, "tokens_per_step": 8 * 256, "by_operation": {"mm": int(analytic * counted_ratio / 100)},
                        "recomputed_flops_per_step": 0, "ratio_to_architecture": counted_ratio,
                        "method": "FlopCounterMode over one step x steps", "uncertainty": "matmuls only"},
            "hardware": {"flops": analytic / utilisation, "device_seconds": 95.25, "peak_flops_per_device": analytic / utilisation / 95.25,
                         "peak_source": "AMD EPYC: 2 core(s) x 2,596 MHz x 128 FLOP/cycle", "implied_utilisation": utilisation,
                         "method": "devices x seconds x peak", "uncertainty": "an upper bound"},
        },
        "checkpoint": {"final_step": 100, "path": "checkpoints/step-100", "sha256": "ab" * 32,
                       "files": [{"path": "checkpoints/step-100/__0_0.distcp", "sha256": "cd" * 32, "bytes": 9_876_543}],
                       "kept": [{"step": 100, "path": "checkpoints/step-100", "sha256": "ab" * 32, "files": 1,
                                 "bytes": 9_876_543, "hashed_on_ranks": 1, "hashed_at_publish": 0}]},
        "projection": {"planned_tokens": round(projected / per_token) if projected is not None else tokens,
                       "planned_flops": float(projected if projected is not None else analytic)},
    })


def evaluate_statistics(langs: list[str]) -> dict[str, Any]:
    return _validated("evaluate", {
        "latest_step": 100, "checkpoints_evaluated": [25, 50, 75, 100],
        "per_language": {lang: {"val_loss": 5.25 + i / 8, "val_bits_per_byte": 2.5 + i / 16, "val_token_accuracy": 0.125,
                                "val_bits_per_byte_stderr": 0.0625, "val_documents": 3.0, "val_tokens": 400.0}
                         for i, lang in enumerate(langs)},
        "eval_sets": ["val"], "flagged": [], "missing": {"val": []}, "sources": {"val": {lang: "shards/val" for lang in langs}},
        "tasks": [], "regression_threshold": 0.05, "regression_sigma": 2.0,
        "method": "bits per byte = NLL / (UTF-8 bytes x ln 2)", "skipped": [],
        "contamination": {"val": {lang: {"texts": 3, "short": 0, "contaminated": 1 if lang == langs[0] else 0,
                                         "training_documents": 1 if lang == langs[0] else 0} for lang in langs}},
        "contamination_method": "word 13-grams of each evaluated text against every training document"})


def _validated(stage: str, statistics: dict[str, Any]) -> dict[str, Any]:
    """The statistics as the stage's record model accepts and dumps them (a fake that drifts fails here)."""
    from pipeline.registry import record_model

    return record_model(stage).model_validate(statistics).model_dump(mode="json", exclude_unset=True)


def _manifest(stage: str, config: dict, upstream: dict, statistics: dict, at: str) -> Manifest:
    return Manifest(stage=stage, status="complete", fingerprint=f"{stage}-fp", output_digest=f"{stage}-digest", config=config,
                    upstream=upstream, code_version="1", package_version="0.1.0", git_commit=None, started_at=at, finished_at=at,
                    duration_s=1.0, outputs=[], statistics=statistics)


def write_pretrain(run: Path, statistics: dict[str, Any] | None = None, *, drop: tuple[str, ...] = (), **kw) -> None:
    """Write pretrain/manifest.json; `drop` removes dotted keys (e.g. "compute.counted")."""
    from stages.pretrain.config import PretrainConfig

    rd = RunDir(run)
    stats = statistics or pretrain_statistics(**kw)
    for key in drop:
        *parents, last = key.split(".")
        d = stats
        for p in parents:
            d = d[p]
        del d[last]
    up = {s: {"fingerprint": m.fingerprint, "output_digest": m.output_digest} for s in ("tokenizer", "shards") if (m := rd.manifest(s))}
    m = _manifest("pretrain", PretrainConfig().model_dump(mode="json"), up, stats, "2026-11-30T10:00:00+00:00")
    (run / "pretrain").mkdir(parents=True, exist_ok=True)
    (run / "pretrain" / MANIFEST_NAME).write_text(m.to_json(), encoding="utf-8")


def write_evaluate(run: Path, langs: list[str]) -> None:
    m = _manifest("evaluate", {}, {"pretrain": {"fingerprint": "pretrain-fp", "output_digest": "pretrain-digest"}},
                  evaluate_statistics(langs), "2026-11-30T11:00:00+00:00")
    (run / "evaluate").mkdir(parents=True, exist_ok=True)
    (run / "evaluate" / MANIFEST_NAME).write_text(m.to_json(), encoding="utf-8")


def demo_compliance_section() -> dict[str, Any]:
    """The [compliance] section of configs/demo.toml (only that section: the others belong to other stages)."""
    return tomllib.loads((REPO_ROOT / "configs" / "demo.toml").read_text(encoding="utf-8"))["compliance"]


def upstream_config(udhr_dir: Path) -> str:
    from tests.conftest import udhr_source

    return udhr_source(udhr_dir) + textwrap.dedent(UPSTREAM_BODY)


def load_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))
