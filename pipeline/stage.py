"""The stage contract: what a stage implements, what it may read, what it returns.

Two shapes, because the stages do two kinds of work:
- `UnitStage` (ingest, tokenizer, shards): the work splits into coarse units in one or more `Step`s. The
  executor plans a step's units from the results of the steps before it, runs them on threads, processes or
  Dask workers, records each finished unit, and plans the next step; `finalize` merges everything into the
  stage folder.
- `RunStage` (pretrain, evaluate, compliance): one `run` that writes the stage folder.
Both are generic in their settings model, so `ctx.settings` is the stage's own config type; a step declares the
models of its units' payload and result, which the executor validates and serialises (as it does records), so a
unit that travels to another process or is read back from disk after a crash is checked, not trusted. Optional
hooks have their defaults here; pipeline/executor.py owns everything around a stage (fingerprints, freshness,
staging, publishing, the lock).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Generic, Iterable, Iterator, Mapping, TypeVar, cast

from pydantic import BaseModel, ConfigDict

from pipeline.config import PipelineConfig
from pipeline.errors import EuropaError
from pipeline.manifest import Manifest
from pipeline.rundir import RunDir

Cfg = TypeVar("Cfg", bound=BaseModel)
P = TypeVar("P", bound=BaseModel)
R = TypeVar("R", bound=BaseModel)


class Payload(BaseModel):
    """Base of a unit's payload: what a unit needs to run anywhere (JSON-able, so it can travel), nothing else."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class UnitResult(BaseModel):
    """Base of a unit's result: what finalize and later steps read; written to the unit's result.json."""

    model_config = ConfigDict(extra="forbid")


@dataclass(frozen=True)
class Unit:
    id: str  # stable and filesystem-safe; results are handed back in sorted id order
    payload: BaseModel  # an instance of its step's payload model
    step: str = ""  # the step it belongs to; set by the executor


@dataclass(frozen=True)
class Step(Generic[P, R]):
    """A wave of units of a UnitStage: its name and the models of its units' payload and result."""

    name: str
    payload: type[P]
    result: type[R]

    def unit(self, id: str, payload: P) -> Unit:
        return Unit(id, payload, self.name)

    def round(self, number: int) -> Step[P, R]:
        """The same step as round `number` of a repeated step: its own name, so its own unit folders."""
        return Step(f"{self.name}-{number:03d}", self.payload, self.result)

    def round_of(self, name: str) -> int | None:
        """The round number of a step name made by `round`, None for any other name."""
        base, _, number = name.rpartition("-")
        return int(number) if base == self.name and number.isdigit() else None

    def payload_of(self, unit: Unit) -> P:
        if not isinstance(unit.payload, self.payload):
            raise TypeError(f"unit {unit.id} of step {unit.step!r} carries {type(unit.payload).__name__}, "
                            f"not step {self.name!r}'s {self.payload.__name__}")
        return unit.payload

    def results(self, done: StepResults) -> Mapping[str, R]:
        """The results of this step's units by unit id (the executor validated each against `result`)."""
        return cast(Mapping[str, R], done.get(self.name, {}))


# step name -> unit id -> the unit's result, validated against its step's result model (read from the unit's
# folder when asked for: pipeline/executor.py UnitResults)
StepResults = dict[str, Mapping[str, BaseModel]]


@dataclass
class StageContext(Generic[Cfg]):
    """Everything a stage may read: its settings, the run's settings, its inputs' records, where to write."""

    run_dir: RunDir
    config: PipelineConfig
    stage: str
    fingerprint: str
    upstream: dict[str, Manifest]  # the published manifests of the stages it consumes
    records: dict[str, BaseModel] = field(default_factory=dict)  # their statistics, validated (pipeline/records.py)
    # the stage itself: it travels with the context to whichever process runs a unit, so a worker runs the stage
    # the context was built for, not whatever its own registry names (a stage registered only where it planned)
    impl: BaseStage[Any] | None = None
    # --force: the stage starts from scratch, so nothing of its earlier outputs may be continued (the pretrain
    # stage otherwise brings a damaged published training back into its job folder: stages/pretrain/folders.py)
    from_scratch: bool = False

    @property
    def settings(self) -> Cfg:
        """The stage's `[<stage>]` section, an instance of its `config_model` (pipeline/config.py validates it
        with the model the registry names, and a test checks that it is the stage's)."""
        return cast(Cfg, self.config.section(self.stage))

    @property
    def work_dir(self) -> Path:
        return self.run_dir.work_dir(self.stage, self.fingerprint)

    @property
    def job_dir(self) -> Path:
        return self.run_dir.job_dir(self.stage, self.fingerprint)

    def unit_dir(self, step: str, unit_id: str) -> Path:
        """The folder of a finished unit (its outputs and its result.json)."""
        return Path(self.unit_path(step, unit_id))

    def unit_path(self, step: str, unit_id: str) -> str:
        """unit_dir as a string, built without pathlib: the executor asks for it per unit, 10^5 times a step."""
        return os.path.join(self.run_dir.work_path(self.stage, self.fingerprint), step, unit_id)

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


