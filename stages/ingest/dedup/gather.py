"""Step 3b, per run of at most fan_in partitions: their drops and copies files as one folder, so that no filter
unit opens more.

Why: a filter unit (one per documents unit) reads its own range of every partition's exact drops (and, for a
group clustered in rounds, of every node partition's near drops): P files per unit, ~40,000 for English, so
~66,000 x 40,000 opens in all. These files are sorted by order key, so runs of at most fan_in of them merge into
one sorted file in a single streaming pass (a k-way merge of their batches), in levels until at most fan_in are
left; the filter then reads at most fan_in folders.

A gather folder holds the files of the partitions [first_partition, first_partition + count): exact-drops.parquet
(doc, rep, rep_id) sorted by doc and exact-copies.parquet (rep, copies) sorted by rep, and the near-drops and
near-copies files likewise when the group's near drops are per partition (clustered in rounds); stats.json
(GatherStats). Ties keep input order, so the output depends only on the inputs. Memory: one batch per input.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from stages.ingest.dedup import files
from stages.ingest.minhash import DedupConfig
from stages.ingest.units import ClusterStats, DedupSettings, ExactStats, GatherStats

BATCH_ROWS = 8192  # rows of each input held at once


def gather_drops(exact_dirs: Sequence[Path], near_dirs: Sequence[Path], first_partition: int, out_dir: Path,
                 cfg: DedupConfig, partitions: int) -> GatherStats:
    """Merge the drops of consecutive partitions from `first_partition`: `exact_dirs` step 2a's folders (or a lower
    level's gather folders), `near_dirs` the node partitions' step-3 folders (or gather folders; empty when the
    group's near drops are in one folder or near dedup is off)."""
    return files.run_step(out_dir, lambda folder: _gather(list(map(Path, exact_dirs)), list(map(Path, near_dirs)),
                                                          first_partition, folder, cfg, partitions))


def covered(folder: Path, kind: str, settings: DedupSettings, position: int) -> list[int]:
    """The partitions whose `kind` ("exact" or "near") drops a finished folder holds: a step-2a folder its own
    partition, a node partition's step-3 folder the one its `position` in the list says (its statistics name
    none), a gather folder its run."""
    stats = gather_stats(folder)
    if stats is None:
        if kind == "exact":
            return [files.read_finished(folder, "step-2a folder", ExactStats, settings).partition]
        files.read_finished(folder, "step-3 folder", ClusterStats, settings)
        return [position]
    if stats.settings != settings:
        files.read_finished(folder, "gather folder", GatherStats, settings)  # raises, naming both settings
    if kind == "near" and not stats.near:
        raise ValueError(f"gather folder {folder} holds no near drops: gather the node partitions' step-3 folders too")
    return list(range(stats.first_partition, stats.first_partition + stats.count))


def gather_stats(folder: Path) -> GatherStats | None:
    """A gather folder's statistics; None for any other folder (step 2a's, step 3's, or one not finished)."""
    path = Path(folder) / files.STATS
    if not path.exists():
        return None
    raw = json.loads(path.read_text())
    return GatherStats.model_validate(raw) if isinstance(raw, dict) and "first_partition" in raw else None


def covered_run(dirs: Sequence[Path], kind: str, settings: DedupSettings, first: int = 0) -> list[int]:
    """The partitions a list of drops folders holds, in order, the first of them numbered `first`."""
    seen: list[int] = []
    for d in dirs:
        seen += covered(Path(d), kind, settings, first + len(seen))
    return seen


def _gather(exact_dirs: list[Path], near_dirs: list[Path], first: int, tmp: Path, cfg: DedupConfig,
            partitions: int) -> GatherStats:
    settings = files.settings_record(cfg, partitions)
    counts = set()
    for kind, dirs in (("exact", exact_dirs if cfg.exact else []), ("near", near_dirs)):
        if not dirs:
            continue
        seen = covered_run(dirs, kind, settings, first)
        if seen != list(range(first, first + len(seen))):
            raise ValueError(f"a gather from partition {first} needs the {kind} drops of consecutive partitions in "
                             f"order; got {seen}")
        counts.add(len(seen))
    if len(counts) != 1:
        raise ValueError(f"a gather from partition {first} needs the same partitions of exact and near drops, and at "
                         f"least one; got {sorted(counts)}")
    rows = {}
    if cfg.exact:
        rows["exact_drops"] = merge_sorted([d / files.EXACT_DROPS for d in exact_dirs], "doc", tmp / files.EXACT_DROPS,
                                           files.DROP_SCHEMA)
        rows["exact_copies"] = merge_sorted([d / files.EXACT_COPIES for d in exact_dirs], "rep",
                                            tmp / files.EXACT_COPIES, files.COPIES_SCHEMA)
    if near_dirs:
        rows["near_drops"] = merge_sorted([d / files.NEAR_DROPS for d in near_dirs], "doc", tmp / files.NEAR_DROPS,
                                          files.DROP_SCHEMA)
        rows["near_copies"] = merge_sorted([d / files.NEAR_COPIES for d in near_dirs], "rep", tmp / files.NEAR_COPIES,
                                           files.COPIES_SCHEMA)
    return GatherStats(settings=settings, first_partition=first, count=counts.pop(), near=bool(near_dirs),
                       inputs=max(len(exact_dirs), len(near_dirs)), **rows)


def merge_sorted(paths: list[Path], column: str, out: Path, schema: pa.Schema) -> int:
    """One Parquet file sorted by `column` from files each sorted by it (ties in input order), holding one batch
    of each input at a time; returns the rows written."""
    cursors = [_Cursor(pq.ParquetFile(p, pre_buffer=False).iter_batches(batch_size=BATCH_ROWS, use_threads=False),
                       column) for p in paths]
    held: list[pa.Table] = []
    n_held = written = 0
    with pq.ParquetWriter(out, schema, compression="zstd") as writer:
        while True:
            live = [c for c in cursors if c.fill()]
            if not live:
                break
            bound = min(c.last() for c in live)  # every row <= bound of every input is here: emit them, merged
            parts = [c.take_upto(bound) for c in live]
            keys = np.concatenate([p.column(column).to_numpy() for p in parts])
            table = pa.concat_tables(parts).take(pa.array(np.argsort(keys, kind="stable")))
            held.append(table)
            n_held += table.num_rows
            if n_held >= files.ROW_GROUP:
                writer.write_table(pa.concat_tables(held).cast(schema), row_group_size=files.ROW_GROUP)
                written += n_held
                held, n_held = [], 0
        if n_held:
            writer.write_table(pa.concat_tables(held).cast(schema), row_group_size=files.ROW_GROUP)
            written += n_held
    return written


class _Cursor:
    """The unread rows of one sorted input: its current batch, refilled from the file's batches."""

    def __init__(self, batches: Iterator[pa.RecordBatch], column: str):
        self.batches, self.column = batches, column
        self.table: pa.Table | None = None
        self.keys = np.empty(0, np.uint64)

    def fill(self) -> bool:
        while not len(self.keys):
            batch = next(self.batches, None)
            if batch is None:
                return False
            self.table = pa.Table.from_batches([batch])
            self.keys = batch.column(self.column).to_numpy()
        return True

    def last(self) -> int:
        return int(self.keys[-1])

    def take_upto(self, bound: int) -> pa.Table:
        assert self.table is not None
        n = int(np.searchsorted(self.keys, np.uint64(bound), side="right"))
        head, self.table = self.table.slice(0, n), self.table.slice(n)
        self.keys = self.keys[n:]
        return head
