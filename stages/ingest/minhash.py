"""Exact and near-duplicate detection: MinHash signatures over word n-grams + LSH banding, in numpy.

Why: the web repeats itself (mirrors, syndicated news, templated pages with small edits); duplicates waste
compute and raise memorisation. Exact duplicates are caught by a hash of the normalised text; near duplicates by
MinHash: the fraction of equal signature entries estimates the Jaccard similarity of two documents' n-gram
sets, and LSH banding finds the pairs worth comparing without comparing all pairs. Self-made because
Python-level shingling is the bottleneck of every pure-Python implementation: here everything after the word
split is vectorised over the batch (crc32 word hashes, multiply-shift n-gram hashes, multiply-add-shift
permutations), with constants from `numpy.random.default_rng(seed)`, so signatures are reproducible bit for bit.
`_dedupkeys.c` computes the same in C; `_signatures_reference` and `exact_key` are the definitions it is
tested against, and what runs where no C compiler built it.

A document with fewer words than `ngram` is one shingle (all its words); an empty document gets the
sentinel signature (all 0xFFFFFFFF) that `find_duplicates` never matches.
"""

from __future__ import annotations

import hashlib
import re
import zlib
from functools import lru_cache
from typing import Literal, Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

SENTINEL = np.uint32(0xFFFFFFFF)
"""Signature value of empty documents (every entry)."""

_WORD = re.compile(r"\w+")
_CHUNK_ELEMENTS = 1 << 19  # shingles x permutations per vectorised step (4 MiB of uint64; larger only costs memory)


class DedupConfig(BaseModel):
    """`[ingest.dedup]`: exact and near-duplicate removal (within the documents of one language)."""

    model_config = ConfigDict(extra="forbid", strict=True, use_attribute_docstrings=True, frozen=True)

    exact: bool = True
    """Drop documents whose whitespace/case-normalised text was seen before."""
    near: bool = True
    """Drop near duplicates found by MinHash LSH."""
    ngram: int = Field(5, ge=1)
    """Shingle size in words (FineWeb-2: 5). Parallel translations share no word 5-grams."""
    num_perm: int = Field(128, ge=1)
    """Signature length (hash functions); must equal bands * rows."""
    bands: int = Field(16, ge=1)
    """LSH bands. Pairs with Jaccard J become candidates with probability 1 - (1 - J^rows)^bands:
    16 x 8 gives 0.92 at J = 0.8, 0.47 at J = 0.7, 0.04 at J = 0.5."""
    rows: int = Field(8, ge=1)
    """Signature entries per band."""
    threshold: float = Field(0.7, gt=0.0, le=1.0)
    """A candidate pair is a duplicate when this fraction of signature entries agree (estimated Jaccard)."""
    seed: int = Field(1, ge=0)
    """Seed of the hash functions; signatures are only comparable under the same seed and num_perm."""
    scope: Literal["language", "source", "dump"] = "language"
    """Which documents are compared: all of a language, those of one source, or those of one dump (a source's
    declared `dump`, e.g. a Common Crawl snapshot). FineWeb found per-dump dedup better than global dedup for
    English: a duplicate across dumps is often a page that stayed up, and global dedup keeps the lowest-quality
    remainder. The record's config says which scope ran."""
    rule: Literal["greedy", "components"] = "greedy"
    """Which documents of a cluster of verified pairs are dropped. greedy: a document is a duplicate of the first
    kept earlier one it is similar to (the single-process LSH index's rule; not transitive, so A~B~C without A~C
    keeps A and C). components: all but the first document of each connected component. A group whose pairs
    exceed cluster_unit_pairs is clustered with components whatever this says; the record says which rule ran
    for each group."""
    cluster_unit_pairs: int = Field(50_000_000, ge=0)
    """Verified pairs a dedup group may have to be clustered in one unit (~40 bytes of memory per pair); a group
    with more is clustered as connected components in rounds of partitioned units (dedup/components.py), each
    holding only its partition's edges. 0 clusters every group in rounds."""
    partition_docs: int = Field(500_000, ge=1)
    """Kept documents per band partition of the dedup steps (a language of N documents gets ceil(N / this)
    partitions): a buckets unit holds 8 bytes per band row of its partition plus the rows and signatures of its
    candidates, so this bounds its memory (docs/benchmarks.md has the measured bytes per document)."""

    bucket_leaders: int = Field(16, ge=1)
    """Documents of a band bucket each member is compared with: its first ones (smallest order keys). A bucket of
    k <= bucket_leaders + 1 documents compares all k(k-1)/2 pairs; a larger one (a boilerplate page copied a
    million times) only about k * bucket_leaders, so a buckets unit's work grows with its rows, not with the
    square of its largest bucket. The pairs left uncompared are counted per group in the record
    (dedup_buckets); a member similar only to other non-leaders can stay, as in datatrove's star of the
    bucket's first document."""
    fan_in: int = Field(256, ge=2)
    """Folders of another step a dedup unit may open, whatever the size of its group: a group with more documents
    units than this merges their keys in levels of runs of at most fan_in first (dedup/merge.py), one with more
    partitions merges each components round's folders before the next round (components.py) and gathers its
    drops before the filter (dedup/gather.py). Each level rewrites what it merges once: raise it to save levels,
    lower it where open files or small reads are dear."""

    @model_validator(mode="after")
    def _check_bands(self) -> DedupConfig:
        if self.bands * self.rows != self.num_perm:
            raise ValueError(f"bands * rows = {self.bands * self.rows} must equal num_perm = {self.num_perm}")
        return self


