"""The keys all dedup steps must agree on, so that steps run apart still reach the decisions of one process.

- Global order key: `(unit rank << 32) | ordinal`, uint64. The rank is the unit's position in the language's
  units (sorted unit ids), the ordinal the row in the unit's kept.parquet; so comparing order keys is comparing
  positions in the units' concatenation, and "first occurrence" survives being split over workers.
- Band keys: the exact formula of `minhash.NearDuplicateIndex` (one 64-bit multiply-sum per band), so the
  candidate pairs are the same pairs, hash collisions included.
- Exact keys: the 128-bit blake2b of `minhash.exact_key` as two uint64: an exact group is the same group as
  the single-process dedup's dict of hex strings.
- Partitions: a splitmix64 finaliser of (band, band key) or the exact key's high word, mod P, so any P works
  and each bucket lives in exactly one partition.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from stages.ingest.minhash import SENTINEL, DedupConfig

ORDINAL_BITS = 32
_ORDINAL_MASK = np.uint64((1 << ORDINAL_BITS) - 1)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_HEX = np.full(256, 255, dtype=np.uint8)
_HEX[np.frombuffer(b"0123456789", np.uint8)] = np.arange(10)
_HEX[np.frombuffer(b"abcdef", np.uint8)] = np.arange(10, 16)
_HEX[np.frombuffer(b"ABCDEF", np.uint8)] = np.arange(10, 16)


def order_keys(rank: int, ordinals: np.ndarray) -> np.ndarray:
    if not 0 <= rank < 1 << 32:
        raise ValueError(f"unit rank {rank} out of range")
    return (np.uint64(rank) << np.uint64(ORDINAL_BITS)) | ordinals.astype(np.uint64)


def unit_rank(keys: np.ndarray) -> np.ndarray:
    return (keys >> np.uint64(ORDINAL_BITS)).astype(np.int64)


def ordinal(keys: np.ndarray) -> np.ndarray:
    return (keys & _ORDINAL_MASK).astype(np.int64)


def unit_range(rank: int) -> tuple[int, int]:
    """[first, last] order key of a unit: for range filters on files sorted by order key."""
    return rank << ORDINAL_BITS, ((rank + 1) << ORDINAL_BITS) - 1


@lru_cache(maxsize=8)
def band_multipliers(rows: int, seed: int) -> np.ndarray:
    """`NearDuplicateIndex._band_mult`, recomputed (a test pins the two together)."""
    return np.random.default_rng(seed + 1).integers(1, 2**63, size=rows, dtype=np.uint64) | np.uint64(1)


def band_keys(signatures: np.ndarray, cfg: DedupConfig) -> np.ndarray:
    """(n, bands) uint64: the key under which `NearDuplicateIndex` files each document in each band."""
    mult = band_multipliers(cfg.rows, cfg.seed)
    out = np.empty((len(signatures), cfg.bands), dtype=np.uint64)
    for band in range(cfg.bands):  # one band at a time: the uint64 temporaries stay 1/bands of the matrix
        rows = signatures[:, band * cfg.rows : (band + 1) * cfg.rows].astype(np.uint64)
        rows *= mult
        out[:, band] = rows.sum(axis=1, dtype=np.uint64)
    return out


def is_sentinel(signatures: np.ndarray) -> np.ndarray:
    """Empty documents: the LSH index neither matches nor indexes them, so they get no band rows."""
    return (signatures == SENTINEL).all(axis=1)


def mix64(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser: band keys are linear in the signature, so their low bits alone are no partition."""
    z = x.astype(np.uint64) + _GOLDEN
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def band_partition(band: np.ndarray, key: np.ndarray, partitions: int) -> np.ndarray:
    return (mix64(key ^ (band.astype(np.uint64) * _GOLDEN)) % np.uint64(partitions)).astype(np.int64)


def exact_partition(hi: np.ndarray, partitions: int) -> np.ndarray:
    return (hi % np.uint64(partitions)).astype(np.int64)


def exact_words(hex_keys: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """`exact_key` hex digests (32 characters) -> (high, low) uint64 words, vectorised."""
    n = len(hex_keys)
    if n == 0:
        return np.empty(0, np.uint64), np.empty(0, np.uint64)
    raw = np.frombuffer("".join(hex_keys).encode("ascii"), dtype=np.uint8)
    if raw.size != 32 * n:
        raise ValueError("exact keys must be 32 hexadecimal characters (minhash.exact_key)")
    nibbles = _HEX[raw].reshape(n, 2, 16)
    if (nibbles == 255).any():
        raise ValueError("exact keys must be hexadecimal (minhash.exact_key)")
    shifts = np.arange(60, -1, -4, dtype=np.uint64)
    words = (nibbles.astype(np.uint64) << shifts).sum(axis=2, dtype=np.uint64)
    return np.ascontiguousarray(words[:, 0]), np.ascontiguousarray(words[:, 1])
