"""Runs one stage against a run directory: decide freshness, run its steps of units (or its one `run`), publish.

The orchestration engine (Prefect flows, or the in-process loop here) only chooses *how units are mapped*;
everything that decides *what* runs and what counts as done lives here, so every engine behaves the same.

Freshness: a stage's fingerprint hashes its config section, the [run] section, the output digests of the
stages it consumes, its code version and a cheap signature of its external inputs (settings as they are
recorded, secrets masked, so a run's own run.toml and the config file it came from agree). A stage is fresh
when its published manifest carries the fingerprint computed now, everything upstream is fresh too, and its
outputs are all there with the sizes the manifest recorded (else it is *damaged* and reruns; `europa verify`
checks the checksums too).
"""

from __future__ import annotations

import ctypes
import functools
import json
import shutil
import subprocess
import time
import traceback
from dataclasses import dataclass, replace
from importlib import metadata
from pathlib import Path
from typing import Any, Callable

from pipeline import progress
from pipeline.config import REPO_ROOT, PipelineConfig
from pipeline.errors import EuropaError
from pipeline.fsutil import atomic_dir, atomic_write_text
from pipeline.manifest import Manifest, describe_outputs, digest, output_digest
from pipeline.records import load_record
from pipeline.registry import DEPENDS_ON, STAGE_NAMES, get_stage
from pipeline.retry import retrying
from pipeline.rundir import RunDir, utc_now
from pipeline.secrets import redact
from pipeline.stage import Detached, StageContext, StageError, StageOutcome, StepResults, Unit, UnitStage

UNIT_RESULT = "result.json"  # written last into a unit folder: its completion marker
RETRIES = "_retries"  # key of a unit's result that carries the retries it took (taken out before finalize)

# A mapper runs units and returns their results in the same order; engines provide their own.
UnitMapper = Callable[[StageContext, list[Unit]], list[dict[str, Any]]]


@dataclass
class StageStatus:
    name: str
    state: str  # fresh | stale | damaged | missing | failed | running | interrupted | submitted
    reason: str
    manifest: Manifest | None


def fingerprinted_settings(stage: Any, ctx: StageContext) -> dict[str, Any]:
    """The settings that decide a stage's outputs: its whole section, unless the stage names the part that
    only decides where and how it runs (`launch_only_settings`, e.g. pretrain's [pretrain.slurm]), which must
    not invalidate its results (weeks of checkpoints)."""
    settings = redact(ctx.settings.model_dump(mode="json"))
    for key in getattr(stage, "launch_only_settings", ()):
        settings.pop(key, None)
    return settings


def fingerprint_inputs(stage: Any, ctx: StageContext) -> dict[str, Any]:
    """What a stage's fingerprint hashes (a long job records it in its folder, so a later version can tell
    whether a folder holds the same training: stages/pretrain/folders.py)."""
    return {
        "stage": ctx.stage,
        "run": redact(ctx.config.run.model_dump(mode="json")),
        "config": fingerprinted_settings(stage, ctx),
        "upstream": {name: m.output_digest for name, m in sorted(ctx.upstream.items())},
        "code_version": stage.code_version,
        "inputs": stage.input_signature(ctx),
    }


def build_context(run_dir: RunDir, config: PipelineConfig, name: str, *, require_fresh_upstream: bool = True,
                  load_records: bool = True) -> StageContext:
    """The context for running `name` now; refuses when an upstream stage is missing or out of date, and when
    an upstream record does not match its model (`load_records`)."""
    upstream: dict[str, Manifest] = {}
    for dep in DEPENDS_ON[name]:
        manifest = run_dir.manifest(dep)
        if manifest is None:
            raise StageError(
                f"stage {name}: needs the {dep} stage's output in {run_dir.path}, which is missing; "
                f"run `europa stage {dep} --run-dir {run_dir.path}` first"
            )
        upstream[dep] = manifest
    if require_fresh_upstream:
        for st in statuses(run_dir, config, upto=DEPENDS_ON[name]):
            if st.state != "fresh":
                raise StageError(
                    f"stage {name}: upstream stage {st.name} is {st.state} ({st.reason}); "
                    f"run `europa run --run-dir {run_dir.path} --to {name}` to bring everything up to date"
                )
    records = {dep: load_record(run_dir, dep, m, name) for dep, m in upstream.items()} if load_records else {}
    stage = get_stage(name)
    ctx = StageContext(run_dir, config, name, "", upstream, records)
    ctx.fingerprint = digest(fingerprint_inputs(stage, ctx))
    return ctx


