"""The shard format: fixed-width tokens you can memory-map, and an O(1) document index.

    <name>.bin   tokens, little-endian uint16 (vocabulary <= 65,536) or uint32; every document ends with EOS
    <name>.idx   int64 offsets, n_docs + 1 of them: document i is tokens[idx[i]:idx[i+1]]
    <name>.ids   the ingest ids of the documents, one per line (provenance: which documents were trained on)
Shape, dtype and checksums live in the stage's index.json, so the binary files carry no header and numpy,
Megatron-style readers or a C++ loader can map them directly.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pipeline.fsutil import sha256_file as _sha256


def token_dtype(vocab_size: int) -> np.dtype:
    return np.dtype("<u2") if vocab_size <= 65536 else np.dtype("<u4")


class ShardError(ValueError):
    """A shard is missing, truncated or corrupt; the message names it and says what to do."""


class ShardWriter:
    """Appends documents to a shard; `close()` writes the index and returns the shard's record."""

    def __init__(self, prefix: Path, dtype: np.dtype):
        self.prefix, self.dtype = prefix, dtype
        self._bin = open(prefix.with_suffix(".bin"), "wb")
        self._ids: list[str] = []
        self._offsets = [0]

    @property
    def tokens(self) -> int:
        return self._offsets[-1]

    def add(self, doc_id: str, tokens: np.ndarray) -> None:
        self._bin.write(np.asarray(tokens, dtype=self.dtype).tobytes())
        self._offsets.append(self._offsets[-1] + len(tokens))
        self._ids.append(doc_id)

    def close(self) -> dict:
        self._bin.close()
        np.asarray(self._offsets, dtype="<i8").tofile(self.prefix.with_suffix(".idx"))
        self.prefix.with_suffix(".ids").write_text("".join(f"{i}\n" for i in self._ids), encoding="utf-8")
        return {"name": self.prefix.name, "dtype": self.dtype.str, "tokens": self.tokens, "docs": len(self._ids),
                "sha256_bin": _sha256(self.prefix.with_suffix(".bin")), "sha256_idx": _sha256(self.prefix.with_suffix(".idx"))}


@dataclass
class Shard:
    """A shard opened for reading; verified against its record unless told otherwise."""

    prefix: Path
    record: dict
    verify: bool = True

    def __post_init__(self) -> None:
        bin_path, idx_path = self.prefix.with_suffix(".bin"), self.prefix.with_suffix(".idx")
        dtype = np.dtype(self.record["dtype"])
        for path in (bin_path, idx_path):
            if not path.exists():
                raise ShardError(f"shard {path} is missing; rerun the shards stage (europa stage shards --force)")
        expected_bin = self.record["tokens"] * dtype.itemsize
        expected_idx = (self.record["docs"] + 1) * 8
        for path, size in ((bin_path, expected_bin), (idx_path, expected_idx)):
            if path.stat().st_size != size:
                raise ShardError(f"shard {path} is truncated or has the wrong size ({path.stat().st_size} bytes, expected "
                                 f"{size}); rerun the shards stage (europa stage shards --force)")
        if self.verify:
            for path, key in ((bin_path, "sha256_bin"), (idx_path, "sha256_idx")):
                if _sha256(path) != self.record[key]:
                    raise ShardError(f"shard {path} does not match its checksum in index.json (corrupt); "
                                     f"rerun the shards stage (europa stage shards --force)")
        # A plain ndarray view of the mapping: slicing np.memmap objects costs microseconds per document.
        self.tokens = np.asarray(np.memmap(bin_path, dtype=dtype, mode="r")) if expected_bin else np.zeros(0, dtype)
        self.offsets = np.fromfile(idx_path, dtype="<i8")

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def doc(self, i: int) -> np.ndarray:
        return self.tokens[self.offsets[i].item() : self.offsets[i + 1].item()]

    def ids(self) -> list[str]:
        return self.prefix.with_suffix(".ids").read_text(encoding="utf-8").splitlines()
