"""Gopher / FineWeb-2 style heuristic quality and repetition filters.

Why heuristics: web text is full of menus, link lists, keyword spam, boilerplate and machine-generated
repetition; a few cheap document statistics remove most of it (Gopher), and FineWeb-2 kept them for 1,000+
languages with per-language thresholds. The defaults are Gopher's; only the mean word length needs
per-language overrides (compounding/agglutinative languages).

Words: matches of one Unicode regex (`wordstats.WORD`), not a tokenizer model (slow, downloaded at run time);
it keeps apostrophes and hyphens inside words ("l'homme", "il-kelb", "t-uisce") so Maltese and Irish articles
do not inflate the word count, and drops punctuation, so word lengths are letters only. Most documents are
decided on per-document word statistics (`wordstats.word_stats`, in C); only documents whose statistics cannot
rule out repeated n-grams have their word list built, in Python.

Character ratios (duplicate lines/paragraphs/n-grams) are relative to `len(text)`, n-gram lengths count word
characters only (as datatrove does), so the published thresholds keep their meaning.

`check_quality` returns the first failing filter's reason (cheap filters first: the n-gram filters only run
on documents that passed everything else); reasons.QUALITY_REASONS lists every reason it can return.
"""

from __future__ import annotations

import re
from collections import Counter
from itertools import repeat
from operator import itemgetter
from typing import Annotated, Optional

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, PrivateAttr, create_model, field_validator

from pipeline.languages import EU_LANGUAGE_CODES as EU_LANGUAGES
from stages.ingest.reasons import DUP_NGRAM_SIZES, TOP_NGRAM_SIZES
from .wordstats import WordStats, repeated_mask, runs_of, split_words, word_stats

_PARAGRAPH_BREAK = re.compile(r"\n[^\S\n]*\n\s*")

_BULLETS = ("•", "‣", "⁃", "◦", "▪", "▫", "●", "○", "■", "□", "◆", "►", "▶", "➢", "✓", "✔", "-", "–", "—", "*", "·")
_ELLIPSES = ("...", "…")
_BULLET_CHARS = frozenset(_BULLETS)  # every bullet is one character: "starts with a bullet" = first character in here
assert all(len(b) == 1 for b in _BULLETS)


def _line_classes() -> bytes:
    """What `_textscan.line_stats` reads: a byte per code point of the Basic Multilingual Plane, bit 1 for what
    str.strip() removes (str.isspace()), bit 2 for a bullet, bit 4 for what it counts or splits at."""
    table = bytearray(0x10000)
    for code in range(0x10000):
        table[code] = chr(code).isspace() | (chr(code) in _BULLET_CHARS) << 1 | (chr(code) in ".#…\n") << 2
    return bytes(table)


def _stripped_lines(text: str) -> list[str]:
    """The lines the quality filters look at: those of text.split("\n"), stripped, the empty ones left out."""
    return list(filter(None, map(str.strip, text.split("\n"))))


def _line_stats_python(text: str) -> tuple[int, int, int, int, int, bool]:
    """The definition of `line_stats`, and what runs without the C extension."""
    lines = _stripped_lines(text)
    return (text.count("#"), text.count("...") + text.count("…"), len(lines),
            sum(map(_BULLET_CHARS.__contains__, map(itemgetter(0), lines))),
            sum(map(str.endswith, lines, repeat(_ELLIPSES))), len(set(lines)) == len(lines))


try:
    from ._textscan import line_stats as _line_stats_compiled
except ImportError:  # built without a C compiler: the Python below, same answers
    _line_stats_compiled = None
else:
    _LINE_CLASSES = _line_classes()


def line_stats(text: str) -> tuple[int, int, int, int, int, bool]:
    """(text.count("#"), how many "..." and "…", how many lines, how many start with a bullet, how many end with
    an ellipsis, whether no two lines are equal) of `_stripped_lines(text)`. One pass in C
    (`_textscan.line_stats`) instead of a split, strips and counts in Python. Its `distinct` is False also where
    two lines only may be equal (equal hashes): check_quality then compares the lines themselves."""
    if _line_stats_compiled is not None:
        return _line_stats_compiled(text, _LINE_CLASSES)
    return _line_stats_python(text)


