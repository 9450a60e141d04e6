"""Fairness of a tokenizer across the 24 languages: fertility, bytes per token, parity, byte fallback.

Parity (Petrov et al. 2023) is the one that matters for cost: tokens for a text in language L divided by
tokens for the same text in English, so it needs parallel text. Fertility (tokens per whitespace word) and
bytes per token need none and are reported for every language.
"""

from __future__ import annotations

import glob
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from pipeline.languages import LANGUAGES
from stages.tokenizer.record import Fairness, LanguageMetrics


@dataclass(frozen=True)
class ReportMeta:
    """What the metrics are of: report.json's "meta", the report's title and the plot's parity gate."""

    model_type: str
    vocab_size: int
    evaluation_text: str
    max_parity: float | None
    missing_languages: list[str]


def parallel_from_ingest(data_dir: Path, source: str, languages: list[str]) -> dict[str, dict[str, str]]:
    """Documents of one ingest source keyed by their position in the input (aligned across languages)."""
    import pyarrow.parquet as pq

    out: dict[str, dict[str, str]] = {}
    for lang in languages:
        texts: dict[str, str] = {}
        for path in sorted((data_dir / lang).glob("part-*.parquet")):
            for row in pq.read_table(path, columns=["source", "input_index", "text"]).to_pylist():
                if row["source"] == source:
                    texts[str(row["input_index"])] = row["text"]
        out[lang] = texts
    return out


def parallel_from_flores(folder: Path, languages: list[str]) -> tuple[dict[str, dict[str, str]], list[str]]:
    """FLORES-200 layout: <flores code>.<split> with one sentence per line. Returns (texts, missing languages)."""
    out, missing = {}, []
    for lang in languages:
        files = sorted(glob.glob(os.path.join(folder, f"{LANGUAGES[lang].flores}.*")))
        if not files:
            missing.append(lang)
            continue
        if len(files) > 1:
            raise ValueError(f"{folder}: {len(files)} files for {lang} ({', '.join(os.path.basename(f) for f in files)}); "
                             f"point parallel_path at one split's folder (e.g. flores200/devtest)")
        lines = Path(files[0]).read_text(encoding="utf-8").splitlines()
        out[lang] = {str(i): line for i, line in enumerate(lines) if line.strip()}
    return out, missing


def sample_from_ingest(data_dir: Path, languages: list[str], max_docs: int = 2000) -> dict[str, dict[str, str]]:
    import pyarrow.parquet as pq

    out = {}
    for lang in languages:
        texts: dict[str, str] = {}
        for path in sorted((data_dir / lang).glob("part-*.parquet")):
            for row in pq.read_table(path, columns=["id", "text"]).slice(0, max_docs - len(texts)).to_pylist():
                texts[row["id"]] = row["text"]
            if len(texts) >= max_docs:
                break
        out[lang] = texts
    return out


def measure(model_path: Path, texts: dict[str, dict[str, str]], reference: str, parallel: bool) -> dict[str, LanguageMetrics]:
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=str(model_path))
    # A newline is one byte piece <0x0A>: one token either way (a piece of its own would cost the same), so it
    # is reported apart, and "byte fallback" means what it says: characters the vocabulary does not know.
    newline = sp.PieceToId("<0x0A>")
    is_byte = [sp.IsByte(i) and i != newline for i in range(sp.GetPieceSize())]
    tokens_by_lang: dict[str, dict[str, int]] = {}
    result: dict[str, LanguageMetrics] = {}
    for lang, docs in texts.items():
        keys = sorted(docs)
        ids = sp.encode([docs[k] for k in keys])
        tokens_by_lang[lang] = {k: len(x) for k, x in zip(keys, ids)}
        n_tokens = sum(len(x) for x in ids)
        n_words = sum(len(docs[k].split()) for k in keys)
        n_bytes = sum(len(docs[k].encode("utf-8")) for k in keys)
        n_fallback = sum(is_byte[t] for x in ids for t in x)
        n_newlines = sum(t == newline for x in ids for t in x)
        result[lang] = LanguageMetrics(
            texts=len(keys), tokens=n_tokens, words=n_words, bytes=n_bytes,
            fertility=round(n_tokens / n_words, 4) if n_words else None,
            bytes_per_token=round(n_bytes / n_tokens, 4) if n_tokens else None,
            byte_fallback_rate=round(n_fallback / n_tokens, 6) if n_tokens else None,
            newline_rate=round(n_newlines / n_tokens, 6) if n_tokens else None,
            parity=None,
        )
    if parallel and reference in tokens_by_lang:
        ref = tokens_by_lang[reference]
        for lang, toks in tokens_by_lang.items():
            shared = [k for k in toks if k in ref]
            denom = sum(ref[k] for k in shared)
            if shared and denom:
                # An assigned field counts as set: parallel_texts is dumped (exclude_unset) only where it was measured.
                result[lang].parity = round(sum(toks[k] for k in shared) / denom, 4)
                result[lang].parallel_texts = len(shared)
    return result


