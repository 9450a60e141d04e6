"""The whole-text scans in C (stages/ingest/_textscan.c) answer exactly what the regexes they stand in for answer."""

import random
import shutil
import sysconfig

import pytest

from stages.ingest import normalize, pii
from tests.ingest.test_wordstats import udhr_texts

COMPILED = normalize._suspect_compiled is not None and pii._digit_hints_compiled is not None

EDGE_CASES = [
    "",
    "a",
    "BrÃ¼cke",  # mojibake: a lead character and a continuation character
    "Ã",  # a lead character at the end
    "â€œquotedâ€\x9d",  # "â" + punctuation + continuation
    "â€",  # ... cut short
    "âx€",
    "ï»¿text",  # a byte order mark read as cp1252
    "ï»",
    "Åland SÃO PAULO ÂNGELO Ärger",  # legitimate capitals followed by letters
    "tab\tand newline\n are fine, \r is not",
    "nul\x00",
    "bom\ufeff",
    "lone \ud800 surrogate",
    "\uffff",
    "𝐀𝐁 😀 \U0001d7d8",  # beyond the Basic Multilingual Plane (U+1D7D8 is a decimal digit)
    "no digits at all",
    "DE89 3704 0044 0532 0130 00",  # an IBAN at the very start: the first digit follows its country code
    "xDE1",
    "De12 de12 D12 ZZ12 AT",  # no listed upper-case pair before a digit
    "year 2024, then IBAN FR1420041010050500013M02606",
    "٣٤ Arabic-Indic and ० Devanagari digits, then AT٣",  # \d is any decimal digit
    "² ³ ① are digits for str.isdigit but not decimal",
]


def _random_texts(n: int = 3000) -> list[str]:
    """Short strings over the characters the scans care about, mixed with others."""
    alphabet = ("AaDEFRTZ09٣ \t\n\r\x00\x1f\x7f\x80\x9f\xa0\xbb\xbf\xc2\xc3\xd3\xd4âïÃ€‚ƒ„…™œŸ\ufeff\ud800\uffff"
                "é€\U0001d7d8😀")
    rng = random.Random(14)
    return ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12))) for _ in range(n)]


def _reference_digit_hints(text: str) -> tuple[int, bool]:
    first = pii._DIGIT.search(text)
    return (-1, False) if first is None else (first.start(), pii._IBAN_HINT.search(text, first.start()) is not None)


@pytest.mark.skipif(not COMPILED, reason="the C extension was not built (no C compiler)")
def test_suspect_is_the_regex(udhr_dir):
    texts = EDGE_CASES + udhr_texts(udhr_dir) + _random_texts()
    for text in texts:
        assert normalize.is_suspect(text) == (normalize._SUSPECT.search(text) is not None), repr(text[:80])
    assert sum(map(normalize.is_suspect, texts)) > 100  # both answers occur


@pytest.mark.skipif(not COMPILED, reason="the C extension was not built (no C compiler)")
def test_digit_hints_are_the_regexes(udhr_dir):
    texts = EDGE_CASES + udhr_texts(udhr_dir) + _random_texts()
    for text in texts:
        assert pii.digit_hints(text) == _reference_digit_hints(text), repr(text[:80])
    assert pii.digit_hints("DE89 3704")[1] and not pii.digit_hints("De89 3704")[1]


def test_without_the_extension_the_regexes_answer(monkeypatch):
    monkeypatch.setattr(normalize, "_suspect_compiled", None)
    monkeypatch.setattr(pii, "_digit_hints_compiled", None)
    assert normalize.is_suspect("BrÃ¼cke") and not normalize.is_suspect("Brücke")
    assert pii.digit_hints("IBAN DE89 3704") == (7, True)
    assert pii.digit_hints("no digit") == (-1, False)


@pytest.mark.skipif(not COMPILED, reason="the C extension was not built (no C compiler)")
def test_a_wrong_table_is_refused():
    from stages.ingest import _textscan

    with pytest.raises(ValueError, match="65536 bytes"):
        _textscan.suspect("text", b"\x00" * 10)
    with pytest.raises(TypeError):
        _textscan.digit_hints(b"bytes", pii._COUNTRY_PAIRS)


def test_compiled_where_a_compiler_exists():
    """`optional = true` lets the install succeed without a compiler; it must not hide a broken build."""
    compiler = (sysconfig.get_config_var("CC") or "cc").split()[0]
    if shutil.which(compiler) is None:
        pytest.skip(f"no C compiler ({compiler}) on this machine")
    assert COMPILED, "stages/ingest/_textscan.c did not build: run `pip install -e .` and read its errors"
