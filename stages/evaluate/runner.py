"""Evaluate the checkpoints of a run that have not been evaluated yet (or one named checkpoint).

Shared by `europa evaluate`, the scheduled Prefect deployment (`europa eval-schedule`) and the evaluate stage.
A checkpoint is evaluated once: its `eval/step-N/metrics.json` records the identity of the checkpoint it came
from (the checksum of its DCP metadata), so a retrained step-N (other settings) is evaluated again, and an
unchanged one never twice. Only complete checkpoints are seen (europa_model/checkpoints.py): the published
pretrain stage's and those of a training job still running (RunDir.live_attempt). A damaged checkpoint is named
and skipped by the scheduler, and is an error when asked for explicitly.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from europa_model.checkpoints import JOB_INFO, Checkpoint, complete_checkpoints, incomplete_checkpoints, model_info
from europa_model.devices import resolve_device
from pipeline import progress
from pipeline.config import PipelineConfig
from pipeline.errors import UsageError
from pipeline.fsutil import sha256_file
from pipeline.rundir import RunDir, utc_now
from stages.evaluate.config import EvaluateConfig
from stages.evaluate.results import EvalStore, write_history, write_report
from stages.evaluate.scoring import CheckpointError, Score, load_model, score
from stages.evaluate.texts import external_texts, validation_texts

STORE = "eval"  # the run's results store (RunDir.store_dir)
TRAINING = "pretrain"  # the stage whose checkpoints are evaluated


class NothingToEvaluate(UsageError):
    """An explicit request for a checkpoint that does not exist (yet)."""


def run_checkpoints(run_dir: RunDir) -> list[Checkpoint]:
    """Every complete checkpoint of the run: the published stage's and those of a job still training.

    Steps present in both (cannot happen with one fingerprint, but can after a settings change) resolve to
    the live job, which is what training is writing now."""
    by_step = {c.step: c for c in complete_checkpoints(run_dir.stage_dir(TRAINING))}
    live = run_dir.live_attempt(TRAINING)
    if live is not None and live.job_dir is not None:
        by_step.update({c.step: c for c in complete_checkpoints(live.job_dir)})
    return [by_step[s] for s in sorted(by_step)]


@dataclass
class EvalOutcome:
    evaluated: list[int] = field(default_factory=list)
    skipped: list[dict[str, Any]] = field(default_factory=list)
    flagged: list[dict[str, Any]] = field(default_factory=list)
    message: str = ""
    report: str | None = None


def checkpoint_id(ckpt: Checkpoint) -> str:
    return sha256_file(ckpt.path / ".metadata")


def select(checkpoints: list[Checkpoint], store: EvalStore, which: str | None) -> list[Checkpoint]:
    if which is None:
        return [c for c in checkpoints if (store.read(c.step) or {}).get("checkpoint_id") != checkpoint_id(c)]
    if not checkpoints:
        raise NothingToEvaluate("no complete checkpoint yet; the pretrain stage writes them (europa stage pretrain)")
    if which == "latest":
        return [checkpoints[-1]]  # (a damaged newer one was refused by latest_is_damaged before)
    by_name = {c.name: c for c in checkpoints}
    if which not in by_name:
        raise NothingToEvaluate(f"no complete checkpoint {which} (complete: {', '.join(by_name)}); one still being "
                                "written becomes complete when its .metadata file appears")
    return [by_name[which]]


def evaluate_run(run_dir: RunDir, config: PipelineConfig, *, which: str | None = None,
                 published_only: bool = False) -> EvalOutcome:
    settings: EvaluateConfig = config.section("evaluate")
    pretrain = config.section("pretrain")
    store = EvalStore(run_dir.store_dir(STORE))
    checkpoints = complete_checkpoints(run_dir.stage_dir(TRAINING)) if published_only else run_checkpoints(run_dir)
    damaged = [c for c in incomplete_checkpoints(run_dir.stage_dir(TRAINING)) if not checkpoints or c.step > checkpoints[-1].step]
    if which == "latest" and damaged:  # a finished job's checkpoint lost its .metadata: never evaluate an older one instead
        older = f"the latest complete one is {checkpoints[-1].name} (--checkpoint {checkpoints[-1].name})" if checkpoints else "no complete one"
        raise CheckpointError(f"checkpoint {damaged[-1].path}: has no .metadata (damaged: a published checkpoint is always "
                              f"complete); rerun the pretrain stage (europa run --run-dir {run_dir.path}), or evaluate an "
                              f"older step: {older}")
    outcome = EvalOutcome()
    with run_dir.store_lock(STORE, f"evaluating {run_dir.path}"):
        todo = select(checkpoints, store, which)
        if not checkpoints:
            outcome.message = "no complete checkpoint yet; nothing to evaluate"
            return outcome
        texts = _load_texts(run_dir, config, settings) if todo else None
        seq_len = settings.seq_len or pretrain.seq_len
        device = resolve_device(settings.device)
        for ckpt in todo:
            try:
                metrics = _evaluate_checkpoint(ckpt, texts, settings, seq_len, device)
            except CheckpointError as e:
                if which is not None:
                    raise
                outcome.skipped.append({"step": ckpt.step, "path": str(ckpt.path), "reason": str(e)})
                progress.note("evaluate", f"skipped {ckpt.name}: {e}")
                continue
            store.write(ckpt.step, metrics)
            outcome.evaluated.append(ckpt.step)
        all_metrics = store.all()
        if all_metrics:  # rewritten even when nothing is new: the threshold may have changed
            write_history(store.root, all_metrics)
            rows = write_report(store.root, all_metrics, settings.regression_threshold)
            outcome.flagged = [r for r in rows if r["flagged"]]
            outcome.report = (store.root / "report.md").read_text()
    if not todo:
        outcome.message = f"all {len(checkpoints)} complete checkpoint(s) already evaluated; nothing new"
        return outcome
    done = ", ".join(f"step-{s}" for s in outcome.evaluated) or "none"
    outcome.message = f"evaluated {done}" + (f"; skipped {len(outcome.skipped)} damaged" if outcome.skipped else "") + \
        (f"; REGRESSION in {', '.join(r['lang'] for r in outcome.flagged)}" if outcome.flagged else "")
    return outcome


def _load_texts(run_dir: RunDir, config: PipelineConfig, settings: EvaluateConfig):
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=str(run_dir.stage_dir("tokenizer") / "tokenizer.model"))
    languages = list(config.run.languages)
    sets: dict[str, tuple[dict, list[str]]] = {}
    if settings.validation_split:
        sets["val"] = validation_texts(run_dir.stage_dir("shards"), languages, sp, settings.max_tokens_per_language)
    for s in settings.sets:
        sets[s.name] = external_texts(s.name, s.path, s.pattern, languages, sp, settings.max_tokens_per_language)
    return sp, sets


def _evaluate_checkpoint(ckpt: Checkpoint, texts, settings: EvaluateConfig, seq_len: int, device: str) -> dict[str, Any]:
    sp, sets = texts
    info = model_info(ckpt)
    if info is None:
        raise CheckpointError(f"checkpoint {ckpt.path}: no {JOB_INFO} beside its checkpoints folder; "
                              "cannot tell which model it holds")
    progress.note("evaluate", f"{ckpt.name}: loading ({info['flavor']}, vocabulary {info['vocab_size']:,})")
    model = load_model(ckpt.path, info["flavor"], info["vocab_size"], device)
    out: dict[str, Any] = {"step": ckpt.step, "checkpoint": str(ckpt.path), "checkpoint_id": checkpoint_id(ckpt),
                           "flavor": info["flavor"], "seq_len": seq_len, "evaluated_at": utc_now(),
                           "sets": {}, "missing": {}, "sources": {}}
    for set_name, (by_lang, missing) in sets.items():
        out["sets"][set_name] = {}
        out["missing"][set_name] = missing
        for lang, t in by_lang.items():
            s: Score = score(model, t.docs, seq_len=seq_len, batch_size=settings.batch_size, bos=sp.bos_id(), device=device)
            out["sets"][set_name][lang] = s.figures(t.n_bytes)
            out["sources"].setdefault(set_name, {})[lang] = t.source
        langs = out["sets"][set_name]
        if langs:
            mean = sum(f["bits_per_byte"] for f in langs.values()) / len(langs)
            progress.note("evaluate", f"{ckpt.name} {set_name}: {len(langs)} languages, mean bits/byte {mean:.4f}"
                          + (f"; missing {', '.join(missing)}" if missing else ""))
    return out
