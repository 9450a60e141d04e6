"""Documents before training: the pretrain record as the planner projects it from the config, for
`europa stage compliance --projected`.

Why: Art. 52(1) asks for a notification as soon as it is known that the 1e25 FLOP threshold will be met, which
for a planned run is before its first step; the providers of a run like EUROPA's also prepare Annex XI while the
data is still being collected. So the documents are written from what is known then: the model (from the
flavor and the tokenizer's vocabulary), the planned tokens and compute, and the planner's time and device-hours
(its expected band; the pessimistic and optimistic bands are stated beside it). Every such value is marked
*projected* (facts.PROJECTED) and cites the planner and the config; what only the run can tell (loss, the
checkpoint's files, the data) is absent, so it is open. The documents say on their first line that they are
projected.
"""

from __future__ import annotations

from pathlib import Path

from pipeline.config import PipelineConfig
from stages.pretrain.record import (ArchitectureEstimate, Compute, HardwareBound, PretrainRecord, Projection,
                                    Training)

PROJECTED_NOTICE = (
    "PROJECTED before training: written from the run config and the planner's estimate (europa plan), not from "
    "records of a run. Values marked projected are the planner's; what only the run can tell is open.")
BAND = "expected"  # the band whose time and device-hours the documents carry


def origin(config_path: str | Path) -> str:
    return f"projected pretrain record (europa plan --config {config_path}, {BAND} band)"


def projected_pretrain(config: PipelineConfig) -> tuple[PretrainRecord, dict[str, float]]:
    """The parts of a pretrain record the plan knows (the rest absent: open in the documents), and the days of each
    band. Built with model_construct: absent fields stay absent instead of being invented to pass validation."""
    from europa_model.flops import training_flops_per_token
    from stages.pretrain.compute import ARCHITECTURE_METHOD, HARDWARE_METHOD
    from stages.pretrain.launch.checks import planner_hardware
    from stages.pretrain.planner.report import plan
    from stages.pretrain.publish import model_facts

    settings = config.section("pretrain")
    vocab = getattr(config.stages.get("tokenizer"), "vocab_size", None)
    hardware, _ = planner_hardware(settings)
    report = plan(settings, vocab, hardware=hardware)
    p = report.predicted[BAND]
    per_token = training_flops_per_token(settings.flavor, report.vocab_size, settings.seq_len)
    tokens = settings.planned_tokens
    seconds = p.days * 86_400
    device_seconds = seconds * p.gpus
    flops_a = per_token["total"] * tokens
    bound = device_seconds * p.peak_flops
    uncertainty = (f"projected: planned tokens ([pretrain] steps x global batch x seq_len) x the architecture's FLOPs per "
                   "token; exact for what it counts if the run trains every planned step")
    record = PretrainRecord.model_construct(
        model=model_facts(settings, report.vocab_size),
        training=Training.model_construct(
            steps=settings.steps, tokens_seen=tokens, seq_len=settings.seq_len, global_batch_size=settings.global_batch,
            optimizer=settings.optimizer.name, lr=settings.optimizer.lr, precision=settings.precision,
            wall_time_s=round(seconds, 1), device_type="cuda", device_name=hardware.name, device_count=p.gpus,
            nodes=settings.parallelism.nodes, device_hours=round(p.gpu_hours, 1), launcher=settings.launcher,
            tokens_per_s_per_device=p.tokens_per_s_per_gpu, torch_version=_version("torch"),
            torchtitan_version=_version("torchtitan")),
        compute=Compute.model_construct(
            architecture=ArchitectureEstimate(
                flops=flops_a, flops_per_token=per_token["total"], flops_per_token_matmul=per_token["matmul"],
                flops_per_token_attention=per_token["attention"], flops_attention=per_token["attention"] * tokens,
                tokens=tokens, method=ARCHITECTURE_METHOD, uncertainty=uncertainty),
            counted=None, not_counted="projected: nothing is counted before the first training step",
            hardware=HardwareBound(
                flops=bound, device_seconds=round(device_seconds, 1), peak_flops_per_device=p.peak_flops,
                peak_source=f"{hardware.name}: dense bf16 peak (stages/cluster/machine.py)",
                implied_utilisation=flops_a / bound if bound else 0.0, method=HARDWARE_METHOD + " (projected: the "
                "planner's expected time)", uncertainty="projected: the planner's time, itself an estimate "
                f"({report.predicted['pessimistic'].days:,.0f} to {report.predicted['optimistic'].days:,.0f} days over "
                "its bands)"),
            no_hardware_bound=None),
        projection=Projection(planned_tokens=tokens, planned_flops=flops_a),
    )
    return record, {band: proj.days for band, proj in report.predicted.items()}


def _version(package: str) -> str | None:
    """The version this installation would train with (the project pins it): projected, like the rest."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(package)
    except PackageNotFoundError:
        return None