def _ngram_ratios(allowed: tuple[int, ...]):
    def check(v: dict[int, float]) -> dict[int, float]:
        for n, ratio in v.items():
            if n not in allowed:
                raise ValueError(f"n-gram size {n} is not one of {allowed}")
            if not 0.0 < ratio <= 1.0:
                raise ValueError(f"ratio {ratio} for {n}-grams is outside (0, 1]")
        return dict(sorted(v.items()))

    def int_keys(v):
        """TOML keys are always strings ("2" = 2-grams); the values keep the model's strict types."""
        if not isinstance(v, dict):
            return v
        try:
            return {int(k) if isinstance(k, str) else k: x for k, x in v.items()}
        except ValueError:
            bad = next(k for k in v if isinstance(k, str) and not k.strip().isdigit())
            raise ValueError(f"n-gram size {bad!r} is not a whole number") from None

    return Annotated[dict[int, float], BeforeValidator(int_keys), AfterValidator(check)]


_Ratio = Annotated[float, Field(ge=0.0, le=1.0)]


class QualityThresholds(BaseModel):
    """Resolved thresholds for one language (what `check_quality` takes)."""

    model_config = ConfigDict(extra="forbid", strict=True, use_attribute_docstrings=True, frozen=True)

    min_words: int = Field(50, ge=0)
    """Fewer words than this: too short to be useful prose (Gopher: 50)."""
    max_words: int = Field(100_000, ge=1)
    """More words than this: dumps, logs, concatenated pages (Gopher: 100,000)."""
    min_avg_word_length: float = Field(3.0, ge=0.0)
    """Mean word length (letters) below this: lists of initials, codes, broken tokenisation (Gopher: 3)."""
    max_avg_word_length: float = Field(10.0, ge=0.0)
    """Mean word length above this: URLs, hashes, keyword soup (Gopher: 10). Finnish/Estonian/Hungarian/
    German compounds are long: see the per-language overrides."""
    max_symbol_word_ratio: float = Field(0.1, ge=0.0)
    """('#' + '...' + '…') per word above this: hashtag spam, truncated teasers (Gopher: 0.1)."""
    max_bullet_lines_ratio: _Ratio = 0.9
    """Fraction of non-empty lines starting with a bullet above this: menus and link lists (Gopher: 0.9)."""
    max_ellipsis_lines_ratio: _Ratio = 0.3
    """Fraction of lines ending with an ellipsis above this: lists of truncated snippets (Gopher: 0.3)."""
    min_alpha_words_ratio: _Ratio = 0.8
    """Fraction of words containing a letter below this: tables, numbers, code (Gopher: 0.8)."""
    alpha_ratio_counts_punctuation: bool = False
    """Count each punctuation mark as a word in that fraction, as datatrove's FineWeb-2 filter does (its spaCy
    tokens include punctuation, so its published per-language thresholds assume it; Maltese tokens follow its
    Maltese splitter, "il-" "Parlament"); off: over our words only."""
    max_duplicate_line_ratio: _Ratio = 0.3
    """Fraction of non-empty lines that repeat an earlier line (Gopher: 0.3)."""
    max_duplicate_line_chars_ratio: _Ratio = 0.2
    """Characters in repeated lines / document characters (Gopher: 0.2)."""
    max_duplicate_paragraph_ratio: _Ratio = 0.3
    """Fraction of paragraphs (blank-line separated) that repeat an earlier one (Gopher: 0.3)."""
    max_duplicate_paragraph_chars_ratio: _Ratio = 0.2
    """Characters in repeated paragraphs / document characters (Gopher: 0.2)."""
    top_ngram_char_ratios: _ngram_ratios(TOP_NGRAM_SIZES) = {2: 0.2, 3: 0.18, 4: 0.16}
    """n -> max share of the document's characters taken by its most frequent word n-gram (counted only if it
    occurs more than once) (Gopher)."""
    dup_ngram_char_ratios: _ngram_ratios(DUP_NGRAM_SIZES) = {5: 0.15, 6: 0.14, 7: 0.13, 8: 0.12, 9: 0.11, 10: 0.10}
    """n -> max share of the document's characters inside repeated word n-grams (Gopher)."""

    _maltese_tokens: bool = PrivateAttr(False)
    """Tokens by Maltese rules where they are counted as FineWeb-2 counts them (set by `for_language("mt")`)."""


