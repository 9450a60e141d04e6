"""File names, Parquet helpers and the settings record that ties the outputs of the four steps together.

Why a settings record: the outputs of one step are only meaningful to the next under the same band layout,
seed and partition count. Each step records them in its stats.json and the next step refuses outputs made
under other settings, instead of silently pairing band keys of two different hash families.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable, Sequence

import pyarrow as pa
import pyarrow.parquet as pq

from stages.ingest.dedup.atomic import STATS, finished
from stages.ingest.minhash import DedupConfig

# step 1, per input unit
BANDS, EXACT_ROWS, SIGNATURES, IDS = "bands.parquet", "exact.parquet", "signatures.npy", "ids.parquet"
# step 2, per partition; step 3, per language
EXACT_DROPS, PAIRS, NEAR_DROPS = "exact-drops.parquet", "pairs.parquet", "near-drops.parquet"
# step 4, per input unit: bounded parts kept-NNNNN.parquet, duplicates-NNNNN.parquet; kept bytes per domain
KEPT_PARTS, DUPLICATE_PARTS, DOMAINS = "kept", "duplicates", "domains.parquet"

INDEX = "index.json"  # step 1: where each partition's rows are; not statistics, so not in stats.json
ROW_GROUP = 65_536  # rows per row group of sorted outputs: the granularity of range reads
IDS_GROUP = 65_536  # documents per row group of ids.parquet: step 3 reads only the groups it needs

BAND_SCHEMA = pa.schema([("band", pa.uint16()), ("key", pa.uint64()), ("exact", pa.uint64()), ("ordinal", pa.uint32())])
EXACT_SCHEMA = pa.schema([("hi", pa.uint64()), ("lo", pa.uint64()), ("ordinal", pa.uint32()), ("id", pa.string())])
PAIR_SCHEMA = pa.schema([("a", pa.uint64()), ("b", pa.uint64())])
DROP_SCHEMA = pa.schema([("doc", pa.uint64()), ("rep", pa.uint64()), ("rep_id", pa.string())])


def settings_record(cfg: DedupConfig, partitions: int) -> dict[str, Any]:
    return {"exact": cfg.exact, "near": cfg.near, "num_perm": cfg.num_perm, "bands": cfg.bands, "rows": cfg.rows,
            "threshold": cfg.threshold, "seed": cfg.seed, "partitions": partitions}


def read_finished(folder: Path, what: str, settings: dict[str, Any] | None = None) -> dict[str, Any]:
    """stats.json of a finished step; an unfinished folder or other settings is an error, never skipped."""
    stats = finished(folder)
    if stats is None:
        raise FileNotFoundError(f"{what} {folder} is not finished (no {STATS}): run that step first")
    if settings is not None and stats.get("settings") != settings:
        raise ValueError(f"{what} {folder} was made with dedup settings {stats.get('settings')}, "
                         f"not {settings}: rerun it with the same settings")
    return stats


def read_index(unit: Path) -> dict[str, Any]:
    """Step 1's index: row groups per partition, first ordinal per ids row group, digest of the ids."""
    return json.loads((Path(unit) / INDEX).read_text())


def read_row_groups(path: Path, groups: Sequence[int], columns: list[str] | None = None) -> pa.Table:
    pf = pq.ParquetFile(path)
    if not groups:
        return pf.schema_arrow.empty_table().select(columns or pf.schema_arrow.names)
    return pf.read_row_groups(list(groups), columns=columns)


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
