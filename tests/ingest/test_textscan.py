"""The whole-text scans in C (stages/ingest/_textscan.c) answer exactly what the regexes they stand in for answer."""

import random
import shutil
import sysconfig

import pytest

from stages.ingest import normalize, pii, quality
from tests.ingest.test_wordstats import udhr_texts

COMPILED = (normalize._suspect_compiled is not None and normalize._settled_compiled is not None
            and pii._pii_hints_compiled is not None and quality._line_stats_compiled is not None)

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
    "::1 and fe80::1",  # IPv6 hints: "::" ...
    "a:b:c:d:e:f:g:h 1",  # ... or seven colons
    "a:b:c:d:e:f 1:",
    "IP 192.168.0.1, not 1.2.3 or 1.2345.6.7; 1.2.3.4",  # IPv4 hint: three dots between 1-3 digits
    ".1.22.333.4444 .1.2.x3",
    ".١.٢.٣",  # any decimal digit
    "0 at the start",  # phone hints: a "0" that starts a number ...
    "x0 x-0 x.0 x/0 x,0 x+0 x_0 é0 \U0001d7d80 7 -- not after a word or number character",
    "tel (0)30 and +49 1",  # ... or a "+"
    "a +, no digit",
]


def _random_texts(n: int = 3000) -> list[str]:
    """Short strings over the characters the scans care about, mixed with others."""
    alphabet = ("AaDEFRTZ09٣ :.+-,/_\t\n\r\x00\x1f\x7f\x80\x9f\xa0\xbb\xbf\xc2\xc3\xd3\xd4âïÃ€‚ƒ„…™œŸ\ufeff\ud800\uffff"
                "é€\U0001d7d8😀")
    rng = random.Random(14)
    return ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12))) for _ in range(n)]


NORMALIZE_CASES = [
    "plain text", "a \nb", "a\t\nb", "\nstart", "end\n", "end ", "end\u00a0", "a\n\nb", "a\n \nb", "e\u0301",  # combining
    "\u00e9", "\u1100\u1161", "\uac00\u11a8", "\u0b47\u0b3e", "x\u2028y", "x\u2029", "\ufb01", "\u2126", "\u212b",
    "\u0344", "\u0958", "\U0001d15e", "😀", "", "\r\n", "BrÃ¼cke", "a\x85", "\u3000end\u3000",
]


def _random_normalize_texts(n: int = 3000) -> list[str]:
    """Short texts over what each normalisation step looks at: spaces and newlines, marks and what they compose
    with, Hangul jamo, compatibility characters, line separators, mojibake markers."""
    alphabet = ["a", "e", "\u00e9", "\u0301", "\u0327", "\u1100", "\u1161", "\u11a8", "\uac00", "\u0b47", "\u0b3e",
                "\ufb01", "\u2126", " ", "\t", "\n", "\u00a0", "\u3000", "\u2028", "Ã", "¼", "â€", "\r", "\x00", "😀",
                "word", "λέξη", "\u0958", "\u0915\u093c"]
    rng = random.Random(11)
    return ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 10))) for _ in range(n)]


@pytest.mark.skipif(not COMPILED, reason="the C extension was not built (no C compiler)")
@pytest.mark.parametrize("form", ["NFC", "NFKC"])
def test_settled_texts_are_left_as_they_are(form, udhr_dir, monkeypatch):
    """`_textscan.settled` says True only of texts the full normalisation returns unchanged, and the results with
    and without it are equal; it answers True for most clean prose (or it would be no fast path)."""
    cfg = normalize.NormalizeConfig(form=form)
    udhr = udhr_texts(udhr_dir)
    clean = [normalize.normalize_text(t, cfg)[0] for t in udhr]  # what most web text looks like already
    texts = NORMALIZE_CASES + EDGE_CASES + udhr + clean + _random_normalize_texts()
    settled = [normalize._settled_compiled(t, normalize._SUSPECT_CLASSES, normalize._SETTLED_CLASSES,
                                           normalize._FORM_BITS[form]) for t in texts]
    fast = [normalize.normalize_text(t, cfg) for t in texts]
    monkeypatch.setattr(normalize, "_settled_compiled", None)
    slow = [normalize.normalize_text(t, cfg) for t in texts]
    assert fast == slow
    for text, ok, result in zip(texts, settled, slow):
        if ok:
            assert result == (text, False), repr(text[:80])
    assert sum(settled[len(texts) - len(clean) - 3000:-3000]) > 0.8 * len(clean) and not all(settled)  # 85%: marks fall back


def test_no_composite_above_the_plane_composes_with_a_code_point_in_it():
    """`normalize._settled_classes` looks for the second code points of canonical pairs in the composites of the
    Basic Multilingual Plane only: this Python's Unicode has none above it whose second code point is in it."""
    import unicodedata

    for c in range(0x10000, 0x110000):
        parts = unicodedata.decomposition(chr(c)).split()
        if len(parts) == 2 and not parts[0].startswith("<"):
            assert int(parts[1], 16) >= 0x10000, hex(c)