# Same fields, all optional (None = inherit the global value); built from QualityThresholds so the two
# cannot drift apart. Constraints and descriptions are kept.
QualityOverrides = create_model(
    "QualityOverrides",
    __config__=ConfigDict(extra="forbid", frozen=True),
    __doc__="Per-language thresholds; unset fields inherit the global ones (n-gram dicts are merged per n).",
    **{
        name: (Optional[Annotated[(f.annotation, *f.metadata)] if f.metadata else f.annotation],
               Field(None, description=f.description))
        for name, f in QualityThresholds.model_fields.items()
    },
)


class QualityConfig(QualityThresholds):
    """`[ingest.quality]`: global thresholds plus per-language overrides."""

    model_config = ConfigDict(extra="forbid", strict=True, use_attribute_docstrings=True, frozen=True)

    per_language: dict[str, QualityOverrides] = {
        "de": QualityOverrides(max_avg_word_length=11.0),
        "et": QualityOverrides(max_avg_word_length=11.0),
        "hu": QualityOverrides(max_avg_word_length=11.0),
        "fi": QualityOverrides(max_avg_word_length=12.0),
    }
    """ISO 639-1 code -> overrides. Defaults raise the mean word length limit for compounding and
    agglutinative languages (Finnish FLORES documents reach 9.5 letters/word, web text more). Setting this
    table in the config replaces the defaults."""

    _resolved: dict[str, QualityThresholds] = PrivateAttr(default_factory=dict)

    @field_validator("per_language")
    @classmethod
    def _check_languages(cls, v: dict) -> dict:
        unknown = sorted(set(v) - set(EU_LANGUAGES))
        if unknown:
            raise ValueError(f"per_language: {unknown} are not among {' '.join(EU_LANGUAGES)}")
        return v

    def for_language(self, lang: str) -> QualityThresholds:
        """Thresholds for `lang`: the global ones with its overrides applied (cached)."""
        resolved = self._resolved.get(lang)
        if resolved is None:
            values = {name: getattr(self, name) for name in QualityThresholds.model_fields}
            override = self.per_language.get(lang)
            if override is not None:
                for name in values:
                    value = getattr(override, name)
                    if value is not None:
                        values[name] = {**values[name], **value} if isinstance(value, dict) else value
            resolved = self._resolved[lang] = QualityThresholds(**values)
            resolved._maltese_tokens = lang == "mt"
        return resolved


def _ngrams_at(words: list[str], starts: list[int], n: int) -> list[tuple[str, ...]]:
    """The n-grams of `words` starting at `starts`."""
    return [tuple(words[i : i + n]) for i in starts]


def _repeated_starts(mask: bytes, n: int) -> list[int]:
    """Ascending start positions of the n-grams made only of words that occur more than once (`mask` from
    `repeated_mask`): every n-gram that occurs more than once starts at one of them."""
    if b"\x01" * n not in mask:
        return []
    return [i for m in runs_of(n).finditer(mask) for i in range(m.start(), m.end() - n + 1)]


def _words_and_mask(text: str) -> tuple[list[str], bytes]:
    """The words of `text` and their `repeated_mask`."""
    words = split_words(text)
    return words, repeated_mask(words, Counter(words))


def _duplicate_ngram_chars(words: list[str], starts: list[int], n: int) -> int:
    """Characters in n-grams that repeat an earlier one, scanning left to right and jumping over a repeat so
    overlapping repeats are not counted twice (Gopher / datatrove `find_all_duplicate`).

    Only the n-grams starting at `starts` (ascending) are looked at: they must include every n-gram that
    occurs more than once. The others occur once, so the full scan would just add each to `seen` and step
    on: they never count and never cause a jump, and leaving them out gives the same result.
    """
    seen: set[tuple[str, ...]] = set()
    chars, resume = 0, 0
    for i in starts:
        if i < resume:
            continue  # inside the repeat counted last
        gram = tuple(words[i : i + n])
        if gram in seen:
            chars += sum(map(len, gram))
            resume = i + n
        else:
            seen.add(gram)
    return chars


