"""Runs one stage against a run directory: its steps of units (or its one `run`), then publishes it.

The orchestration engine (Prefect flows, or the in-process loop here) only chooses *how units are mapped*;
everything that decides *what* runs and what counts as done lives here and in pipeline/status.py, so every
engine behaves the same. Unit payloads and results are validated against their step's models on the way in
and out (a plan, a unit, or a result.json of another version that does not match is an error naming the
field), and a unit's folder appears under its final name only when it is done, with result.json written last.
"""

from __future__ import annotations

import bisect
import ctypes
import functools
import json
import os
import shutil
import subprocess
import time
import traceback
from dataclasses import dataclass, replace
from importlib import metadata
from pathlib import Path
from array import array
from typing import Any, Callable, Iterator, Mapping

from pydantic import BaseModel, ValidationError
from pydantic_core import to_json

from pipeline import progress
from pipeline.config import REPO_ROOT, PipelineConfig
from pipeline.errors import EuropaError
from pipeline.fsutil import atomic_dir, atomic_write_text
from pipeline.manifest import Manifest, ManifestDamaged, describe_outputs, output_digest
from pipeline.registry import get_stage
from pipeline.retry import retrying
from pipeline.rundir import RunDir, utc_now
from pipeline.secrets import redact_exception
from pipeline.stage import (BaseStage, Detached, RunStage, StageContext, StageError, StageOutcome, Step, StepResults,
                            Unit, UnitStage)
from pipeline.status import build_context, damaged_outputs

UNIT_RESULT = "result.json"  # written last into a unit folder: its completion marker


RESULTS_KEPT = 4096  # finished units' results a step's UnitResults keeps in memory once read


@dataclass(frozen=True)
class UnitDone:
    """A finished unit: its validated result, and how many times it was tried again (for the manifest)."""

    result: BaseModel
    retries: int = 0


# A mapper runs a step's units (in the order given, as far as it can) until each has its unit folder, and returns
# the retries those that needed any took, by unit id; engines provide their own. Results stay on disk.
UnitMapper = Callable[[StageContext[Any], "PlannedUnits"], dict[str, int]]


class UnitResults(Mapping[str, BaseModel]):
    """A finished step's results by unit id, each read from its unit's result.json when asked for (the last
    RESULTS_KEPT kept): the orchestrator holds the step's unit ids, never all its results, whatever their number."""

    def __init__(self, stage: UnitStage[Any], step: Step[Any, Any], folder: str, ids: list[str]):
        self._stage, self._step, self._folder = stage, step, folder
        self._ids = ids  # in id order (plan_step sorts them): looked up by bisection, no second index
        self._read = functools.lru_cache(maxsize=RESULTS_KEPT)(self._load)

    def _load(self, unit_id: str) -> BaseModel:
        return read_unit_result(self._stage, self._step, os.path.join(self._folder, unit_id, UNIT_RESULT))

    def __getitem__(self, unit_id: str) -> BaseModel:
        i = bisect.bisect_left(self._ids, unit_id)
        if i == len(self._ids) or self._ids[i] != unit_id:
            raise KeyError(unit_id)
        return self._read(unit_id)

    def __contains__(self, unit_id: object) -> bool:  # by the ids alone: Mapping's default would read the result
        i = bisect.bisect_left(self._ids, unit_id)
        return i < len(self._ids) and self._ids[i] == unit_id

    def __iter__(self) -> Iterator[str]:
        return iter(self._ids)

    def __len__(self) -> int:
        return len(self._ids)


def _field_error(e: ValidationError) -> str:
    err = e.errors()[0]
    where = ".".join(str(p) for p in err["loc"]) or "(the whole value)"
    more = f" (and {e.error_count() - 1} more)" if e.error_count() > 1 else ""
    return f"{where}: {err['msg']}{more}"


