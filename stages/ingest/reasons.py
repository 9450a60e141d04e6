"""Why a document was removed: the names in a rejected row's `reason` and in the record's `per_filter`.

Defined once, here, for the filters that give them and for whoever reads them back (the record re-exports them
for other stages); nothing to import but the names, so the record stays light.
"""

from __future__ import annotations

EMPTY = "empty"  # no text left after normalisation
OPT_OUT = "tdm_opt_out"  # the document's domain reserved its rights (text-and-data-mining opt-out)
BLOCKLIST = "blocklist"  # the URL or domain is on a configured block list

# language identification (langid.py), in check order
LANG_NOT_EU, LANG_LOW_SCORE, LANG_MISMATCH = "lang_not_eu", "lang_low_score", "lang_mismatch"
LANGID_REASONS: tuple[str, ...] = (LANG_NOT_EU, LANG_LOW_SCORE, LANG_MISMATCH)

# quality filters (quality.py), in check order; the n-gram sizes name the repetition filters
TOP_NGRAM_SIZES = (2, 3, 4)
DUP_NGRAM_SIZES = (5, 6, 7, 8, 9, 10)
QUALITY_REASONS: tuple[str, ...] = (
    "too_few_words", "too_many_words", "avg_word_length", "symbol_ratio", "bullet_lines", "ellipsis_lines",
    "alpha_words", "dup_lines", "dup_line_chars", "dup_paragraphs", "dup_paragraph_chars",
    *(f"top_{n}gram" for n in TOP_NGRAM_SIZES), *(f"dup_{n}gram" for n in DUP_NGRAM_SIZES),
)  # fmt: skip

# evaluation sets kept out of the training data ([[ingest.decontaminate]])
EVAL_OVERLAP = "evaluation_overlap"

# deduplication (dedup/)
EXACT_DUP, NEAR_DUP = "exact_duplicate", "near_duplicate"

# every reason the stage can record, in the order of the document chain (the record's per_filter order)
ALL_REASONS: tuple[str, ...] = (EMPTY, OPT_OUT, BLOCKLIST, *LANGID_REASONS, *QUALITY_REASONS, EVAL_OVERLAP, EXACT_DUP,
                               NEAR_DUP)