# Maltese tokens as UD Maltese MUDT defines them (universaldependencies.org/mt), which is what FineWeb-2's
# Maltese word splitter (Stanza, trained on MUDT) makes: the article keeps its hyphen and is a token of its own
# ("il-" "Parlament"; also its assimilated and fused forms "is-", "tal-", "fil-", "mill-", "għall-": they end in
# "l" or the consonant it assimilates to), the apostrophe closes a proclitic ("b'" "Malta", "ta'"), and a comma
# splits a number ("1" "," "500"). FineWeb-2's Maltese stop words ("il-", "tal-", "ta'") are such tokens.
_MT_ARTICLE = re.compile(r"[^\W\d_]{0,5}[lċdnrstxżzLĊDNRSTXŻZ]")
_MT_PROCLITIC = re.compile(r"(?i:b|f|m|s|t|ta|sa|bħa|ma)")
_MT_GLUED = re.compile(r"([^\W\d_]{1,6})(-|'|’)(?=\w)")
_NUMBER_WITH_COMMAS = re.compile(r"\d+(?:,\d+)+")


def _token_alpha_ratio(text: str, maltese: bool = False) -> float:
    """Share of tokens with a letter, tokens as FineWeb-2's word splitter makes them, approximately. spaCy: each
    whitespace token loses its leading and trailing marks, each of which is a token of its own ("(see", "end.",
    "“Hi,”"); what is left stays one token ("1,000", "l'homme", "e-mail"). Maltese (`maltese`): MUDT's rules
    on top (above)."""
    tokens = alpha = 0
    for tok in text.split():
        if tok.isalpha():
            tokens += 1
            alpha += 1
            continue
        lo, hi = 0, len(tok)
        while lo < hi and not tok[lo].isalnum():
            lo += 1
        while hi > lo and not tok[hi - 1].isalnum():
            hi -= 1
        core = tok[lo:hi]
        tokens += len(tok) - len(core) + (1 if core else 0)
        alpha += any(map(str.isalpha, core))
        if maltese and core:
            if hi < len(tok) and tok[hi] in "'’" and _MT_PROCLITIC.fullmatch(core):
                tokens -= 1  # "ta'" is one token
            glued = _MT_GLUED.match(core)
            if glued and (_MT_ARTICLE.fullmatch(glued[1]) if glued[2] == "-" else _MT_PROCLITIC.fullmatch(glued[1])):
                tokens += 1  # "il-Parlament" is "il-" (the letter the core was counted for) and "Parlament"
                alpha += any(map(str.isalpha, core[glued.end():]))  # "fl-2020": "2020" has none
            elif _NUMBER_WITH_COMMAS.fullmatch(core):
                tokens += 2 * core.count(",")
    return alpha / tokens if tokens else 0.0


def quality_word_stats(text: str, t: QualityThresholds) -> WordStats:
    """The word statistics `check_quality` decides on (runs counted for the shortest duplicate n-gram filter)."""
    return word_stats(text, min(t.dup_ngram_char_ratios, default=0))


