"""Word statistics of a document: the numbers the quality filters decide most documents on.

Why a separate step: the Gopher filters need, per document, the word count, the words' lengths, how many are
numbers, and how often each word occurs (repetition bounds). Computing them from Python word lists costs about
as much as language identification; `_wordstats.c` computes them in one pass over the characters. This module is
the definition (`word_stats_reference`, from `split_words` and a Counter) and picks the compiled version when
it was built (`pip install` builds it where a C compiler exists; `tests/ingest/test_wordstats.py` checks that
both agree on the UDHR in its 500+ languages and on edge cases).
"""

from __future__ import annotations

import functools
import re
from collections import Counter
from operator import mul
from typing import NamedTuple

# A word: a run of letters/digits/underscores, joined by inner apostrophes or hyphens.
WORD = re.compile(r"\w+(?:['’\-]\w+)*")
# Punctuation stripped from the ends of a whitespace token before asking whether the rest is one plain word.
# Only characters that are neither word characters nor whitespace may be here (checked below): then a token
# "<these>*<word characters>+<these>*" contains exactly one match of WORD, its middle part. Apostrophes
# are included: at the ends of a token they do not join anything. The most frequent ones only (str.strip
# pays for every character listed); tokens with other punctuation take the regex path, same result.
_EDGE_PUNCT = ".,:;!?\"'’“”„«»()"
assert not any(c.isalnum() or c == "_" or c.isspace() for c in _EDGE_PUNCT)


def split_words(text: str) -> list[str]:
    """The words of `text`, exactly `WORD.findall(text)`.

    How: `WORD` matches word characters (str.isalnum or "_") and apostrophes/hyphens between them, none of
    which is whitespace, so its matches in `text` are its matches in each whitespace token, in order. A token
    that is all alphanumeric is one match; most others are one word with punctuation attached ("end.",
    "(see"), which `str.strip(_EDGE_PUNCT)` removes; the rest ("l'homme", "1,5", "e.g.", "snake_case", "--")
    go through the regex: faster than `WORD.findall` on typical documents.
    """
    words = text.split()
    for i in [i for i, w in enumerate(words) if not w.isalnum()][::-1]:
        core = words[i].strip(_EDGE_PUNCT)
        if core.isalnum():
            words[i] = core
        else:
            words[i : i + 1] = WORD.findall(words[i])
    return words


_MORE_THAN_ONCE = bytes([0, 0] + [1] * 254)  # bytes.translate table: count -> 1 if count >= 2 else 0


def repeated_mask(words: list[str], counts: Counter) -> bytes:
    """One byte per word: 1 if the word occurs more than once in the document (`counts` of `words`), else 0."""
    try:
        return bytes(map(counts.__getitem__, words)).translate(_MORE_THAN_ONCE)
    except ValueError:  # a count above 255
        return bytes(map((1).__lt__, map(counts.__getitem__, words)))


@functools.lru_cache(maxsize=16)
def runs_of(n: int) -> re.Pattern:
    """Runs of at least n words occurring more than once, in a `repeated_mask`."""
    return re.compile(b"\x01{%d,}" % n)


class WordStats(NamedTuple):
    """Statistics of one text; "words" are the matches of `WORD` (see `split_words`)."""

    n_tokens: int
    """Whitespace-separated tokens: `len(text.split())` (the row's `n_words`)."""
    n_words: int
    word_chars: int
    """Characters of all words (inner apostrophes and hyphens included)."""
    digit_words: int
    """Words that are all digits (`str.isdigit`)."""
    distinct: int
    """Distinct words."""
    distinct_chars: int
    """Characters of the distinct words, each counted once."""
    max_word_mass: int
    """max over distinct words of occurrences x length."""
    repeated_run_chars: int
    """Characters of the words in runs of at least `run_length` consecutive words that each occur more than
    once in the text (0 when `run_length` <= 0)."""


def word_stats_reference(text: str, run_length: int) -> WordStats:
    """The definition, in Python."""
    words = split_words(text)
    counts = Counter(words)
    lengths = list(map(len, counts))
    run_chars = 0
    if run_length > 0 and len(counts) < len(words):
        runs = runs_of(run_length).finditer(repeated_mask(words, counts))
        run_chars = sum(sum(map(len, words[m.start() : m.end()])) for m in runs)
    return WordStats(
        n_tokens=len(text.split()),
        n_words=len(words),
        word_chars=sum(map(len, words)),
        digit_words=sum(map(str.isdigit, words)),
        distinct=len(counts),
        distinct_chars=sum(lengths),
        max_word_mass=max(map(mul, counts.values(), lengths), default=0),
        repeated_run_chars=run_chars,
    )


try:
    from ._wordstats import word_stats as _compiled
except ImportError:  # built without a C compiler: same results, slower
    _compiled = None

COMPILED = _compiled is not None
"""Whether the C implementation is in use (the ingest benchmark prints it)."""


def word_stats(text: str, run_length: int) -> WordStats:
    """Statistics of `text` (see WordStats); `run_length` is the n of the shortest duplicate n-gram filter."""
    if _compiled is None:
        return word_stats_reference(text, run_length)
    return WordStats._make(_compiled(text, run_length))
