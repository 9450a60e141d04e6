"""Normalisation: mojibake repaired only where it is mojibake, control characters and whitespace cleaned."""

import pytest

from stages.ingest.normalize import NormalizeConfig, normalize_text

CFG = NormalizeConfig()

CLEAN = {
    "de": "Über die Brücke gehen – „Grüße“ aus Köln.",
    "pl": "Zażółć gęślą jaźń, to jest zdanie testowe.",
    "ro": "Și țara își păstrează tradițiile.",
    "hu": "Árvíztűrő tükörfúrógép: ő és ű.",
    "cs": "Příliš žluťoučký kůň úpěl ďábelské ódy.",
    "mt": "Ħarsa lejn il-ġnien ta' ż-żgħar.",
    "el": "Καλημέρα σας, τι κάνετε;",
    "bg": "Здравейте, как сте днес?",
    "en": "It’s “quoted” — and… €5.",
}


def mojibake(text: str, encoding: str) -> str:
    """UTF-8 bytes decoded with the wrong codec, the way broken web pages show them."""
    raw = text.encode("utf-8")
    if encoding == "latin-1":
        return raw.decode("latin-1")
    # cp1252 leaves 0x81, 0x8D, 0x8F, 0x90, 0x9D undefined; browsers show them as C1 controls
    return "".join(bytes([b]).decode("cp1252", errors="ignore") or chr(b) for b in raw)


@pytest.mark.parametrize("encoding", ["cp1252", "latin-1"])
@pytest.mark.parametrize("lang", sorted(CLEAN))
def test_mojibake_repaired(lang, encoding):
    broken = mojibake(CLEAN[lang], encoding)
    assert broken != CLEAN[lang]
    assert normalize_text(broken, CFG) == (CLEAN[lang], True)


@pytest.mark.parametrize(
    "text",
    [
        "ÅSA ÅNGSTRÖM bor på Åland. Årets bästa.",  # Swedish capital Å
        "SÃO PAULO, SÃO TOMÉ E PRÍNCIPE",  # Portuguese capital Ã
        "ÎN ROMÂNIA, ÂNGELO și ÎNVĂȚĂMÂNT",  # Romanian/Portuguese Î Â
        "ÁRVÍZTŰRŐ TÜKÖRFÚRÓGÉP",  # Hungarian capitals
        "«ÉTÉ» et «ÇA»",  # capital followed by a guillemet: looks suspicious, ftfy keeps it
        "ÄPFEL, Öl und Übermut; ÅÄÖ.",  # German/Swedish capitals followed by letters
        *CLEAN.values(),
    ],
)
def test_legitimate_text_untouched(text):
    assert normalize_text(text, CFG) == (text, False)


def test_mojibake_repair_can_be_disabled():
    broken = mojibake(CLEAN["de"], "cp1252")
    assert normalize_text(broken, NormalizeConfig(fix_mojibake=False)) == (broken, False)


def test_control_characters_line_endings_and_trailing_spaces():
    text = "\ufeffTitle \t\r\nline\x00 one\x1b[0m\x85\r\n\r\nline\ttwo\u00a0 \rthree\u2028four\ud800\n\n"
    assert normalize_text(text, CFG) == ("Title\nline one[0m\n\nline\ttwo\nthree\nfour", False)


def test_control_characters_kept_when_disabled():
    out, _ = normalize_text("a\x00b\r\nc", NormalizeConfig(strip_control_chars=False))
    assert out == "a\x00b\nc"


def test_unicode_normal_forms():
    decomposed = "Cafe\u0301 in Gro\u0308ningen: ﬁnance ①"
    assert normalize_text(decomposed, CFG)[0] == "Café in Gröningen: ﬁnance ①"
    assert normalize_text(decomposed, NormalizeConfig(form="NFKC"))[0] == "Café in Gröningen: finance 1"


def test_ascii_fast_path_still_cleans():
    assert normalize_text("plain ascii  \r\n\x07text", CFG) == ("plain ascii\ntext", False)


def test_config_is_strict():
    with pytest.raises(ValueError):
        NormalizeConfig(form="NFD")
    with pytest.raises(ValueError):
        NormalizeConfig(fix_mojibake_everywhere=True)
