"""Word n-grams for overlap checks between evaluation texts and training text (shared: the ingest stage drops
documents that overlap declared evaluation sets, the evaluate stage measures what overlap remains).

Lowercased, split on whitespace, n = 13 (the size of GPT-3's and the Llama reports' contamination checks).
Hashed with Python's str hash: the sets are built and compared in one process, never stored.
"""

from __future__ import annotations

from pathlib import Path

N = 13


def ngrams(text: str, n: int = N) -> set[int]:
    words = text.lower().split()
    return {hash(" ".join(words[i:i + n])) for i in range(len(words) - n + 1)}


def file_ngrams(path: Path, n: int = N) -> set[int]:
    """The n-grams of every line of a text file (one evaluation text per line, the FLORES-200 layout)."""
    out: set[int] = set()
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        out |= ngrams(line, n)
    return out
