"""<run>/eval/: the evaluation results of a run, kept across checkpoints and across the processes that add to them.

    eval/step-<N>/metrics.json   one checkpoint's figures (written whole, then renamed into place)
    eval/history.parquet         every (step, set, language) row, rebuilt from the metrics files
    eval/report.md               the latest checkpoint's table, the change since the previous one, the flags
    eval/bpb_latest.png          bits per byte per language at the latest checkpoint
    eval/bpb_over_steps.png      bits per byte over steps, one line per language
    eval/.lock                   held while a process adds results (RunDir.store_lock)
It is not a stage folder but a results store of the run directory (RunDir.store_dir("eval")): training can take
weeks and the scheduled evaluation adds to it while the pretrain stage has not been published yet, so it is
appended to (under its own lock, never the run's), not swapped in whole. The evaluate stage publishes a
manifest about it in <run>/evaluate/.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from pipeline.fsutil import atomic_dir, atomic_write_text

METRICS = "metrics.json"


class EvalStore:
    def __init__(self, root: Path):
        self.root = Path(root)

    def metrics_path(self, step: int) -> Path:
        return self.root / f"step-{step}" / METRICS

    def read(self, step: int) -> dict[str, Any] | None:
        path = self.metrics_path(step)
        return json.loads(path.read_text()) if path.exists() else None

    def all(self) -> list[dict[str, Any]]:
        out = []
        for p in self.root.glob(f"step-*/{METRICS}"):
            out.append(json.loads(p.read_text()))
        return sorted(out, key=lambda m: m["step"])

    def write(self, step: int, metrics: dict[str, Any]) -> Path:
        """One checkpoint's figures, written whole; an explicit re-evaluation replaces the earlier result."""
        final = self.root / f"step-{step}"
        with atomic_dir(final, replace=True) as tmp:
            (tmp / METRICS).write_text(json.dumps(metrics, indent=2, ensure_ascii=False) + "\n")
        return final / METRICS


# --- history, changes, flags ---------------------------------------------------------------------------------

