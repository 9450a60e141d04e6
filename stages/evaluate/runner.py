"""Evaluate the checkpoints of a run that have not been evaluated yet (or one named checkpoint).

Shared by `europa evaluate`, the scheduled Prefect deployment (`europa eval-schedule`) and the evaluate stage.
A checkpoint is evaluated once: its `eval/step-N/metrics.json` records the identity of the checkpoint it came
from (the checksum of its DCP metadata), so a retrained step-N (other settings) is evaluated again, and an
unchanged one never twice. Only complete checkpoints are seen (europa_model/checkpoints.py): the published
pretrain stage's and those of a training job still running (RunDir.live_attempt). A damaged checkpoint is named
and skipped by the scheduler, and is an error when asked for explicitly.
"""

from __future__ import annotations

import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from europa_model.checkpoints import JOB_INFO, Checkpoint, ModelInfo, incomplete_checkpoints, model_info
from europa_model.devices import resolve_device
from pipeline import progress
from pipeline.config import PipelineConfig
from pipeline.rundir import RunDir
from stages.checkpoints import TRAINING, NoSuchCheckpoint, checkpoint_id, find_checkpoint, run_checkpoints
from stages.evaluate.config import EvaluateConfig
from stages.evaluate.job import EvalJobFailed, run_torchrun, slurm_job
from stages.evaluate.metrics import CheckpointMetrics, Coverage, EvalJob, TaskFigures
from stages.evaluate.results import EvalStore, checkpoint_metrics, write_history, write_report
from stages.evaluate.scoring import CheckpointError, load_model, score

STORE = "eval"  # the run's results store (RunDir.store_dir)

NothingToEvaluate = NoSuchCheckpoint  # an explicit request for a checkpoint that does not exist (yet)

__all__ = ["EvalOutcome", "NothingToEvaluate", "evaluate_run", "run_checkpoints"]


@dataclass
class EvalOutcome:
    """What one round did. Its lists are plain JSON-able rows: the scheduled flow returns them as they are."""

    evaluated: list[int] = field(default_factory=list)
    skipped: list[dict[str, Any]] = field(default_factory=list)  # {step, path, reason}: record.SkippedCheckpoint
    pending: list[dict[str, Any]] = field(default_factory=list)  # {step, path, state}: jobs still running (not waited for)
    flagged: list[dict[str, Any]] = field(default_factory=list)  # the regressions: results.Change as a dict
    message: str = ""
    report: str | None = None


def wanted(settings: EvaluateConfig) -> Coverage:
    """What a checkpoint's metrics must cover (a configuration that adds a set or task re-evaluates)."""
    return Coverage(sets=(["val"] if settings.validation_split else []) + [s.name for s in settings.sets],
                    tasks=[t.name for t in settings.tasks])


def _covers(metrics: CheckpointMetrics | None, ckpt: Checkpoint, settings: EvaluateConfig) -> bool:
    if metrics is None or metrics.checkpoint_id != checkpoint_id(ckpt):
        return False
    covered, needed = metrics.coverage(), wanted(settings)
    return set(needed.sets) <= set(covered.sets) and set(needed.tasks) <= set(covered.tasks)


def select(checkpoints: list[Checkpoint], store: EvalStore, which: str | None, settings: EvaluateConfig) -> list[Checkpoint]:
    if which is None:
        return [c for c in checkpoints if not _covers(store.read(c.step), c, settings)]
    return [find_checkpoint(checkpoints, which)]