def statuses(run_dir: RunDir, config: PipelineConfig, upto: tuple[str, ...] | None = None) -> list[StageStatus]:
    """Each stage's state, in pipeline order (only the stages in `upto` and their ancestors if given)."""
    out: dict[str, StageStatus] = {}
    for name in STAGE_NAMES:
        manifest = run_dir.manifest(name)
        attempt = run_dir.live_attempt(name)
        bad_up = [d for d in DEPENDS_ON[name] if out[d].state != "fresh"]
        if attempt is not None and attempt.status == "failed":
            out[name] = StageStatus(name, "failed", attempt.detail.splitlines()[0][:200] if attempt.detail else "", manifest)
        elif attempt is not None and attempt.status == "running":
            running = run_dir.is_locked()
            out[name] = StageStatus(
                name, "running" if running else "interrupted",
                "in progress" if running else "stopped before finishing; a rerun resumes its finished units", manifest,
            )
        elif attempt is not None and attempt.status == "submitted":
            out[name] = StageStatus(name, "submitted", attempt.detail, manifest)
        elif manifest is None:
            out[name] = StageStatus(name, "missing", "never run", None)
        elif bad_up:
            out[name] = StageStatus(name, "stale", f"upstream {bad_up[0]} is {out[bad_up[0]].state}", manifest)
        else:
            ctx = build_context(run_dir, config, name, require_fresh_upstream=False, load_records=False)
            damage = damaged_outputs(run_dir, manifest)
            if ctx.fingerprint != manifest.fingerprint:
                out[name] = StageStatus(name, "stale", _stale_reason(ctx, manifest), manifest)
            elif damage:
                more = f" (and {len(damage) - 1} more)" if len(damage) > 1 else ""
                out[name] = StageStatus(name, "damaged", f"{damage[0]}{more}; `europa run` reruns it", manifest)
            else:
                out[name] = StageStatus(name, "fresh", "", manifest)
        if upto is not None and set(upto) <= set(out):
            break
    return [s for s in out.values() if upto is None or s.name in upto]


def damaged_outputs(run_dir: RunDir, manifest: Manifest) -> list[str]:
    """The published outputs that are missing or have another size than the manifest recorded (the cheap check
    of pipeline/verify.py: one stat per file; the checksums are `europa verify`'s job)."""
    from pipeline.verify import check_stage

    check = check_stage(run_dir, manifest.stage, checksums=False)
    folder = run_dir.stage_dir(manifest.stage)
    return [f"{folder / d.path}: {d.detail}" for d in (check.damage if check else [])]


def _stale_reason(ctx: StageContext, manifest: Manifest) -> str:
    stage = get_stage(ctx.stage)
    recorded = {k: v for k, v in manifest.config.items() if k not in getattr(stage, "launch_only_settings", ())}
    if fingerprinted_settings(stage, ctx) != recorded:
        return "settings changed"
    if any(manifest.upstream.get(n, {}).get("output_digest") != m.output_digest for n, m in ctx.upstream.items()):
        return "upstream output changed"
    if get_stage(ctx.stage).code_version != manifest.code_version:
        return "stage code changed"
    return "inputs or run settings changed"


def execute_unit(ctx: StageContext, unit: Unit) -> dict[str, Any]:
    """Run one unit unless a finished copy exists; the folder appears under its final name only when done. A
    transient failure is tried again ([orchestration] retries); the retries it took ride along in the result
    under RETRIES (the executor takes them out for the manifest)."""
    final = ctx.unit_dir(unit.step, unit.id)
    marker = final / UNIT_RESULT
    if marker.exists():
        return json.loads(marker.read_text())
    final.parent.mkdir(parents=True, exist_ok=True)

    def attempt() -> dict[str, Any]:
        with atomic_dir(final) as tmp:  # a second worker that finished the same unit first keeps its identical copy
            result = get_stage(ctx.stage).run_unit(ctx, unit, tmp)
            (tmp / UNIT_RESULT).write_text(json.dumps(result, ensure_ascii=False, sort_keys=True))
        return result

    o = ctx.config.orchestration
    try:
        result, retries = retrying(attempt, retries=o.retries, backoff_s=o.retry_backoff_s, on_retry=lambda n, e: progress.note(
            ctx.stage, f"unit {unit.id}: {type(e).__name__}: {e}; trying again ({n} of {o.retries})"))
    finally:
        give_back_freed_memory()
    return {**result, RETRIES: retries} if retries else result


@functools.lru_cache(maxsize=1)
def _malloc_trim() -> Callable[[int], int] | None:
    try:
        return ctypes.CDLL(None).malloc_trim  # glibc
    except (OSError, AttributeError):  # another C library (musl, macOS): nothing to call
        return None


