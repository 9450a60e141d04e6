"""Step 1, per input unit: a unit's kept documents -> its dedup keys on disk, grouped by partition.

Why: the later steps must see every document of a language, but no worker may hold a language. So each unit
writes, once, what the others need from it: for every non-empty document one row per LSH band (band, band
key, 64-bit exact key, ordinal) and one exact row (128-bit exact key, ordinal, id), each file in row groups of
one partition (a bucket's rows all land in one partition), plus its signatures as a memory-mappable array (a
candidate pair is verified by reading two rows, not a unit) and its ids (the representative's id is looked up,
not carried in every band row). The unit's rows stream through in batches; at most `buffer_rows` band rows
are held before they are written, so memory does not grow with the unit.

Folder (`out_dir`): bands.parquet, exact.parquet, signatures.npy, ids.parquet, index.json (the row groups of
each partition, the ids' first ordinal per row group, a digest of the ids: step 4 checks it reads the same
kept.parquet in the same order), stats.json (counts and settings).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from stages.ingest.dedup import files, keys
from stages.ingest.dedup.atomic import run_step
from stages.ingest.minhash import DedupConfig


def write_signatures(kept: Path, out_dir: Path, cfg: DedupConfig, partitions: int, *,
                     batch_rows: int = 16_384, buffer_rows: int = 1_000_000, atomic: bool = True) -> dict[str, Any]:
    """Write the dedup keys of `kept` (a Parquet with id, signature, exact_key in document order) to `out_dir`.

    Returns (and records) the statistics: docs, empty_docs (sentinel signatures: exact rows only), band_rows.
    """
    if partitions < 1:
        raise ValueError("partitions must be >= 1")
    return run_step(out_dir, lambda tmp: _write(Path(kept), tmp, cfg, partitions, batch_rows, buffer_rows), atomic)


class _PartitionedWriter:
    """Buffers columns and writes them as one row group per (flush, partition); remembers which is which.

    Numeric columns stay numpy until the flush (one concatenation, one reordering, zero-copy into Arrow);
    the id column, the only string one, is reordered by Arrow.
    """

    def __init__(self, path: Path, schema: pa.Schema, partitions: int, buffer_rows: int):
        self.writer = pq.ParquetWriter(path, schema, compression="zstd")
        self.schema, self.partitions, self.buffer_rows = schema, partitions, buffer_rows
        self.groups: list[list[int]] = [[] for _ in range(partitions)]
        self.pending: list[tuple[np.ndarray, dict[str, Any]]] = []
        self.pending_rows = self.n_groups = self.rows = 0

    def add(self, part: np.ndarray, columns: dict[str, Any]) -> None:
        self.pending.append((part, columns))
        self.pending_rows += len(part)
        if self.pending_rows >= self.buffer_rows:
            self.flush()

    def flush(self) -> None:
        if not self.pending_rows:
            self.pending.clear()
            return
        pending, self.pending, self.pending_rows = self.pending, [], 0
        order = np.argsort(np.concatenate([p for p, _ in pending]), kind="stable")
        part = np.concatenate([p for p, _ in pending])[order]
        columns = {}
        for name in self.schema.names:
            values = [c[name] for _, c in pending]
            if isinstance(values[0], np.ndarray):
                columns[name] = np.concatenate(values)[order]
            else:
                columns[name] = pa.concat_arrays([v.combine_chunks() if isinstance(v, pa.ChunkedArray) else v
                                                  for v in values]).take(pa.array(order))
        del pending
        table = pa.table(columns, schema=self.schema)
        counts = np.bincount(part, minlength=self.partitions)
        start = 0
        for p in np.flatnonzero(counts):
            n = int(counts[p])
            self.writer.write_table(table.slice(start, n), row_group_size=n)  # exactly one row group
            self.groups[p].append(self.n_groups)
            self.n_groups += 1
            start += n
        self.rows += table.num_rows

    def close(self) -> list[list[int]]:
        self.flush()
        self.writer.close()
        return self.groups


def _signature_matrix(column: pa.ChunkedArray | pa.Array, num_perm: int) -> np.ndarray:
    """The signature bytes as an (n, num_perm) uint32 view, without a Python loop over documents."""
    width = 4 * num_perm
    try:
        fixed = pa.concat_arrays(column.chunks) if isinstance(column, pa.ChunkedArray) else column
        fixed = fixed.cast(pa.binary(width))
    except (pa.ArrowInvalid, ValueError):
        raise ValueError(f"signatures must be {width} bytes (num_perm = {num_perm} uint32 values); "
                         "were they computed with other settings?") from None
    if fixed.null_count:
        raise ValueError("a kept document has no signature")
    data = fixed.buffers()[1]
    return np.frombuffer(data, dtype=np.uint32, count=len(fixed) * num_perm,
                         offset=fixed.offset * width).reshape(len(fixed), num_perm)


def _write(kept: Path, tmp: Path, cfg: DedupConfig, partitions: int, batch_rows: int, buffer_rows: int) -> dict[str, Any]:
    pf = pq.ParquetFile(kept)
    n = pf.metadata.num_rows
    # A plain .npy written by appending (not a memory map: its dirty pages would count as the worker's memory)
    sigs_out = (tmp / files.SIGNATURES).open("wb")
    np.lib.format.write_array_header_1_0(sigs_out, {"descr": np.lib.format.dtype_to_descr(np.dtype("<u4")),
                                                    "fortran_order": False, "shape": (n, cfg.num_perm)})
    bands = _PartitionedWriter(tmp / files.BANDS, files.BAND_SCHEMA, partitions, buffer_rows)
    exact = _PartitionedWriter(tmp / files.EXACT_ROWS, files.EXACT_SCHEMA, partitions, max(1, buffer_rows // cfg.bands))
    ids_writer = pq.ParquetWriter(tmp / files.IDS, pa.schema([("id", pa.string())]), compression="zstd")
    ids_digest = hashlib.sha256()
    ids_groups: list[int] = []
    start = empty_docs = 0
    band_index = np.arange(cfg.bands, dtype=np.uint16)
    for batch in pf.iter_batches(batch_size=batch_rows, columns=["id", "signature", "exact_key"]):
        m = batch.num_rows
        if not m:
            continue
        ids = batch.column("id")
        sigs = _signature_matrix(batch.column("signature"), cfg.num_perm)
        sigs_out.write(np.ascontiguousarray(sigs, dtype="<u4").tobytes())
        hi, lo = keys.exact_words(batch.column("exact_key").to_pylist())
        ordinals = np.arange(start, start + m, dtype=np.uint32)

        live = np.flatnonzero(~keys.is_sentinel(sigs))
        empty_docs += m - len(live)
        k = keys.band_keys(sigs[live], cfg)  # (live, bands)
        band = np.tile(band_index, len(live))
        key = k.ravel()
        bands.add(keys.band_partition(band, key, partitions), {
            "band": band, "key": key, "exact": np.repeat(hi[live], cfg.bands),
            "ordinal": np.repeat(ordinals[live], cfg.bands)})
        exact.add(keys.exact_partition(hi, partitions), {"hi": hi, "lo": lo, "ordinal": ordinals, "id": ids})

        ids_groups.append(start)
        ids_writer.write_table(pa.table({"id": ids}), row_group_size=m)
        for value in ids.to_pylist():
            ids_digest.update(value.encode() + b"\n")
        start += m
    sigs_out.close()
    ids_writer.close()
    band_groups, exact_groups = bands.close(), exact.close()
    if start != n:
        raise RuntimeError(f"{kept}: read {start} rows, the file says {n}")
    (tmp / files.INDEX).write_text(json.dumps({
        "docs": n, "row_groups": {"bands": band_groups, "exact": exact_groups},
        "ids_groups": ids_groups, "ids_sha256": ids_digest.hexdigest()}))
    return {"docs": n, "empty_docs": empty_docs, "band_rows": bands.rows, "settings": files.settings_record(cfg, partitions)}