def gini(values: list[float]) -> float:
    """Gini coefficient: the mean absolute difference between all pairs over twice the mean (0 = all equal)."""
    n, total = len(values), sum(values)
    if n == 0 or total <= 0:
        return 0.0
    ordered = sorted(values)
    # sum_i sum_j |x_i - x_j| = 2 sum_i (2i - n + 1) x_(i), i from 0, ascending order
    return sum((2 * i - n + 1) * x for i, x in enumerate(ordered)) / (n * total)


def fairness(metrics: dict[str, LanguageMetrics]) -> Fairness:
    """Across languages: mean fertility, the worst parity and the Gini of the parities (token counts on the same
    parallel texts, relative to English's: their Gini is the Gini of the counts when every language has the
    same texts, as FLORES does)."""
    parities = {lang: m.parity for lang, m in metrics.items() if m.parity is not None}
    fertility = [m.fertility for m in metrics.values() if m.fertility is not None]
    worst = max(parities, key=parities.__getitem__) if parities else None
    return Fairness(languages=len(metrics), mean_fertility=round(sum(fertility) / len(fertility), 4) if fertility else None,
                    max_parity=parities[worst] if worst else None, worst_language=worst,
                    parity_gini=round(gini(list(parities.values())), 4) if parities else None)


def write_reports(metrics: dict[str, LanguageMetrics], meta: ReportMeta, out_dir: Path) -> list[Path]:
    languages = {lang: m.model_dump(exclude_unset=True) for lang, m in metrics.items()}  # as the manifest has them
    (out_dir / "report.json").write_text(json.dumps({"meta": asdict(meta), "languages": languages}, indent=2, ensure_ascii=False) + "\n")
    lines = [
        f"# Tokenizer report: {meta.model_type} {meta.vocab_size:,} pieces",
        "",
        f"Evaluation text: {meta.evaluation_text}. Parity = tokens for the same text / tokens in English "
        f"(1.0 = as cheap as English). Fertility = tokens per whitespace-separated word. Byte fallback = share of "
        f"tokens that are byte pieces for characters the vocabulary lacks; newlines (the byte piece <0x0A>, one "
        f"token as a piece of their own would be) are counted apart.",
        "",
        "| language | parity | fertility | bytes/token | byte fallback | newlines | texts |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    fmt = lambda v, spec: "n/a" if v is None else format(v, spec)  # noqa: E731
    for lang, m in metrics.items():
        lines.append(f"| {lang} {LANGUAGES[lang].english_name} | {fmt(m.parity, '.3f')} | {fmt(m.fertility, '.3f')} | "
                     f"{fmt(m.bytes_per_token, '.2f')} | {fmt(m.byte_fallback_rate, '.2%')} | "
                     f"{fmt(m.newline_rate, '.2%')} | {m.texts:,} |")
    parities = {lang: m.parity for lang, m in metrics.items() if m.parity is not None}
    f = fairness(metrics)
    if parities:
        lines += ["", f"Worst parity: {f.worst_language} at {f.max_parity:.3f}; median "
                      f"{sorted(parities.values())[len(parities) // 2]:.3f}; Gini of the per-language token counts "
                      f"{f.parity_gini:.3f} (0 = every language costs the same)."]
    if f.mean_fertility is not None:
        lines += ["", f"Mean fertility over {f.languages} languages: {f.mean_fertility:.3f} tokens per word."]
    if meta.missing_languages:
        lines += ["", f"No evaluation text for: {', '.join(meta.missing_languages)}."]
    (out_dir / "report.md").write_text("\n".join(lines) + "\n")
    _plot(metrics, meta, out_dir / "report.png")
    return [out_dir / "report.json", out_dir / "report.md", out_dir / "report.png"]


def _plot(metrics: dict[str, LanguageMetrics], meta: ReportMeta, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    langs = list(metrics)
    parity = [metrics[lang].parity for lang in langs]
    panels = [("parity", "parity vs English (lower is fairer)", parity)] if any(v is not None for v in parity) else []
    panels.append(("fertility", "fertility (tokens per word)", [metrics[lang].fertility for lang in langs]))
    fig, axes = plt.subplots(len(panels), 1, figsize=(11, 3.2 * len(panels)), squeeze=False)
    for ax, (key, title, values) in zip(axes[:, 0], panels):
        ax.bar(langs, [v or 0 for v in values], color="#3b6ea8")
        if key == "parity":
            ax.axhline(1.0, color="black", linewidth=0.8)
            if meta.max_parity:
                ax.axhline(meta.max_parity, color="#c0392b", linestyle="--", linewidth=1, label=f"gate {meta.max_parity}")
                ax.legend(loc="upper right")
        ax.set_title(title, fontsize=10)
        ax.tick_params(axis="x", labelsize=8)
    fig.suptitle(f"{meta.model_type} {meta.vocab_size:,} pieces on {meta.evaluation_text}", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=100, metadata={"Software": None})  # no version/date metadata: stable bytes
    plt.close(fig)