def check_quality(text: str, t: QualityThresholds, stats: WordStats | None = None) -> str | None:
    """The reason of the first failing filter (see reasons.QUALITY_REASONS), None when the document passes.

    `t` is usually `QualityConfig.for_language(lang)`; a QualityConfig itself also works (global thresholds).
    `stats` may pass `quality_word_stats(text, t)` when the caller has computed it already.
    """
    s = quality_word_stats(text, t) if stats is None else stats
    n_words = s.n_words
    if n_words < t.min_words or n_words == 0:
        return "too_few_words"
    if n_words > t.max_words:
        return "too_many_words"
    avg_len = s.word_chars / n_words
    if not t.min_avg_word_length <= avg_len <= t.max_avg_word_length:
        return "avg_word_length"
    n_hashes, n_ellipses, n_lines, bullet_lines, ellipsis_lines, distinct_lines = line_stats(text)
    if (n_hashes + n_ellipses) / n_words > t.max_symbol_word_ratio:
        return "symbol_ratio"

    n_lines = n_lines or 1
    if bullet_lines / n_lines > t.max_bullet_lines_ratio:
        return "bullet_lines"
    if ellipsis_lines / n_lines > t.max_ellipsis_lines_ratio:
        return "ellipsis_lines"
    if t.alpha_ratio_counts_punctuation:
        if _token_alpha_ratio(text, t._maltese_tokens) < t.min_alpha_words_ratio:
            return "alpha_words"
    elif 1.0 - s.digit_words / n_words < t.min_alpha_words_ratio:
        return "alpha_words"

    n_chars = len(text)
    lines = [] if distinct_lines else _stripped_lines(text)
    unique_lines = set(lines)
    if len(unique_lines) < len(lines):
        if (len(lines) - len(unique_lines)) / n_lines > t.max_duplicate_line_ratio:
            return "dup_lines"
        if (sum(map(len, lines)) - sum(map(len, unique_lines))) / n_chars > t.max_duplicate_line_chars_ratio:
            return "dup_line_chars"
        # Paragraphs are only looked at here: two equal paragraphs have equal first lines (stripped, on
        # different lines of the text), so a document without a repeated line has no repeated paragraph.
        if "\n" in text:
            paragraphs = [p for p in map(str.strip, _PARAGRAPH_BREAK.split(text)) if p]
            unique_paragraphs = set(paragraphs)
            if len(unique_paragraphs) < len(paragraphs):
                if (len(paragraphs) - len(unique_paragraphs)) / len(paragraphs) > t.max_duplicate_paragraph_ratio:
                    return "dup_paragraphs"
                dup_chars = sum(map(len, paragraphs)) - sum(map(len, unique_paragraphs))
                if dup_chars / n_chars > t.max_duplicate_paragraph_chars_ratio:
                    return "dup_paragraph_chars"

    # Only words occurring at least twice can be part of a repeated n-gram; no such word, no repetition.
    if s.distinct == n_words:
        return None
    return _check_repetition(text, t, s)


def _check_repetition(text: str, t: QualityThresholds, s: WordStats) -> str | None:
    """The n-gram filters. Most documents are cleared by the bounds below from their word statistics alone;
    the others have their word list built (in Python) and their repeated n-grams counted."""
    n_chars, n_words = len(text), s.n_words
    words, mask = [], None  # built on first need

    # Upper bound for the top n-gram filters: an n-gram occurring c >= 2 times has c <= count(w) for each of
    # its n words w, so c * chars(n-gram) <= n * max(count(w) * len(w)). Typical prose stays below every
    # threshold by this bound alone, which saves building the n-gram counters. (The maximum is taken over
    # all words, not only repeated ones: a looser bound, cheaper to get, still far below the thresholds.)
    # Where it does not, only n-grams made of repeated words are counted (see `_repeated_starts`): they are
    # all the n-grams that can occur twice, with their counts and in their order of first occurrence, so the
    # most frequent one (first of equal counts) is the one a Counter of all n-grams would name.
    for n, max_ratio in t.top_ngram_char_ratios.items():
        if n_words < n:
            break
        if n * s.max_word_mass <= max_ratio * n_chars:
            continue
        if mask is None:
            words, mask = _words_and_mask(text)
        grams = Counter(_ngrams_at(words, _repeated_starts(mask, n), n))
        if not grams:
            break  # no n-gram repeats, so no longer one does either
        gram, c = grams.most_common(1)[0]
        if c == 1:
            break
        if sum(map(len, gram)) * c / n_chars > max_ratio:
            return f"top_{n}gram"

    ratios = t.dup_ngram_char_ratios
    if ratios and n_words > min(ratios):
        # The repeats `_duplicate_ngram_chars` counts do not overlap and each of their words occurs earlier
        # too, so they hold at most the characters of all repeated occurrences (word characters minus those
        # of the distinct words), and at most those of the words in runs of at least min(ratios) repeated
        # words (`s.repeated_run_chars`: a repeated n-gram is n consecutive repeated words). When either is
        # within the smallest ratio, no filter can fire: typical prose. Otherwise only the n-grams inside the
        # runs can repeat, and only those are built.
        min_ratio = min(ratios.values())
        if (s.word_chars - s.distinct_chars) / n_chars > min_ratio and s.repeated_run_chars / n_chars > min_ratio:
            if mask is None:
                words, mask = _words_and_mask(text)
            for n, max_ratio in ratios.items():
                starts = _repeated_starts(mask, n)
                if len(set(_ngrams_at(words, starts, n))) == len(starts):
                    break  # no repeated n-gram, hence no repeated longer one
                if _duplicate_ngram_chars(words, starts, n) / n_chars > max_ratio:
                    return f"dup_{n}gram"
    return None
