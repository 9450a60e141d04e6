"""The shards as units write them and as index.json lists them (europa_model/data/streams.py reads it).

The writer (europa_model/data/format.py) hands back a dict; it becomes a ShardWritten where the unit receives
it, so the stage reads fields and a renamed key fails there. IndexedShard's and ShardIndex's field order is
index.json's key order: reordering them changes the file's bytes.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

Split = Literal["train", "val"]


class ShardWritten(BaseModel):
    """A shard a unit wrote, with the checksums taken while writing."""

    model_config = ConfigDict(extra="forbid")

    split: Split
    name: str  # in the unit folder: <split>-NNNN
    dtype: str
    tokens: int
    docs: int
    ids_bytes: int
    sha256_bin: str
    sha256_idx: str
    sha256_ids: str


class IndexedShard(BaseModel):
    """A shard's entry in index.json: where it lies under the stage folder, and what its unit wrote."""

    model_config = ConfigDict(extra="forbid")

    path: str  # <split>/<lang>/shard-NNNNN, without the extensions
    split: Split
    lang: str
    dtype: str
    tokens: int
    docs: int
    ids_bytes: int
    sha256_bin: str
    sha256_idx: str
    sha256_ids: str


class ShardIndex(BaseModel):
    """index.json: the token ids' meaning and every shard."""

    model_config = ConfigDict(extra="forbid")

    format: int
    vocab_size: int
    bos_id: int
    eos_id: int
    pad_id: int
    dtype: str | None  # of every .bin (None without shards)
    seed: int
    tokenizer_output_digest: str
    shards: list[IndexedShard]