def give_back_freed_memory() -> None:
    """Return the C heap's free pages to the kernel, between units (glibc's `malloc_trim(0)`).

    Why: a worker runs many units one after another. What a unit frees stays in the heap, fragmented between the
    few blocks still in use, and the next unit's allocations partly land beside it rather than in it, so the
    worker's resident memory creeps up unit after unit. Measured with every ingest unit of the 298 MB scale corpus
    in one process, each unit through execute_unit: the filter step's peak 244 -> 221 MiB; at 2 GB the step had
    gone from 217 to 259 MiB over its 24 units. It costs a few milliseconds per unit (~5 ms on a 200 MB heap),
    and nothing where the C library has no malloc_trim."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


def map_units_locally(ctx: StageContext, units: list[Unit]) -> list[dict[str, Any]]:
    results = []
    for i, unit in enumerate(units):
        results.append(execute_unit(ctx, unit))
        report_unit(ctx, i + 1, len(units), unit, results[-1])
    return results


def report_unit(ctx: StageContext, done: int, total: int, unit: Unit, result: dict[str, Any]) -> None:
    """Progress for a finished unit, with the work it did when the stage can say (`unit_work`: e.g. documents)."""
    work = getattr(get_stage(ctx.stage), "unit_work", None)
    progress.unit_done(ctx.stage, done, total, unit.id, work(unit, result) if work else None)


def run_steps(stage: UnitStage, ctx: StageContext, mapper: UnitMapper, retries: dict[str, int]) -> StepResults:
    """Every step of a unit stage in order: plan its units from the earlier steps' results, map them; the
    retries units took are collected into `retries` (step/unit -> count)."""
    done: StepResults = {}
    for step in stage.steps:
        units = [replace(u, step=step) for u in sorted(stage.plan(ctx, step, done), key=lambda u: u.id)]
        progress.stage_started(ctx.stage, len(units), step if len(stage.steps) > 1 else None)
        submitted = largest_first(stage, units)
        by_id = {u.id: r for u, r in zip(submitted, mapper(ctx, submitted) if units else [])}
        done[step] = {}
        for u in units:
            r = by_id[u.id]
            if RETRIES in r:
                retries[f"{step}/{u.id}"] = r.pop(RETRIES)
            done[step][u.id] = r
    return done


def largest_first(stage: UnitStage, units: list[Unit]) -> list[Unit]:
    """The order units are handed to the engine: by the stage's `unit_cost`, largest first (ids ascending among
    equals), where it has one. Engines start units in the order given, so the last to start are the smallest and
    the workers finish together (longest processing time first: within 4/3 of the best order, where
    alphabetical order can leave one worker alone on a large unit at the end). Results never depend on it."""
    cost = getattr(stage, "unit_cost", None)
    return sorted(units, key=lambda u: -cost(u)) if cost else units


def execute_stage(
    run_dir: RunDir, config: PipelineConfig, name: str, *, force: bool = False, mapper: UnitMapper | None = None
) -> tuple[Manifest, bool]:
    """Run `name` if it is not fresh (or if forced). Returns (manifest, whether it ran).

    The caller holds the run directory's lock.
    """
    stage = get_stage(name)
    ctx = build_context(run_dir, config, name)
    current = run_dir.manifest(name)
    if not force and current is not None and current.fingerprint == ctx.fingerprint:
        damage = damaged_outputs(run_dir, current)
        if not damage:
            tidy(run_dir, name)  # an earlier attempt (e.g. an interrupted --force) left nothing worth keeping
            return current, False
        progress.note(name, f"published outputs damaged ({damage[0]}); rerunning the stage")

    started, t0 = utc_now(), time.monotonic()
    job_dir = ctx.job_dir if getattr(stage, "long_job", False) else None
    run_dir.record_attempt(name, "running", ctx.fingerprint, job_dir=job_dir)
    try:
        if force:  # forced means from scratch, not from the units (or the job) of any earlier attempt
            run_dir.remove_work(name)
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
    except BaseException as e:
        shutil.rmtree(run_dir.staging_dir(name), ignore_errors=True)
        error = str(e) if isinstance(e, (EuropaError, OSError)) else f"{type(e).__name__}: {e}"
        run_dir.record_attempt(name, "failed", ctx.fingerprint, job_dir=job_dir, error=error,
                               traceback=traceback.format_exc(limit=20))
        raise


def _manifest(ctx: StageContext, stage: Any, outcome: StageOutcome, staging, started: str, t0: float) -> Manifest:
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
    for trash in run_dir.path.glob(f".trash/{name}-*"):
        shutil.rmtree(trash, ignore_errors=True)


def remove_work(run_dir: RunDir, name: str, published: Path | None = None) -> None:
    """Delete the stage's work folders, except those it must keep (`keep_work`: a long job's checkpoints of other
    settings, days of training that only --force may delete); `published` (the folder whose output was just
    published) always goes. What is kept is said, every time."""
    keep = getattr(get_stage(name), "keep_work", None)
    for folder in run_dir.remove_work(name, keep=keep, published=published):
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
