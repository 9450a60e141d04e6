"""Step 1, per input unit: a unit's kept documents -> its dedup keys on disk, grouped by partition.

Why: the later steps must see every document of a language, but no worker may hold a language. So each unit
writes, once, what the others need from it: its band and exact records as raw fixed-width records grouped by
partition (a partition's unit reads its rows with one seek per flush), its signatures as a memory-mappable
array (a pair is verified by reading two rows) and its ids (looked up, not carried in every record). Rows stream
through in batches; at most `buffer_rows` band records are held, so memory does not grow with the unit.

Folder (`out_dir`): bands.bin + bands-index.npy, exact.bin + exact-index.npy, signatures.npy, ids.parquet,
index.json (documents, the ids' first ordinal per row group, a digest of the ids: step 4 checks it reads the
same kept.parquet in the same order), stats.json (counts and settings).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from stages.ingest.dedup import files, keys
from stages.ingest.minhash import DedupConfig
from stages.ingest.units import SignatureStats


def write_signatures(kept: Path, out_dir: Path, cfg: DedupConfig, partitions: int, *,
                     batch_rows: int = 4096, buffer_rows: int = 262_144) -> SignatureStats:
    """Write the dedup keys of `kept` (a Parquet with id, signature, exact_key in document order) to `out_dir`;
    returns (and records) the statistics."""
    if partitions < 1:
        raise ValueError("partitions must be >= 1")
    return files.run_step(out_dir, lambda folder: _write(Path(kept), folder, cfg, partitions, batch_rows, buffer_rows))


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


def _write(kept: Path, tmp: Path, cfg: DedupConfig, partitions: int, batch_rows: int, buffer_rows: int) -> SignatureStats:
    pf = pq.ParquetFile(kept, pre_buffer=False)  # pre-buffering would read all the row groups at once
    n = pf.metadata.num_rows
    # A plain .npy written by appending (not a memory map: its dirty pages would count as the worker's memory)
    sigs_out = (tmp / files.SIGNATURES).open("wb")
    np.lib.format.write_array_header_1_0(sigs_out, {"descr": np.lib.format.dtype_to_descr(np.dtype("<u4")),
                                                    "fortran_order": False, "shape": (n, cfg.num_perm)})
    bands = files.PartitionedWriter(tmp / files.BANDS, files.BAND_RECORD, partitions, buffer_rows)
    exact = files.PartitionedWriter(tmp / files.EXACT_ROWS, files.EXACT_RECORD, partitions, max(1, buffer_rows // cfg.bands))
    ids_writer = pq.ParquetWriter(tmp / files.IDS, pa.schema([("id", pa.string())]), compression="zstd",
                                  use_dictionary=False)  # every id is distinct: a dictionary only costs CPU
    ids_digest = hashlib.sha256()
    ids_groups: list[int] = []
    start = empty_docs = 0
    band_index = np.arange(cfg.bands, dtype=np.uint16)
    # decoded on this thread, as in step 4 (filter.py): Arrow's reader threads cost peak memory, not CPU, here
    for batch in pf.iter_batches(batch_size=batch_rows, columns=["id", "signature", "exact_key"], use_threads=False):
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
        exact.add(keys.exact_partition(hi, partitions), {"hi": hi, "lo": lo, "ordinal": ordinals})

        ids_groups.append(start)
        ids_writer.write_table(pa.table({"id": ids}), row_group_size=m)
        files.digest_ids(ids_digest, ids)
        start += m
    sigs_out.close()
    ids_writer.close()
    bands.close(tmp / files.BAND_INDEX)
    exact.close(tmp / files.EXACT_INDEX)
    if start != n:
        raise RuntimeError(f"{kept}: read {start} rows, the file says {n}")
    files.SignatureIndex(docs=n, ids_groups=ids_groups, ids_sha256=ids_digest.hexdigest()).write(tmp)
    return SignatureStats(settings=files.settings_record(cfg, partitions), docs=n, empty_docs=empty_docs, band_rows=bands.rows)
