"""The language table's FineWeb-2 names, as FineWeb-2 publishes them (HuggingFaceFW/fineweb-2's subsets, listed
in github.com/huggingface/fineweb-2 fineweb2-language-distribution.csv at pipeline.languages.FINEWEB2_LIST_REVISION)."""

import pytest

from pipeline.languages import EU_LANGUAGE_CODES, LANGUAGES, PLACEHOLDERS, expand_template

# Copied from that list: the 23 non-English EU languages' subsets (GlotLID labels).
FINEWEB2_SUBSETS = {
    "bg": "bul_Cyrl", "cs": "ces_Latn", "da": "dan_Latn", "de": "deu_Latn", "el": "ell_Grek", "es": "spa_Latn",
    "et": "ekk_Latn", "fi": "fin_Latn", "fr": "fra_Latn", "ga": "gle_Latn", "hr": "hrv_Latn", "hu": "hun_Latn",
    "it": "ita_Latn", "lt": "lit_Latn", "lv": "lvs_Latn", "mt": "mlt_Latn", "nl": "nld_Latn", "pl": "pol_Latn",
    "pt": "por_Latn", "ro": "ron_Latn", "sk": "slk_Latn", "sl": "slv_Latn", "sv": "swe_Latn",
}


def test_every_language_has_its_published_fineweb2_name():
    assert {code: LANGUAGES[code].fineweb2 for code in EU_LANGUAGE_CODES if code != "en"} == FINEWEB2_SUBSETS
    assert LANGUAGES["en"].fineweb2 is None  # FineWeb-2 is non-English


def test_estonian_differs_from_flores():
    assert expand_template("data/{fineweb2}/train/*", "et") == "data/ekk_Latn/train/*"
    assert expand_template("{flores}", "et") == "est_Latn"
    assert "fineweb2" in PLACEHOLDERS


def test_english_cannot_expand_the_fineweb2_placeholder():
    with pytest.raises(ValueError, match="no FineWeb-2 config"):
        expand_template("{fineweb2}", "en")
    assert expand_template("{flores}", "en") == "eng_Latn"