def _reference_pii_hints(text: str) -> tuple[int, bool, bool, bool, bool]:
    first = pii._DIGIT.search(text)
    if first is None:
        return -1, False, False, False, False
    return (first.start(), pii._IBAN_HINT.search(text, first.start()) is not None,
            "::" in text or text.count(":") >= 7, pii._IPV4_HINT.search(text) is not None,
            "+" in text or pii._FREE_ZERO.search(text) is not None)


@pytest.mark.skipif(not COMPILED, reason="the C extension was not built (no C compiler)")
def test_suspect_is_the_regex(udhr_dir):
    texts = EDGE_CASES + udhr_texts(udhr_dir) + _random_texts()
    for text in texts:
        assert normalize.is_suspect(text) == (normalize._SUSPECT.search(text) is not None), repr(text[:80])
    assert sum(map(normalize.is_suspect, texts)) > 100  # both answers occur


@pytest.mark.skipif(not COMPILED, reason="the C extension was not built (no C compiler)")
def test_pii_hints_are_the_regexes(udhr_dir):
    texts = EDGE_CASES + udhr_texts(udhr_dir) + _random_texts()
    answers = []
    for text in texts:
        answers.append(pii.pii_hints(text))
        assert answers[-1] == _reference_pii_hints(text), repr(text[:80])
    for kind in range(1, 5):  # each hint both true and false somewhere
        assert {a[kind] for a in answers} == {True, False}, kind
    assert pii.pii_hints("DE89 3704")[1] and not pii.pii_hints("De89 3704")[1]


LINE_PIECES = ["\n", "\n\n", " ", "\t", "\xa0", "\u3000", "\u2028", "\x1c", "\x85", "\r", ".", "..", "...", "…", "#",
               "- ", "•", "* x", "·", "word", "Wort", "a", "a ", " a", "😀", "𝐀", "\ud800", "\n- item\n", "line…\n"]


def _random_line_texts(n: int = 4000) -> list[str]:
    """Texts of lines with what `line_stats` counts: whitespace of every kind (only "\n" splits), runs of dots,
    bullets, ellipses at line ends, code points of 1, 2 and 4 bytes, repeated lines."""
    rng = random.Random(21)
    return ["".join(rng.choice(LINE_PIECES) for _ in range(rng.randint(0, 16))) for _ in range(n)]


@pytest.mark.skipif(not COMPILED, reason="the C extension was not built (no C compiler)")
def test_line_stats_is_the_python(udhr_dir):
    texts = EDGE_CASES + udhr_texts(udhr_dir) + _random_line_texts()
    texts += ["\n".join(f"line {i}" for i in range(1000)), "\n".join(["same"] * 300 + ["other"])]  # past 256 lines
    answers, maybe_equal = [], 0
    for text in texts:
        answers.append(quality.line_stats(text))
        python = quality._line_stats_python(text)
        assert answers[-1][:5] == python[:5], repr(text[:80])
        assert answers[-1][5] <= python[5], repr(text[:80])  # "distinct" only when no two lines are equal
        maybe_equal += answers[-1][5] < python[5]  # lines that only share a hash: compared in Python
    assert maybe_equal < len(texts) / 100, maybe_equal
    for field in range(5):  # each count zero and nonzero somewhere, both answers of `distinct`
        assert {bool(a[field]) for a in answers} == {True, False}, field
    assert {a[5] for a in answers} == {True, False}
    assert quality.line_stats(".....\n......") == (0, 3, 2, 0, 2, True)  # str.count: non-overlapping "..."


@pytest.mark.parametrize("compiled", [True, False])
def test_check_quality_is_the_same_without_the_line_scan(compiled, udhr_dir, monkeypatch):
    """check_quality's answers, with `line_stats` in C or in Python, against the lines built in Python only."""
    if compiled and not COMPILED:
        pytest.skip("the C extension was not built (no C compiler)")
    if not compiled:
        monkeypatch.setattr(quality, "_line_stats_compiled", None)
    cfg = quality.QualityConfig()
    rng = random.Random(3)
    texts = [" ".join(rng.choice(("Wort", "word", "ein", "the", "x")) for _ in range(rng.randint(40, 80))) + piece
             for piece in _random_line_texts(1500)]
    texts += [" ".join(["line of some words here"] * 3) + "\n" + "\n".join(rng.choice(("- a b c d", "... x y z w", "x y z w …", "r s t u v"))
                                                                     for _ in range(rng.randint(5, 30))) for _ in range(500)]
    texts += ["\n".join(f"{rng.choice('-•*')} item {i} of the list here" for i in range(rng.randint(5, 30))) for _ in range(100)]
    reasons = [quality.check_quality(t, cfg) for t in texts]
    monkeypatch.setattr(quality, "line_stats", lambda text: (*quality._line_stats_python(text)[:5], False))
    assert reasons == [quality.check_quality(t, cfg) for t in texts]
    assert {"bullet_lines", "ellipsis_lines", "dup_lines", None} <= set(reasons), set(reasons)


