"""Which stages exist, in which order, what each consumes, and where each one's parts live.

The core names the stages' modules by string and imports them only when needed (the way torchtitan finds a
model through its ModelSpec registry), so `europa --help` and `europa status` never pay for torch or Prefect
and no module of pipeline/ imports a stage. A stage package provides:
    stage.py     the stage (pipeline.stage.UnitStage or RunStage)
    config.py    its `[<stage>]` settings model
    record.py    the typed statistics its manifest carries (pipeline.records.Record)
    commands.py  optional: its own `europa` subcommands and `europa stage <name>` options
    projected.py optional: its record as projected from a run config before the stage runs (the pretrain
                 stage's planner), for documents written before training
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

from pipeline.errors import UsageError

STAGE_NAMES: tuple[str, ...] = ("ingest", "tokenizer", "shards", "pretrain", "evaluate", "compliance")

DEPENDS_ON: dict[str, tuple[str, ...]] = {
    "ingest": (),
    "tokenizer": ("ingest",),
    "shards": ("ingest", "tokenizer"),
    "pretrain": ("tokenizer", "shards"),
    "evaluate": ("shards", "pretrain"),
    "compliance": ("ingest", "tokenizer", "shards", "pretrain", "evaluate"),
}


@dataclass(frozen=True)
class StageParts:
    stage: str  # "module:Class" of the stage
    config: str  # "module:Class" of its settings model
    record: str  # "module:Class" of its record model
    commands: str | None = None  # module with add_commands / add_stage_options / stage_overrides
    projection: str | None = None  # "module:function": config -> (its record projected before it runs, how)


_PARTS: dict[str, StageParts] = {
    "ingest": StageParts("stages.ingest.stage:IngestStage", "stages.ingest.config:IngestConfig",
                         "stages.ingest.record:IngestRecord"),
    "tokenizer": StageParts("stages.tokenizer.stage:TokenizerStage", "stages.tokenizer.config:TokenizerConfig",
                            "stages.tokenizer.record:TokenizerRecord"),
    "shards": StageParts("stages.shards.stage:ShardsStage", "stages.shards.config:ShardsConfig",
                         "stages.shards.record:ShardsRecord"),
    "pretrain": StageParts("stages.pretrain.stage:PretrainStage", "stages.pretrain.config:PretrainConfig",
                           "stages.pretrain.record:PretrainRecord", "stages.pretrain.commands",
                           "stages.pretrain.projected:projected_record"),
    "evaluate": StageParts("stages.evaluate.stage:EvaluateStage", "stages.evaluate.config:EvaluateConfig",
                           "stages.evaluate.record:EvaluateRecord", "stages.evaluate.commands"),
    "compliance": StageParts("stages.compliance.stage:ComplianceStage", "stages.compliance.config:ComplianceConfig",
                             "stages.compliance.record:ComplianceRecord", "stages.compliance.commands"),
}

# Commands that belong to no stage but to the orchestration layer (e.g. `europa eval-schedule`).
ORCHESTRATION_COMMANDS: tuple[str, ...] = ("flows.commands",)

# How a pipeline run maps units onto workers: "engine" in [orchestration]. Each is `run(run_dir, stages, forced)`.
ENGINES: dict[str, str] = {
    "local": "pipeline.executor:run_stages",  # in this process, no Prefect (debugging)
    "prefect": "flows.stages:run_stages",  # Prefect flows; units as tasks on threads, processes or Dask
}


def load(ref: str) -> Any:
    module, _, attr = ref.partition(":")
    obj = importlib.import_module(module)
    return getattr(obj, attr) if attr else obj


def check_stage_name(name: str) -> str:
    if name not in STAGE_NAMES:
        raise UsageError(f"unknown stage {name!r}; stages are: {', '.join(STAGE_NAMES)}")
    return name


def stage_config_model(name: str) -> type:
    return load(_PARTS[check_stage_name(name)].config)


def record_model(name: str) -> type:
    return load(_PARTS[check_stage_name(name)].record)


def projected_record(name: str, config: Any) -> tuple[Any, str]:
    """A stage's record as projected from the run config before the stage runs, and what the projection is."""
    ref = _PARTS[check_stage_name(name)].projection
    if ref is None:
        raise UsageError(f"the {name} stage projects no record before it runs")
    return load(ref)(config)


def get_stage(name: str) -> Any:
    return load(_PARTS[check_stage_name(name)].stage)()


def commands_modules() -> list[Any]:
    """The stages' command modules in stage order, then the orchestration layer's (each is light: heavy
    imports happen in its handlers)."""
    return [load(p.commands) for p in _PARTS.values() if p.commands] + [load(m) for m in ORCHESTRATION_COMMANDS]


def stage_commands(name: str) -> Any | None:
    ref = _PARTS[check_stage_name(name)].commands
    return load(ref) if ref else None


def downstream_of(name: str) -> list[str]:
    """The stage and every stage that (transitively) consumes it, in pipeline order."""
    out = {name}
    for stage in STAGE_NAMES:
        if any(dep in out for dep in DEPENDS_ON[stage]):
            out.add(stage)
    return [s for s in STAGE_NAMES if s in out]
