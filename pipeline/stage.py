"""The stage contract: what a stage implements, what it may read, what it returns.

Two shapes, because the stages do two kinds of work:
- `UnitStage` (ingest, tokenizer, shards): the work splits into coarse units (a language x a batch of files),
  in one or more *steps*. The executor plans a step's units (from the results of the steps before it), runs
  them on threads, processes or Dask workers, records each finished unit, and plans the next step; `finalize`
  merges everything into the stage folder. A unit's folder appears under its final name only when it is done,
  so a killed run redoes only the units in flight, in whichever step it was.
- `RunStage` (pretrain, evaluate, compliance): one `run` that writes the stage folder. A stage whose work is a
  long job (training) runs it in `ctx.job_dir`, which survives failed attempts and which evaluation can read
  while the job runs.
Both get a `StageContext` (their settings, the run's settings, the typed records of the stages they consume,
where to write) and return a `StageOutcome` (their typed record and a few counts); the executor
(pipeline/executor.py) owns everything around that: fingerprints, freshness, staging, publishing, the lock.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Protocol, runtime_checkable

from pydantic import BaseModel

from pipeline.config import PipelineConfig
from pipeline.errors import EuropaError
from pipeline.manifest import Manifest
from pipeline.rundir import RunDir


@dataclass(frozen=True)
class Unit:
    id: str  # stable and filesystem-safe; results are handed back in sorted id order
    payload: dict[str, Any] = field(default_factory=dict)  # JSON-able, so a unit can travel to another process
    step: str = ""  # the step it belongs to; set by the executor


# step -> unit id -> the unit's result (what run_unit returned)
StepResults = dict[str, dict[str, dict[str, Any]]]


@dataclass
class StageContext:
    """Everything a stage may read: its settings, the run's settings, its inputs' records, where to write."""

    run_dir: RunDir
    config: PipelineConfig
    stage: str
    fingerprint: str
    upstream: dict[str, Manifest]  # the published manifests of the stages it consumes
    records: dict[str, BaseModel] = field(default_factory=dict)  # their statistics, validated (pipeline/records.py)

    @property
    def settings(self) -> BaseModel:
        return self.config.section(self.stage)

    @property
    def work_dir(self) -> Path:
        return self.run_dir.work_dir(self.stage, self.fingerprint)

    @property
    def job_dir(self) -> Path:
        return self.run_dir.job_dir(self.stage, self.fingerprint)

    def unit_dir(self, step: str, unit_id: str) -> Path:
        """The folder of a finished unit (its outputs and its result.json)."""
        return self.work_dir / step / unit_id

    def upstream_dir(self, stage: str) -> Path:
        return self.run_dir.stage_dir(stage)

    def record(self, stage: str) -> Any:
        """The typed statistics of a consumed stage (e.g. `ctx.record("ingest").per_language`)."""
        try:
            return self.records[stage]
        except KeyError:
            raise KeyError(f"stage {self.stage} does not consume {stage} (pipeline/registry.py DEPENDS_ON)") from None


@dataclass
class StageOutcome:
    """What a stage reports; the executor adds checksums, times and lineage to make the manifest."""

    statistics: BaseModel  # the stage's record (stages/<stage>/record.py): the contract its consumers read
    summary: dict[str, Any]  # a few key counts shown by `europa status`
    skipped: list[dict[str, Any]] = field(default_factory=list)
    rows: dict[str, int] = field(default_factory=dict)  # output path -> rows
    tokens: dict[str, int] = field(default_factory=dict)  # output path -> tokens
    checksums: dict[str, str] = field(default_factory=dict)  # output path -> sha256 the stage already computed


class StageError(EuropaError, RuntimeError):
    """A stage failed for a reason the user can fix; the message names the stage, the file and the fix."""

    exit_code = 1


class InputError(StageError):
    """A stage refused its input (a bad file, a source that yields nothing): bad input, exit 2 like a bad config."""

    exit_code = 2


class Detached(KeyboardInterrupt):
    """Interrupted while following work that goes on without us (a submitted Slurm job): the attempt stays
    *submitted*, and the message says how to follow the work again and how to stop it. A KeyboardInterrupt, so
    every engine unwinds as it does for Ctrl-C (exit 130)."""


@runtime_checkable
class UnitStage(Protocol):
    name: ClassVar[str]
    code_version: ClassVar[str]  # bump when a code change alters the stage's outputs
    steps: ClassVar[tuple[str, ...]]  # the steps (waves of units), in order

    def input_signature(self, ctx: StageContext) -> Any:
        """Cheap description of external inputs (file sizes and times) that enters the fingerprint."""

    def plan(self, ctx: StageContext, step: str, done: StepResults) -> list[Unit]:
        """The units of `step`, from the settings and the results of the steps before it (deterministic: a
        resumed run must plan the same units)."""

    def run_unit(self, ctx: StageContext, unit: Unit, out_dir: Path) -> dict[str, Any]: ...

    def finalize(self, ctx: StageContext, done: StepResults, out_dir: Path) -> StageOutcome: ...

    # optional: unit_work(unit, result) -> (amount, name) | None: the work a finished unit did (e.g. documents),
    # for the rate the progress line shows
    # optional: unit_cost(unit) -> float: the work a unit is expected to do (e.g. bytes to read); the executor
    # hands units to the engine largest first, so the step does not end waiting on one large unit started last

    def summary_markdown(self, manifest: Manifest) -> str: ...


@runtime_checkable
class RunStage(Protocol):
    name: ClassVar[str]
    code_version: ClassVar[str]
    # optional: long_job = True (runs in ctx.job_dir); launch_only_settings = ("slurm",): keys of its section
    # that decide where and how it runs, not what it produces, so they stay out of its fingerprint;
    # keep_work(folder) -> bool: a work folder of other settings that must outlive a publish (checkpoints)

    def input_signature(self, ctx: StageContext) -> Any: ...

    def run(self, ctx: StageContext, out_dir: Path) -> StageOutcome:
        """Do the stage's work and write its folder into `out_dir` (published whole by the executor)."""

    def summary_markdown(self, manifest: Manifest) -> str: ...


Stage = UnitStage | RunStage