PII_PIECES = ["+49 30 1234567", "030 1234567", "(01) 234 5678", "DE89 3704 0044 0532 0130 00", "DE89 3704 0044", "10.0.0.1",
              "1.2.3", "fe80::1", "a:b:c:d:e:f:g:1", "x@example.org", "2024", "0", "+", ".", ":", "word", " ", "\n", ","]


def _redact_without_fast_paths(text: str, cfg: pii.PiiConfig) -> tuple[str, dict[str, int]]:
    """`pii.redact_pii` as if no hint existed: every pattern runs, in its order."""
    counts: dict[str, int] = {}
    text, counts["email"] = pii._EMAIL.subn(cfg.email_replacement, text)
    text, counts["iban"] = pii._substitute_iban(text, cfg.iban_replacement)
    text, n_ipv6 = pii._substitute(pii._IPV6, text, cfg.ip_replacement, pii._ipv6_ok)
    text, n_ipv4 = pii._IPV4.subn(cfg.ip_replacement, text)
    counts["ip"] = n_ipv6 + n_ipv4
    text, counts["phone"] = pii._substitute(pii._PHONE, text, cfg.phone_replacement, pii._phone_ok)
    return text, {kind: n for kind, n in counts.items() if n}


@pytest.mark.parametrize("compiled", [True, False])
def test_the_hints_never_change_a_redaction(compiled, monkeypatch):
    """The hints only decide which regexes run: text and counts are those of running every pattern, also with
    replacements that hold what a later pattern looks for (the hints are taken again after a replacement)."""
    if compiled and not COMPILED:
        pytest.skip("the C extension was not built (no C compiler)")
    if not compiled:
        monkeypatch.setattr(pii, "_pii_hints_compiled", None)
    rng = random.Random(7)
    texts = ["".join(rng.choice(PII_PIECES) for _ in range(rng.randint(1, 12))) for _ in range(3000)]
    for cfg in (pii.PiiConfig(), pii.PiiConfig(iban_replacement="fe80::1:2:3", ip_replacement="030 1234567")):
        redacted = [pii.redact_pii(t, cfg) for t in texts]
        assert redacted == [_redact_without_fast_paths(t, cfg) for t in texts]
        assert sum(bool(counts) for _, counts in redacted) > 1000  # most texts had something redacted


def test_without_the_extension_the_regexes_answer(monkeypatch):
    monkeypatch.setattr(normalize, "_suspect_compiled", None)
    monkeypatch.setattr(normalize, "_settled_compiled", None)
    monkeypatch.setattr(pii, "_pii_hints_compiled", None)
    monkeypatch.setattr(quality, "_line_stats_compiled", None)
    assert quality.line_stats("- a\n- a…\n#") == (1, 1, 3, 2, 1, True)
    assert normalize.is_suspect("BrÃ¼cke") and not normalize.is_suspect("Brücke")
    assert normalize.normalize_text("BrÃ¼cke e\u0301 \n", normalize.NormalizeConfig()) == ("Brücke \u00e9", True)
    assert pii.pii_hints("IBAN DE89 3704") == (7, True, False, False, False)
    assert pii.pii_hints("IP 10.0.0.1, tel. +49 30 1234") == (3, False, False, True, True)
    assert pii.pii_hints("no digit: +") == (-1, False, False, False, False)


@pytest.mark.skipif(not COMPILED, reason="the C extension was not built (no C compiler)")
def test_a_wrong_table_is_refused():
    from stages.ingest import _textscan

    with pytest.raises(ValueError, match="65536 bytes"):
        _textscan.suspect("text", b"\x00" * 10)
    with pytest.raises(ValueError, match="form must be"):
        _textscan.settled("text", normalize._SUSPECT_CLASSES, normalize._SETTLED_CLASSES, 3)
    with pytest.raises(ValueError, match="676 bytes"):
        _textscan.pii_hints("text", pii._HINT_CLASSES, b"\x00")
    with pytest.raises(TypeError):
        _textscan.pii_hints(b"bytes", pii._HINT_CLASSES, pii._COUNTRY_PAIRS)
    with pytest.raises(ValueError, match="65536 bytes"):
        _textscan.line_stats("text", b"")


def test_compiled_where_a_compiler_exists():
    """`optional = true` lets the install succeed without a compiler; it must not hide a broken build."""
    compiler = (sysconfig.get_config_var("CC") or "cc").split()[0]
    if shutil.which(compiler) is None:
        pytest.skip(f"no C compiler ({compiler}) on this machine")
    assert COMPILED, "stages/ingest/_textscan.c did not build: run `pip install -e .` and read its errors"
