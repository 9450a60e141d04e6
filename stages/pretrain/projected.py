"""The pretrain record as the planner projects it from a run config, before any training step: what the
compliance stage writes its documents from under `europa stage compliance --projected` (the registry's
`projection` plug-in, so a consumer never imports the planner itself).

Why here: the planner, the FLOPs formula and the record's model belong to this stage; the projected record is
this stage's contract with the documents, like its manifest. Built with model_construct: the fields only a run
can tell (loss, the checkpoint's files) stay absent instead of being invented to pass validation.
"""

from __future__ import annotations

from pipeline.config import PipelineConfig
from stages.pretrain.record import (ArchitectureEstimate, Compute, HardwareBound, PretrainRecord, Projection,
                                    Training)

BAND = "expected"  # the planner's band whose time and device-hours the projected record carries


def projected_record(config: PipelineConfig) -> tuple[PretrainRecord, str]:
    """The parts of a pretrain record the plan knows (the rest absent: open in the documents), and the name of the
    planner's band it carries."""
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
    return record, BAND


def _version(package: str) -> str | None:
    """The version this installation would train with (the project pins it): projected, like the rest."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(package)
    except PackageNotFoundError:
        return None
