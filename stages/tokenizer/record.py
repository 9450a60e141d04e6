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


class BalanceRound(Record):
    round: int = Field(description="0: the policy's plan (with [tokenizer.balance] weights); then one per retraining.")
    target_chars: dict[str, int] = Field(description="Characters per language this round's tokenizer was trained on.")
    parity: dict[str, float] = Field(description="Parity per language of this round's tokenizer on the report text.")
    max_parity: float
    mean_fertility: float | None
    parity_gini: float | None


class ParityMerges(Record):
    merges: int = Field(description="Merges learned (as many as SentencePiece's model on the same sample had).")
    target_parity: float = Field(description="Merges were chosen for the worst language while its parity was above this.")
    chosen_for: dict[str, int] = Field(description="Per language: merges chosen for it as the most expensive language; the rest are classic BPE.")
    sentencepiece_max_parity: float | None = Field(description="The worst parity of SentencePiece's own merges on the same sample.")
    seconds: float = Field(description="Time to learn the merges (stages/tokenizer/parity_bpe.py).")


class Balance(Record):
    method: str = Field(description="[tokenizer.balance].method: none, parity-weights, parity-merges or parity-weights+merges.")
    weights: dict[str, float] = Field(description="[tokenizer.balance].weights applied to the policy's plan.")
    target_parity: float | None = Field(description="parity-weights: the worst parity it stops at.")
    strength: float | None
    rounds: list[BalanceRound] = Field(description="Every tokenizer trained, round 0 first (only parallel report text gives parity).")
    chosen_round: int = Field(description="The round whose tokenizer was kept: the lowest worst parity.")
    stopped: str = Field(description="Why the rounds ended: target met, no improvement, max_rounds, or method none.")
    merges: ParityMerges | None = Field(None, description="parity-merges: how the kept model's merges were chosen.")


class Sample(Record):
    policy: str
    budget_chars: int
    max_passes: float
    per_language: dict[str, LanguageSample]
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


class Fairness(Record):
    """The inequality across languages in one place: what the report's headline, the parity gate and the AI Act
    language description cite."""

    languages: int = Field(description="Languages with evaluation text.")
    mean_fertility: float | None = Field(description="Mean over languages of tokens per whitespace word (as OpenEuroLLM reports it).")
    max_parity: float | None = Field(description="The worst language's parity; None without parallel text.")
    worst_language: str | None = Field(description="The language with that parity.")
    parity_gini: float | None = Field(
        description="Gini coefficient of the per-language token counts on the parallel text (each relative to English's "
        "on the same texts): 0 = every language costs the same; None without parallel text.")


class TokenizerRecord(Record):
    sample: Sample = Field(description="The language-balanced sample SentencePiece was trained on.")
    model: TokenizerModel = Field(description="The trained tokenizer.")
    evaluation_text: str = Field(description="Which text the metrics were measured on.")
    hf_equivalence_checked_texts: int = Field(description="Texts on which tokenizer.json and the .model encode identically.")
    metrics: dict[str, LanguageMetrics] = Field(description="Fairness metrics per language (report.json).")
    missing_languages: list[str] = Field(description="Languages without evaluation text.")
    balance: Balance | None = Field(None, description="How the per-language shares were chosen (absent in records of code_version 2).")
    fairness: Fairness | None = Field(None, description="Inequality across languages (absent in records of code_version 2).")
