"""Language identification for the 24 official EU languages, with a reject path for everything else.

Why pycld2: it ships its model inside the wheel (works offline), knows all 24 EU languages including Irish
and Maltese, and is fast (bench/langid_bench.py). Models restricted to the 24 labels would force Russian or
Norwegian text into an EU label; cld2 knows ~160 languages, so non-EU text gets its own label and is rejected.

Conventions:
- `identify` returns (code, score): the cld2 code after the mapping below (ISO 639-1 for the EU languages,
  whatever cld2 says for others, "und" when nothing could be identified; never None). `is_eu` tells them apart.
- Croatian: cld2 knows Bosnian ("bs") and Serbian ("sr", "sr-ME", "sh"), near-identical to Croatian in Latin
  script and none of them EU languages, so Latin-script bs/sr/sh/sr-ME is mapped to "hr"; Serbian in Cyrillic
  cannot be Croatian (always written in Latin) and stays "sr". Norwegian is NOT mapped to Danish.
- Score: cld2's percentage of the text's bytes in the best code (entries that map to the same code added),
  divided by 100 and halved when cld2 flags the decision as unreliable (short or very mixed text).
"""

from __future__ import annotations

import re

import pycld2
from pydantic import BaseModel, ConfigDict, Field, field_validator

from pipeline.languages import EU_LANGUAGE_CODES as EU_LANGUAGES  # the one language table
from stages.ingest.reasons import LANG_LOW_SCORE, LANG_MISMATCH, LANG_NOT_EU

_EU = frozenset(EU_LANGUAGES)

UNDETERMINED = "und"
"""Code returned when no language could be identified (ISO 639-2 'undetermined')."""

_NO_LANGUAGE = frozenset({"un", "xxx"})  # cld2's "unknown" entries
_BCMS = frozenset({"bs", "sr", "sr-ME", "sh"})  # cld2 labels of Bosnian, Serbian, Montenegrin (+ legacy "sh")
_CYRILLIC = re.compile("[\u0400-\u04ff]")
_LETTER = re.compile(r"[^\W\d_]")

# Characters cld2 refuses ("input contains invalid UTF-8"): C0/C1 controls except \t \n \f \r, DEL and the
# Unicode non-characters (U+FDD0-U+FDEF and U+xFFFE/U+xFFFF of every plane). Lone surrogates cannot even be
# encoded to UTF-8; they are dropped by the encode/decode round trip in `_clean`.
_CLD2_REFUSES = re.compile(
    "[\x00-\x08\x0b\x0e-\x1f\x7f-\x9f\ufdd0-\ufdef"
    + "".join(f"{chr(p * 0x10000 + 0xFFFE)}{chr(p * 0x10000 + 0xFFFF)}" for p in range(17))
    + "]"
)


def is_eu(code: str | None) -> bool:
    """True for the ISO 639-1 codes of the 24 official EU languages."""
    return code in _EU


def _clean(text: str) -> str:
    text = text.encode("utf-8", "ignore").decode("utf-8")
    return _CLD2_REFUSES.sub(" ", text)


class LangIdConfig(BaseModel):
    """`[ingest.langid]`: which documents are kept after language identification."""

    model_config = ConfigDict(extra="forbid", strict=True, use_attribute_docstrings=True)

    min_score: float = Field(0.5, ge=0.0, le=1.0)
    """Minimum score (see module docstring) to accept a document. 0.5 rejects unreliable guesses and text
    that is less than half in its language."""
    min_score_per_language: dict[str, float] = {}
    """Per-language override of `min_score`, keyed by ISO 639-1 code (FineWeb-2 sets a per-language
    threshold from the score distribution)."""
    reject_mismatch: bool = True
    """Reject a document whose detected language differs from the language declared by its source."""

    @field_validator("min_score_per_language")
    @classmethod
    def _check_per_language(cls, v: dict[str, float]) -> dict[str, float]:
        for lang, score in v.items():
            if lang not in _EU:
                raise ValueError(f"min_score_per_language: {lang!r} is not one of {' '.join(EU_LANGUAGES)}")
            if not 0.0 <= score <= 1.0:
                raise ValueError(f"min_score_per_language[{lang!r}] = {score} is outside 0..1")
        return v


class LanguageIdentifier:
    """pycld2 wrapper that maps labels to the project's conventions and decides keep/reject."""

    def __init__(self, cfg: LangIdConfig | None = None):
        self.cfg = cfg or LangIdConfig()

    def identify(self, text: str) -> tuple[str, float]:
        """(language code, score in 0..1); ("und", 0.0) when nothing was identified."""
        try:
            reliable, _, details = pycld2.detect(text, bestEffort=True)
        except (pycld2.error, UnicodeEncodeError):
            try:
                reliable, _, details = pycld2.detect(_clean(text), bestEffort=True)
            except (pycld2.error, UnicodeEncodeError):  # pragma: no cover - _clean removes every known cause
                return UNDETERMINED, 0.0
        percents: dict[str, int] = {}
        for _name, code, percent, _score in details:
            if percent == 0 or code in _NO_LANGUAGE:
                continue
            if code in _BCMS:
                code = self._map(code, text)
            percents[code] = percents.get(code, 0) + percent
        if not percents:
            return UNDETERMINED, 0.0
        if len(percents) == 1:  # the usual case: one language
            ((code, percent),) = percents.items()
        else:
            code = max(percents, key=percents.__getitem__)  # first of equal maxima: cld2's order
            percent = percents[code]
        score = min(percent, 100) / 100.0
        return code, score if reliable else score / 2

    @staticmethod
    def _map(code: str, text: str) -> str:
        if code in _BCMS:
            # Latin-script Bosnian/Serbian is Croatian for our purposes; Cyrillic Serbian is not. Most such texts
            # have no Cyrillic letter at all: one scan answers them without listing every letter of the text.
            if _CYRILLIC.search(text) is None:
                return "hr"
            n_cyrillic = len(_CYRILLIC.findall(text))
            return "sr" if n_cyrillic > 0.5 * len(_LETTER.findall(text)) else "hr"
        return code

    def decide(self, declared: str, text: str) -> tuple[str, float, str | None]:
        """(detected code, score, reject reason or None).

        Reasons, checked in this order: "lang_not_eu" (detected language is not one of the 24, including
        "und"), "lang_low_score" (score below the detected language's minimum), "lang_mismatch" (detected
        differs from `declared`, only when `reject_mismatch`). Low score is checked before mismatch because a
        mismatch on an uncertain detection says little about the declared label.
        """
        code, score = self.identify(text)
        if code not in _EU:
            return code, score, LANG_NOT_EU
        if score < self.cfg.min_score_per_language.get(code, self.cfg.min_score):
            return code, score, LANG_LOW_SCORE
        if self.cfg.reject_mismatch and code != declared:
            return code, score, LANG_MISMATCH
        return code, score, None