class BaseStage(Generic[Cfg]):
    """What both shapes declare. `launch_only_settings` names keys of the stage's section that decide where and
    how it runs, not what it produces (pretrain's [pretrain.slurm]): they stay out of its fingerprint, so a
    raised time limit does not invalidate weeks of checkpoints."""

    name: ClassVar[str]
    code_version: ClassVar[str]  # bump when a code change alters the stage's outputs
    config_model: ClassVar[type[BaseModel]]  # its `[<stage>]` section's model
    launch_only_settings: ClassVar[tuple[str, ...]] = ()

    def input_signature(self, ctx: StageContext[Cfg]) -> Any:
        """Cheap description of external inputs (file sizes and times) that enters the fingerprint."""
        return None

    def preflight(self, ctx: StageContext[Cfg]) -> None:
        """Checks that need the file system but no work, run by `europa run` before any engine starts (a
        temporary Prefect server takes seconds): a config that cannot work is exit 2 at once (InputError)."""

    def keep_work(self, folder: Path) -> bool:
        """Whether a work folder of other settings must outlive a publish (a long job's checkpoints: days of
        training that only --force may delete)."""
        return False

    def summary_markdown(self, manifest: Manifest) -> str:
        raise NotImplementedError


class UnitStage(BaseStage[Cfg]):
    steps: ClassVar[tuple[Step[Any, Any], ...]]  # the waves of units, in order

    def iter_steps(self, ctx: StageContext[Cfg], done: StepResults) -> Iterator[Step[Any, Any]]:
        """The steps to run, each asked for after the ones before it finished (`done` then holds their results):
        `steps` in order, unless a stage needs steps whose number depends on its data (rounds until a fixed
        point); those are named `<base>-NNN` after a step of `steps` and found by `step`."""
        yield from self.steps

    def plan(self, ctx: StageContext[Cfg], step: Step[Any, Any], done: StepResults) -> Iterable[Unit]:
        """The units of `step`, from the settings and the results of the steps before it (deterministic: a
        resumed run must plan the same units). A generator is welcome: the executor keeps each unit in a compact
        form as it comes, so a step of many units never holds them all as models."""
        raise NotImplementedError

    def run_unit(self, ctx: StageContext[Cfg], unit: Unit, out_dir: Path) -> BaseModel:
        raise NotImplementedError

    def finalize(self, ctx: StageContext[Cfg], done: StepResults, out_dir: Path) -> StageOutcome:
        raise NotImplementedError

    def unit_cost(self, unit: Unit) -> float:
        """The work a unit is expected to do (bytes to read): the executor hands units to the engine largest
        first, so a step does not end with one worker alone on a large unit started last."""
        return 1.0

    def unit_work(self, unit: Unit, result: BaseModel) -> tuple[float, str] | None:
        """The work a finished unit did and its name (e.g. (12.5, "MB")), for the rate on the progress line."""
        return None

    def step(self, name: str) -> Step[Any, Any]:
        for step in self.steps:
            if step.name == name:
                return step
        for step in self.steps:
            if (number := step.round_of(name)) is not None:
                return step.round(number)
        raise KeyError(f"stage {self.name} has no step {name!r}; its steps are: {', '.join(s.name for s in self.steps)}")


class RunStage(BaseStage[Cfg]):
    long_job: ClassVar[bool] = False  # runs its work in ctx.job_dir, which survives failed attempts

    def run(self, ctx: StageContext[Cfg], out_dir: Path) -> StageOutcome:
        """Do the stage's work and write its folder into `out_dir` (published whole by the executor)."""
        raise NotImplementedError


Stage = UnitStage[Any] | RunStage[Any]
