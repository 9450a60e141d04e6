"""File names, Parquet helpers, each step's stats.json and the settings record that ties the outputs of the four
steps together.

Why a settings record: the outputs of one step are only meaningful to the next under the same band layout,
seed and partition count. Each step records them in its stats.json and the next step refuses outputs made
under other settings, instead of silently pairing band keys of two different hash families.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Iterable, Iterator, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import ValidationError

from stages.ingest.dedup import keys
from stages.ingest.minhash import DedupConfig
from stages.ingest.units import DedupSettings, StepStats

S = TypeVar("S", bound=StepStats)

# step 1, per input unit: fixed-width records grouped by partition (*.bin, and where each partition's records are
# in each flush: *-index.npy, shape (partitions, flushes, 2): first record, records), the signatures, the ids
BANDS, EXACT_ROWS, SIGNATURES, IDS = "bands.bin", "exact.bin", "signatures.npy", "ids.parquet"
BAND_INDEX, EXACT_INDEX = "bands-index.npy", "exact-index.npy"
# step 2, per partition; step 3, per language
EXACT_DROPS, PAIRS, NEAR_DROPS = "exact-drops.parquet", "pairs.parquet", "near-drops.parquet"
# beside the drops, by representative: how many documents each representative's drops are (cluster sizes)
EXACT_COPIES, NEAR_COPIES = "exact-copies.parquet", "near-copies.parquet"
# step 4, per input unit: bounded parts kept-NNNNN.parquet, duplicates-NNNNN.parquet; kept bytes per domain
KEPT_PARTS, DUPLICATE_PARTS, DOMAINS = "kept", "duplicates", "domains.parquet"

STATS = "stats.json"  # every step's statistics, written last: the next step reads its settings and partition
INDEX = "index.json"  # step 1: where each partition's rows are; not statistics, so not in stats.json
ROW_GROUP = 65_536  # rows per row group of sorted outputs: the granularity of range reads
IDS_GROUP = 65_536  # documents per row group of ids.parquet: step 3 reads only the groups it needs

# Raw little-endian records, packed: a partition of a unit is read with a seek and one read per flush, never
# through a file footer (a Parquet footer of partitions x flushes row groups, read by every partition's unit,
# would cost more than the rows at thousands of partitions).
BAND_RECORD = np.dtype([("band", "<u2"), ("key", "<u8"), ("exact", "<u8"), ("ordinal", "<u4")])
EXACT_RECORD = np.dtype([("hi", "<u8"), ("lo", "<u8"), ("ordinal", "<u4")])
PAIR_SCHEMA = pa.schema([("a", pa.uint64()), ("b", pa.uint64())])
DROP_SCHEMA = pa.schema([("doc", pa.uint64()), ("rep", pa.uint64()), ("rep_id", pa.string())])
COPIES_SCHEMA = pa.schema([("rep", pa.uint64()), ("copies", pa.int64())])


def write_copies(path: Path, rep: np.ndarray) -> None:
    """(rep, number of drops naming it), sorted by rep: a unit reads its own representatives' range."""
    reps, counts = np.unique(rep, return_counts=True)
    write_sorted(path, pa.table({"rep": reps.astype(np.uint64), "copies": counts.astype(np.int64)}, schema=COPIES_SCHEMA))


def settings_record(cfg: DedupConfig, partitions: int) -> DedupSettings:
    return DedupSettings(exact=cfg.exact, near=cfg.near, num_perm=cfg.num_perm, bands=cfg.bands, rows=cfg.rows,
                         threshold=cfg.threshold, seed=cfg.seed, partitions=partitions)


