"""Publishing a finished training job: its folder as <run>/pretrain/ and the stage's record (record.py).

The job folder's content is hard-linked into the stage folder (no copy of the checkpoints, and the job folder
stays intact until the publish has succeeded). The record holds what evaluation and the compliance documents
need: the model, tokens, steps, time, devices, device-hours, the training compute three ways (compute.py) and
the checksums of every kept checkpoint, which the training ranks computed while saving: no checkpoint is read
again to publish.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import NamedTuple

from europa_model.checkpoints import complete_checkpoints, recorded_digests
from pipeline.fsutil import sha256_files
from pipeline.manifest import digest
from pipeline.stage import StageError, StageOutcome
from stages.pretrain import job as jobdir
from stages.pretrain import step_count
from stages.pretrain.compute import compute_statistics
from stages.pretrain.config import PretrainConfig
from stages.pretrain.damaged import set_aside
from stages.pretrain.record import (
    CheckpointFile,
    FinalCheckpoint,
    KeptCheckpoint,
    ModelFacts,
    PretrainRecord,
    Projection,
    Training,
)

# what the published stage folder keeps of the job folder (seed checkpoints and comm traces stay behind)
PUBLISHED = ("checkpoints", "damaged-checkpoints", "training.json", "metrics.jsonl", "segments.jsonl", "job_info.json", "flop_count.json", "train.log", "tb",
             "job.sbatch", "plan.txt", "plan.json", "jobs.jsonl", "slurm-*.out")


class FileDigest(NamedTuple):
    sha256: str
    bytes: int
    on_ranks: bool  # hashed by the rank that saved it (else read and hashed when publishing)


Digests = dict[int, dict[str, FileDigest]]  # step -> path relative to the stage folder -> its digest


def publish(settings: PretrainConfig, job: Path, out_dir: Path) -> StageOutcome:
    """The finished job folder into `out_dir` (the staged stage folder), with its record."""
    for pattern in PUBLISHED:
        for src in sorted(job.glob(pattern)):
            if src.is_dir():
                shutil.copytree(src, out_dir / src.name, copy_function=os.link)
            elif src.is_file():
                os.link(src, out_dir / src.name)
    digests = checkpoint_digests(out_dir)
    record = training_statistics(settings, out_dir, digests)
    t, c = record.training, record.compute
    summary = {"steps": t.steps, "tokens": t.tokens_seen, "final loss": round(t.final_loss, 4),
               "checkpoints": len(complete_checkpoints(out_dir)), "FLOPs": f"{c.architecture.flops:.2e}"}
    if record.checkpoint.set_aside:
        summary["set aside"] = ", ".join(f"{d.path} ({d.reason})" for d in record.checkpoint.set_aside)
    # every kept checkpoint's digests come from the ranks (or were computed once, above): no second read
    checksums = {path: f.sha256 for files in digests.values() for path, f in files.items()}
    return StageOutcome(statistics=record, summary=summary, checksums=checksums)


def checkpoint_digests(folder: Path) -> Digests:
    """Every complete checkpoint's files with their digests, by step.

    The ranks hashed their files while saving (checksums-rank<R>.json, europa_model/checkpoint_digests.py); only
    files no rank recorded (or whose size changed since) are read here, once, on up to 8 threads."""
    out: Digests = {}
    for ckpt in complete_checkpoints(folder):
        covered, missing = recorded_digests(ckpt.path)
        rel = ckpt.path.relative_to(folder).as_posix()
        files = {f"{rel}/{name}": FileDigest(sha, size, True) for name, (sha, size) in covered.items()}
        for p, sha in zip(missing, sha256_files(missing)):
            files[f"{rel}/{p.name}"] = FileDigest(sha, p.stat().st_size, False)
        out[ckpt.step] = dict(sorted(files.items()))
    return out


def _kept(step: int, files: dict[str, FileDigest]) -> KeptCheckpoint:
    return KeptCheckpoint(step=step, path=f"checkpoints/step-{step}",
                          sha256=digest([(p, f.sha256) for p, f in files.items()]), files=len(files),
                          bytes=sum(f.bytes for f in files.values()),
                          hashed_on_ranks=sum(f.on_ranks for f in files.values()),
                          hashed_at_publish=sum(not f.on_ranks for f in files.values()))


def model_facts(settings: PretrainConfig, vocab_size: int) -> ModelFacts:
    """The model of `[pretrain]` with the tokenizer's vocabulary: what the record (and a projection) says it is."""
    from europa_model.flavors import FLAVORS, count_parameters

    f = FLAVORS[settings.flavor]
    counts = count_parameters(settings.flavor, vocab_size)
    return ModelFacts(
        flavor=settings.flavor,
        architecture="decoder-only transformer, Mixture-of-Experts (DeepSeek-V3 / Kimi-K2 layers: MLA attention, "
                     f"{f.num_experts} routed experts top-{f.top_k} + {f.num_shared_experts} shared, "
                     f"first {f.n_dense_layers} layers dense), built with torchtitan",
        vocab_size=vocab_size, total_params=counts["total"], active_params=counts["active"],
        active_matmul_params=counts["active_matmul"], dim=f.dim, n_layers=f.n_layers,
        n_dense_layers=f.n_dense_layers, num_experts=f.num_experts, top_k=f.top_k,
        num_shared_experts=f.num_shared_experts, context_length=settings.seq_len)


