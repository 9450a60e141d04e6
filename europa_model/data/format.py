"""The shard format: fixed-width tokens you can read at any offset, and an O(1) document index.

    <name>.bin   tokens, little-endian uint16 (vocabulary <= 65,536) or uint32; every document ends with EOS
    <name>.idx   int64 offsets, n_docs + 1 of them: document i is tokens[idx[i]:idx[i+1]]
    <name>.ids   the ingest ids of the documents, one per line (provenance: which documents were trained on)
Shape, dtype and checksums live in the stage's index.json, so the binary files carry no header and numpy,
Megatron-style readers or a C++ loader can map them directly.

Both sides are written for thousands of ranks reading tens of thousands of shards:
- `ShardWriter` hashes every byte as it writes it: the checksums it returns are the ones the manifest
  publishes, so nothing reads a shard back to checksum it (terabytes at full scale).
- `Shard` touches no file until a document is read from it; then it checks the two files' sizes against its
  record (not their checksums: that is `europa verify`), memory-maps the offsets and reads each document with
  one `pread`, checking the slice it reads, so a damaged shard read weeks into training is named, not a
  SIGBUS or a silently short document. A `ShardPool` decides how many shards stay open.
"""

from __future__ import annotations

import hashlib
import mmap
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from europa_model.data.pool import ShardPool

FIX = "check it with `europa verify --run-dir <run> --stage shards` and rerun the shards stage (europa stage shards --force)"


def token_dtype(vocab_size: int) -> np.dtype:
    return np.dtype("<u2") if vocab_size <= 65536 else np.dtype("<u4")


class ShardError(ValueError):
    """A shard is missing, truncated or corrupt; the message names it and says what to do."""


class ShardWriter:
    """Appends documents to a shard; `close()` writes the index and returns the shard's record, checksums included."""

    def __init__(self, prefix: Path, dtype: np.dtype):
        self.prefix, self.dtype = Path(prefix), np.dtype(dtype)
        self._bin = open(self.prefix.with_suffix(".bin"), "wb")
        self._ids = open(self.prefix.with_suffix(".ids"), "wb")
        self._bin_hash, self._ids_hash = hashlib.sha256(), hashlib.sha256()
        self._lengths: list[np.ndarray] = []
        self._ids_bytes = 0
        self.tokens = self.docs = 0

    def add(self, doc_id: str, tokens: np.ndarray) -> None:
        tokens = np.asarray(tokens)
        self.add_many([doc_id], np.array([len(tokens)], np.int64), tokens)

    def add_many(self, doc_ids: list[str], lengths: np.ndarray, tokens: np.ndarray) -> None:
        """Documents given as their lengths and their tokens concatenated (a whole batch in one write)."""
        data = np.ascontiguousarray(tokens, dtype=self.dtype)
        if len(data) != int(lengths.sum()):
            raise ValueError(f"{len(data)} tokens for documents of {int(lengths.sum())} tokens in all")
        self._bin.write(data.data)
        self._bin_hash.update(data.data)
        ids = "".join(f"{i}\n" for i in doc_ids).encode("utf-8")
        self._ids.write(ids)
        self._ids_hash.update(ids)
        self._ids_bytes += len(ids)
        self._lengths.append(np.asarray(lengths, np.int64))
        self.tokens += len(data)
        self.docs += len(doc_ids)

    def close(self) -> dict[str, Any]:
        self._bin.close()
        self._ids.close()
        offsets = np.zeros(self.docs + 1, "<i8")
        if self.docs:
            np.cumsum(np.concatenate(self._lengths), out=offsets[1:])
        idx = offsets.tobytes()
        self.prefix.with_suffix(".idx").write_bytes(idx)
        return {"name": self.prefix.name, "dtype": self.dtype.str, "tokens": self.tokens, "docs": self.docs,
                "ids_bytes": self._ids_bytes, "sha256_bin": self._bin_hash.hexdigest(),
                "sha256_idx": hashlib.sha256(idx).hexdigest(), "sha256_ids": self._ids_hash.hexdigest()}


