"""A language-balanced, bounded, deterministic training sample for SentencePiece that reads what it keeps.

The plan decides characters per language from the ingest record's counts (no data read). The writer streams
a language's Parquet: every file for each whole pass the plan asks for (small languages), then, for the
fraction of a pass that remains (all of a large language's sample), row groups in a seeded order (files by
a hash of their name, a file's row groups by a hash of their position) until the characters are written.
English at full scale (tens of TB) is therefore sampled by reading a few GB of it, not all of it; the sample
is reproducible, needs O(1) memory and does not depend on the order units run in. The price: the partial
pass is whole row groups (runs of neighbouring documents), not documents drawn one by one.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field
from pathlib import Path

from stages.mixture import allocate
from stages.tokenizer.config import SampleConfig


@dataclass(frozen=True)
class LanguageShare:
    lang: str
    available_chars: int
    target_chars: int
    passes: float  # target / available


@dataclass(frozen=True)
class WrittenSample:
    """What a language's sample holds and what was read for it (the record's per-language counts)."""

    chars: int
    lines: int
    documents: int
    files: int  # the language's Parquet files
    files_read: int
    row_groups_read: int


@dataclass
class _Counts:
    chars: int = 0  # of the lines written (stripped, cut)
    lines: int = 0
    documents: int = 0
    text_chars: int = 0  # of the documents' text, as the plan counts them
    files_read: set[str] = field(default_factory=set)
    row_groups_read: int = 0


def plan_sample(available: dict[str, int], cfg: SampleConfig) -> dict[str, LanguageShare]:
    """Characters per language under the configured policy, capped at max_passes over each language."""
    target = allocate(available, cfg.budget_chars, cfg.policy, cfg.max_passes, cfg.temperature)
    return {
        lang: LanguageShare(lang, available[lang], target[lang], target[lang] / available[lang] if available[lang] else 0.0)
        for lang in sorted(available)
    }


def weighted_plan(available: dict[str, int], cfg: SampleConfig, weights: dict[str, float]) -> dict[str, LanguageShare]:
    """The policy's plan with each language's characters multiplied by its weight (1 when not named), the budget
    filled again under the max_passes caps."""
    shares = plan_sample(available, cfg)
    if not weights:
        return shares
    targets = rebalance({lang: s.target_chars for lang, s in shares.items()},
                        {lang: weights.get(lang, 1.0) for lang in shares}, available, cfg.budget_chars, cfg.max_passes)
    return {lang: LanguageShare(lang, available[lang], targets[lang], targets[lang] / available[lang] if available[lang] else 0.0)
            for lang in sorted(available)}


def _order_key(seed: int, lang: str, *parts: object) -> bytes:
    return hashlib.blake2b(":".join(map(str, (seed, lang, *parts))).encode(), digest_size=8).digest()


def write_language_sample(parquet_files: list[Path], share: LanguageShare, seed: int, max_line_chars: int,
                          out: Path) -> WrittenSample:
    """Write the language's lines (non-empty, cut at max_line_chars) to `out`: whole passes first, then seeded row
    groups until the remaining characters (of document text, as the plan counts them) are written."""
    import pyarrow.parquet as pq

    full_passes = math.floor(share.passes)
    n = _Counts()

    def take(text: str, f) -> None:
        n.documents += 1
        n.text_chars += len(text)
        for line in text.split("\n"):
            line = line.strip()[:max_line_chars]
            if line:
                f.write(line + "\n")
                n.chars += len(line)
                n.lines += 1

    def row_group(pf, path: Path, rg: int):
        n.files_read.add(path.name)
        n.row_groups_read += 1
        for batch in pf.iter_batches(row_groups=[rg], columns=["text"], batch_size=2048):
            yield from batch.column("text").to_pylist()

    with open(out, "w", encoding="utf-8") as f:
        for _ in range(full_passes):
            for path in parquet_files:
                pf = pq.ParquetFile(path)
                for rg in range(pf.metadata.num_row_groups):
                    for text in row_group(pf, path, rg):
                        take(text, f)
        remaining = share.target_chars - n.text_chars
        for path in sorted(parquet_files, key=lambda p: _order_key(seed, share.lang, p.name)):
            if remaining <= 0:
                break
            pf = pq.ParquetFile(path)
            for rg in sorted(range(pf.metadata.num_row_groups), key=lambda i: _order_key(seed, share.lang, path.name, i)):
                for text in row_group(pf, path, rg):
                    take(text, f)
                    remaining -= len(text)
                    if remaining <= 0:
                        break
                if remaining <= 0:
                    break
    return WrittenSample(chars=n.chars, lines=n.lines, documents=n.documents, files=len(parquet_files),
                         files_read=len(n.files_read), row_groups_read=n.row_groups_read)


def rebalance(current: dict[str, int], factors: dict[str, float], available: dict[str, int], budget: int,
              max_passes: float) -> dict[str, int]:
    """New character targets: each language's current target times its factor (weights, or balance.py's parity
    factors), then the budget filled again under the max_passes caps (water-filling: what a capped language
    cannot take goes to the others in proportion). Languages without a factor keep their relative share.
    """
    mean = sum(factors.values()) / len(factors) if factors else 1.0
    want = {lang: max(1.0, current[lang] * factors.get(lang, mean) / mean) for lang in current}
    caps = {lang: max_passes * available[lang] for lang in current}
    target: dict[str, float] = {}
    free, remaining = dict(want), float(budget)
    while free and remaining > 0:
        scale = remaining / sum(free.values())
        capped = {lang for lang, w in free.items() if w * scale >= caps[lang]}
        if not capped:
            target.update({lang: w * scale for lang, w in free.items()})
            break
        for lang in capped:
            target[lang] = caps[lang]
            remaining -= caps[lang]
            del free[lang]
    return {lang: int(target.get(lang, 0)) for lang in sorted(current)}
