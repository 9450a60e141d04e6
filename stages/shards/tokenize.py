"""Tokenize one ingest Parquet file into bounded train/validation shards: the work of one shards unit.

Kept apart from the stage so the benchmark measures exactly the code the stage runs.
"""

from __future__ import annotations

import functools
import hashlib
from collections import defaultdict
from pathlib import Path

import numpy as np

from europa_model.data.format import ShardWriter, token_dtype


class RoundTripError(ValueError):
    pass


def split_hash(seed: int, doc_id: str) -> int:
    """Where a document goes (validation when below the language's threshold): a function of its id only,
    so the split does not depend on file order, unit size or the number of workers."""
    return int.from_bytes(hashlib.blake2b(f"{seed}:split:{doc_id}".encode(), digest_size=8).digest(), "big")


@functools.lru_cache(maxsize=2)
def _processor(model_path: str, mtime_ns: int):
    import sentencepiece as spm

    return spm.SentencePieceProcessor(model_file=model_path)


def tokenize_file(model_path: Path, parquet_file: Path, out_dir: Path, *, seed: int, val_threshold: int,
                  max_shard_tokens: int, batch_size: int = 1024) -> list[dict]:
    """Write `train-NNNN` / `val-NNNN` shards of the file's documents (tokens + EOS) into out_dir."""
    import pyarrow.parquet as pq

    sp = _processor(str(model_path), Path(model_path).stat().st_mtime_ns)  # loaded once per worker
    eos, dtype = sp.eos_id(), token_dtype(sp.GetPieceSize())
    writers: dict[str, ShardWriter] = {}
    parts: dict[str, int] = defaultdict(int)
    records: list[dict] = []
    checked = False
    for batch in pq.ParquetFile(parquet_file).iter_batches(columns=["id", "text"], batch_size=batch_size):
        ids, texts = batch.column("id").to_pylist(), batch.column("text").to_pylist()
        # One thread: parallelism comes from units running side by side, never from oversubscribing cores.
        for doc_id, text, tokens in zip(ids, texts, sp.encode(texts, num_threads=1)):
            if not checked:  # the tokenizer must give the text back, or the model learns something else
                if sp.decode(tokens) != text:
                    raise RoundTripError(f"the tokenizer does not round-trip document {doc_id} of {parquet_file}")
                checked = True
            tokens.append(eos)
            split = "val" if split_hash(seed, doc_id) < val_threshold else "train"
            w = writers.get(split)
            if w is not None and w.tokens >= max_shard_tokens:
                records.append({"split": split, **w.close()})
                w = None
            if w is None:
                w = writers[split] = ShardWriter(out_dir / f"{split}-{parts[split]:04d}", dtype)
                parts[split] += 1
            w.add(doc_id, np.asarray(tokens, dtype=dtype))
    records += [{"split": split, **w.close()} for split, w in writers.items()]
    return sorted(records, key=lambda r: r["name"])