class Shard:
    """One shard of index.json, opened on its first read (through its pool, which bounds how many are open).

    Holding a `Shard` costs a few hundred bytes (tens of thousands of them per rank) and nothing else: no
    file, no mapping, no offsets in memory. Open, it holds one file (the tokens, read with pread) and one
    read-only mapping of the offsets, whose pages the kernel loads as documents are looked up and may drop.
    """

    __slots__ = ("_prefix", "dtype", "n_tokens", "n_docs", "pool", "_fd", "_map", "_offsets", "__weakref__")

    def __init__(self, prefix: Path | str, record: dict[str, Any], pool: ShardPool | None = None):
        self._prefix, self.pool = str(prefix), pool
        self.dtype = np.dtype(record["dtype"])
        self.n_tokens, self.n_docs = int(record["tokens"]), int(record["docs"])
        self._fd: int | None = None
        self._map: mmap.mmap | None = None
        self._offsets: np.ndarray | None = None

    @property
    def prefix(self) -> Path:
        return Path(self._prefix)

    @property
    def bin_path(self) -> Path:
        return Path(self._prefix + ".bin")

    @property
    def idx_path(self) -> Path:
        return Path(self._prefix + ".idx")

    def __len__(self) -> int:
        return self.n_docs

    @property
    def is_open(self) -> bool:
        return self._fd is not None

    def check_files(self) -> None:
        """The files exist and have the sizes the record implies (cheap: two stats; checksums are `europa verify`)."""
        for path, size in ((self.bin_path, self.n_tokens * self.dtype.itemsize), (self.idx_path, (self.n_docs + 1) * 8)):
            try:
                actual = path.stat().st_size
            except FileNotFoundError:
                raise ShardError(f"shard {path} is missing; {FIX}") from None
            if actual != size:
                raise ShardError(f"shard {path} is truncated or has the wrong size ({actual} bytes, expected {size}); {FIX}")

    def open(self) -> None:
        if self.is_open:
            return
        self.check_files()
        fd = os.open(self.idx_path, os.O_RDONLY)
        try:
            self._map = mmap.mmap(fd, (self.n_docs + 1) * 8, access=mmap.ACCESS_READ)
        finally:
            os.close(fd)  # the mapping keeps what it needs
        self._offsets = np.frombuffer(self._map, dtype="<i8")
        self._fd = os.open(self.bin_path, os.O_RDONLY)

    def close(self) -> None:
        if self.pool is not None:
            self.pool.discard(self)
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        self._offsets = None  # releases the array's hold on the mapping (only scalars are ever taken from it)
        if self._map is not None:
            self._map.close()
            self._map = None

    def doc(self, i: int) -> np.ndarray:
        """Document i's tokens (ending with EOS), a fresh read-only array."""
        if self.pool is not None:
            self.pool.use(self)
        elif not self.is_open:
            self.open()
        if not 0 <= i < self.n_docs:
            raise IndexError(f"document {i} of shard {self.prefix} (it has {self.n_docs})")
        start, end = int(self._offsets[i]), int(self._offsets[i + 1])  # type: ignore[index]
        if not 0 <= start <= end <= self.n_tokens:
            raise ShardError(f"shard {self.idx_path}: document {i} has offsets {start}..{end}, outside the shard's "
                             f"{self.n_tokens} tokens (the index is corrupt); {FIX}")
        size = self.dtype.itemsize
        data = os.pread(self._fd, (end - start) * size, start * size)  # type: ignore[arg-type]
        if len(data) != (end - start) * size:
            raise ShardError(f"shard {self.bin_path}: document {i} (tokens {start}..{end}) is cut off after "
                             f"{len(data) // size} tokens (the file is truncated); {FIX}")
        return np.frombuffer(data, self.dtype)

    def offsets(self) -> np.ndarray:
        """A copy of all n_docs + 1 offsets (for tools and tests; the readers look offsets up one by one)."""
        self.check_files()
        return np.fromfile(self.idx_path, dtype="<i8")

    def ids(self) -> list[str]:
        return Path(self._prefix + ".ids").read_text(encoding="utf-8").splitlines()

    def __getstate__(self) -> dict[str, Any]:  # a dataloader worker process opens its own files
        return {"_prefix": self._prefix, "dtype": self.dtype, "n_tokens": self.n_tokens, "n_docs": self.n_docs, "pool": self.pool}

    def __setstate__(self, state: dict[str, Any]) -> None:
        for key, value in state.items():
            setattr(self, key, value)
        self._fd = self._map = self._offsets = None

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass
