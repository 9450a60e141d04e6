"""A bucket larger than bucket_leaders + 1 compares its members only with its first ones (dedup/buckets.py).

Why: a page copied a million times puts a million documents in one band bucket, and all pairs would be 5 * 10^11
candidates; the leaders make the buckets step linear in its rows. Small buckets are unchanged.
"""

from __future__ import annotations

import random

import numpy as np

from stages.ingest.dedup.buckets import bucket_pairs
from tests.ingest.test_dedup_steps import _doc, _edit, decisions, steps, write_units


def _pairs(found) -> set[tuple[int, int]]:
    return {(int(a), int(b)) for ca, cb, _ in found.chunks for a, b in zip(ca, cb)}


def test_a_capped_bucket_pairs_each_member_with_its_leaders_and_counts_the_rest():
    big = np.arange(10, dtype=np.uint64) + 100  # one bucket of 10 in band 0
    small = np.array([5, 7, 200], dtype=np.uint64)  # one of 3 in band 1
    lone = np.array([1, 2], dtype=np.uint64)  # two keys that occur once
    order = np.concatenate([big, small, lone])
    band = np.array([0] * 10 + [1] * 3 + [0, 1], dtype=np.uint16)
    key = np.array([7] * 10 + [9] * 3 + [11, 12], dtype=np.uint64)
    rng = np.random.default_rng(0)
    shuffle = rng.permutation(len(order))  # input order does not matter
    args = band[shuffle], key[shuffle], order[shuffle], order[shuffle]
    every = bucket_pairs(*args, chunk_pairs=4, leaders=9)
    assert (every.capped, every.uncompared, every.largest) == (0, 0, 10)
    assert _pairs(every) == {(a, b) for g in (big, small) for a in map(int, g) for b in map(int, g) if a < b}
    capped = bucket_pairs(*args, chunk_pairs=4, leaders=3)
    assert (capped.capped, capped.uncompared) == (1, 21)  # the 7 non-leaders' 7 * 6 / 2 pairs
    expected = {(int(big[i]), int(big[j])) for i in range(3) for j in range(i + 1, 10)}
    expected |= {(5, 7), (5, 200), (7, 200)}  # 3 <= leaders + 1: every pair
    assert _pairs(capped) == expected and len(expected) - 3 + capped.uncompared == 45
    assert capped.docs.tolist() == sorted(map(int, np.concatenate([big, small])))


def test_a_star_of_near_copies_gets_the_same_decisions_with_two_leaders(tmp_path):
    """Every copy of the hub shares a bucket with it, and the hub, first, is a leader of every bucket it is in."""
    rng = random.Random(3)
    hub = _doc(rng)
    others = [_doc(rng) for _ in range(20)]
    copies = [_edit(hub, rng, 0.03) for _ in range(40)]
    units = [[hub] + copies[:20] + others[:10], copies[20:] + others[10:]]
    ctx, kept = write_units(tmp_path, units)
    cfg = ctx.settings.dedup
    _, all_dups, every = steps(kept, tmp_path / "all", cfg.model_copy(update={"bucket_leaders": 64}), 2)
    _, few_dups, few = steps(kept, tmp_path / "few", cfg.model_copy(update={"bucket_leaders": 2}), 2)
    assert decisions(few_dups) == decisions(all_dups)
    assert len(decisions(all_dups)) == 40 and {d for _, d in decisions(all_dups).values()} == {_id(kept, 0)}
    full = sum(s.candidates for s in every.stats.pairs.values())
    assert sum(s.capped_buckets for s in every.stats.pairs.values()) == 0
    assert sum(s.capped_buckets for s in few.stats.pairs.values()) > 0
    uncompared = sum(s.uncompared for s in few.stats.pairs.values())
    assert sum(s.candidates for s in few.stats.pairs.values()) < full / 3 and uncompared > full / 2


def _id(kept, row: int) -> str:
    import pyarrow.parquet as pq

    return pq.read_table(kept[0], columns=["id"]).column("id")[row].as_py()
