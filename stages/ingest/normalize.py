"""Unicode and whitespace normalisation: the first step every document goes through.

Why each step exists:
- Mojibake repair: web text that was UTF-8 but got decoded as cp1252/Latin-1 ("BrÃ¼cke", "â€œ") turns every
  accented letter into two junk characters. The model would learn the junk, language ID mis-scores it and
  dedup treats "Brücke" and "BrÃ¼cke" as different. ftfy repairs it well but is slow, so it only
  runs when a cheap regex has seen the byte pattern that mojibake leaves behind (see `_MOJIBAKE`), and its
  result is kept only when it actually changed something.
- Control characters: NUL, escape sequences, C1 controls, stray BOMs and lone surrogates carry no text, break
  downstream tools (pycld2 raises on some of them; UTF-8 encoding fails on surrogates) and waste tokens.
- Line endings / trailing spaces: "\r\n" vs "\n" and invisible trailing spaces make identical lines differ
  for the repetition filters and exact dedup.
- Unicode normal form: the same word can be encoded precomposed or decomposed (é vs e + U+0301); NFC makes
  them identical without changing meaning. NFKC additionally folds compatibility forms (ligatures, full-width
  letters, superscripts) - more aggressive, so it is opt-in.

Pure function, no I/O. Cost on real text is dominated by a handful of C-level str scans.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Literal

import ftfy
from pydantic import BaseModel, ConfigDict

# What cp1252 shows for the bytes 0x80-0x9F; together with U+0080-U+00BF (Latin-1 decoding) these are the
# characters a UTF-8 continuation byte (0x80-0xBF) turns into when UTF-8 is mis-decoded.
_CP1252_C1 = "€‚ƒ„…†‡ˆ‰Š‹ŒŽ‘’“”•–—˜™š›œžŸ"
_CONT = "\x80-\xbf" + _CP1252_C1

# Mojibake markers, each "a UTF-8 lead byte seen as cp1252/Latin-1" + "a continuation byte seen the same way":
# - Â..Ó (lead bytes 0xC2-0xD3): Latin-1 supplement, Latin Extended-A/B (Polish, Czech, Baltic, Romanian
#   ș/ț, Maltese, Hungarian ő/ű), Greek (Î/Ï) and Cyrillic (Ð/Ñ) letters;
# - â + one of 0x80-0x84 + continuation: general punctuation (’ “ ” – — …), € and ™;
# - ï»¿: a UTF-8 byte order mark decoded as cp1252.
# Legitimate capitals such as Swedish "Å", Portuguese "Ã", Romanian/French "Â" are followed by letters,
# never by these symbols, so e.g. "Åland", "SÃO PAULO", "ÂNGELO" do not trigger ftfy at all.
_LEAD = "\u00c2-\u00d3"
_PUNCT = "€‚ƒ„\x80-\x84"
_MOJIBAKE = re.compile(f"[{_LEAD}][{_CONT}]|â[{_PUNCT}][{_CONT}]|ï»¿")

# Control characters except \t and \n (\r is turned into \n before), DEL, C1 controls, BOM / zero-width
# no-break space, lone surrogates and the two non-characters U+FFFE/U+FFFF.
_CONTROL_CHARS = "\x00-\x08\x0b-\x1f\x7f-\x9f\ufeff\ud800-\udfff\ufffe\uffff"
_CONTROL = re.compile(f"[{_CONTROL_CHARS}]")

# Matches exactly where _MOJIBAKE or _CONTROL matches (the \r that _CONTROL also covers included), in one pass:
# clean text, nearly all of it, is scanned once instead of twice. Written with a single character class first
# (the lookbehinds tell the alternatives apart) because Python's regex engine only skips quickly through
# text to the characters a pattern can start with when the pattern starts with one class or literal;
# `_MOJIBAKE` itself starts with an alternation and is tried at every position.
_SUSPECT = re.compile(
    f"[{_CONTROL_CHARS}{_LEAD}âï]"
    f"(?:(?<=[{_CONTROL_CHARS}])|(?<=[{_LEAD}])[{_CONT}]|(?<=â)[{_PUNCT}][{_CONT}]|(?<=ï)»¿)"
)


def _suspect_classes() -> bytes:
    """The character classes of `_SUSPECT` as `_textscan.suspect` reads them: a byte of bits per code point of
    the Basic Multilingual Plane (every class lies in it), from the same sets as the regex."""
    every = "".join(map(chr, range(0x10000)))  # lone surrogates included: str holds them
    table = bytearray(0x10000)
    for bit, chars in enumerate((_CONTROL_CHARS, _LEAD, _CONT, _PUNCT, "â", "ï", "»", "¿")):
        for m in re.finditer(f"[{chars}]", every):
            table[m.start()] |= 1 << bit
    return bytes(table)


_MATCH_STARTS = 1 | 2 | 16 | 32  # the bits of _suspect_classes where a _SUSPECT match can start: control, lead, â, ï


def _settled_classes(suspect_classes: bytes) -> bytes:
    """What `_textscan.settled` reads beside `_suspect_classes()`: a byte per code point of the Basic Multilingual
    Plane, bit 1 for str.isspace(), bits 2 (NFC) and 4 (NFKC) for a code point that `normalize_text`'s character
    steps leave alone wherever it stands: not U+2028/U+2029 (they become "\n"), canonical combining class 0,
    in that form on its own, and nothing before it can compose with it (the second of no canonical pair, no
    Hangul vowel or trailing consonant). Unicode's quick check (UAX #15) answers Yes for a text of such code points,
    so it is normalised. Composites above the plane have their second code point there too (a test checks).
    Bit 8: where a `_SUSPECT` match can start (the suspect table's first four bits); bit 16: "\n"."""
    seconds = set(range(0x1161, 0x1176)) | set(range(0x11A8, 0x11C3))  # Hangul V and T jamo
    for c in range(0x10000):
        parts = unicodedata.decomposition(chr(c)).split()
        if len(parts) == 2 and not parts[0].startswith("<"):
            seconds.add(int(parts[1], 16))
    table = bytearray(0x10000)
    for c in range(0x10000):
        ch = chr(c)
        bits = 1 if ch.isspace() else 0
        if c not in seconds and c not in (0x2028, 0x2029) and unicodedata.combining(ch) == 0:
            bits |= (2 if unicodedata.is_normalized("NFC", ch) else 0) | (4 if unicodedata.is_normalized("NFKC", ch) else 0)
        table[c] = bits | (8 if suspect_classes[c] & _MATCH_STARTS else 0)
    table[ord("\n")] |= 16
    return bytes(table)


_FORM_BITS = {"NFC": 2, "NFKC": 4}

try:
    from ._textscan import settled as _settled_compiled
    from ._textscan import suspect as _suspect_compiled
except ImportError:  # built without a C compiler: the regex, same answers, slower
    _suspect_compiled = _settled_compiled = None
else:
    _SUSPECT_CLASSES = _suspect_classes()
    _SETTLED_CLASSES = _settled_classes(_SUSPECT_CLASSES)


def is_suspect(text: str) -> bool:
    """Whether `_SUSPECT` matches in text: the mojibake repair or control character removal may have work."""
    if _suspect_compiled is None:
        return _SUSPECT.search(text) is not None
    return _suspect_compiled(text, _SUSPECT_CLASSES)


class NormalizeConfig(BaseModel):
    """`[ingest.normalize]`: how raw documents are cleaned before anything else looks at them."""

    model_config = ConfigDict(extra="forbid", strict=True, use_attribute_docstrings=True)

    form: Literal["NFC", "NFKC"] = "NFC"
    """Unicode normal form. NFC is lossless; NFKC also folds ligatures/full-width forms (lossy)."""
    fix_mojibake: bool = True
    """Repair UTF-8 text that was mis-decoded as cp1252/Latin-1 (ftfy), only where markers are seen."""
    strip_control_chars: bool = True
    """Remove control characters (except tab and newline), BOMs and lone surrogates."""


def normalize_text(text: str, cfg: NormalizeConfig) -> tuple[str, bool]:
    """Return (normalised text, whether mojibake was repaired).

    Order matters: mojibake is repaired first because the C1 control characters it may contain are evidence
    ftfy needs; control characters are removed before Unicode normalisation; trailing whitespace last
    (every line is right-stripped, blank lines at the start and end of the document are dropped).
    """
    # Nearly every document has nothing to change: one scan in C says so (`_textscan.settled`).
    if _settled_compiled is not None and _settled_compiled(text, _SUSPECT_CLASSES, _SETTLED_CLASSES, _FORM_BITS[cfg.form]):
        return text, False
    repaired = False
    ascii_only = text.isascii()  # pure ASCII can contain neither mojibake nor non-NFC sequences
    # Without a mojibake marker or a control character (\r included) the first two steps and the control
    # character removal have nothing to do (the U+2028/U+2029 replacement only adds "\n").
    suspect = is_suspect(text)
    if suspect:
        if cfg.fix_mojibake and not ascii_only and _MOJIBAKE.search(text):
            fixed = ftfy.fix_encoding(text)
            if fixed != text:
                text, repaired = fixed, True
        if "\r" in text:
            text = text.replace("\r\n", "\n").replace("\r", "\n")
    if not ascii_only and ("\u2028" in text or "\u2029" in text):
        text = text.replace("\u2028", "\n").replace("\u2029", "\n")
    if suspect and cfg.strip_control_chars and _CONTROL.search(text):
        text = _CONTROL.sub("", text)
    if not ascii_only and not unicodedata.is_normalized(cfg.form, text):
        text = unicodedata.normalize(cfg.form, text)
    # str.rstrip per line (C-level map) also removes NBSP and other Unicode spaces at line ends.
    text = "\n".join(map(str.rstrip, text.split("\n"))).strip("\n")
    return text, repaired
