"""Which stages exist, in which order, what each consumes, and where its code lives.

Stage modules are imported by name only when needed, so `europa --help` and `europa status` never pay for
torch or Prefect. A stage that is not built yet has no entry in `_IMPLEMENTATIONS`: the CLI reports it as
not implemented instead of pretending.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pydantic import BaseModel

    from pipeline.stage import Stage

STAGE_NAMES: tuple[str, ...] = ("ingest", "tokenizer", "shards", "pretrain", "evaluate", "compliance")

DEPENDS_ON: dict[str, tuple[str, ...]] = {
    "ingest": (),
    "tokenizer": ("ingest",),
    "shards": ("ingest", "tokenizer"),
    "pretrain": ("tokenizer", "shards"),
    "evaluate": ("shards", "pretrain"),
    "compliance": ("ingest", "tokenizer", "shards", "pretrain", "evaluate"),
}

# stage -> ("module:StageClass", "module:ConfigModel")
_IMPLEMENTATIONS: dict[str, tuple[str, str]] = {
    "ingest": ("stages.ingest.stage:IngestStage", "stages.ingest.config:IngestConfig"),
    "tokenizer": ("stages.tokenizer.stage:TokenizerStage", "stages.tokenizer.config:TokenizerConfig"),
    "shards": ("stages.shards.stage:ShardsStage", "stages.shards.config:ShardsConfig"),
    "compliance": ("stages.compliance.stage:ComplianceStage", "stages.compliance.config:ComplianceConfig"),
    "pretrain": ("stages.pretrain.stage:PretrainStage", "stages.pretrain.config:PretrainConfig"),
    "evaluate": ("stages.evaluate.stage:EvaluateStage", "stages.evaluate.config:EvaluateConfig"),
}

# Where the work on a missing stage is tracked, so "not implemented" points somewhere useful.
_TRACKING_ISSUE = {"tokenizer": 3, "shards": 4, "pretrain": 5, "evaluate": 6, "compliance": 7}


class StageNotImplemented(RuntimeError):
    def __init__(self, name: str):
        super().__init__(
            f"stage {name}: not implemented yet (tracked in issue {_TRACKING_ISSUE.get(name, '?')}); "
            f"nothing was run for it"
        )
        self.stage = name


def _load(ref: str):
    module, _, attr = ref.partition(":")
    return getattr(importlib.import_module(module), attr)


def check_stage_name(name: str) -> str:
    if name not in STAGE_NAMES:
        raise ValueError(f"unknown stage {name!r}; stages are: {', '.join(STAGE_NAMES)}")
    return name


def is_implemented(name: str) -> bool:
    return name in _IMPLEMENTATIONS


def stage_config_model(name: str) -> type[BaseModel] | None:
    return _load(_IMPLEMENTATIONS[name][1]) if name in _IMPLEMENTATIONS else None


def get_stage(name: str) -> Stage:
    check_stage_name(name)
    if name not in _IMPLEMENTATIONS:
        raise StageNotImplemented(name)
    return _load(_IMPLEMENTATIONS[name][0])()


def downstream_of(name: str) -> list[str]:
    """The stage and every stage that (transitively) consumes it, in pipeline order."""
    out = {name}
    for stage in STAGE_NAMES:
        if any(dep in out for dep in DEPENDS_ON[stage]):
            out.add(stage)
    return [s for s in STAGE_NAMES if s in out]
