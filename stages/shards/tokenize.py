"""Tokenize ingest Parquet files into bounded train/validation shards: the work of one shards unit.

Kept apart from the stage so the benchmark measures exactly the code the stage runs. Tokenization is the
work (SentencePiece's encode, one thread); everything around it is done per batch of documents, not per
document: the encoder returns numpy arrays, a batch's documents are joined with their EOS in one vectorized
step and written, hashed and indexed in one call (format.ShardWriter.add_many).
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from europa_model.data.format import ShardWriter, token_dtype
from stages.shards.index import ShardWritten, Split


class RoundTripError(ValueError):
    pass


class MissingClusterSizes(ValueError):
    pass


@dataclass
class Rehydrated:
    """What rehydration added to a unit's training split: documents and tokens beyond the first copy, and how many
    documents got each number of copies."""

    docs_added: int = 0
    tokens_added: int = 0
    docs_by_copies: dict[int, int] = field(default_factory=dict)


def copies_for(sizes: np.ndarray, table: tuple[tuple[int, int], ...]) -> np.ndarray:
    """Copies of each document by its cluster size: the row with the largest smallest-size <= the size."""
    bounds = np.array([lo for lo, _ in table], np.int64)
    copies = np.array([c for _, c in table], np.int64)
    return copies[np.searchsorted(bounds, sizes, side="right") - 1]


def split_hash(seed: int, doc_id: str) -> int:
    """Where a document goes (validation when below the language's threshold): a function of its id only,
    so the split does not depend on file order, unit size or the number of workers."""
    return int.from_bytes(hashlib.blake2b(f"{seed}:split:{doc_id}".encode(), digest_size=8).digest(), "big")


@functools.lru_cache(maxsize=2)
def _processor(model_path: str, mtime_ns: int):
    import sentencepiece as spm

    return spm.SentencePieceProcessor(model_file=model_path)


class _RollingShards:
    """One split's shards in a unit folder: `<split>-0000`, `<split>-0001`, ... each at most `max_tokens`
    (a document longer than that gets a shard of its own)."""

    def __init__(self, out_dir: Path, split: Split, dtype: np.dtype, eos: int, max_tokens: int):
        self.out_dir, self.split, self.dtype, self.eos, self.max_tokens = out_dir, split, dtype, eos, max_tokens
        self.writer: ShardWriter | None = None
        self.records: list[ShardWritten] = []

    def add(self, ids: list[str], docs: list[np.ndarray]) -> None:
        lengths = np.fromiter(map(len, docs), np.int64, len(docs)) + 1  # + EOS
        ends = np.cumsum(lengths)
        flat = np.empty(int(ends[-1]), self.dtype)
        body = np.ones(len(flat), bool)
        body[ends - 1] = False
        flat[ends - 1] = self.eos
        flat[body] = np.concatenate(docs)
        start = 0  # first document of the batch not written yet
        while start < len(ids):
            if self.writer is None:
                self.writer = ShardWriter(self.out_dir / f"{self.split}-{len(self.records):04d}", self.dtype)
            room = self.max_tokens - self.writer.tokens
            before = int(ends[start - 1]) if start else 0
            stop = int(np.searchsorted(ends, before + room, side="right"))  # documents [start, stop) fit
            if stop == start and self.writer.docs == 0:
                stop = start + 1  # too long for any shard: alone
            if stop > start:
                upto = int(ends[stop - 1])
                self.writer.add_many(ids[start:stop], lengths[start:stop], flat[before:upto])
                start = stop
            if start < len(ids):
                self.close()

    def close(self) -> None:
        if self.writer is not None:
            self.records.append(ShardWritten.model_validate({"split": self.split, **self.writer.close()}))
            self.writer = None


def tokenize_files(model_path: Path, parquet_files: list[Path], out_dir: Path, *, seed: int, val_threshold: int,
                   shard_bytes: int, batch_size: int = 1024, rehydration: tuple[tuple[int, int], ...] | None = None,
                   rehydrated: Rehydrated | None = None) -> list[ShardWritten]:
    """Write `train-NNNN` / `val-NNNN` shards of the files' documents (tokens + EOS) into out_dir, each .bin at
    most `shard_bytes`; returns their records (with the checksums computed while writing). With `rehydration`
    (stages/shards/config.py) a training document is written as many times as its cluster size's row says, next
    to itself (the dataloader's shuffle spreads them); `rehydrated` counts what that added."""
    import pyarrow.parquet as pq

    sp = _processor(str(model_path), Path(model_path).stat().st_mtime_ns)  # loaded once per worker
    eos, dtype = sp.eos_id(), token_dtype(sp.GetPieceSize())
    max_tokens = max(1, shard_bytes // dtype.itemsize)
    train, val = _RollingShards(out_dir, "train", dtype, eos, max_tokens), _RollingShards(out_dir, "val", dtype, eos, max_tokens)
    checked = False
    for parquet_file in parquet_files:
        pf = pq.ParquetFile(parquet_file)
        columns = ["id", "text"]
        if rehydration is not None:
            if "cluster_size" not in pf.schema_arrow.names:
                raise MissingClusterSizes(f"{parquet_file} has no cluster_size column (written by an earlier ingest); "
                                          "rerun the ingest stage, or unset [shards.mixture] rehydration")
            columns.append("cluster_size")
        for batch in pf.iter_batches(columns=columns, batch_size=batch_size):
            ids, texts = batch.column("id").to_pylist(), batch.column("text").to_pylist()
            copies = (copies_for(batch.column("cluster_size").to_numpy(), rehydration) if rehydration is not None
                      else None)
            if not ids:
                continue
            # One thread: parallelism comes from units running side by side, never from oversubscribing cores.
            docs = sp.encode(texts, num_threads=1, out_type="numpy")
            if not checked:  # the tokenizer must give the text back, or the model learns something else
                if sp.decode(docs[0].tolist()) != texts[0]:
                    raise RoundTripError(f"the tokenizer does not round-trip document {ids[0]} of {parquet_file}")
                checked = True
            is_val = [split_hash(seed, i) < val_threshold for i in ids] if val_threshold > 0 else [False] * len(ids)
            for rolling, want in ((train, False), (val, True)):
                chosen = [k for k, v in enumerate(is_val) if v is want]
                if chosen and copies is not None and not want:
                    chosen = _rehydrate(chosen, copies, docs, rehydrated)
                if chosen:
                    rolling.add([ids[k] for k in chosen], [docs[k] for k in chosen])
    for rolling in (train, val):
        rolling.close()
    return sorted(train.records + val.records, key=lambda r: r.name)


def _rehydrate(chosen: list[int], copies: np.ndarray, docs: list[np.ndarray], count: Rehydrated | None) -> list[int]:
    """`chosen` with each document repeated by its copies (in place: a document's copies are adjacent)."""
    n = copies[chosen]
    if count is not None:
        for c, k in zip(*np.unique(n, return_counts=True)):
            count.docs_by_copies[int(c)] = count.docs_by_copies.get(int(c), 0) + int(k)
        extra = n - 1
        count.docs_added += int(extra.sum())
        count.tokens_added += int(sum((len(docs[k]) + 1) * int(e) for k, e in zip(chosen, extra) if e))
    return np.repeat(np.asarray(chosen), n).tolist()