def evaluate_run(run_dir: RunDir, config: PipelineConfig, *, which: str | None = None,
                 published_only: bool = False, wait: bool = True, wait_for_others: bool = False) -> EvalOutcome:
    """Evaluate the run's checkpoints not evaluated yet (or `which`), then rewrite history, report and plots.
    `wait`: follow a Slurm evaluation job until it ends (False: the scheduled deployment, which looks again
    next round). `wait_for_others`: when another evaluation holds the results store (a side `europa evaluate`),
    wait for it to end and keep what it added, instead of failing (the evaluate stage of `europa run`)."""
    settings: EvaluateConfig = config.section("evaluate")
    if settings.tasks:
        from stages.evaluate.tasks import check_tasks

        check_tasks(settings.tasks, list(config.run.languages))  # before any checkpoint is loaded
    store = EvalStore(run_dir.store_dir(STORE))
    checkpoints = run_checkpoints(run_dir, published_only=published_only)
    damaged = [c for c in incomplete_checkpoints(run_dir.stage_dir(TRAINING)) if not checkpoints or c.step > checkpoints[-1].step]
    if which == "latest" and damaged:  # a finished job's checkpoint lost its .metadata: never evaluate an older one instead
        older = f"the latest complete one is {checkpoints[-1].name} (--checkpoint {checkpoints[-1].name})" if checkpoints else "no complete one"
        raise CheckpointError(f"checkpoint {damaged[-1].path}: has no .metadata (damaged: a published checkpoint is always "
                              f"complete); rerun the pretrain stage (europa run --run-dir {run_dir.path}), or evaluate an "
                              f"older step: {older}")
    outcome = EvalOutcome()
    tries = 0

    def waiting(message: str) -> None:  # said at once, then every 5 minutes (one try per 2 s)
        nonlocal tries
        if tries % 150 == 0:
            progress.note("evaluate", f"{'waiting' if not tries else 'still waiting'}: {message.split(';')[0]}; "
                                      "the checkpoints it evaluates are not evaluated again")
        tries += 1

    with run_dir.store_lock(STORE, f"evaluating {run_dir.path}", waiting=waiting if wait_for_others else None):
        todo = select(checkpoints, store, which, settings)
        if not checkpoints:
            outcome.message = "no complete checkpoint yet; nothing to evaluate"
            return outcome
        evaluator = _Evaluator(run_dir, config, store)
        for ckpt in todo:
            try:
                metrics = evaluator.checkpoint(ckpt, wait=wait, retry=which is not None)
            except (CheckpointError, EvalJobFailed) as e:
                if which is not None:
                    raise
                outcome.skipped.append({"step": ckpt.step, "path": str(ckpt.path), "reason": str(e)})
                progress.note("evaluate", f"skipped {ckpt.name}: {e}")
                continue
            if metrics is None:
                outcome.pending.append({"step": ckpt.step, "path": str(ckpt.path), "state": evaluator.note})
                continue
            store.write(ckpt.step, metrics)
            outcome.evaluated.append(ckpt.step)
        all_metrics = store.all()
        if all_metrics:  # rewritten even when nothing is new: the threshold may have changed
            write_history(store.root, all_metrics)
            rows = write_report(store.root, all_metrics, settings.regression_threshold, settings.regression_sigma)
            outcome.flagged = [asdict(r) for r in rows if r.flagged]
            outcome.report = (store.root / "report.md").read_text()
    if not todo:
        outcome.message = f"all {len(checkpoints)} complete checkpoint(s) already evaluated; nothing new"
        return outcome
    done = ", ".join(f"step-{s}" for s in outcome.evaluated) or "none"
    outcome.message = f"evaluated {done}" + (f"; skipped {len(outcome.skipped)} damaged" if outcome.skipped else "") + \
        "".join(f"; step-{p['step']} still being evaluated ({p['state']})" for p in outcome.pending) + \
        (f"; REGRESSION in {', '.join(r['lang'] for r in outcome.flagged)}" if outcome.flagged else "")
    return outcome


