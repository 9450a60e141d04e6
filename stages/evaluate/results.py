"""<run>/eval/: the evaluation results of a run, kept across checkpoints and across the processes that add to them.

    eval/step-<N>/metrics.json   one checkpoint's figures (written whole, then renamed into place): per set and
                                 language bits per byte with its standard error, tokens, documents; per task and
                                 language the accuracy with its standard error; per document the bits and bytes
                                 (what the paired standard error of a change between checkpoints needs)
    eval/history.parquet         every (step, set or task, language) row, rebuilt from the metrics files
    eval/report.md               the latest checkpoint's tables, the change since the previous one, the flags
    eval/bpb_latest.png          bits per byte per language at the latest checkpoint (+- 2 standard errors)
    eval/bpb_over_steps.png      bits per byte over steps, one small panel per language
    eval/tasks_latest.png, tasks_over_steps.png   the same for the downstream tasks' accuracies
    eval/jobs/step-<N>/          a distributed evaluation job's folder (job.py)
    eval/.lock                   held while a process adds results (RunDir.store_lock)

Noise: a language's bits per byte is a ratio over documents (total NLL / total bytes); its standard error is
the ratio estimator's over documents (scoring.ratio_stderr). Every checkpoint scores the same documents, so the
change between two checkpoints has a *paired* standard error (per-document differences), much smaller than
the two errors combined; a regression is flagged only when the change exceeds `regression_threshold` AND
`regression_sigma` of those standard errors. Task accuracies come with lm-eval's standard error (per example);
their changes use the two errors combined (lm-eval's per-example results are not kept).
It is not a stage folder but a results store of the run directory (RunDir.store_dir("eval")): training can take
weeks and the scheduled evaluation adds to it while the pretrain stage has not been published yet, so it is
appended to (under its own lock, never the run's), not swapped in whole. The evaluate stage publishes a
manifest about it in <run>/evaluate/.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from pipeline.fsutil import atomic_dir, atomic_write_bytes, atomic_write_text
from stages.evaluate.metrics import CheckpointMetrics, DocumentFigures, EvalJob, SetFigures

METRICS = "metrics.json"


class EvalStore:
    def __init__(self, root: Path):
        self.root = Path(root)

    def metrics_path(self, step: int) -> Path:
        return self.root / f"step-{step}" / METRICS

    def read(self, step: int) -> CheckpointMetrics | None:
        path = self.metrics_path(step)
        return CheckpointMetrics.model_validate_json(path.read_text()) if path.exists() else None

    def all(self) -> list[CheckpointMetrics]:
        out = [CheckpointMetrics.model_validate_json(p.read_text()) for p in self.root.glob(f"step-*/{METRICS}")]
        return sorted(out, key=lambda m: m.step)

    def write(self, step: int, metrics: CheckpointMetrics) -> Path:
        """One checkpoint's figures, written whole; an explicit re-evaluation replaces the earlier result."""
        final = self.root / f"step-{step}"
        with atomic_dir(final, replace=True) as tmp:
            (tmp / METRICS).write_text(metrics.to_json(indent=2) + "\n")
        return final / METRICS


# --- one checkpoint's figures --------------------------------------------------------------------------------

def checkpoint_metrics(ckpt, flavor: str, sets, scores, *, seq_len: int, job: EvalJob) -> CheckpointMetrics:
    """The metrics.json of one checkpoint from its scores {(set, lang): Score} over `sets` (texts.load_eval_texts);
    the same for the in-process and the distributed evaluation."""
    from pipeline.rundir import utc_now
    from stages.checkpoints import checkpoint_id

    out = CheckpointMetrics(step=ckpt.step, checkpoint=str(ckpt.path), checkpoint_id=checkpoint_id(ckpt),
                            flavor=flavor, seq_len=seq_len, evaluated_at=utc_now(), job=job, sets={}, missing={},
                            sources={}, documents={})
    for set_name, (by_lang, missing) in sets.items():
        out.sets[set_name], out.documents[set_name] = {}, {}
        out.missing[set_name] = missing
        for lang, t in by_lang.items():
            sc = scores[(set_name, lang)]
            out.sets[set_name][lang] = SetFigures.model_validate(sc.figures())
            out.sources.setdefault(set_name, {})[lang] = t.source
            out.documents[set_name][lang] = DocumentFigures(bits=[round(float(v) / math.log(2), 6) for v in sc.doc_nll],
                                                            bytes=[int(b) for b in sc.doc_bytes])
    return out


