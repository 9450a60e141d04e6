"""Evaluation results with their precision, from the evaluate record: Annex XI 1.3 and Annex XII's capabilities.

Why with standard errors and sample sizes: a bits-per-byte figure to four decimals from three documents looks
exact and is not; the evaluate stage records the standard error and the documents (or task examples) behind
every figure, so the documents print each value with its error at the precision the error allows, and the
count beside it. A language a task has no data for says so (the task record's `missing`) instead of being open.
"""

from __future__ import annotations

import math

from stages.compliance.facts import Fact, Records, Traced, constant, derive
from stages.compliance.numbers import percent


def decimals_for(se: float) -> int:
    """Decimals that show two significant digits of the standard error (at most 6)."""
    if not se or not math.isfinite(se) or se <= 0:
        return 4
    return max(0, min(6, 1 - math.floor(math.log10(se))))


def with_error(value: float, se: float) -> str:
    d = decimals_for(se)
    return f"{value:.{d}f} ± {se:.{d}f}"


def _figure(figures: Traced, key: str, what: str) -> Fact:
    """`key` ± `key`_stderr of one language, as one fact with both sources."""
    return derive(lambda v, s: {"value": v, "stderr": s}, figures[key].fact(), figures[f"{key}_stderr"].fact(),
                  method=f"{what} ± its standard error", fmt=lambda d: with_error(d["value"], d["stderr"]))


def _count(figures: Traced, key: str) -> Fact:
    return figures[key].fact(lambda v: f"{int(v):,}")


def columns(rec: Records) -> list[str]:
    cols = ["language"]
    for s in rec.evaluate.eval_sets.value or []:
        cols += [f"{s} bits per byte ± s.e.", f"{s} documents"]
    for t in rec.evaluate.tasks.value or []:
        cols += [f"{t.name} {t.metric} ± s.e.", f"{t.name} examples"]
    return cols


def rows(rec: Records) -> list[list[Fact]]:
    """Per language: each set's bits per byte with its error and documents, each task's metric with its error and
    examples (or "no task" where lm-eval has none for the language)."""
    per_lang = rec.evaluate.per_language
    sets = rec.evaluate.eval_sets.value or []
    tasks = list(enumerate(rec.evaluate.tasks.value or []))
    out = []
    for lang in sorted(per_lang.keys()):
        figures = per_lang[lang]
        row = [constant(lang, source=per_lang.where)]
        for s in sets:
            if figures[f"{s}_bits_per_byte"].value is None:
                missing = rec.evaluate.missing[s]
                row += [Fact("", "no text", (missing.where,)), Fact("", "-", (missing.where,))]
                continue
            row += [_figure(figures, f"{s}_bits_per_byte", f"{s} bits per byte"), _count(figures, f"{s}_documents")]
        for i, t in tasks:
            key = f"{t.name}_{t.metric}"
            if figures[key].value is None:
                missing = rec.evaluate.tasks[i].missing
                row += [Fact("", "no task for the language", (missing.where,)), Fact("", "-", (missing.where,))]
                continue
            row += [_figure(figures, key, f"{t.name} {t.metric}"), _count(figures, f"{t.name}_examples")]
        out.append(row)
    return out


def capabilities_text(rec: Records) -> Fact:
    """What the evaluation shows the model can and cannot do, in figures: the best and worst language, the gap
    between them, the tasks' range and the languages without a task, the regressions, and the sample sizes."""
    per_lang, step, tasks, flagged = (rec.evaluate.per_language.fact(), rec.evaluate.latest_step.fact(),
                                      rec.evaluate.tasks.fact(), rec.evaluate.flagged.fact())

    def text(pl: dict, at: int, ts: list, flags: list) -> str:
        bpb = {lang: (v["val_bits_per_byte"], v.get("val_bits_per_byte_stderr", 0.0)) for lang, v in pl.items()
               if "val_bits_per_byte" in v}
        parts = [f"Evaluated at step {at:,} in {len(pl)} languages."]
        if bpb:
            best, worst = min(bpb, key=lambda k: bpb[k][0]), max(bpb, key=lambda k: bpb[k][0])
            docs = [int(v["val_documents"]) for v in pl.values() if "val_documents" in v]
            parts.append(f"Held-out bits per byte (lower is better): best {best} {with_error(*bpb[best])}, worst {worst} "
                         f"{with_error(*bpb[worst])}, a gap of {bpb[worst][0] - bpb[best][0]:.3g}"
                         + (f"; from {min(docs):,} to {max(docs):,} documents per language" if docs else "") + ".")
        for t in ts:
            key = f"{t['name']}_{t['metric']}"
            got = {lang: v[key] for lang, v in pl.items() if key in v}
            if got:
                parts.append(f"Task {t['name']} ({t['metric']}, {t['num_fewshot']}-shot): from {percent(min(got.values()))} "
                             f"to {percent(max(got.values()))} over {len(got)} languages"
                             + (f"; no result for {', '.join(sorted(t['missing']))}" if t["missing"] else "") + ".")
        if not ts:
            parts.append("No downstream task was evaluated: the figures say how well the model predicts text, not how "
                         "well it performs any task.")
        parts.append("Languages flagged for a regression: " + (", ".join(flags) if flags else "none") + ".")
        return " ".join(parts)

    return derive(text, per_lang, step, tasks, flagged,
                  method="best and worst language by held-out bits per byte, each task's range, the flagged languages",
                  fmt=str)


def contamination_text(rec: Records) -> Fact:
    """How many evaluated texts share a word 13-gram with the training split, per set: a score on such texts
    measures memory rather than generalisation."""
    def text(c: dict, _method: str) -> str:  # the method is an input for its footnote only
        parts = []
        for name, langs in c.items():
            texts = sum(v["texts"] for v in langs.values())
            hit = {lang: v["contaminated"] for lang, v in langs.items() if v["contaminated"]}
            parts.append(f"{name}: {sum(hit.values()):,} of {texts:,} texts in {len(langs)} languages"
                         + (f" (most in {max(hit, key=hit.__getitem__)}: {max(hit.values()):,})" if hit else ""))
        return ("Evaluated texts sharing a word 13-gram with a training document of their language: " + "; ".join(parts)
                + ". Texts under 13 words cannot match; downstream task data is not checked.")

    return derive(text, rec.evaluate.contamination.fact(), rec.evaluate.contamination_method.fact(),
                  method="evaluate statistics.contamination (stages/evaluate/contamination.py)", fmt=str)
