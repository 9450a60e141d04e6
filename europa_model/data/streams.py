"""Reading documents from the shards: the mixture of languages, the per-rank slice, exact resume.

Two small pieces, each with a state that fits in a few integers (packing them into rows: packing.py):
- `LanguageStream` walks one language's documents for one data-parallel rank: per epoch a seeded order of
  the shards, and within a shard a seeded order of its documents of which the rank takes every W-th. Ranks
  therefore see disjoint documents; a rank holds the order of its share of one shard per language, and opens
  a shard only when it reads from it (the shards' records give their document counts).
- `MixtureStream` draws the language of the k-th document from a counter-based hash of (seed, rank, k)
  against the mixture weights: no RNG state to save, the same draws after a restore.
"""

from __future__ import annotations

import gc
import json
import os
from bisect import bisect_right
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from europa_model.data.format import Shard, ShardError
from europa_model.data.pool import DEFAULT_MAX_OPEN, ShardPool

_MASK64 = (1 << 64) - 1


def _mix(*values: int) -> int:
    """splitmix64 over the values: a stable, fast, counter-based random number in [0, 2^64)."""
    z = 0x9E3779B97F4A7C15
    for v in values:
        z = (z ^ (v & _MASK64)) & _MASK64
        z = (z + 0x9E3779B97F4A7C15) & _MASK64
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
        z ^= z >> 31
    return z


def open_shards(shards_dir: Path, split: str, languages: list[str] | None = None,
                max_open: int = DEFAULT_MAX_OPEN) -> tuple[dict, dict[str, list[Shard]]]:
    """index.json and the split's shards per language, none of them opened yet: each opens on its first read
    (sizes checked then), and at most `max_open` of them stay open at once (one pool for all)."""
    index_path = Path(shards_dir) / "index.json"
    if not index_path.exists():
        raise ShardError(f"{index_path} not found; run the shards stage first (europa stage shards)")
    pool = ShardPool(max_open)
    root = os.path.join(str(shards_dir), "")  # plain strings: pathlib's per-path cost adds up over tens of thousands of shards
    by_lang: dict[str, list[Shard]] = {}
    with _no_gc():  # hundreds of thousands of new objects: the cyclic GC would rescan them all, again and again
        index = json.loads(index_path.read_text())
        for rec in index["shards"]:
            if rec["split"] == split and (languages is None or rec["lang"] in languages):
                by_lang.setdefault(rec["lang"], []).append(Shard(root + rec["path"], rec, pool))
    return index, by_lang


@contextmanager
def _no_gc() -> Iterator[None]:
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


class LanguageStream:
    def __init__(self, shards: list[Shard], seed: int, lang_key: int, rank: int, world: int):
        self.shards, self.seed, self.key, self.rank, self.world = shards, seed, lang_key, rank, world
        self.epoch = self.shard_pos = self.doc_pos = 0
        self._cache: tuple[int, int, int, np.ndarray] | None = None  # (epoch, shard_pos, shard, this rank's doc order)
        self._shard_order: tuple[int, np.ndarray] | None = None  # (epoch, the epoch's order of the shards)
        if not any(len(range(rank, len(s), world)) for s in shards):
            raise ShardError(f"no documents of this language for data-parallel rank {rank} of {world}")

    def _docs(self) -> tuple[Shard, np.ndarray]:
        if self._cache is None or self._cache[:2] != (self.epoch, self.shard_pos):
            if self._shard_order is None or self._shard_order[0] != self.epoch:
                self._shard_order = (self.epoch, np.random.default_rng([self.seed, self.key, self.epoch]).permutation(len(self.shards)))
            shard_index = int(self._shard_order[1][self.shard_pos])
            order = np.random.default_rng([self.seed, self.key, self.epoch, shard_index]).permutation(len(self.shards[shard_index]))
            # a copy of this rank's share only: the whole permutation of a large shard is freed at once
            mine = order[self.rank :: self.world].astype(np.uint32 if len(order) < 2**32 else np.int64)
            self._cache = (self.epoch, self.shard_pos, shard_index, mine)
        return self.shards[self._cache[2]], self._cache[3]

    def next_doc(self) -> np.ndarray:
        while True:
            shard, docs = self._docs()
            if self.doc_pos < len(docs):
                doc = shard.doc(int(docs[self.doc_pos]))
                self.doc_pos += 1
                return doc
            self.doc_pos = 0
            self.shard_pos += 1
            if self.shard_pos == len(self.shards):
                self.shard_pos, self.epoch = 0, self.epoch + 1

    def state(self) -> list[int]:
        return [self.epoch, self.shard_pos, self.doc_pos]

    def restore(self, state: list[int]) -> None:
        self.epoch, self.shard_pos, self.doc_pos = state


class MixtureStream:
    def __init__(self, by_lang: dict[str, list[Shard]], weights: dict[str, float], seed: int, rank: int, world: int):
        self.languages = sorted(lang for lang in weights if weights[lang] > 0 and lang in by_lang)
        if not self.languages:
            raise ShardError("the mixture gives no weight to any language that has shards")
        self.streams = {lang: LanguageStream(by_lang[lang], seed, i, rank, world) for i, lang in enumerate(self.languages)}
        total = sum(weights[lang] for lang in self.languages)
        self.cumulative = list(np.cumsum([weights[lang] / total for lang in self.languages]))
        self.seed, self.rank, self.draws = seed, rank, 0

    def choose(self, draw: int) -> int:
        u = _mix(self.seed, self.rank, draw) / 2**64
        return min(bisect_right(self.cumulative, u), len(self.languages) - 1)

    def next_doc(self) -> tuple[str, list[int], np.ndarray]:
        """(language, that language's stream state before this draw, the document's tokens)."""
        lang = self.languages[self.choose(self.draws)]
        stream = self.streams[lang]
        before = stream.state()
        self.draws += 1
        return lang, before, stream.next_doc()

    def state(self) -> dict[str, Any]:
        return {"draws": self.draws, "streams": {lang: s.state() for lang, s in self.streams.items()}}

    def restore(self, state: dict[str, Any]) -> None:
        self.draws = state["draws"]
        for lang, s in state["streams"].items():
            self.streams[lang].restore(s)