class _Evaluator:
    """One round's evaluation of checkpoints: texts loaded once, in this process or by the configured job."""

    def __init__(self, run_dir: RunDir, config: PipelineConfig, store: EvalStore):
        self.run_dir, self.config, self.store = run_dir, config, store
        self.settings: EvaluateConfig = config.section("evaluate")
        self.seq_len = self.settings.seq_len or config.section("pretrain").seq_len
        self._texts = None
        self._built_tasks: dict[str, dict[str, int]] = {}  # task -> examples per language it was built for
        self.note = ""

    def texts(self):
        from stages.evaluate.texts import load_eval_texts

        if self._texts is None:
            self._texts = load_eval_texts(self.run_dir, self.config, self.settings)
        return self._texts

    def checkpoint(self, ckpt: Checkpoint, *, wait: bool, retry: bool) -> CheckpointMetrics | None:
        """The metrics of `ckpt`, or None while its distributed job is still running (not waited for)."""
        info = model_info(ckpt)
        if info is None:
            raise CheckpointError(f"checkpoint {ckpt.path}: no {JOB_INFO} beside its checkpoints folder; "
                                  "cannot tell which model it holds")
        job = self.settings.job
        ident = checkpoint_id(ckpt)
        folder = self.run_dir.store_job_dir(STORE, ckpt.name)
        if job.launcher == "local":
            metrics = self._in_process(ckpt, info)
        elif job.launcher == "torchrun":
            metrics = run_torchrun(self._job_config(), self.run_dir.path, folder, ckpt.path, ident, job.processes_per_node)
        else:
            state = slurm_job(self._job_config(), self.run_dir.path, folder, ckpt.path, ident, wait=wait, retry=retry)
            if not state.done:
                self.note = state.note
                return None
            metrics = state.metrics
        metrics.evaluated_with = wanted(self.settings)
        if self.settings.tasks:
            self._tasks(ckpt, info, metrics)
        self._note(ckpt, metrics)
        return metrics

    def _in_process(self, ckpt: Checkpoint, info: ModelInfo) -> CheckpointMetrics:
        device = resolve_device(self.settings.device)
        sp, sets = self.texts()
        progress.note("evaluate", f"{ckpt.name}: loading ({info.flavor}, vocabulary {info.vocab_size:,})")
        model = load_model(ckpt.path, info.flavor, info.vocab_size, device, info.routing)
        scores = {(s, lang): score(model, t.docs, t.doc_bytes, seq_len=self.seq_len, batch_size=self.settings.batch_size,
                                   bos=sp.bos_id(), device=device)
                  for s, (by_lang, _) in sets.items() for lang, t in by_lang.items()}
        return checkpoint_metrics(ckpt, info.flavor, sets, scores, seq_len=self.seq_len,
                                  job=EvalJob(launcher="local", ranks=1, expert_parallel=1, precision="float32",
                                              device=device))

    def _job_config(self) -> PipelineConfig:
        """The settings a distributed job evaluates with: this round's, with the tasks the evaluator builds built
        (their include_path set), so the job's ranks read the same task files as an in-process run."""
        if not self.settings.tasks:
            return self.config
        # a built task is, to the job, a task of its include_path (build and include_path exclude each other)
        tasks = [self._built(t).model_copy(update={"build": None}) for t in self.settings.tasks]
        evaluate = self.settings.model_copy(update={"tasks": tasks})
        c = self.config
        return PipelineConfig(c.run, c.orchestration, {**c.stages, "evaluate": evaluate}, c.source)

    def _tasks(self, ckpt: Checkpoint, info: ModelInfo, metrics: CheckpointMetrics) -> None:
        """lm-evaluation-harness on the fp32 Hugging Face export of the checkpoint (a temporary folder), or, when
        a distributed job evaluated it, the figures its ranks computed on the sharded model (sharded_lm.py)."""
        names = [t.name for t in self.settings.tasks]
        if self.settings.job.launcher != "local":
            from stages.evaluate.tasks import TaskResults

            res = TaskResults(metrics.tasks, metrics.tasks_missing, metrics.task_reasons)
        else:
            from europa_model.hf import export_checkpoint
            from stages.evaluate.tasks import run_tasks

            device = resolve_device(self.settings.device)
            tasks = [self._built(t) for t in self.settings.tasks]
            progress.note("evaluate", f"{ckpt.name}: downstream tasks {', '.join(names)} (lm-eval on the HF export)")
            with tempfile.TemporaryDirectory(prefix=f"europa-eval-{ckpt.name}-") as tmp:
                folder = export_checkpoint(ckpt.path, info.flavor, info.vocab_size, Path(tmp) / "hf", dtype="fp32",
                                           tokenizer_dir=self.run_dir.stage_dir("tokenizer"), routing=info.routing).out_dir
                res = run_tasks(folder, tasks, list(self.config.run.languages), device=device,
                                batch_size=self.settings.batch_size)
        for task in self.settings.tasks:
            if task.build:  # why a built task lacks a language: its held-out text, not lm-eval
                for lang in res.missing.get(task.name, []):
                    if lang not in self._built_tasks.get(task.name, {}):
                        res.reasons[task.name][lang] = ("too few held-out sentences (4 of 6+ words) to build "
                                                        f"europa_cloze_{lang}")
        metrics.tasks = {name: {lang: TaskFigures.model_validate(f) for lang, f in by_lang.items()}
                         for name, by_lang in res.results.items()}
        metrics.tasks_missing, metrics.task_reasons = res.missing, res.reasons

    def _built(self, task):
        """A task with `build = "validation"`: the cloze task from the held-out documents, built (once per
        round, deterministically) into <run>/eval/tasks/<name>/ and used from there."""
        if not task.build:
            return task
        from stages.evaluate import cloze

        folder = self.store.root / "tasks" / task.name
        if task.name not in self._built_tasks:
            import shutil

            shutil.rmtree(folder, ignore_errors=True)
            counts = cloze.build(cloze.sentences_from_validation(self.run_dir.path, list(self.config.run.languages)), folder)
            self._built_tasks[task.name] = counts
            progress.note("evaluate", f"task {task.name}: built from the held-out documents for {len(counts)} languages")
        return task.model_copy(update={"include_path": str(folder)})

    def _note(self, ckpt: Checkpoint, metrics: CheckpointMetrics) -> None:
        for set_name, langs in metrics.sets.items():
            if langs:
                mean = sum(f.bits_per_byte for f in langs.values()) / len(langs)
                missing = metrics.missing.get(set_name) or []
                progress.note("evaluate", f"{ckpt.name} {set_name}: {len(langs)} languages, mean bits/byte {mean:.4f}"
                              + (f"; missing {', '.join(missing)}" if missing else ""))
        for task, by_lang in metrics.tasks.items():
            if by_lang:
                mean = sum(t.value for t in by_lang.values()) / len(by_lang)
                progress.note("evaluate", f"{ckpt.name} {task}: {len(by_lang)} languages, mean "
                              f"{next(iter(by_lang.values())).metric} {mean:.4f}")
