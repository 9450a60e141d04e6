"""The Stage protocol: how a stage splits its work so that it can crash, resume and scale out.

A stage is plain Python (no Prefect). `plan` splits the work into coarse units (a language x a batch of
input files), `run_unit` writes one unit's output into a folder of its own, `finalize` merges the units into
the stage folder and returns the statistics for the manifest. The executor (pipeline/executor.py) owns
everything around that: fingerprints, completion markers, staging, publishing, the lock. Because each unit's
folder is renamed into place only when the unit is done, a rerun after a crash redoes only the units that
were in flight, and units can run on threads, processes or remote workers without the stage knowing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Protocol

from pydantic import BaseModel

from pipeline.config import PipelineConfig
from pipeline.manifest import Manifest
from pipeline.rundir import RunDir


@dataclass(frozen=True)
class Unit:
    id: str  # stable and filesystem-safe; units are merged in sorted id order
    payload: dict[str, Any] = field(default_factory=dict)  # JSON-able, so a unit can travel to another process


@dataclass
class StageContext:
    """Everything a stage may read: its settings, the run's settings, its inputs' manifests, where to write."""

    run_dir: RunDir
    config: PipelineConfig
    stage: str
    fingerprint: str
    upstream: dict[str, Manifest]

    @property
    def settings(self) -> BaseModel:
        return self.config.section(self.stage)

    @property
    def work_dir(self) -> Path:
        return self.run_dir.work_dir(self.stage, self.fingerprint)

    def upstream_dir(self, stage: str) -> Path:
        return self.run_dir.stage_dir(stage)


@dataclass
class StageOutcome:
    """What finalize reports; the executor adds checksums, times and lineage to make the manifest."""

    statistics: dict[str, Any]
    summary: dict[str, Any]  # a few key counts shown by `europa status`
    skipped: list[dict[str, Any]] = field(default_factory=list)
    rows: dict[str, int] = field(default_factory=dict)  # output path -> rows
    tokens: dict[str, int] = field(default_factory=dict)  # output path -> tokens
    checksums: dict[str, str] = field(default_factory=dict)  # output path -> sha256 the stage already computed


class StageError(RuntimeError):
    """A stage failed for a reason the user can fix; the message names the stage, the file and the fix."""


class Stage(Protocol):
    name: ClassVar[str]
    code_version: ClassVar[str]  # bump when a code change alters the stage's outputs

    def input_signature(self, ctx: StageContext) -> Any:
        """Cheap description of external inputs (file sizes and times) that enters the fingerprint."""

    def plan(self, ctx: StageContext) -> list[Unit]: ...

    def run_unit(self, ctx: StageContext, unit: Unit, out_dir: Path) -> dict[str, Any]: ...

    def finalize(self, ctx: StageContext, results: dict[str, dict[str, Any]], out_dir: Path) -> StageOutcome: ...

    def summary_markdown(self, manifest: Manifest) -> str: ...
