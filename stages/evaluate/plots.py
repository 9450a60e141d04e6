"""The evaluation store's plots (PNG, written atomically, no timestamps in them so reruns are identical):

    bpb_latest.png        bits per byte per language at the latest checkpoint, one row of bars per set, +- 2 SE
    bpb_over_steps.png    small multiples: one small panel per language (shared axes, so panels compare), one
                          line per set with its +- 2 SE band; 24 overlapping lines in one panel say nothing
    tasks_latest.png, tasks_over_steps.png   the same for the downstream tasks' accuracies (when there are any)
"""

from __future__ import annotations

import io
import math
from pathlib import Path

from pipeline.fsutil import atomic_write_bytes
from stages.evaluate.metrics import CheckpointMetrics

COLORS = ("#3b6ea8", "#d0703c", "#4f9a5b", "#8a5aa8", "#b8a03a", "#5aa8a0")


Series = dict[str, dict[str, list[tuple[int, float, float | None]]]]  # set or task -> lang -> (step, value, stderr)


def write_plots(root: Path, all_metrics: list[CheckpointMetrics]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    latest = all_metrics[-1]
    series: Series = {}
    tasks: Series = {}
    for m in all_metrics:
        for name, langs in m.sets.items():
            for lang, f in langs.items():
                series.setdefault(name, {}).setdefault(lang, []).append((m.step, f.bits_per_byte, f.bits_per_byte_stderr))
        for name, by_lang in m.tasks.items():
            for lang, t in by_lang.items():
                tasks.setdefault(name, {}).setdefault(lang, []).append((m.step, t.value, t.stderr))
    _latest(root / "bpb_latest.png", latest.step, series, "bits per byte")
    _small_multiples(root / "bpb_over_steps.png", series, "bits per byte over steps (lower is better)")
    for name in ("tasks_latest.png", "tasks_over_steps.png"):
        (root / name).unlink(missing_ok=True)  # a run whose tasks were removed keeps no stale plot
    if tasks:
        _latest(root / "tasks_latest.png", latest.step, tasks, "accuracy")
        _small_multiples(root / "tasks_over_steps.png", tasks, "downstream task accuracy over steps (higher is better)")


def _latest(path: Path, step: int, series: Series, ylabel: str) -> None:
    import matplotlib.pyplot as plt

    names = list(series)
    fig, axes = plt.subplots(len(names), 1, figsize=(11, 3.2 * len(names)), squeeze=False)
    for ax, name, color in zip(axes[:, 0], names, COLORS * 4):
        langs = sorted(lg for lg, pts in series[name].items() if pts[-1][0] == step)
        vals = [series[name][lg][-1][1] for lg in langs]
        errs = [2 * (series[name][lg][-1][2] or 0.0) for lg in langs]
        ax.bar(langs, vals, yerr=errs, color=color, capsize=2, error_kw={"linewidth": 0.8})
        ax.set_title(f"{ylabel} at step {step} ({name}; bars: +- 2 standard errors)", fontsize=10)
        ax.tick_params(axis="x", labelsize=8)
    fig.tight_layout()
    _save(fig, path)


def _small_multiples(path: Path, series: Series, title: str) -> None:
    import matplotlib.pyplot as plt

    langs = sorted({lg for per_lang in series.values() for lg in per_lang})
    cols = min(6, len(langs))
    rows = math.ceil(len(langs) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(2.3 * cols, 1.9 * rows + 0.6), sharex=True, sharey=True, squeeze=False)
    for ax, lang in zip(axes.flat, langs):
        for (name, per_lang), color in zip(series.items(), COLORS * 4):
            pts = per_lang.get(lang)
            if not pts:
                continue
            steps, vals = [p[0] for p in pts], [p[1] for p in pts]
            ax.plot(steps, vals, marker="o", markersize=2.5, linewidth=1, color=color, label=name)
            errs = [p[2] for p in pts]
            if all(e is not None for e in errs):
                ax.fill_between(steps, [v - 2 * e for v, e in zip(vals, errs)], [v + 2 * e for v, e in zip(vals, errs)],
                                color=color, alpha=0.18, linewidth=0)
        ax.set_title(lang, fontsize=9, pad=2)
        ax.tick_params(labelsize=7)
    for ax in list(axes.flat)[len(langs):]:
        ax.axis("off")
    handles, labels = axes.flat[0].get_legend_handles_labels()
    fig.suptitle(title + "; bands: +- 2 standard errors", fontsize=10)
    if len(series) > 1:
        fig.legend(handles, labels, loc="upper right", fontsize=8, ncol=len(series))
    fig.supxlabel("step", fontsize=8)
    fig.tight_layout()
    _save(fig, path)


def _save(fig, path: Path) -> None:
    import matplotlib.pyplot as plt

    png = io.BytesIO()
    fig.savefig(png, format="png", dpi=100, metadata={"Software": None})
    plt.close(fig)
    atomic_write_bytes(path, png.getvalue())