def training_statistics(settings: PretrainConfig, folder: Path, digests: Digests | None = None) -> PretrainRecord:
    """The stage's record from a finished job folder (the contract compliance reads: record.py); `digests`:
    `checkpoint_digests(folder)`, computed here when not given."""
    from europa_model.flops import training_flops_per_token

    info = jobdir.job_info(folder)
    rows = jobdir.steps(folder)
    segs = jobdir.segments(folder)
    final = complete_checkpoints(folder)[-1]
    if info is None or not rows:
        raise StageError(f"stage pretrain: {folder} lacks job_info.json or metrics.jsonl; the job did not start "
                         "properly; rerun with --force")
    tokens = final.step * settings.tokens_per_step
    per_token = training_flops_per_token(settings.flavor, info.vocab_size, settings.seq_len)
    device_seconds = sum(s.seconds * s.world_size for s in segs)
    steady = [r for r in rows if r.step > 1] or rows  # step 1 pays for start-up and lazy initialisation
    digests = checkpoint_digests(folder) if digests is None else digests
    files = [CheckpointFile(path=p, sha256=d.sha256, bytes=d.bytes) for p, d in digests[final.step].items()]
    return PretrainRecord(
        model=model_facts(settings, info.vocab_size),
        training=Training(
            steps=final.step, tokens_seen=tokens, seq_len=settings.seq_len, global_batch_size=settings.global_batch,
            optimizer=settings.optimizer.name, lr=settings.optimizer.lr, precision=settings.precision,
            wall_time_s=round(sum(s.seconds for s in segs), 3), device_type=info.device_type,
            device_name=info.device_name, device_count=max((s.world_size for s in segs), default=info.world_size),
            nodes=info.nodes, device_hours=round(device_seconds / 3600, 6), launcher=settings.launcher,
            segments=len(segs), final_loss=rows[-1].loss, first_loss=rows[0].loss,
            tokens_per_s_per_device=sum(r.tokens_per_s_per_device for r in steady) / len(steady),
            peak_memory_gib=max(r.memory_gib for r in rows), torch_version=info.torch_version,
            torchtitan_version=info.torchtitan_version),
        compute=compute_statistics(per_token, tokens, final.step, device_seconds, info, step_count.read(folder)),
        checkpoint=FinalCheckpoint(final_step=final.step, path=f"checkpoints/{final.name}",
                                   sha256=digest([(x.path, x.sha256) for x in files]), files=files,
                                   kept=[_kept(step, fs) for step, fs in sorted(digests.items())],
                                   **({"set_aside": damaged} if (damaged := set_aside(folder)) else {})),
        projection=Projection(planned_tokens=settings.planned_tokens,
                              planned_flops=settings.planned_tokens * per_token["total"]))


def summary_markdown(record: PretrainRecord) -> str:
    m, t, c = record.model, record.training, record.compute
    counted = (f"{c.counted.flops:.3e} ({c.counted.ratio_to_architecture:.3f} x (a)) |" if c.counted is not None
               else f"not counted: {c.not_counted} |")
    bound = (f"{c.hardware.flops:.3e} (implied utilisation {c.hardware.implied_utilisation:.2%}) |" if c.hardware is not None
             else f"none: {c.no_hardware_bound} |")
    return "\n".join([
        f"# pretrain: {m.flavor} ({m.total_params:,} parameters, {m.active_params:,} active)", "",
        "| figure | value |", "|---|---|",
        f"| steps | {t.steps:,} |", f"| tokens | {t.tokens_seen:,} |", f"| final loss | {t.final_loss:.4f} |",
        f"| devices | {t.device_count} x {t.device_type} ({t.device_name}) |",
        f"| wall time | {t.wall_time_s:.0f} s |", f"| device-hours | {t.device_hours:.4f} |",
        f"| (a) training FLOPs, architecture-based (reported) | {c.architecture.flops:.3e} |",
        "| (b) training FLOPs, counted in one step x steps | " + counted,
        "| (c) hardware bound, devices x seconds x peak | " + bound,
        f"| final checkpoint | {record.checkpoint.path} |",
    ])
