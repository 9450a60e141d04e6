"""Step 2a, per partition: exact duplicates among the exact rows of one partition, from all keys folders of a group.

Why a partition is enough: identical texts have identical 128-bit exact keys and so the same partition; within
it, rows sorted by (key, order key) put each group's first occurrence first. That document is the one the
single-process dedup keeps (its dict remembers the first index per key); every other member is dropped with it
as `duplicate_of`, also when that first occurrence is itself dropped later as a near duplicate. The
representatives' ids are looked up in their units' ids.parquet (only the row groups that hold them).

Output (`out_dir`): exact-drops.parquet (doc, rep, rep_id), sorted by doc order key; exact-copies.parquet (rep,
copies), sorted by rep; and stats.json.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np
import pyarrow as pa

from stages.ingest.dedup import files
from stages.ingest.minhash import DedupConfig
from stages.ingest.units import ExactStats


def find_exact_duplicates(units: Sequence[Path], partition: int, out_dir: Path, cfg: DedupConfig,
                          partitions: int) -> ExactStats:
    """`units`: the keys folders of one group in rank order (step 1's, or its last merge level's)."""
    if not 0 <= partition < partitions:
        raise ValueError(f"partition {partition} not in 0..{partitions - 1}")
    return files.run_step(out_dir, lambda folder: _find(list(map(Path, units)), partition, folder, cfg, partitions))


def _find(paths: list[Path], partition: int, tmp: Path, cfg: DedupConfig, partitions: int) -> ExactStats:
    settings = files.settings_record(cfg, partitions)
    folders = files.key_folders(paths)
    files.check_key_folders(folders, settings)
    his, los, orders = [], [], []
    for folder in folders if cfg.exact else ():
        rec = files.read_partition(folder.path, files.EXACT_ROWS, files.EXACT_INDEX, files.EXACT_RECORD, partition)
        his.append(rec["hi"])
        los.append(rec["lo"])
        orders.append(folder.order_keys(rec["ordinal"]))
        del rec
    hi = np.concatenate(his) if his else np.empty(0, np.uint64)
    lo = np.concatenate(los) if los else np.empty(0, np.uint64)
    order = np.concatenate(orders) if orders else np.empty(0, np.uint64)
    del his, los, orders

    idx = np.lexsort((order, lo, hi))
    hi, lo = hi[idx], lo[idx]
    first = np.ones(len(idx), dtype=bool)
    first[1:] = (hi[1:] != hi[:-1]) | (lo[1:] != lo[:-1])
    group_start = np.maximum.accumulate(np.where(first, np.arange(len(idx)), 0))
    dropped = np.flatnonzero(~first)
    doc = order[idx[dropped]]
    rep = order[idx[group_start[dropped]]]
    by_doc = np.argsort(doc, kind="stable")
    doc, rep = doc[by_doc], rep[by_doc]
    table = pa.table({"doc": doc, "rep": rep, "rep_id": files.resolve_ids(folders, rep)}, schema=files.DROP_SCHEMA)
    files.write_sorted(tmp / files.EXACT_DROPS, table)
    files.write_copies(tmp / files.EXACT_COPIES, rep)
    n_groups = int(first.sum())
    return ExactStats(settings=settings, partition=partition, rows_read=int(len(idx)), distinct=n_groups,
                      groups_with_copies=int(len(np.unique(group_start[dropped]))), dropped=int(len(dropped)))
