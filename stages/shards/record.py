"""The shards stage's record (manifest `statistics`): tokens and documents per language and split, the shard
format and the training mixture. Pretraining reads the vocabulary; compliance reports the training data size."""

from __future__ import annotations

from pydantic import Field

from pipeline.records import Record


class Totals(Record):
    train_tokens: int = Field(description="Tokens of the training split (EOS included): each document once, or as many "
                              "times as rehydration writes it.")
    train_docs: int
    val_tokens: int
    val_docs: int


class LanguageSplit(Record):
    train_tokens: int
    train_docs: int
    train_shards: int
    val_tokens: int
    val_docs: int
    val_shards: int


class LanguageMixture(Record):
    weight: float = Field(description="Share of training draws given to the language.")
    tokens: int = Field(description="Tokens of the language in the planned training tokens.")
    available_tokens: int
    expected_epochs: float = Field(description="tokens / available_tokens: how often its text is repeated.")


class Mixture(Record):
    """mixture.json: the language weights training samples with."""

    policy: str
    planned_tokens: int
    allocated_tokens: int
    max_epochs: float
    temperature: float | None
    languages: dict[str, LanguageMixture]
    note: str | None = Field(None, description="Present when the epoch cap leaves planned tokens unallocated.")


class LanguageRehydration(Record):
    docs_added: int = Field(description="Training documents written beyond their first copy.")
    tokens_added: int = Field(description="Their tokens (EOS included): part of train_tokens.")
    docs_by_copies: dict[str, int] = Field(description="Training documents (first copies) by the copies written of each.")


class Rehydration(Record):
    """[shards.mixture] rehydration: the training split upsampled by ingest's duplicate cluster sizes."""

    table: str = Field(description="fineweb-2 (FineWeb-2's published table) or table (the user's rows).")
    rows: list[list[int]] = Field(description="[smallest cluster size, copies] rows that ran.")
    docs_added: int
    tokens_added: int
    per_language: dict[str, LanguageRehydration]


class ShardsRecord(Record):
    totals: Totals = Field(description="Over all languages.")
    per_language: dict[str, LanguageSplit] = Field(description="Keyed by ISO 639-1 code.")
    dtype: str | None = Field(description="Token dtype of the .bin files (uint16 or uint32).")
    vocab_size: int
    shards: int = Field(description="Number of shards (train and validation).")
    mixture: Mixture = Field(description="The training mixture (mixture.json).")
    languages_without_validation: list[str] = Field(description="Languages too small for a validation document.")
    rehydration: Rehydration | None = Field(None, description="Absent when every training document is written once.")
