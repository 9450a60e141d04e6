"""A language-balanced, bounded, deterministic training sample for SentencePiece.

The plan decides characters per language from the ingest manifest's counts (no data read); the writer
streams one language's Parquet files and keeps each document with a probability derived from its id, so
the sample is reproducible, needs O(1) memory and does not depend on the order units run in.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from pathlib import Path

from stages.mixture import allocate
from stages.tokenizer.config import SampleConfig


@dataclass(frozen=True)
class LanguageShare:
    lang: str
    available_chars: int
    target_chars: int
    passes: float  # target / available


def plan_sample(available: dict[str, int], cfg: SampleConfig) -> dict[str, LanguageShare]:
    """Characters per language under the configured policy, capped at max_passes over each language."""
    target = allocate(available, cfg.budget_chars, cfg.policy, cfg.max_passes, cfg.temperature)
    return {
        lang: LanguageShare(lang, available[lang], target[lang], target[lang] / available[lang] if available[lang] else 0.0)
        for lang in sorted(available)
    }


def _keep_fraction(doc_id: str, seed: int, fraction: float) -> bool:
    h = int.from_bytes(hashlib.blake2b(f"{seed}:{doc_id}".encode(), digest_size=8).digest(), "big")
    return h < fraction * 2**64


def write_language_sample(parquet_files: list[Path], share: LanguageShare, seed: int, max_line_chars: int, out: Path) -> dict:
    """Write the language's lines (non-empty, cut at max_line_chars) to `out`; whole passes first, then a
    seeded fraction of documents for the remainder. Returns what was written."""
    import pyarrow.parquet as pq

    full_passes = math.floor(share.passes)
    fraction = share.passes - full_passes
    chars = lines = docs = 0
    with open(out, "w", encoding="utf-8") as f:
        for p in range(full_passes + (1 if fraction > 0 else 0)):
            partial = p == full_passes
            for path in parquet_files:
                for batch in pq.ParquetFile(path).iter_batches(columns=["id", "text"], batch_size=2048):
                    for doc_id, text in zip(batch.column("id").to_pylist(), batch.column("text").to_pylist()):
                        if partial and not _keep_fraction(doc_id, seed + p, fraction):
                            continue
                        docs += 1
                        for line in text.split("\n"):
                            line = line.strip()[:max_line_chars]
                            if line:
                                f.write(line + "\n")
                                chars += len(line)
                                lines += 1
    return {"lang": share.lang, "chars": chars, "lines": lines, "documents": docs}


def rebalance(current: dict[str, int], parity: dict[str, float], available: dict[str, int], budget: int,
              max_passes: float, strength: float = 1.0) -> dict[str, int]:
    """New character targets that give languages which cost more tokens (higher parity) more text.

    Each target is scaled by (parity / mean parity)^strength, then the budget is filled again under the
    max_passes caps (water-filling: what a capped language cannot take goes to the others in proportion).
    Languages without a parity figure keep their relative share.
    """
    mean = sum(parity.values()) / len(parity) if parity else 1.0
    want = {lang: max(1.0, current[lang] * (parity.get(lang, mean) / mean) ** strength) for lang in current}
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
