"""The tokenizer stage's record (manifest `statistics`): the sample it was trained on, the model, and the
fairness metrics per language. The pretrain stage reads the vocabulary size; compliance describes the model."""

from __future__ import annotations

from pydantic import Field

from pipeline.records import Record


class LanguageSample(Record):
    available_chars: int = Field(description="Characters of the language in the ingest output.")
    target_chars: int = Field(description="Characters the sampling policy asked for.")
    passes: float = Field(description="target / available: passes over the language's text (capped).")
    chars: int
    lines: int
    documents: int
    files: int = Field(description="Ingest Parquet files of the language.")
    files_read: int = Field(description="Of those, the files the sample read from (a bounded, seeded subset for large languages).")
    row_groups_read: int = Field(description="Parquet row groups read, over all passes.")
    sha256: str = Field(description="Checksum of the sample file.")


class RebalanceRound(Record):
    round: int
    target_chars: dict[str, int]
    parity: dict[str, float]


class Sample(Record):
    policy: str
    budget_chars: int
    max_passes: float
    per_language: dict[str, LanguageSample]
    rebalance_rounds: list[RebalanceRound]
    total_chars: int
    total_lines: int
    memory_budget_gb: float = Field(description="[tokenizer].memory_budget_gb: the training's memory budget.")
    estimated_peak_gb: float = Field(description="SentencePiece's estimated peak memory on this sample (stages/tokenizer/memory.py).")
    input_sentence_size: int = Field(description="At most this many sample lines were loaded (from the budget and the mean line length).")


class TokenizerModel(Record):
    type: str = Field(description="bpe or unigram (SentencePiece).")
    vocab_size: int
    byte_fallback: bool
    normalization: str
    special_tokens: list[str]


class LanguageMetrics(Record):
    texts: int
    tokens: int
    words: int
    bytes: int
    fertility: float | None = Field(description="Tokens per word (None without words).")
    bytes_per_token: float | None
    byte_fallback_rate: float | None = Field(
        description="Share of tokens that are byte-fallback pieces for characters the vocabulary lacks (newlines apart).")
    newline_rate: float | None = Field(None, description="Share of tokens that are newlines (the byte piece <0x0A>).")
    parity: float | None = Field(description="Tokens relative to the reference language on parallel text; None without parallel text.")
    parallel_texts: int | None = Field(None, description="Parallel texts shared with the reference language (absent without).")


class TokenizerRecord(Record):
    sample: Sample = Field(description="The language-balanced sample SentencePiece was trained on.")
    model: TokenizerModel = Field(description="The trained tokenizer.")
    evaluation_text: str = Field(description="Which text the metrics were measured on.")
    hf_equivalence_checked_texts: int = Field(description="Texts on which tokenizer.json and the .model encode identically.")
    metrics: dict[str, LanguageMetrics] = Field(description="Fairness metrics per language (report.json).")
    missing_languages: list[str] = Field(description="Languages without evaluation text.")
