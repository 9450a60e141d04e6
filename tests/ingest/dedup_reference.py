"""The single-process dedup the steps are proven against: the rule in its plainest form.

One language's kept rows in unit order; exact duplicates by a dict of first occurrences; then
`minhash.find_duplicates`, the greedy LSH index, over the survivors. Tests and bench/dedup_equivalence.py compare
the steps' output with it row for row; it holds a whole language in memory, so the stage never runs it.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from stages.ingest.minhash import DedupConfig, find_duplicates
from stages.ingest.reasons import EXACT_DUP, NEAR_DUP
from stages.ingest.schema import CLUSTER_SIZE, DOCUMENT_FIELD_NAMES, DOCUMENT_SCHEMA, REJECTED_SCHEMA


def dedup_in_memory(kept: pa.Table, cfg: DedupConfig) -> tuple[pa.Table, pa.Table]:
    """`kept`: a language's kept rows with `exact_key` and `signature`, concatenated in unit order. Returns (the
    rows that stay, DOCUMENT_SCHEMA; the duplicates with reason and duplicate_of, REJECTED_SCHEMA), both in order."""
    n = kept.num_rows
    dup_of = np.full(n, -1, dtype=np.int64)
    reason = np.array([None] * n, dtype=object)
    if n and cfg.exact:
        first: dict[str, int] = {}
        for i, key in enumerate(kept.column("exact_key").to_pylist()):
            j = first.setdefault(key, i)
            if j != i:
                dup_of[i], reason[i] = j, EXACT_DUP
    if n and cfg.near:
        alive = np.flatnonzero(dup_of < 0)
        sigs = np.stack([np.frombuffer(b, dtype=np.uint32)
                         for b in kept.column("signature").take(pa.array(alive)).to_pylist()])
        near = find_duplicates(sigs, cfg)
        for k in np.flatnonzero(near >= 0):
            dup_of[alive[k]], reason[alive[k]] = alive[near[k]], NEAR_DUP
    is_dup = dup_of >= 0
    if not n:
        return DOCUMENT_SCHEMA.empty_table(), REJECTED_SCHEMA.empty_table()
    size = (1 + np.bincount(dup_of[is_dup], minlength=n)).astype(np.int32)  # itself + what was dropped for it
    final = (kept.select(DOCUMENT_FIELD_NAMES).append_column(CLUSTER_SIZE, pa.array(size))
             .filter(pa.array(~is_dup)).cast(DOCUMENT_SCHEMA))
    idx = np.flatnonzero(is_dup)
    ids = kept.column("id").to_pylist()
    dups = kept.take(pa.array(idx, pa.int64())).select(DOCUMENT_FIELD_NAMES)
    dups = dups.append_column("reason", pa.array(reason[idx].tolist(), pa.string()))
    dups = dups.append_column("duplicate_of", pa.array([ids[j] for j in dup_of[idx]], pa.string()))
    return final, dups.cast(REJECTED_SCHEMA)