# --- history, changes, flags ---------------------------------------------------------------------------------

def history_rows(all_metrics: list[CheckpointMetrics]) -> list[dict[str, Any]]:
    """The rows of history.parquet: one per (step, set or task, language)."""
    rows = []
    for m in all_metrics:
        common = {"step": m.step, "evaluated_at": m.evaluated_at, "checkpoint_id": m.checkpoint_id}
        for set_name, langs in m.sets.items():
            for lang, f in sorted(langs.items()):
                rows.append({**common, "kind": "bits_per_byte", "set": set_name, "lang": lang, "loss": f.loss,
                             "bits_per_byte": f.bits_per_byte, "bits_per_byte_stderr": f.bits_per_byte_stderr,
                             "token_accuracy": f.token_accuracy, "tokens": f.tokens, "bytes": f.bytes,
                             "documents": f.documents, "metric": None, "value": None, "value_stderr": None,
                             "examples": None})
        for task, langs in m.tasks.items():
            for lang, t in sorted(langs.items()):
                rows.append({**common, "kind": "task", "set": task, "lang": lang, "loss": None, "bits_per_byte": None,
                             "bits_per_byte_stderr": None, "token_accuracy": None, "tokens": None, "bytes": None,
                             "documents": None, "metric": t.metric, "value": t.value, "value_stderr": t.stderr,
                             "examples": t.examples})
    by_step = {m.step: {"step": m.step, "evaluated_at": m.evaluated_at, "checkpoint_id": m.checkpoint_id} for m in all_metrics}
    for g in language_gaps(all_metrics):  # kind language_gap: lang is the worst language, metric names the best
        rows.append({**by_step[g.step], "kind": "language_gap", "set": g.set, "lang": g.worst, "loss": None,
                     "bits_per_byte": None, "bits_per_byte_stderr": None, "token_accuracy": None, "tokens": None,
                     "bytes": None, "documents": None, "metric": f"{g.kind} gap to {g.best}", "value": g.gap,
                     "value_stderr": g.gap_stderr, "examples": g.languages})
    return rows


@dataclass(frozen=True)
class LanguageGap:
    """The distance between the best and the worst language of one set or task at one checkpoint: what a
    multilingual model is judged by. For bits per byte the best is the lowest; for a task, the highest."""

    step: int
    kind: Literal["bits_per_byte", "task"]
    set: str
    best: str
    worst: str
    gap: float  # worst - best for bits per byte, best - worst for a task: positive either way
    gap_stderr: float | None  # the two languages' standard errors combined (independent samples)
    languages: int


def language_gaps(all_metrics: list[CheckpointMetrics]) -> list[LanguageGap]:
    out = []
    for m in all_metrics:
        groups = [("bits_per_byte", name, {lang: (f.bits_per_byte, f.bits_per_byte_stderr) for lang, f in langs.items()})
                  for name, langs in m.sets.items()]
        groups += [("task", name, {lang: (t.value, t.stderr) for lang, t in langs.items()}) for name, langs in m.tasks.items()]
        for kind, name, figures in groups:
            if len(figures) < 2:
                continue
            ranked = sorted(figures, key=lambda k: figures[k][0], reverse=kind == "task")  # best first
            best, worst = ranked[0], ranked[-1]
            out.append(LanguageGap(m.step, kind, name, best, worst, abs(figures[worst][0] - figures[best][0]),
                                   _combined(figures[worst][1], figures[best][1]), len(figures)))
    return out


@dataclass(frozen=True)
class Change:
    """The figure of one (set or task, language) at the latest checkpoint and how it moved since the previous.
    kind "bits_per_byte" (worse = higher; loss .. documents are set) or "task" (worse = lower; metric and
    examples are set)."""

    kind: Literal["bits_per_byte", "task"]
    set: str  # the set, or the task
    lang: str
    value: float
    stderr: float | None
    previous_step: int | None
    previous_value: float | None
    change: float | None
    relative_change: float | None  # worse is positive for bits per byte, negative for a task
    change_stderr: float | None
    flagged: bool  # a regression: worse beyond the threshold and the noise
    loss: float | None = None
    token_accuracy: float | None = None
    tokens: int | None = None
    documents: int | None = None
    metric: str | None = None
    examples: int | None = None