@lru_cache(maxsize=8)
def _constants(ngram: int, num_perm: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Random 64-bit constants: odd n-gram word multipliers, odd permutation multipliers a, offsets b."""
    rng = np.random.default_rng(seed)
    word_mult, a, b = (rng.integers(0, 2**64, size=n, dtype=np.uint64) for n in (ngram, num_perm, num_perm))
    return word_mult | np.uint64(1), a | np.uint64(1), b


def exact_key(text: str) -> str:
    """Hex digest identifying a text up to whitespace and letter case (for exact dedup)."""
    canonical = " ".join(text.lower().split())
    return hashlib.blake2b(canonical.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()


def exact_keys(texts: Sequence[str]) -> list[str]:
    """`exact_key` of each text; the canonical text comes from C where the extension was built."""
    if _dedupkeys is None:
        return [exact_key(t) for t in texts]
    return [hashlib.blake2b(c, digest_size=16).hexdigest() for c in _dedupkeys.canonical_texts(list(texts))]


def _word_hashes_reference(texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """The definition: (zlib.crc32 of the UTF-8 bytes of every `\\w+` word of each `text.lower()`, as uint64, all
    documents in order; words per document). `_dedupkeys.c` computes the same in one pass (tests compare)."""
    words_per_doc = [_WORD.findall(text.lower()) for text in texts]
    n_words = np.fromiter(map(len, words_per_doc), dtype=np.int64, count=len(texts))
    # Hash all words at once: one encode of the joined words, split back into bytes (C loops only).
    joined = "\x00".join("\x00".join(words) for words in words_per_doc if words)
    encoded = joined.encode("utf-8", "surrogatepass").split(b"\x00") if joined else []
    return np.fromiter(map(zlib.crc32, encoded), dtype=np.uint64, count=len(encoded)), n_words


def _word_hashes_compiled(texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    hashes, counts = _dedupkeys.word_hashes(list(texts))
    return np.frombuffer(hashes, dtype=np.uint32).astype(np.uint64), np.frombuffer(counts, dtype=np.int64)


try:
    from stages.ingest import _dedupkeys
except ImportError:  # built by `pip install -e .` where a C compiler exists (pyproject.toml)
    _dedupkeys = None
COMPILED = _dedupkeys is not None
word_hashes = _word_hashes_compiled if COMPILED else _word_hashes_reference


def _shingle_hashes(texts: Sequence[str], ngram: int, word_mult: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(32-bit shingle hashes as uint64 of all documents concatenated, shingles per document)."""
    word_hash, n_words = word_hashes(texts)

    # Lay the documents out with (ngram - 1) zero words after each, so an n-gram window starting in a
    # document never reaches the next one, and a short document's single window is just its words.
    pad = ngram - 1
    padded_start = np.concatenate(([0], np.cumsum(n_words + pad)[:-1])).astype(np.int64)
    padded = np.zeros(int(n_words.sum()) + pad * len(texts) + pad, dtype=np.uint64)
    padded[np.arange(len(word_hash)) + np.repeat(np.arange(len(texts)) * pad, n_words)] = word_hash

    n_windows = len(padded) - pad
    gram = padded[:n_windows] * word_mult[0]
    for i in range(1, ngram):
        gram += padded[i : i + n_windows] * word_mult[i]

    n_shingles = np.where(n_words > 0, np.maximum(n_words - pad, 1), 0)
    shingle_start = np.concatenate(([0], np.cumsum(n_shingles)[:-1]))
    positions = np.arange(int(n_shingles.sum())) + np.repeat(padded_start - shingle_start, n_shingles)
    return gram[positions] >> np.uint64(32), n_shingles


def minhash_signatures(texts: Sequence[str], cfg: DedupConfig) -> np.ndarray:
    """MinHash signatures, shape (len(texts), num_perm), dtype uint32; empty documents get SENTINEL rows."""
    if _dedupkeys is None:
        return _signatures_reference(texts, cfg)
    word_mult, a, b = _constants(cfg.ngram, cfg.num_perm, cfg.seed)
    out = np.empty((len(texts), cfg.num_perm), dtype=np.uint32)
    _dedupkeys.signatures(list(texts), word_mult.tobytes(), a.tobytes(), b.tobytes(), out)
    return out


def dedup_keys(texts: Sequence[str], cfg: DedupConfig) -> tuple[list[str], np.ndarray]:
    """(`exact_keys(texts)`, `minhash_signatures(texts, cfg)`): what a kept document carries into the dedup steps.
    In C each text is lower-cased once for both."""
    if _dedupkeys is None:
        return exact_keys(texts), minhash_signatures(texts, cfg)
    word_mult, a, b = _constants(cfg.ngram, cfg.num_perm, cfg.seed)
    out = np.empty((len(texts), cfg.num_perm), dtype=np.uint32)
    canonical = _dedupkeys.dedup_keys(list(texts), word_mult.tobytes(), a.tobytes(), b.tobytes(), out)
    return [hashlib.blake2b(c, digest_size=16).hexdigest() for c in canonical], out


def _signatures_reference(texts: Sequence[str], cfg: DedupConfig) -> np.ndarray:
    """The definition of `minhash_signatures`, vectorised over the batch with numpy."""
    if len(texts) == 0:
        return np.empty((0, cfg.num_perm), dtype=np.uint32)
    word_mult, a, b = _constants(cfg.ngram, cfg.num_perm, cfg.seed)
    shingles, n_shingles = _shingle_hashes(texts, cfg.ngram, word_mult)
    docs = np.flatnonzero(n_shingles)
    ends = np.cumsum(n_shingles[docs])
    starts = ends - n_shingles[docs]
    minima = np.full((len(docs), cfg.num_perm), np.iinfo(np.uint64).max, dtype=np.uint64)
    # Permutations x shingles, a slice of shingles at a time so the matrix stays bounded whatever the document
    # sizes; each permutation is a contiguous row, so reduceat runs along rows. A document cut by a slice
    # boundary gets the minimum of both parts. One buffer is reused: a fresh array per slice is an mmap and its
    # page faults wherever glibc's mmap threshold is fixed (Dask workers set MALLOC_TRIM_THRESHOLD_).
    step = max(1, _CHUNK_ELEMENTS // cfg.num_perm)
    a, b = a[:, None], b[:, None]
    buffer = np.empty((cfg.num_perm, min(step, len(shingles))), dtype=np.uint64)
    for lo in range(0, len(shingles), step):
        hi = min(lo + step, len(shingles))
        first, last = np.searchsorted(ends, [lo, hi - 1], side="right")
        values = np.multiply(a, shingles[None, lo:hi], out=buffer[:, : hi - lo])  # uint64 wraps mod 2^64
        values += b
        segments = np.concatenate(([0], starts[first + 1 : last + 1] - lo))
        part = np.minimum.reduceat(values, segments, axis=1).T
        np.minimum(minima[first : last + 1], part, out=minima[first : last + 1])
    signatures = np.full((len(texts), cfg.num_perm), SENTINEL, dtype=np.uint32)
    signatures[docs] = (minima >> np.uint64(32)).astype(np.uint32)
    return signatures


class NearDuplicateIndex:
    """LSH index over the signatures of kept documents, filled in a deterministic (insertion) order.

    `add` gives each row a running id. A row is a near duplicate of the first (lowest id) kept document that
    shares at least one band with it and agrees on >= threshold of the signature entries; duplicates are
    not inserted, so every removed document is verified-similar to the kept document it is attributed to.
    """

    def __init__(self, cfg: DedupConfig):
        self.cfg = cfg
        self._buckets: list[dict[int, list[int]]] = [{} for _ in range(cfg.bands)]
        self._kept: dict[int, np.ndarray] = {}
        self._band_mult = np.random.default_rng(cfg.seed + 1).integers(
            1, 2**63, size=cfg.rows, dtype=np.uint64) | np.uint64(1)  # fmt: skip
        self.size = 0

    def __len__(self) -> int:
        return self.size

    def add(self, signatures: np.ndarray) -> np.ndarray:
        """For each row (in order): -1 if kept, else the id of the kept document it duplicates."""
        cfg = self.cfg
        n = len(signatures)
        # One 64-bit key per (row, band): cheaper dict keys than the band bytes; collisions are harmless
        # because every candidate is verified on the full signature.
        band_keys = (signatures.reshape(n, cfg.bands, cfg.rows).astype(np.uint64) * self._band_mult).sum(axis=2)
        min_agree = int(np.ceil(cfg.threshold * cfg.num_perm - 1e-9))
        result = np.full(n, -1, dtype=np.int64)
        empty = (signatures == SENTINEL).all(axis=1)
        for row, keys in enumerate(band_keys.tolist()):
            doc_id = self.size + row
            if empty[row]:
                continue
            sig = signatures[row]
            candidates = sorted({c for band, key in enumerate(keys) for c in self._buckets[band].get(key, ())})
            for c in candidates:
                if np.count_nonzero(self._kept[c] == sig) >= min_agree:
                    result[row] = c
                    break
            else:
                self._kept[doc_id] = sig.copy()
                for band, key in enumerate(keys):
                    self._buckets[band].setdefault(key, []).append(doc_id)
        self.size += n
        return result


def find_duplicates(signatures: np.ndarray, cfg: DedupConfig) -> np.ndarray:
    """For each row: -1 if kept, else the row index of the earlier kept document it near-duplicates."""
    return NearDuplicateIndex(cfg).add(signatures)
