"""Settings of the tokenizer stage: `[tokenizer]`, `[tokenizer.sample]`, `[tokenizer.report]`."""

from __future__ import annotations

import os
from typing import Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from pipeline.config import StrictModel


class SampleConfig(StrictModel):
    """How much text of each language the tokenizer sees (the corpus itself is never loaded whole).

    UniMax (Chung et al. 2023): every language gets an equal share of the character budget, capped at
    `max_passes` passes over its data; what a small language cannot use goes to the larger ones. Temperature
    sampling draws shares proportional to (size share)^(1/temperature), also capped at `max_passes`.
    """

    policy: Literal["unimax", "temperature"] = "unimax"
    budget_chars: int = Field(50_000_000, ge=1_000, description="Characters of text in the training sample, all languages together.")
    max_passes: float = Field(4.0, gt=0, description="At most this many passes over one language's text.")
    temperature: float = Field(3.33, ge=1.0, description="For policy temperature: 1 = proportional, larger = flatter.")
    max_line_chars: int = Field(4096, ge=16, description="Longer lines are cut (SentencePiece skips overlong sentences).")


class BalanceConfig(StrictModel):
    """How the per-language shares of the sample are chosen beyond the policy.

    "parity-weights" iterates: train, measure parity on the report's parallel text, give each language above
    `target_parity` (parity / target)^strength times its text and the reference language (target / worst
    parity)^strength times its own (the rest keep their shares; within the max_passes caps), retrain; it stops
    when the worst parity is at most `target_parity`, when it no longer improves by `min_improvement`, or after
    `max_rounds`, and keeps the round with the lowest worst parity. Parity is relative to English, so English,
    the cheapest language, is the one that gives up text: its own fertility rises (the report shows it). Steps
    shrink as the worst parity nears the target; set min_improvement = 0 to let only the target and max_rounds
    stop it. Tune on a dev split (e.g. flores200/dev as parallel_path) and judge on another.

    "parity-merges" (BPE only) keeps SentencePiece's sample, characters and settings but learns the merges itself
    (stages/tokenizer/parity_bpe.py): while the worst language's parity on the report text is above
    `target_parity`, the next merge is that language's most frequent pair. "parity-weights+merges" does both,
    the merges on the kept round's sample. Pure Python: minutes for a sample of a few million characters.
    """

    method: Literal["none", "parity-weights", "parity-merges", "parity-weights+merges"] = "none"
    weights: dict[str, float] = Field(
        default_factory=dict,
        description="Multipliers on the policy's per-language characters before any round, e.g. {el = 1.5}; languages "
        "not named keep 1. Applied with every method.")
    target_parity: float = Field(1.15, gt=1.0, description="parity-weights: stop once the worst language's parity is at most "
                                 "this; parity-merges: choose merges for the worst language while it is above this.")
    max_rounds: int = Field(6, ge=1, le=20, description="parity-weights: at most this many retrainings.")
    strength: float = Field(2.0, gt=0, le=8, description="parity-weights: exponent on parity / target (and target / worst parity) per round.")
    min_improvement: float = Field(0.005, ge=0, description="parity-weights: stop when the worst parity improves by less.")

    @property
    def weights_rounds(self) -> bool:
        return self.method in ("parity-weights", "parity-weights+merges")

    @property
    def parity_merges(self) -> bool:
        return self.method in ("parity-merges", "parity-weights+merges")

    @field_validator("weights")
    @classmethod
    def _positive(cls, v: dict[str, float]) -> dict[str, float]:
        bad = {lang: w for lang, w in v.items() if not w > 0}
        if bad:
            lang, w = next(iter(bad.items()))
            raise ValueError(f"weight {w} for {lang!r}: weights multiply a language's characters and must be positive "
                             "(leave a language out to keep its share)")
        return v


class ReportConfig(StrictModel):
    """Fairness metrics. Parity needs parallel text: an ingest source whose documents align across languages
    by position (the UDHR demo source), or a folder in the FLORES-200 layout (<flores code>.<split> files, one
    sentence per line)."""

    parallel_source: str | None = Field(None, description="Name of an ingest source whose documents are parallel (aligned by input_index).")
    parallel_path: str | None = Field(None, description="Folder of FLORES-200-style files, e.g. .../flores200/devtest.")
    max_parity: float | None = Field(None, gt=0, description="Fail the stage when a language costs more than this many times English.")
    reference_language: str = "en"

    @field_validator("parallel_path")
    @classmethod
    def _resolve(cls, v: str | None, info: ValidationInfo) -> str | None:
        base = (info.context or {}).get("base_dir")
        if v and not os.path.isabs(v) and base is not None:
            return os.path.normpath(os.path.join(base, v))
        return v


class TokenizerConfig(StrictModel):
    model_type: Literal["bpe", "unigram"] = "bpe"
    vocab_size: int = Field(32_000, ge=300, le=1_048_576, description="Including special and byte-fallback pieces.")
    character_coverage: float = Field(0.9999, gt=0.9, le=1.0)
    reserved_tokens: int = Field(16, ge=0, description="<|reserved_N|> tokens kept free for later use (chat, tools).")
    user_defined_symbols: list[str] = Field(default_factory=list, description="Extra tokens never split.")
    num_threads: int = Field(2, ge=1)
    max_sentences: int = Field(20_000_000, ge=1_000, description="Upper bound on the sample lines SentencePiece loads.")
    memory_budget_gb: float = Field(
        16.0, gt=0, description="Peak memory SentencePiece training may use on the machine that runs the stage's finalize "
        "(stages/tokenizer/memory.py estimates it); bounds the sentences it loads, and the stage refuses a sample that does not fit.")
    sample: SampleConfig = Field(default_factory=SampleConfig)
    balance: BalanceConfig = Field(default_factory=BalanceConfig)
    report: ReportConfig = Field(default_factory=ReportConfig)

    @model_validator(mode="after")
    def _one_parallel(self) -> TokenizerConfig:
        if self.report.parallel_source and self.report.parallel_path:
            raise ValueError("report: set parallel_source or parallel_path, not both")
        if self.balance.parity_merges and self.model_type != "bpe":
            raise ValueError(f"balance.method = {self.balance.method!r} learns BPE merges; set model_type = \"bpe\" or "
                             "method = \"parity-weights\"")
        return self