def history_rows(all_metrics: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for m in all_metrics:
        for set_name, langs in m["sets"].items():
            for lang, f in sorted(langs.items()):
                rows.append({"step": m["step"], "set": set_name, "lang": lang, "loss": f["loss"],
                             "bits_per_byte": f["bits_per_byte"], "token_accuracy": f["token_accuracy"],
                             "tokens": f["tokens"], "bytes": f["bytes"], "evaluated_at": m["evaluated_at"],
                             "checkpoint_id": m["checkpoint_id"]})
    return rows


def changes(all_metrics: list[dict[str, Any]], threshold: float) -> list[dict[str, Any]]:
    """Per (set, language) of the latest checkpoint: bits per byte now, at the previous checkpoint, the relative
    change, and whether it worsened by more than `threshold` (a regression flag)."""
    if not all_metrics:
        return []
    latest, previous = all_metrics[-1], (all_metrics[-2] if len(all_metrics) > 1 else None)
    out = []
    for set_name, langs in latest["sets"].items():
        for lang, f in sorted(langs.items()):
            before = (previous or {}).get("sets", {}).get(set_name, {}).get(lang)
            rel = None if before is None else (f["bits_per_byte"] - before["bits_per_byte"]) / before["bits_per_byte"]
            out.append({"set": set_name, "lang": lang, "bits_per_byte": f["bits_per_byte"], "loss": f["loss"],
                        "token_accuracy": f["token_accuracy"],
                        "previous_step": previous["step"] if previous else None,
                        "previous_bits_per_byte": None if before is None else before["bits_per_byte"],
                        "relative_change": rel, "flagged": rel is not None and rel > threshold})
    return out


def write_history(root: Path, all_metrics: list[dict[str, Any]]) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = root / "history.parquet"
    tmp = root / f".history.parquet.tmp-{os.getpid()}"
    pq.write_table(pa.Table.from_pylist(history_rows(all_metrics)), tmp)
    os.replace(tmp, path)
    return path


def report_markdown(all_metrics: list[dict[str, Any]], rows: list[dict[str, Any]], threshold: float) -> str:
    latest = all_metrics[-1]
    prev = rows[0]["previous_step"] if rows else None
    flagged = [r for r in rows if r["flagged"]]
    lines = [f"# Evaluation: step {latest['step']}", "",
             f"Checkpoint `{latest['checkpoint']}` ({latest['flavor']}), evaluated {latest['evaluated_at']}; "
             f"{len(all_metrics)} checkpoint(s) evaluated so far: {', '.join(str(m['step']) for m in all_metrics)}.",
             "Bits per byte = total negative log-likelihood / (UTF-8 bytes x ln 2); lower is better.", ""]
    if flagged:
        lines += [f"**Regressions** (bits per byte worse by more than {threshold:.1%} since step {prev}): "
                  + ", ".join(f"{r['lang']} ({r['set']}, {r['relative_change']:+.1%})" for r in flagged), ""]
    elif prev is not None:
        lines += [f"No language worsened by more than {threshold:.1%} since step {prev}.", ""]
    lines += ["| set | language | bits/byte | change since previous | loss | token accuracy | flag |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        change = "-" if r["relative_change"] is None else f"{r['relative_change']:+.2%}"
        lines.append(f"| {r['set']} | {r['lang']} | {r['bits_per_byte']:.4f} | {change} | {r['loss']:.4f} | "
                     f"{r['token_accuracy']:.3f} | {'REGRESSION' if r['flagged'] else ''} |")
    missing = {k: v for k, v in latest.get("missing", {}).items() if v}
    if missing:
        lines += ["", "Languages without evaluation text: " + "; ".join(f"{k}: {', '.join(v)}" for k, v in missing.items())]
    return "\n".join(lines) + "\n"


def write_report(root: Path, all_metrics: list[dict[str, Any]], threshold: float) -> list[dict[str, Any]]:
    rows = changes(all_metrics, threshold)
    atomic_write_text(root / "report.md", report_markdown(all_metrics, rows, threshold))
    _plots(root, all_metrics)
    return rows


def _plots(root: Path, all_metrics: list[dict[str, Any]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    latest = all_metrics[-1]
    sets = list(latest["sets"])
    fig, axes = plt.subplots(len(sets), 1, figsize=(11, 3.2 * len(sets)), squeeze=False)
    for ax, set_name in zip(axes[:, 0], sets):
        langs = sorted(latest["sets"][set_name])
        ax.bar(langs, [latest["sets"][set_name][lg]["bits_per_byte"] for lg in langs], color="#3b6ea8")
        ax.set_title(f"bits per byte at step {latest['step']} ({set_name})", fontsize=10)
        ax.tick_params(axis="x", labelsize=8)
    fig.tight_layout()
    _save(fig, root / "bpb_latest.png")

    fig, axes = plt.subplots(len(sets), 1, figsize=(11, 3.6 * len(sets)), squeeze=False)
    for ax, set_name in zip(axes[:, 0], sets):
        langs = sorted({lg for m in all_metrics for lg in m["sets"].get(set_name, {})})
        for lg in langs:
            pts = [(m["step"], m["sets"][set_name][lg]["bits_per_byte"]) for m in all_metrics if lg in m["sets"].get(set_name, {})]
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", markersize=3, linewidth=1, label=lg)
        ax.set_title(f"bits per byte over steps ({set_name})", fontsize=10)
        ax.set_xlabel("step")
        ax.legend(ncol=8, fontsize=7, loc="upper right")
    fig.tight_layout()
    _save(fig, root / "bpb_over_steps.png")


def _save(fig, path: Path) -> None:
    import matplotlib.pyplot as plt

    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}.png")
    fig.savefig(tmp, dpi=100, metadata={"Software": None})
    plt.close(fig)
    os.replace(tmp, path)