def checked_payload(stage: UnitStage[Any], step: Step[Any, Any], unit: Unit) -> Unit:
    """The unit with its payload as an instance of the step's payload model (StageError names the field)."""
    if isinstance(unit.payload, step.payload):
        return unit if unit.step == step.name else replace(unit, step=step.name)
    raw = unit.payload.model_dump(mode="json") if isinstance(unit.payload, BaseModel) else unit.payload
    try:
        payload = step.payload.model_validate(raw)
    except ValidationError as e:
        raise StageError(f"stage {stage.name}: step {step.name}: unit {unit.id}: payload {_field_error(e)} "
                         f"({step.payload.__name__}); this is a bug in the stage's plan") from None
    return Unit(unit.id, payload, step.name)


def checked_result(stage: UnitStage[Any], step: Step[Any, Any], unit: Unit, raw: Any) -> BaseModel:
    if isinstance(raw, step.result):
        return raw
    try:
        return step.result.model_validate(raw.model_dump(mode="json") if isinstance(raw, BaseModel) else raw)
    except ValidationError as e:
        raise StageError(f"stage {stage.name}: step {step.name}: unit {unit.id}: result {_field_error(e)} "
                         f"({step.result.__name__}); this is a bug in the stage's run_unit") from None


def read_unit_result(stage: UnitStage[Any], step: Step[Any, Any], marker: Path | str) -> BaseModel:
    """A finished unit's result.json, validated: one written by another version of the stage is an error that
    names the file, never a half-understood result."""
    with open(marker, "rb") as f:
        data = f.read()
    try:
        return step.result.model_validate_json(data)
    except ValidationError as e:
        bad_json = e.errors()[0]["type"] == "json_invalid"
        detail = f"not JSON ({e.errors()[0]['msg']})" if bad_json else _field_error(e)
        raise StageError(f"stage {stage.name}: {marker}: {detail}; the unit was written by another version of the "
                         f"stage or damaged: rerun it from scratch (europa stage {stage.name} --force)") from None


def unit_result_json(result: BaseModel) -> str:
    return json.dumps(result.model_dump(mode="json"), ensure_ascii=False, sort_keys=True)


def execute_unit(ctx: StageContext[Any], unit: Unit) -> UnitDone:
    """Run one unit unless a finished copy exists; the folder appears under its final name only when done. A
    transient failure is tried again ([orchestration] retries)."""
    stage = unit_stage(ctx)
    step = stage.step(unit.step)
    final = ctx.unit_dir(unit.step, unit.id)
    marker = final / UNIT_RESULT
    if os.path.exists(marker):
        return UnitDone(read_unit_result(stage, step, marker))
    final.parent.mkdir(parents=True, exist_ok=True)
    unit = checked_payload(stage, step, unit)  # a unit that travelled is checked again where it runs

    def attempt() -> BaseModel:
        with atomic_dir(final) as tmp:  # a second worker that finished the same unit first keeps its identical copy
            result = checked_result(stage, step, unit, stage.run_unit(ctx, unit, tmp))
            (tmp / UNIT_RESULT).write_text(unit_result_json(result), encoding="utf-8")
        return result

    o = ctx.config.orchestration
    try:
        result, retries = retrying(attempt, retries=o.retries, backoff_s=o.retry_backoff_s, on_retry=lambda n, e: progress.note(
            ctx.stage, f"unit {unit.id}: {type(e).__name__}: {e}; trying again ({n} of {o.retries})"))
    except BaseException as e:
        raise redact_exception(e)  # a failed unit's message reaches the engine's records
    finally:
        give_back_freed_memory()
    return UnitDone(result, retries)


def unit_finished(ctx: StageContext[Any], step: str, unit_id: str) -> bool:
    """Whether the unit's folder is in place (result.json is written last into it before it is renamed)."""
    return os.path.exists(os.path.join(ctx.unit_path(step, unit_id), UNIT_RESULT))


def unit_stage(ctx: StageContext[Any]) -> UnitStage[Any]:
    stage = ctx.impl if ctx.impl is not None else get_stage(ctx.stage)
    if not isinstance(stage, UnitStage):
        raise StageError(f"stage {ctx.stage} runs as one job, not in units")
    return stage


