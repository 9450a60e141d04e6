"""What state each stage of a run is in, and the context a stage would run with now.

Freshness: a stage's fingerprint hashes its config section, the [run] section, the output digests of the
stages it consumes, its code version and a cheap signature of its external inputs (settings as they are
recorded, secrets masked, so a run's own run.toml and the config file it came from agree). A stage is fresh
when its published manifest carries the fingerprint computed now, everything upstream is fresh too, and its
outputs are all there with the sizes the manifest recorded (else it is *damaged* and reruns; `europa verify`
checks the checksums too). Nothing here writes; pipeline/executor.py does the work.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline import fsutil
from pipeline.config import PipelineConfig
from pipeline.manifest import Manifest, ManifestDamaged, digest
from pipeline.records import load_record
from pipeline.registry import DEPENDS_ON, STAGE_NAMES, get_stage
from pipeline.rundir import JOB_LOCK, RunDir
from pipeline.secrets import redact
from pipeline.stage import BaseStage, StageContext, StageError


@dataclass
class StageStatus:
    name: str
    state: str  # fresh | stale | damaged | missing | failed | running | interrupted | submitted
    reason: str
    manifest: Manifest | None


def fingerprinted_settings(stage: BaseStage[Any], ctx: StageContext[Any]) -> dict[str, Any]:
    """The settings that decide a stage's outputs: its whole section but its `launch_only_settings`."""
    settings = redact(ctx.settings.model_dump(mode="json"))
    for key in stage.launch_only_settings:
        settings.pop(key, None)
    return settings


def fingerprint_inputs(stage: BaseStage[Any], ctx: StageContext[Any]) -> dict[str, Any]:
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
                  load_records: bool = True) -> StageContext[Any]:
    """The context for running `name` now; refuses when an upstream stage is missing or out of date, and when
    an upstream record does not match its model (`load_records`)."""
    upstream: dict[str, Manifest] = {}
    for dep in DEPENDS_ON[name]:
        try:
            manifest = run_dir.manifest(dep)
        except ManifestDamaged as e:
            raise StageError(f"stage {name}: the {dep} stage's manifest is damaged ({e.path}: {e.why}); run "
                             f"`europa run --run-dir {run_dir.path} --to {name}` to rebuild it") from None
        if manifest is None:
            raise StageError(
                f"stage {name}: needs the {dep} stage's output in {run_dir.path}, which is missing; "
                f"run `europa stage {dep} --run-dir {run_dir.path}` first"
                + (" (or, before training, `europa stage compliance --projected`)" if name == "compliance" else "")
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
    ctx: StageContext[Any] = StageContext(run_dir, config, name, "", upstream, records, stage)
    ctx.fingerprint = digest(fingerprint_inputs(stage, ctx))
    return ctx


def statuses(run_dir: RunDir, config: PipelineConfig, upto: tuple[str, ...] | None = None) -> list[StageStatus]:
    """Each stage's state, in pipeline order (only the stages in `upto` and their ancestors if given)."""
    out: dict[str, StageStatus] = {}
    for name in STAGE_NAMES:
        try:
            manifest, unreadable = run_dir.manifest(name), None
        except ManifestDamaged as e:
            manifest, unreadable = None, e
        attempt = run_dir.live_attempt(name)
        bad_up = [d for d in DEPENDS_ON[name] if out[d].state != "fresh"]
        if unreadable is not None and (attempt is None or attempt.status != "running"):
            out[name] = StageStatus(name, "damaged", f"{unreadable}", None)
        elif attempt is not None and attempt.status == "failed":
            out[name] = StageStatus(name, "failed", attempt.detail.splitlines()[0][:200] if attempt.detail else "", manifest)
        elif attempt is not None and attempt.status == "running":
            running = run_dir.is_locked()
            job_holder = _job_holder(attempt.job_dir) if not running else None
            if running:
                out[name] = StageStatus(name, "running", "in progress", manifest)
            elif job_holder is not None:
                out[name] = StageStatus(name, "running", (
                    f"europa stopped but its job still runs ({job_holder}, in {attempt.job_dir}); a second one "
                    "would be refused: let it finish or stop that process, then `europa run` resumes from its "
                    "checkpoints"), manifest)
            else:
                out[name] = StageStatus(name, "interrupted",
                                        "stopped before finishing; a rerun resumes its finished units", manifest)
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


def _job_holder(job_dir: Path | None) -> str | None:
    """What holds the long job's lock in `job_dir` ("pid N (training, since ...)"), or None: no process of that
    job lives (the kernel drops the lock with its holder, so a dead job never reads as alive)."""
    if job_dir is None or not fsutil.is_locked(job_dir / JOB_LOCK):
        return None
    try:
        return (job_dir / JOB_LOCK).read_text(encoding="utf-8", errors="replace").strip() or "a process"
    except OSError:
        return "a process"


def damaged_outputs(run_dir: RunDir, manifest: Manifest) -> list[str]:
    """The published outputs that are missing or have another size than the manifest recorded (the cheap check
    of pipeline/verify.py: one stat per file; the checksums are `europa verify`'s job)."""
    from pipeline.verify import check_stage

    check = check_stage(run_dir, manifest.stage, checksums=False)
    folder = run_dir.stage_dir(manifest.stage)
    return [f"{folder / d.path}: {d.detail}" for d in (check.damage if check else [])]


def _stale_reason(ctx: StageContext[Any], manifest: Manifest) -> str:
    stage = get_stage(ctx.stage)
    recorded = {k: v for k, v in manifest.config.items() if k not in stage.launch_only_settings}
    if fingerprinted_settings(stage, ctx) != recorded:
        return "settings changed"
    if any(manifest.upstream.get(n, {}).get("output_digest") != m.output_digest for n, m in ctx.upstream.items()):
        return "upstream output changed"
    if stage.code_version != manifest.code_version:
        return "stage code changed"
    return "inputs or run settings changed"
