"""The ingest report a person reads: per language what came in, what was kept, what each filter removed, the
PII redactions and duplicates, with a few real examples of removed documents per reason (report.md), and the
same per language as a chart (report.png). It is the stage's Prefect artifact.

Why examples: a filter's count says how much it removed, not whether it was right to; three documents per
reason are where a person sees a threshold that is wrong for a language. They are read back from the published
rejected/ parts in batches (nothing is held but the examples), after PII redaction, and shortened.
"""

from __future__ import annotations

import io
from collections import Counter
from pathlib import Path
from typing import Any

from pipeline.fsutil import atomic_write_bytes
from pipeline.languages import LANGUAGES
from stages.ingest.record import IngestRecord

EXAMPLES_PER_REASON = 3
EXCERPT_CHARS = 240
TOP_REASONS_IN_CHART = 6


def write_report(stage_dir: Path, record: IngestRecord) -> list[Path]:
    examples = removed_examples(stage_dir / "rejected")
    (stage_dir / "report.md").write_text(report_markdown(record, examples), encoding="utf-8")
    plot(record, stage_dir / "report.png")
    return [stage_dir / "report.md", stage_dir / "report.png"]


def removed_examples(rejected_dir: Path, per_reason: int = EXAMPLES_PER_REASON) -> dict[str, list[dict[str, Any]]]:
    """Up to `per_reason` removed documents per reason, in the order of the published parts (deterministic)."""
    import pyarrow.parquet as pq

    out: dict[str, list[dict[str, Any]]] = {}
    for part in sorted(rejected_dir.glob("*/part-*.parquet")):
        f = pq.ParquetFile(part)
        for batch in f.iter_batches(batch_size=4096, columns=["id", "lang", "reason", "text", "input", "input_index",
                                                                "duplicate_of"]):
            for row in batch.to_pylist():
                bucket = out.setdefault(row["reason"], [])
                if len(bucket) < per_reason:
                    bucket.append(row)
    return dict(sorted(out.items()))


def _excerpt(text: str) -> str:
    one_line = " ".join(text.split())
    return one_line if len(one_line) <= EXCERPT_CHARS else one_line[:EXCERPT_CHARS].rstrip() + " …"


def report_markdown(r: IngestRecord, examples: dict[str, list[dict[str, Any]]]) -> str:
    t = r.totals
    lines = [f"# Ingest: {t.kept:,} of {t.docs_in:,} documents kept ({t.kept_bytes / 1e6:,.2f} of {t.bytes_in / 1e6:,.2f} MB)", ""]
    reasons = [k for k, v in r.per_filter.items() if v]
    lines += ["## Per language", "", "| language | | docs in | kept | kept % | MB kept | " + " | ".join(reasons) + " |",
              "|---|---|---:|---:|---:|---:|" + "---:|" * len(reasons)]
    for lang, c in r.per_language.items():
        share = f"{c.kept / c.docs_in:.0%}" if c.docs_in else "-"
        cells = " | ".join(f"{c.removed.get(k, 0):,}" for k in reasons)
        lines.append(f"| {lang} | {LANGUAGES[lang].english_name} | {c.docs_in:,} | {c.kept:,} | {share} | "
                     f"{c.kept_bytes / 1e6:,.2f} | {cells} |")
    if r.languages_without_documents:
        lines += ["", f"**No document kept for:** {', '.join(r.languages_without_documents)}"]
    lines += ["", "## Removed, by filter (every filter, zeros included)", "", "| filter | documents |", "|---|---:|"]
    lines += [f"| {k} | {v:,} |" for k, v in r.per_filter.items()]
    lines += ["", "## PII redactions", "", "| kind | redactions |", "|---|---:|"]
    lines += [f"| {k} | {v:,} |" for k, v in r.pii_redactions.items()] or ["| (none) | 0 |"]
    lines += ["", "## Sources", "", "| source | category | docs in | kept | MB kept |", "|---|---|---:|---:|---:|"]
    for name, s in r.per_source.items():
        lines.append(f"| {name} | {s.category} | {s.counts.get('docs_in', 0):,} | {s.counts.get('kept', 0):,} | "
                     f"{s.counts.get('kept_bytes', 0) / 1e6:,.2f} |")
    lines += ["", f"## Examples of removed documents (up to {EXAMPLES_PER_REASON} per reason)", ""]
    if not examples:
        lines.append("Nothing was removed.")
    for reason, rows in examples.items():
        lines += [f"### {reason} ({r.per_filter.get(reason, len(rows)):,} removed)", ""]
        for row in rows:
            where = f"{row['input']}:{row['input_index']}" if row.get("input") else row["id"]
            dup = f", duplicate of `{row['duplicate_of']}`" if row.get("duplicate_of") else ""
            lines.append(f"- `{row['id']}` ({row['lang']}, {where}{dup}): {_excerpt(row['text'])}")
        lines.append("")
    return "\n".join(lines).rstrip("\n") + "\n"


def plot(r: IngestRecord, path: Path) -> None:
    """Per language, documents kept and removed by the most frequent reasons (stacked horizontal bars)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    langs = list(r.per_language)
    totals = Counter({k: v for k, v in r.per_filter.items() if v})
    top = [k for k, _ in totals.most_common(TOP_REASONS_IN_CHART)]
    fig, ax = plt.subplots(figsize=(10, 0.32 * len(langs) + 1.6))
    left = [0.0] * len(langs)
    series = [("kept", [r.per_language[x].kept for x in langs])]
    series += [(k, [r.per_language[x].removed.get(k, 0) for x in langs]) for k in top]
    other = [sum(v for k, v in r.per_language[x].removed.items() if k not in top) for x in langs]
    if any(other):
        series.append(("other reasons", other))
    for name, values in series:
        ax.barh(langs, values, left=left, label=name)
        left = [a + b for a, b in zip(left, values)]
    ax.invert_yaxis()
    ax.set_xlabel("documents")
    ax.set_title("Ingest: documents kept and removed per language")
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    png = io.BytesIO()
    fig.savefig(png, format="png", dpi=110)
    plt.close(fig)
    atomic_write_bytes(path, png.getvalue())
