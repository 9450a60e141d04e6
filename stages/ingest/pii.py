"""Redaction of personal data that has a recognisable shape: e-mail addresses, IP addresses, phone numbers, IBANs.

Why: web text contains contact details of private persons; a model that memorises them can leak them, and
the GDPR / EU AI Act documentation asks what was done about it. Names need NER (slow, language-specific) and
are out of scope here; these four kinds are found by regular expressions plus validation.

Why the validation: a false positive damages real text (years, dates, prices, version numbers, ISBNs), so
every pattern is narrow and then checked (IP addresses parsed, IBANs by length and mod-97 checksum, phone
numbers only with a leading + or trunk 0 and one kind of separator: in most EU languages a space or dot is the
thousands separator, so "912 345 678" may be a quantity). Fast paths skip every regex a document cannot match;
`pii_hints` takes most of them in one scan.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Callable

from pydantic import BaseModel, ConfigDict



class PiiConfig(BaseModel):
    """`[ingest.pii]`: which kinds of personal data are replaced, and by what."""

    model_config = ConfigDict(extra="forbid", strict=True, use_attribute_docstrings=True)

    enabled: bool = True
    """Master switch."""
    email: bool = True
    """Redact e-mail addresses."""
    ip: bool = True
    """Redact IPv4 and IPv6 addresses."""
    phone: bool = True
    """Redact phone numbers (international, and national with a trunk 0)."""
    iban: bool = True
    """Redact IBANs of EU/EEA countries, Switzerland and the UK (checksum-validated)."""
    email_replacement: str = "<EMAIL>"
    """Text that replaces an e-mail address."""
    ip_replacement: str = "<IP_ADDRESS>"
    """Text that replaces an IPv4 or IPv6 address."""
    phone_replacement: str = "<PHONE>"
    """Text that replaces a phone number."""
    iban_replacement: str = "<IBAN>"
    """Text that replaces an IBAN."""


# Performance note: Python's `re` scans fast only when a pattern starts with a character (class); a leading
# look-behind makes it try every position. So the patterns below consume their first character
# and then look behind it, e.g. `0(?<![\w.]0)` = "a 0 that does not continue a word or number".

_DIGIT = re.compile(r"\d")

_EMAIL = re.compile(r"(?<![\w.%+\-])[\w%+\-]+(?:\.[\w%+\-]+)*@(?:[^\W_](?:[\w\-]*[^\W_])?\.)+[^\W\d_]{2,}(?![\w\-])")

_OCTET = r"(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)"
_IPV4 = re.compile(rf"(?<![\w.])(?:{_OCTET}\.){{3}}{_OCTET}(?!\w|\.\d)")
_IPV4_HINT = re.compile(r"\.\d{1,3}\.\d{1,3}\.\d")  # cheap pre-check: three dots between digits
_IPV6 = re.compile(r"(?<![\w:.])[0-9A-Fa-f]{0,4}(?::[0-9A-Fa-f]{0,4}){2,7}(?![\w:]|\.\w)")

_IBAN_LENGTHS = {
    "AT": 20, "BE": 16, "BG": 22, "CY": 28, "CZ": 24, "DE": 22, "DK": 18, "EE": 20, "ES": 24, "FI": 18,
    "FR": 27, "GR": 27, "HR": 21, "HU": 28, "IE": 22, "IT": 27, "LT": 20, "LU": 20, "LV": 21, "MT": 31,
    "NL": 18, "PL": 28, "PT": 25, "RO": 24, "SE": 24, "SI": 19, "SK": 24,  # EU 27
    "IS": 26, "LI": 21, "NO": 15, "CH": 21, "GB": 22,  # EEA, Switzerland, United Kingdom
}  # fmt: skip
# country code + 2 check digits + groups of 4 (spaced or not) + a shorter last group; validated in _iban_end
_IBAN = re.compile(
    rf"(?:{'|'.join(_IBAN_LENGTHS)})(?<!\w..)\d\d(?:[ \u00a0]?[0-9A-Z]{{4}}){{2,7}}(?:[ \u00a0]?[0-9A-Z]{{1,3}})?\b"
)

# Every IBAN match has a digit right after its country code, at or after the document's first digit: a scan
# from there for such a digit decides whether the (slower, letter-started) IBAN pattern needs to run at all.
_IBAN_HINT = re.compile(rf"\d(?<=(?:{'|'.join(_IBAN_LENGTHS)})\d)")

_SEP = r"(?:[ \u00a0]?[\-./][ \u00a0]?|[ \u00a0])"  # one space, or - . / with optional spaces around
_NUMBER_CHAR = r"[\w+\-./,]"  # a character of a word or number
_FREE = rf"(?<!{_NUMBER_CHAR}.)"  # after a first character: the character before it is not part of a word/number
_INTL_REST = rf"[1-9]\d{{0,2}}(?:{_SEP}?\(0\))?(?:{_SEP}?\(?\d{{1,5}}\)?){{1,6}}"  # country code, "(0)", groups
_NATIONAL_REST = rf"(?:{_SEP}\d{{2,8}}){{1,4}}"  # 1-4 groups, each after a separator
_PHONE = re.compile(
    rf"(?:\+{_FREE}{_INTL_REST}"  # +49 30 1234567, +353 (0)1 234 5678
    rf"|0{_FREE}0{_INTL_REST}"  # 0049 30 1234567
    rf"|\({_FREE}0\d{{1,4}}\){_NATIONAL_REST}"  # (01) 234 5678
    rf"|0{_FREE}\d{{1,4}}{_NATIONAL_REST})"  # 030 1234567, 01 23 45 67 89
    r"(?!\w|[.,\-/]\d)"  # and not followed by more of a word or number
)
# Every phone number match starts with "+" or with a "0" that does not continue a word or number (the
# alternatives starting with "(" continue with such a "0"): a cheap test, as the pattern starts with a literal.
_FREE_ZERO = re.compile(rf"0{_FREE}")
_BETWEEN_DIGITS = re.compile(r"(?<=\d)\D+(?=\d)")
_DATE_START = re.compile(r"\d{1,2}([./\-])\d{1,2}\1\d{2,4}(?!\d)")


def _country_pairs() -> bytes:
    """The IBAN country codes as `_textscan.pii_hints` reads them: 26 x 26 bytes, 1 for a listed pair."""
    table = bytearray(26 * 26)
    for code in _IBAN_LENGTHS:
        table[(ord(code[0]) - 65) * 26 + ord(code[1]) - 65] = 1
    return bytes(table)


def _hint_classes() -> bytes:
    """`_DIGIT`'s and `_NUMBER_CHAR`'s characters as `_textscan.pii_hints` reads them: a byte per code point of
    the Basic Multilingual Plane, bit 1 for a decimal digit, bit 2 for a character of a word or number."""
    every = "".join(map(chr, range(0x10000)))  # lone surrogates included: str holds them
    table = bytearray(0x10000)
    for bit, pattern in enumerate((_DIGIT, re.compile(_NUMBER_CHAR))):
        for m in pattern.finditer(every):
            table[m.start()] |= 1 << bit
    return bytes(table)


try:
    from ._textscan import pii_hints as _pii_hints_compiled
except ImportError:  # built without a C compiler: the regexes, same answers, slower redaction
    _pii_hints_compiled = None
else:
    _COUNTRY_PAIRS, _HINT_CLASSES = _country_pairs(), _hint_classes()


def pii_hints(text: str) -> tuple[int, bool, bool, bool, bool]:
    """(index of the first digit or -1, iban, ipv6, ipv4, phone): whether each pattern's cheap necessary
    condition holds, so that nearly every document is cleared of IBANs, IP addresses and phone numbers by one
    scan (in C) instead of one per kind. No digit: all False (each kind needs one)."""
    if _pii_hints_compiled is not None:
        return _pii_hints_compiled(text, _HINT_CLASSES, _COUNTRY_PAIRS)
    first = _DIGIT.search(text)
    if first is None:
        return -1, False, False, False, False
    return (first.start(), _IBAN_HINT.search(text, first.start()) is not None,
            "::" in text or text.count(":") >= 7, _IPV4_HINT.search(text) is not None,
            "+" in text or _FREE_ZERO.search(text) is not None)


def _count_digits(s: str) -> int:
    return sum(map(str.isdigit, s))


def _ipv6_ok(m: re.Match) -> bool:
    s = m.group()
    if "::" not in s and s.count(":") != 7:
        return False
    try:
        ipaddress.IPv6Address(s)
    except ValueError:
        return False
    return sum(1 for g in s.split(":") if g) >= 3 and _DIGIT.search(s) is not None


def _iban_end(m: re.Match) -> int | None:
    """Length of the match prefix that is a valid IBAN (the regex may run into a following word)."""
    s = m.group()
    length = _IBAN_LENGTHS[s[:2]]
    compact, end = [], 0
    for end, ch in enumerate(s, 1):
        if ch.isalnum():
            compact.append(ch)
            if len(compact) == length:
                break
    if len(compact) < length or (end < len(s) and not s[end].isspace()):
        return None
    iban = "".join(compact)
    digits = "".join(str(int(ch, 36)) for ch in iban[4:] + iban[:4])
    return end if int(digits) % 97 == 1 else None


def _phone_ok(m: re.Match) -> bool:
    s, start = m.group(), m.start()
    # digits of an IBAN that failed its checksum ("DE89 3704 0044 ...") are no phone number
    if any(i.start() < start < i.end() for i in _IBAN.finditer(m.string, max(0, start - 40), m.end())):
        return False
    if s.startswith(("+", "00")):
        return 8 <= _count_digits(s.replace("(0)", "")) <= 15
    if not 9 <= _count_digits(s) <= 12 or _DATE_START.match(s.lstrip("(")):
        return False
    # One kind of separator after the area code ("030 / 123 45 67", "01 23 45 67 89"); mixed ones are times
    # or ranges ("09.00-17.00 18").
    separators = [run.strip() or " " for run in _BETWEEN_DIGITS.findall(s.replace("(", "").replace(")", " "))]
    return len(set(separators[1:])) <= 1


def _substitute(pattern: re.Pattern, text: str, replacement: str, accept: Callable[[re.Match], bool]):
    n = 0

    def repl(m: re.Match) -> str:
        nonlocal n
        if not accept(m):
            return m.group()
        n += 1
        return replacement

    return pattern.sub(repl, text), n


def _substitute_iban(text: str, replacement: str) -> tuple[str, int]:
    n = 0

    def repl(m: re.Match) -> str:
        nonlocal n
        end = _iban_end(m)
        if end is None:
            return m.group()
        n += 1
        return replacement + m.group()[end:]

    return _IBAN.sub(repl, text), n


def redact_pii(text: str, cfg: PiiConfig) -> tuple[str, dict[str, int]]:
    """Return (text with PII replaced, {kind: number replaced}) with only nonzero kinds in the dict.

    Order: e-mail first (its digits must not become phone numbers), then IBAN, IP and phone numbers.
    """
    counts: dict[str, int] = {}
    if not cfg.enabled:
        return text, counts
    if cfg.email and "@" in text:
        text, n = _EMAIL.subn(cfg.email_replacement, text)
        if n:
            counts["email"] = n
    # The hints hold for the text they were taken of: after a replacement they are taken again (rare), since a
    # configured replacement may hold what a later pattern looks for.
    first_digit, iban, ipv6, ipv4, phone = pii_hints(text)
    if first_digit < 0:
        return text, counts
    if cfg.iban and iban:
        text, n = _substitute_iban(text, cfg.iban_replacement)
        if n:
            counts["iban"] = n
            first_digit, iban, ipv6, ipv4, phone = pii_hints(text)
    if cfg.ip:
        n_ip = 0
        if ipv6:
            text, n = _substitute(_IPV6, text, cfg.ip_replacement, _ipv6_ok)
            if n:
                n_ip += n
                first_digit, iban, ipv6, ipv4, phone = pii_hints(text)
        if ipv4:
            text, n = _IPV4.subn(cfg.ip_replacement, text)
            if n:
                n_ip += n
                first_digit, iban, ipv6, ipv4, phone = pii_hints(text)
        if n_ip:
            counts["ip"] = n_ip
    if cfg.phone and phone:
        text, n = _substitute(_PHONE, text, cfg.phone_replacement, _phone_ok)
        if n:
            counts["phone"] = n
    return text, counts