def run_step(folder: Path, body: Callable[[Path], S]) -> S:
    """Run `body(folder)` in the step's output folder and record its statistics there, last. The folder is
    published whole by whoever owns it (the executor renames a unit's folder into place when it is done)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    stats = body(folder)
    (folder / STATS).write_text(json.dumps(stats.model_dump(mode="json"), sort_keys=True, indent=1))
    return stats


def finished(folder: Path, model: type[S]) -> S | None:
    """The recorded statistics of a finished step, or None when it has not finished."""
    path = Path(folder) / STATS
    if not path.exists():
        return None
    try:
        return model.model_validate_json(path.read_text())
    except ValidationError as e:
        err = e.errors()[0]
        raise ValueError(f"{path}: {'.'.join(map(str, err['loc'])) or 'the file'}: {err['msg']}; it was written by "
                         f"another version of the step: rerun that step") from None


def read_finished(folder: Path, what: str, model: type[S], settings: DedupSettings) -> S:
    """stats.json of a finished step; an unfinished folder or other settings is an error, never skipped."""
    stats = finished(folder, model)
    if stats is None:
        raise FileNotFoundError(f"{what} {folder} is not finished (no {STATS}): run that step first")
    if stats.settings != settings:
        raise ValueError(f"{what} {folder} was made with dedup settings {stats.settings.model_dump()}, "
                         f"not {settings.model_dump()}: rerun it with the same settings")
    return stats


def digest_ids(digest: "hashlib._Hash", ids: pa.Array) -> None:
    """Add a batch of ids to the digest that ties step 4 to the kept.parquet step 1 read: each id and a newline
    (one join and one update per batch: the same bytes as an update per id, for less CPU)."""
    if len(ids):
        digest.update(("\n".join(ids.to_pylist()) + "\n").encode())


@dataclass(frozen=True)
class SignatureIndex:
    """index.json of a keys folder: step 1's (one unit) or a merge's (a run of units, dedup/merge.py). What step 4
    checks it reads the same kept.parquet by, and where each id is."""

    docs: int
    ids_groups: list[int]  # the first row of each row group of ids.parquet
    ids_sha256: str  # over the ids in order (digest_ids)
    first_rank: int | None = None  # a merge folder: the rank of its first unit (step 1's folders know none) ...
    rank_docs: list[int] | None = None  # ... and the documents of each of its units, in rank order

    def write(self, unit: Path) -> None:
        fields = {k: v for k, v in asdict(self).items() if v is not None}  # step 1's file keeps its three keys
        (Path(unit) / INDEX).write_text(json.dumps(fields))


def read_index(unit: Path) -> SignatureIndex:
    return SignatureIndex(**json.loads((Path(unit) / INDEX).read_text()))


@dataclass(frozen=True)
class KeyFolder:
    """Where the later steps read the keys of a run of consecutive unit ranks: one unit's step-1 folder, or a
    merge folder of several (dedup/merge.py). Its rows (records' `ordinal`, signature and id rows) are the
    documents of its ranks concatenated in rank order, so a row maps to an order key and back by offsets."""

    path: Path
    first_rank: int
    rank_docs: np.ndarray  # documents per rank

    @property
    def ranks(self) -> int:
        return len(self.rank_docs)

    @property
    def docs(self) -> int:
        return int(self.rank_docs.sum())

    def _starts(self) -> np.ndarray:
        return np.cumsum(self.rank_docs) - self.rank_docs

    def order_keys(self, rows: np.ndarray) -> np.ndarray:
        """Order keys of rows of this folder."""
        if self.ranks == 1:
            return keys.order_keys(self.first_rank, rows)
        starts = self._starts()
        at = np.searchsorted(starts, rows, side="right") - 1
        ranks = (np.uint64(self.first_rank) + at.astype(np.uint64)) << np.uint64(keys.ORDINAL_BITS)
        return ranks | (rows.astype(np.int64) - starts[at]).astype(np.uint64)

    def rows(self, order: np.ndarray) -> np.ndarray:
        """Rows of documents of this folder, by order key."""
        return self._starts()[keys.unit_rank(order) - self.first_rank] + keys.ordinal(order)


def key_folders(paths: Iterable[Path], first_rank: int = 0) -> list[KeyFolder]:
    """The keys folders of consecutive ranks from `first_rank`, in rank order: step 1's take the next rank, a merge
    folder's recorded ranks must be the next ones (folders out of order would pair the wrong documents)."""
    out, rank = [], first_rank
    for path in map(Path, paths):
        if not (path / STATS).exists():
            raise FileNotFoundError(f"keys folder {path} is not finished (no {STATS}): run that step first")
        index = read_index(path)
        start = rank if index.first_rank is None else index.first_rank
        if start != rank:
            raise ValueError(f"{path} holds the keys of units {start}.., not {rank}..: give the keys folders in rank "
                             "order, each run once")
        docs = np.asarray(index.rank_docs if index.rank_docs is not None else [index.docs], dtype=np.int64)
        out.append(KeyFolder(path, start, docs))
        rank += len(docs)
    return out


def check_key_folders(folders: Iterable[KeyFolder], settings: DedupSettings) -> None:
    """Each keys folder finished, under `settings` (its stats.json: step 1's or a merge's)."""
    from stages.ingest.units import MergeStats, SignatureStats

    for f in folders:
        if f.ranks == 1 and read_index(f.path).first_rank is None:
            read_finished(f.path, "step-1 folder", SignatureStats, settings)
        else:
            read_finished(f.path, "merge folder", MergeStats, settings)


def folder_runs(folders: list[KeyFolder], docs: np.ndarray) -> Iterator[tuple[KeyFolder, int, int]]:
    """(folder, lo, hi) for each folder holding some of `docs` (sorted order keys): docs[lo:hi] are its."""
    firsts = np.array([f.first_rank for f in folders], dtype=np.int64)
    at = np.searchsorted(firsts, keys.unit_rank(docs), side="right") - 1
    bounds = np.flatnonzero(np.diff(at)) + 1
    for lo, hi in zip(np.concatenate(([0], bounds)), np.concatenate((bounds, [len(docs)]))):
        if lo < hi:
            yield folders[int(at[lo])], int(lo), int(hi)


class PartitionedWriter:
    """Buffers records and appends them, each flush ordered by partition, to one raw file; counts per flush.
    Read back one partition at a time with iter_partition (step 1's band and exact rows, the rounds' edges)."""

    def __init__(self, path: Path, dtype: np.dtype, partitions: int, buffer_rows: int):
        self.out = path.open("wb")
        self.dtype, self.partitions, self.buffer_rows = dtype, partitions, buffer_rows
        self.counts: list[np.ndarray] = []
        self.pending: list[tuple[np.ndarray, dict[str, np.ndarray]]] = []
        self.pending_rows = self.rows = 0

    def add(self, part: np.ndarray, columns: dict[str, np.ndarray]) -> None:
        self.pending.append((part, columns))
        self.pending_rows += len(part)
        if self.pending_rows >= self.buffer_rows:
            self.flush()

    def flush(self) -> None:
        if not self.pending_rows:
            self.pending.clear()
            return
        pending, self.pending, self.pending_rows = self.pending, [], 0
        part = np.concatenate([p for p, _ in pending])
        order = np.argsort(part, kind="stable")
        records = np.empty(len(part), dtype=self.dtype)
        for name in self.dtype.names:
            records[name] = np.concatenate([c[name] for _, c in pending])[order]
        del pending
        self.out.write(records.tobytes())
        self.counts.append(np.bincount(part, minlength=self.partitions).astype(np.int64))
        self.rows += len(records)

    def close(self, index_path: Path) -> None:
        """Write the index: (partitions, flushes, 2) int64, [first record, records] of each partition in each
        flush, so the unit of partition p reads only its own row of it (a memory map)."""
        self.flush()
        self.out.close()
        counts = np.stack(self.counts) if self.counts else np.zeros((0, self.partitions), np.int64)  # (flushes, P)
        totals = counts.sum(axis=1)
        flush_start = np.concatenate(([0], np.cumsum(totals)[:-1])).astype(np.int64)
        first = flush_start[:, None] + np.cumsum(counts, axis=1) - counts  # (flushes, P)
        np.save(index_path, np.ascontiguousarray(np.stack((first.T, counts.T), axis=2)))


def _spans(unit: Path, index_name: str, partition: int) -> np.ndarray:
    """(first record, records) of one partition in each flush of a step-1 file: its row of the index."""
    index = np.load(Path(unit) / index_name, mmap_mode="r")
    return np.array(index[partition]) if index.shape[1] else np.zeros((0, 2), np.int64)  # (flushes, 2)


def partition_records(unit: Path, index_name: str, partition: int) -> int:
    """How many records one partition has in a step-1 file, from its index alone."""
    return int(_spans(unit, index_name, partition)[:, 1].sum())


def iter_partition(unit: Path, name: str, index_name: str, dtype: np.dtype, partition: int,
                   chunk: int | None = None) -> Iterator[np.ndarray]:
    """The records of one partition from a step-1 file, one flush at a time (at most step 1's `buffer_rows`;
    a merged folder's partition is one flush of any size: `chunk` caps the records yielded at once): its row of
    the index (a memory map), then one seek and one read per flush that wrote any."""
    spans = _spans(unit, index_name, partition)
    with open(Path(unit) / name, "rb") as f:
        for first, count in spans[spans[:, 1] > 0]:
            f.seek(int(first) * dtype.itemsize)
            yield from read_records(f, dtype, int(count), chunk or int(count), Path(unit) / name)


def read_records(f, dtype: np.dtype, total: int, chunk: int, path: Path) -> Iterator[np.ndarray]:
    """`total` records of `dtype` from `f`'s position, at most `chunk` at a time; a short file is an error
    naming `path`."""
    while total:
        rec = np.fromfile(f, dtype=dtype, count=min(chunk, total))
        if not len(rec):
            raise ValueError(f"{path} is shorter than its index says: rerun the step that wrote it")
        total -= len(rec)
        yield rec


def read_partition(unit: Path, name: str, index_name: str, dtype: np.dtype, partition: int) -> np.ndarray:
    """All the records of one partition from a step-1 file, as one array."""
    parts = list(iter_partition(unit, name, index_name, dtype, partition))
    return np.concatenate(parts) if parts else np.empty(0, dtype)


def lookup_ids(unit: Path, index: SignatureIndex, ordinals: np.ndarray) -> pa.Array:
    """Ids of some documents of one unit, reading only the row groups of ids.parquet that hold them."""
    firsts = np.asarray(index.ids_groups, dtype=np.int64)
    group = np.searchsorted(firsts, ordinals, side="right") - 1
    needed = np.unique(group)
    table = pq.ParquetFile(Path(unit) / IDS).read_row_groups(needed.tolist(), columns=["id"])
    sizes = np.diff(np.append(firsts, index.docs))[needed]
    base = np.cumsum(sizes) - sizes  # where each needed group starts in `table`
    pos = base[np.searchsorted(needed, group)] + (ordinals - firsts[group])
    return table.column("id").take(pa.array(pos)).combine_chunks()


def resolve_ids(folders: list[KeyFolder], docs: np.ndarray) -> pa.Array:
    """Ids of documents given by order key (any order), one keys folder at a time."""
    if not len(docs):
        return pa.array([], pa.string())
    order = np.argsort(docs, kind="stable")
    sorted_docs = docs[order]
    parts = [lookup_ids(f.path, read_index(f.path), f.rows(sorted_docs[lo:hi]))
             for f, lo, hi in folder_runs(folders, sorted_docs)]
    ids = pa.concat_arrays(parts)
    inverse = np.empty_like(order)
    inverse[order] = np.arange(len(order))
    return ids.take(pa.array(inverse))


def read_pair_chunks(folder: Path) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """The verified pairs (a, b) of a step-2b folder, one row group at a time."""
    pf = pq.ParquetFile(Path(folder) / PAIRS)
    for i in range(pf.num_row_groups):
        t = pf.read_row_group(i)
        yield t.column("a").to_numpy(), t.column("b").to_numpy()


def read_range(path: Path, column: str, first: int, last: int) -> pa.Table:
    """Rows with first <= column <= last of a file sorted by that column; row-group statistics skip the rest."""
    return pq.read_table(path, filters=[(column, ">=", first), (column, "<=", last)])


def read_parts(folder: Path, prefix: str, schema: pa.Schema) -> pa.Table:
    """The parts `<prefix>-NNNNN.parquet` of a folder as one table, in order (empty with `schema` if none)."""
    paths = sorted(Path(folder).glob(f"{prefix}-*.parquet"))
    return pa.concat_tables(pq.read_table(p) for p in paths) if paths else schema.empty_table()


def write_sorted(path: Path, table: pa.Table) -> None:
    pq.write_table(table, path, row_group_size=ROW_GROUP, compression="zstd")


def write_batches(path: Path, schema: pa.Schema, tables: Iterable[pa.Table]) -> int:
    """Stream tables into one Parquet file (an empty file when there are none); returns the rows written."""
    rows = 0
    with pq.ParquetWriter(path, schema, compression="zstd") as writer:
        for t in tables:
            if t.num_rows:
                writer.write_table(t)
                rows += t.num_rows
    return rows
