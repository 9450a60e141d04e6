"""The evaluate stage: evaluate every checkpoint of the published pretrain stage that is not evaluated yet,
then publish a manifest of the results (the record the compliance stage reads).

A `RunStage`. The figures themselves accumulate in the run's results store <run>/eval/ (see results.py), shared
with `europa evaluate` and the scheduled evaluation, so checkpoints already evaluated while training ran are not
evaluated again here. The stage folder holds the manifest, the latest report, the history and the plots as they
were at publication.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any, ClassVar

from europa_model.checkpoints import complete_checkpoints
from pipeline import progress
from pipeline.manifest import Manifest
from pipeline.stage import RunStage, StageContext, StageError, StageOutcome
from stages.evaluate.config import EvaluateConfig
from stages.evaluate.contamination import METHOD
from stages.evaluate.record import (EvaluateRecord, LanguageGapRecord, SetContamination, SkippedCheckpoint,
                                    TaskSummary)
from stages.evaluate.results import EvalStore, changes, language_gaps
from stages.evaluate.runner import STORE, evaluate_run


class EvaluateStage(RunStage[EvaluateConfig]):
    name: ClassVar[str] = "evaluate"
    code_version: ClassVar[str] = "3"
    config_model = EvaluateConfig

    def input_signature(self, ctx: StageContext[EvaluateConfig]) -> Any:
        """External evaluation files: their sizes and times (changing a file makes the stage stale)."""
        from pipeline.languages import expand_template

        sig = []
        for s in ctx.settings.sets:
            for lang in ctx.config.run.languages:
                p = Path(s.path) / expand_template(s.pattern, lang)
                st = p.stat() if p.is_file() else None
                sig.append([s.name, lang, st.st_size if st else None, st.st_mtime_ns if st else None])
        return sig

    def preflight(self, ctx: StageContext[EvaluateConfig]) -> None:
        """Tasks that cannot run (an unknown name, a dataset that is not there) are exit 2 before the run starts."""
        if ctx.settings.tasks:
            from stages.evaluate.tasks import check_tasks

            check_tasks(ctx.settings.tasks, list(ctx.config.run.languages))

    def run(self, ctx: StageContext[EvaluateConfig], out_dir: Path) -> StageOutcome:
        if not complete_checkpoints(ctx.upstream_dir("pretrain")):
            raise StageError(f"stage evaluate: {ctx.upstream_dir('pretrain')} holds no complete checkpoint; rerun pretrain")
        outcome = evaluate_run(ctx.run_dir, ctx.config, published_only=True, wait_for_others=True)
        store = EvalStore(ctx.run_dir.store_dir(STORE))
        steps = {c.step for c in complete_checkpoints(ctx.upstream_dir("pretrain"))}
        evaluated = [m for m in store.all() if m.step in steps]
        if not evaluated:
            raise StageError(f"stage evaluate: no checkpoint of {ctx.upstream_dir('pretrain')} could be evaluated: "
                             + "; ".join(s["reason"] for s in outcome.skipped))
        for name in ("report.md", "history.parquet", "bpb_latest.png", "bpb_over_steps.png", "tasks_latest.png",
                     "tasks_over_steps.png"):
            if (store.root / name).exists():
                shutil.copy2(store.root / name, out_dir / name)
        latest = evaluated[-1]
        settings = ctx.settings
        rows = changes(evaluated, settings.regression_threshold, settings.regression_sigma)
        per_language: dict[str, dict[str, float]] = {}
        for set_name, langs in latest.sets.items():
            for lang, f in langs.items():
                d = per_language.setdefault(lang, {})
                for key in ("bits_per_byte", "bits_per_byte_stderr", "loss", "token_accuracy", "tokens", "documents"):
                    if getattr(f, key) is not None:
                        d[f"{set_name}_{key}"] = getattr(f, key)
        tasks = []
        for task in settings.tasks:
            results = latest.tasks.get(task.name, {})
            for lang, t in results.items():
                d = per_language.setdefault(lang, {})
                d[f"{task.name}_{t.metric}"] = t.value
                if t.stderr is not None:
                    d[f"{task.name}_{t.metric}_stderr"] = t.stderr
                d[f"{task.name}_examples"] = t.examples
            tasks.append(TaskSummary(name=task.name, metric=task.metric, num_fewshot=task.num_fewshot,
                                     lm_eval_tasks={lang: t.lm_eval_task for lang, t in sorted(results.items())},
                                     missing=sorted(latest.tasks_missing.get(task.name, []))))
        contamination = _contamination(ctx, out_dir)
        statistics = EvaluateRecord(
            latest_step=latest.step,
            checkpoints_evaluated=[m.step for m in evaluated],
            eval_sets=list(latest.sets),
            per_language=dict(sorted(per_language.items())),
            tasks=tasks,
            missing=latest.missing,
            sources=latest.sources,
            flagged=sorted({r.lang for r in rows if r.flagged}),
            regression_threshold=settings.regression_threshold,
            regression_sigma=settings.regression_sigma,
            method="bits per byte = total negative log-likelihood / (UTF-8 bytes x ln 2); documents packed like "
                   "training rows (BOS + document, attention within the document), seq_len "
                   f"{latest.seq_len}; standard errors over documents (ratio estimator)",
            skipped=[SkippedCheckpoint.model_validate(s) for s in outcome.skipped],
            language_gap={g.set: LanguageGapRecord(best=g.best, worst=g.worst, gap=g.gap, gap_stderr=g.gap_stderr,
                                                   languages=g.languages) for g in language_gaps([latest])},
            contamination=contamination,
            contamination_method=METHOD,
        )
        val = [f.bits_per_byte for f in latest.sets.get("val", {}).values()]
        summary = {"checkpoints": len(evaluated), "latest step": latest.step, "languages": len(per_language)}
        if val:
            summary["mean val bits/byte"] = round(sum(val) / len(val), 4)
        if statistics.flagged:
            summary["regressions"] = ", ".join(statistics.flagged)
        return StageOutcome(statistics=statistics, summary=summary, skipped=outcome.skipped)

    def summary_markdown(self, manifest: Manifest) -> str:
        report = manifest.outputs and next((o for o in manifest.outputs if o.path == "report.md"), None)
        s = EvaluateRecord.model_validate(manifest.statistics)
        head = f"# evaluate: {len(s.checkpoints_evaluated)} checkpoint(s), latest step {s.latest_step}\n\n"
        if s.flagged:
            head += f"**Regressions:** {', '.join(s.flagged)}\n\n"
        rows = ["| language | " + " | ".join(f"{x} bits/byte" for x in s.eval_sets) + " |",
                "|---|" + "---|" * len(s.eval_sets)]
        for lang, d in s.per_language.items():
            rows.append(f"| {lang} | " + " | ".join(f"{d.get(f'{x}_bits_per_byte', float('nan')):.4f}" for x in s.eval_sets) + " |")
        return head + "\n".join(rows) + ("\n\nFull report: report.md" if report else "")


def _contamination(ctx: StageContext[EvaluateConfig], out_dir: Path) -> dict[str, dict[str, SetContamination]]:
    """The evaluated texts against the training split (stages/evaluate/contamination.py); appended to the stage's
    report.md."""
    from stages.evaluate.contamination import check, markdown
    from stages.evaluate.texts import load_eval_texts

    sp, sets = load_eval_texts(ctx.run_dir, ctx.config, ctx.settings)
    eos = sp.eos_id()
    texts = {name: {lang: [sp.decode([int(t) for t in d if t != eos]) for d in et.docs] for lang, et in found.items()}
             for name, (found, _) in sets.items()}
    if ctx.settings.tasks:
        from stages.evaluate.tasks import task_texts

        texts.update({f"task:{name}": by_lang for name, by_lang in
                      task_texts(ctx.settings.tasks, list(ctx.config.run.languages)).items()})
    progress.note("evaluate", "contamination: the evaluated texts against the training split (word 13-grams)")
    result = check(ctx.upstream_dir("shards"), texts, sp)
    report = out_dir / "report.md"
    report.write_text((report.read_text() + "\n" if report.exists() else "") + markdown(result))
    return {s: {lang: SetContamination(**vars(o)) for lang, o in sorted(langs.items())} for s, langs in result.items()}