def _paired_stderr(now: DocumentFigures | None, before: DocumentFigures | None) -> float | None:
    """Standard error of the change in bits per byte between two checkpoints scored on the same documents."""
    if now is None or before is None or len(now.bits) != len(before.bits) or now.bytes != before.bytes:
        return None
    from stages.evaluate.scoring import ratio_stderr

    return ratio_stderr(np.asarray(now.bits) - np.asarray(before.bits), np.asarray(now.bytes))


def _combined(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else math.hypot(a, b)


def _flag(worse: float | None, rel: float | None, stderr: float | None, threshold: float, sigma: float) -> bool:
    """Worse by more than the threshold (relative) and by more than `sigma` standard errors of the change
    (unknown noise, e.g. a single document: the threshold alone decides)."""
    if rel is None or rel <= threshold:
        return False
    return stderr is None or sigma == 0 or worse > sigma * stderr


def changes(all_metrics: list[CheckpointMetrics], threshold: float, sigma: float = 2.0) -> list[Change]:
    """Per (set or task, language) of the latest checkpoint: the figure now and at the previous checkpoint, the
    relative change, its standard error, and whether it is a regression (worse beyond threshold and noise)."""
    if not all_metrics:
        return []
    latest, previous = all_metrics[-1], (all_metrics[-2] if len(all_metrics) > 1 else None)
    previous_step = previous.step if previous else None
    out = []
    for set_name, langs in latest.sets.items():
        for lang, f in sorted(langs.items()):
            before = previous.sets.get(set_name, {}).get(lang) if previous else None
            delta = None if before is None else f.bits_per_byte - before.bits_per_byte
            rel = None if before is None else delta / before.bits_per_byte
            se = None
            if before is not None:
                se = _paired_stderr(latest.documents.get(set_name, {}).get(lang),
                                    previous.documents.get(set_name, {}).get(lang))
                if se is None:
                    se = _combined(f.bits_per_byte_stderr, before.bits_per_byte_stderr)
            out.append(Change("bits_per_byte", set_name, lang, f.bits_per_byte, f.bits_per_byte_stderr, previous_step,
                              None if before is None else before.bits_per_byte, delta, rel, se,
                              _flag(delta, rel, se, threshold, sigma), loss=f.loss, token_accuracy=f.token_accuracy,
                              tokens=f.tokens, documents=f.documents))
    for task, langs in latest.tasks.items():
        for lang, t in sorted(langs.items()):
            before_t = previous.tasks.get(task, {}).get(lang) if previous else None
            delta = None if before_t is None else t.value - before_t.value
            rel = None if before_t is None or not before_t.value else -delta / before_t.value
            se = None if before_t is None else _combined(t.stderr, before_t.stderr)
            out.append(Change("task", task, lang, t.value, t.stderr, previous_step,
                              None if before_t is None else before_t.value, delta, None if rel is None else -rel, se,
                              _flag(None if delta is None else -delta, rel, se, threshold, sigma), metric=t.metric,
                              examples=t.examples))
    return out


def write_history(root: Path, all_metrics: list[CheckpointMetrics]) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = root / "history.parquet"
    sink = pa.BufferOutputStream()
    pq.write_table(pa.Table.from_pylist(history_rows(all_metrics)), sink)
    atomic_write_bytes(path, sink.getvalue().to_pybytes())
    return path


def _pm(value: float, stderr: float | None, digits: int = 4) -> str:
    return f"{value:.{digits}f}" + ("" if stderr is None else f" ± {stderr:.{digits}f}")


def _change(r: Change) -> str:
    if r.relative_change is None:
        return "-"
    noise = "" if r.change_stderr is None or not r.change_stderr else f" ({r.change / r.change_stderr:+.1f} SE)"
    return f"{r.relative_change:+.2%}{noise}"


def report_markdown(all_metrics: list[CheckpointMetrics], rows: list[Change], threshold: float,
                    sigma: float = 2.0) -> str:
    latest = all_metrics[-1]
    prev = rows[0].previous_step if rows else None
    flagged = [r for r in rows if r.flagged]
    job = latest.job
    how = "in one process" if job.ranks == 1 and job.launcher == "local" else (
        f"as a {job.launcher} job on {job.ranks} ranks (FSDP2, expert parallel {job.expert_parallel})")
    lines = [f"# Evaluation: step {latest.step}", "",
             f"Checkpoint `{latest.checkpoint}` ({latest.flavor}), evaluated {latest.evaluated_at} {how}; "
             f"{len(all_metrics)} checkpoint(s) evaluated so far: {', '.join(str(m.step) for m in all_metrics)}.",
             "Bits per byte = total negative log-likelihood / (UTF-8 bytes x ln 2); lower is better. ± is one standard "
             "error over documents (the text sample's noise); a change is shown in its own standard errors (SE), paired "
             "over the same documents.", ""]
    rule = f"worse by more than {threshold:.1%}" + (f" and more than {sigma:g} standard errors of the change" if sigma else "")
    if flagged:
        lines += [f"**Regressions** ({rule} since step {prev}): "
                  + ", ".join(f"{r.lang} ({r.set}, {r.relative_change:+.1%})" for r in flagged), ""]
    elif prev is not None:
        lines += [f"No regression ({rule}) since step {prev}.", ""]
    bpb = [r for r in rows if r.kind == "bits_per_byte"]
    if bpb:
        lines += ["| set | language | documents | tokens | bits/byte | change since previous | loss | token accuracy | flag |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for r in bpb:
            lines.append(f"| {r.set} | {r.lang} | {r.documents if r.documents is not None else '-'} | "
                         f"{r.tokens:,} | {_pm(r.value, r.stderr)} | {_change(r)} | {r.loss:.4f} | "
                         f"{r.token_accuracy:.3f} | {'REGRESSION' if r.flagged else ''} |")
    tasks = [r for r in rows if r.kind == "task"]
    if tasks:
        where = "the Hugging Face export" if job.launcher == "local" else "the sharded model on the job's ranks"
        lines += ["", f"Downstream tasks (lm-evaluation-harness on {where}; ± is lm-eval's standard error):", "",
                  "| task | language | examples | metric | value | change since previous | flag |", "|---|---|---|---|---|---|---|"]
        for r in tasks:
            lines.append(f"| {r.set} | {r.lang} | {r.examples:,} | {r.metric} | {_pm(r.value, r.stderr)} | "
                         f"{_change(r)} | {'REGRESSION' if r.flagged else ''} |")
    gaps = language_gaps(all_metrics)
    if gaps:
        lines += ["", "Gap between the best and the worst language, at every checkpoint evaluated (± combines the two "
                      "languages' standard errors):", "",
                  "| step | set or task | best | worst | gap | languages |", "|---|---|---|---|---|---|"]
        for g in gaps:
            lines.append(f"| {g.step} | {g.set} | {g.best} | {g.worst} | {_pm(g.gap, g.gap_stderr)} | {g.languages} |")
    missing = {k: v for k, v in {**latest.missing, **latest.tasks_missing}.items() if v}
    if missing:
        lines += ["", "Languages without evaluation text or task: " + "; ".join(f"{k}: {', '.join(v)}" for k, v in missing.items())]
    lines += coverage_table(latest)
    return "\n".join(lines) + "\n"


def coverage_table(m: CheckpointMetrics) -> list[str]:
    """Which language the latest checkpoint has figures for, per set and task (yes / -), and how many
    downstream tasks each language has: the gaps a multilingual model's evaluation must state."""
    names = [*m.sets, *m.tasks]
    langs = sorted({lang for by_lang in [*m.sets.values(), *m.tasks.values()] for lang in by_lang}
                   | {lang for v in [*m.missing.values(), *m.tasks_missing.values()] for lang in v if lang != "all"})
    if not names or not langs:
        return []
    out = ["", "Coverage of the latest checkpoint (yes: figures; -: no text or task for the language):", "",
           "| language | " + " | ".join(names) + " | tasks |", "|---|" + "---|" * (len(names) + 1)]
    for lang in langs:
        cells = ["yes" if lang in m.sets.get(n, m.tasks.get(n, {})) else "-" for n in names]
        out.append(f"| {lang} | " + " | ".join(cells) + f" | {sum(lang in by_lang for by_lang in m.tasks.values())} |")
    return out


def write_report(root: Path, all_metrics: list[CheckpointMetrics], threshold: float, sigma: float = 2.0) -> list[Change]:
    rows = changes(all_metrics, threshold, sigma)
    atomic_write_text(root / "report.md", report_markdown(all_metrics, rows, threshold, sigma))
    from stages.evaluate.plots import write_plots

    write_plots(root, all_metrics)
    return rows