@functools.lru_cache(maxsize=1)
def _malloc_trim() -> Callable[[int], int] | None:
    try:
        return ctypes.CDLL(None).malloc_trim  # glibc
    except (OSError, AttributeError):  # another C library (musl, macOS): nothing to call
        return None


def give_back_freed_memory() -> None:
    """Return the C heap's free pages to the kernel between units (glibc's `malloc_trim(0)`): what a unit frees
    stays in the heap, fragmented between the few blocks still in use, so a worker that runs many units would
    otherwise creep up in resident memory unit after unit (docs/benchmarks.md). Nothing where there is no
    malloc_trim."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


def map_units_locally(ctx: StageContext[Any], units: PlannedUnits) -> dict[str, int]:
    retries = {}
    for i, unit in enumerate(units):
        done = execute_unit(ctx, unit)
        if done.retries:
            retries[unit.id] = done.retries
        report_unit(ctx, i + 1, len(units), unit, done.result)
    return retries


def report_unit(ctx: StageContext[Any], done: int, total: int, unit: Unit, result: BaseModel) -> None:
    """Progress for a finished unit, with the work it did when the stage can say (`unit_work`: e.g. documents)."""
    progress.unit_done(ctx.stage, done, total, unit.id, unit_stage(ctx).unit_work(unit, result))


class UnitBatch:
    """Some units of one step in the compact form they travel in (ids, payloads as JSON): a bundle for a worker,
    which rebuilds each Unit and its payload model as it runs it."""

    def __init__(self, step: Step[Any, Any], ids: list[str], payloads: list[bytes]):
        self.step, self.ids, self.payloads = step, ids, payloads

    def __len__(self) -> int:
        return len(self.ids)

    def __iter__(self) -> Iterator[Unit]:
        for uid, payload in zip(self.ids, self.payloads):
            yield Unit(uid, self.step.payload.model_validate_json(payload), self.step.name)


class PlannedUnits:
    """A step's units as the orchestrator holds them, in the order they are handed to the engine (largest
    `unit_cost` first, ids ascending among equals: the last to start are the smallest, so the workers finish
    together; results never depend on it). Ids, payloads as JSON and costs sit in compact lists and a Unit with
    its payload model is rebuilt only when asked for: 10^5 units cost their ids and a few bytes each, not a model
    each. `ids` is in id order."""

    def __init__(self, step: Step[Any, Any], ids: list[str], payloads: list[bytes], costs: list[float]):
        self.step, self.ids, self._payloads = step, ids, payloads
        self._costs = array("d", costs)
        self._order = array("q", sorted(range(len(ids)), key=lambda i: -costs[i]))

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, k: int) -> Unit:
        i = self._order[k]
        return Unit(self.ids[i], self.step.payload.model_validate_json(self._payloads[i]), self.step.name)

    def __iter__(self) -> Iterator[Unit]:
        return (self[k] for k in range(len(self)))

    def cost(self, k: int) -> float:
        return self._costs[self._order[k]]

    def batch(self, start: int, stop: int) -> UnitBatch:
        """The units at positions start..stop-1 of the hand-out order."""
        picked = self._order[start:stop]
        return UnitBatch(self.step, [self.ids[i] for i in picked], [self._payloads[i] for i in picked])


def plan_step(stage: UnitStage[Any], ctx: StageContext[Any], step: Step[Any, Any], done: StepResults) -> PlannedUnits:
    """The step's units, each payload checked against the step's model; `plan` may yield them one at a time."""
    ids: list[str] = []
    payloads: list[bytes] = []
    costs: list[float] = []
    try:
        for planned in stage.plan(ctx, step, done):
            unit = checked_payload(stage, step, planned)
            ids.append(unit.id)
            payloads.append(to_json(unit.payload))
            costs.append(float(stage.unit_cost(unit)))
    except ValidationError as e:
        raise StageError(f"stage {stage.name}: step {step.name}: a unit's payload {_field_error(e)} "
                         f"({e.title}); this is a bug in the stage's plan") from None
    by_id = sorted(range(len(ids)), key=ids.__getitem__)
    ids, payloads, costs = [ids[i] for i in by_id], [payloads[i] for i in by_id], [costs[i] for i in by_id]
    for a, b in zip(ids, ids[1:]):
        if a == b:
            raise StageError(f"stage {stage.name}: step {step.name}: two units are named {a!r}; this is a bug in "
                             f"the stage's plan (unit ids name their folders)")
    return PlannedUnits(step, ids, payloads, costs)


def run_steps(stage: UnitStage[Any], ctx: StageContext[Any], mapper: UnitMapper, retries: dict[str, int]) -> StepResults:
    """Every step of a unit stage in order: plan its units from the earlier steps' results, map them; the
    retries units took are collected into `retries` (step/unit -> count). Each step's results are read from
    its unit folders as the next steps and finalize ask for them."""
    done: StepResults = {}
    for step in stage.iter_steps(ctx, done):
        units = plan_step(stage, ctx, step, done)
        ids = units.ids
        progress.stage_started(ctx.stage, len(units), step.name if len(stage.steps) > 1 else None)
        took = mapper(ctx, units) if len(units) else {}
        del units  # the payloads: a step keeps its unit ids only
        retries.update({f"{step.name}/{uid}": took[uid] for uid in ids if took.get(uid)})
        missing = [uid for uid in ids if not unit_finished(ctx, step.name, uid)]
        if missing:
            raise StageError(f"stage {stage.name}: step {step.name}: {len(missing)} unit(s) ended without their result "
                             f"({ctx.unit_dir(step.name, missing[0])}); this is a bug in the engine's mapper")
        done[step.name] = UnitResults(stage, step, os.path.join(ctx.work_dir, step.name), ids)
    return done


def execute_stage(
    run_dir: RunDir, config: PipelineConfig, name: str, *, force: bool = False, mapper: UnitMapper | None = None
) -> tuple[Manifest, bool]:
    """Run `name` if it is not fresh (or if forced). Returns (manifest, whether it ran).

    The caller holds the run directory's lock.
    """
    stage = get_stage(name)
    ctx = build_context(run_dir, config, name)
    try:
        current = run_dir.manifest(name)
    except ManifestDamaged as e:
        current = None
        progress.note(name, f"published manifest damaged ({e.why}); rerunning the stage")
    if not force and current is not None and current.fingerprint == ctx.fingerprint:
        damage = damaged_outputs(run_dir, current)
        if not damage:
            tidy(run_dir, name)  # an earlier attempt (e.g. an interrupted --force) left nothing worth keeping
            return current, False
        progress.note(name, f"published outputs damaged ({damage[0]}); rerunning the stage")

    started, t0 = utc_now(), time.monotonic()
    job_dir = ctx.job_dir if isinstance(stage, RunStage) and stage.long_job else None
    run_dir.record_attempt(name, "running", ctx.fingerprint, job_dir=job_dir)
    try:
        if force:  # forced means from scratch, not from the units (or the job) of any earlier attempt
            run_dir.remove_work(name)
            ctx.from_scratch = True
        retries: dict[str, int] = {}
        if isinstance(stage, UnitStage):
            done = run_steps(stage, ctx, mapper or map_units_locally, retries)
            staging = run_dir.fresh_staging(name)
            outcome = stage.finalize(ctx, done, staging)
        else:
            progress.stage_started(name, None)
            staging = run_dir.fresh_staging(name)
            outcome = stage.run(ctx, staging)
        manifest = _manifest(ctx, stage, outcome, staging, started, t0)
        manifest.retries = dict(sorted(retries.items()))
        atomic_write_text(staging / "manifest.json", manifest.to_json())
        run_dir.publish(name)
        remove_work(run_dir, name, ctx.work_dir)
        run_dir.clear_attempt(name)
        progress.stage_finished(name, manifest)
        return manifest, True
    except Detached as e:  # the work goes on without us (a Slurm job): still submitted, not failed
        shutil.rmtree(run_dir.staging_dir(name), ignore_errors=True)
        run_dir.record_attempt(name, "submitted", ctx.fingerprint, job_dir=job_dir, detail=str(e))
        raise
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM: the attempt stays "running", which status reads as interrupted
        shutil.rmtree(run_dir.staging_dir(name), ignore_errors=True)
        raise
    except BaseException as e:
        redact_exception(e)  # before the state file and the engine (Prefect's database) record it
        shutil.rmtree(run_dir.staging_dir(name), ignore_errors=True)
        error = str(e) if isinstance(e, (EuropaError, OSError)) else f"{type(e).__name__}: {e}"
        run_dir.record_attempt(name, "failed", ctx.fingerprint, job_dir=job_dir, error=error,
                               traceback=traceback.format_exc(limit=20))
        raise


def _manifest(ctx: StageContext[Any], stage: BaseStage[Any], outcome: StageOutcome, staging, started: str, t0: float) -> Manifest:
    outputs = describe_outputs(staging, outcome.rows, outcome.tokens, outcome.checksums)
    return Manifest(
        stage=ctx.stage,
        status="complete",
        fingerprint=ctx.fingerprint,
        output_digest=output_digest(outputs),
        config=ctx.settings.model_dump(mode="json"),
        upstream={n: {"fingerprint": m.fingerprint, "output_digest": m.output_digest} for n, m in ctx.upstream.items()},
        code_version=stage.code_version,
        package_version=_package_version(),
        git_commit=_git_commit(),
        started_at=started,
        finished_at=utc_now(),
        duration_s=round(time.monotonic() - t0, 3),
        outputs=outputs,
        # the record as the producer filled it: optional fields it left out stay out (the contract is the model)
        statistics=outcome.statistics.model_dump(mode="json", exclude_unset=True),
        skipped=outcome.skipped,
        summary=outcome.summary,
    )


def tidy(run_dir: RunDir, name: str) -> None:
    """A stage found fresh: forget an unpublished attempt and its leftovers (finished units, a half-built stage
    folder, a swapped-out old one), which only a rerun with other settings could have used."""
    if run_dir.attempt(name) is not None:
        run_dir.clear_attempt(name)
    remove_work(run_dir, name)
    shutil.rmtree(run_dir.staging_dir(name), ignore_errors=True)
    run_dir.remove_trash(name)


def remove_work(run_dir: RunDir, name: str, published: Path | None = None) -> None:
    """Delete the stage's work folders, except those it must keep (`keep_work`: a long job's checkpoints of other
    settings, days of training that only --force may delete); `published` (the folder whose output was just
    published) always goes. What is kept is said, every time."""
    for folder in run_dir.remove_work(name, keep=get_stage(name).keep_work, published=published):
        progress.note(name, f"kept {folder}: it holds work of other settings (a long job's checkpoints); delete it "
                            f"by hand when it is no longer needed, or rerun with --force")


def run_stages(run_dir: RunDir, config: PipelineConfig, stages: list[str], forced: list[str]) -> list[dict[str, Any]]:
    """The local engine: the stages in order in this process, units one after another (no Prefect)."""
    results = []
    for name in stages:
        manifest, ran = execute_stage(run_dir, config, name, force=name in forced)
        results.append({"stage": name, "ran": ran, "summary": manifest.summary})
    return results


def _package_version() -> str:
    try:
        return metadata.version("europa-pipeline")
    except metadata.PackageNotFoundError:
        return "unknown"


def _git_commit() -> str | None:
    if not (REPO_ROOT / ".git").exists():
        return None
    try:
        out = subprocess.run(["git", "-C", str(REPO_ROOT), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5)
        return out.stdout.strip() or None
    except (OSError, subprocess.TimeoutExpired):
        return None
