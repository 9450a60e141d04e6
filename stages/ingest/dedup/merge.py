"""Step 1b, per run of at most fan_in keys folders: their keys as one folder, so that no later unit opens more.

Why: a partition's buckets or exact unit reads its rows from every keys folder of its group, and verifies and
names documents by reading the folders' signatures and ids. With a folder per documents unit that is ~66,000
folders per unit for English (10^9 small reads over ~40,000 partitions). Merging runs of at most `fan_in`
folders into one, in levels until at most `fan_in` are left, bounds the folders any unit opens whatever the
size of the group; each level rewrites the keys once (docs/scaling.md has the bytes).

A merge folder has step 1's files and layout, with each partition's records in one span (so a later unit reads
a partition with one seek per folder): bands.bin + bands-index.npy, exact.bin + exact-index.npy (records'
`ordinal` = the row in this folder), signatures.npy and ids.parquet (the inputs' rows concatenated in rank
order), index.json (with first_rank and rank_docs: how rows map to order keys) and stats.json. Memory is
`buffer_rows` records (a partition larger than that is held alone) and one window of signatures: never a group.
The output depends only on the inputs, never on which worker merged what.
"""

from __future__ import annotations

import hashlib
from contextlib import ExitStack
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from stages.ingest.dedup import files
from stages.ingest.minhash import DedupConfig
from stages.ingest.units import MergeStats

_ROW_LIMIT = 1 << 32  # record ordinals are uint32: rows of one keys folder


def merge_levels(units: int, fan_in: int) -> list[int]:
    """Folders at each merge level for a group of `units` keys folders: [] when they are at most fan_in."""
    if fan_in < 2:
        raise ValueError(f"fan_in must be at least 2, not {fan_in}")
    out = []
    while units > fan_in:
        units = -(-units // fan_in)
        out.append(units)
    return out


def merge_key_folders(inputs: Sequence[Path], first_rank: int, out_dir: Path, cfg: DedupConfig, partitions: int, *,
                      buffer_rows: int = 1 << 20, window_rows: int = 16_384) -> MergeStats:
    """Merge keys folders of consecutive ranks from `first_rank` (step 1's, or a lower level's) into `out_dir`."""
    if not inputs:
        raise ValueError("a merge needs at least one keys folder")
    return files.run_step(out_dir, lambda folder: _merge(list(map(Path, inputs)), first_rank, folder, cfg, partitions,
                                                         buffer_rows, window_rows))


def _merge(inputs: list[Path], first_rank: int, tmp: Path, cfg: DedupConfig, partitions: int, buffer_rows: int,
           window_rows: int) -> MergeStats:
    settings = files.settings_record(cfg, partitions)
    folders = files.key_folders(inputs, first_rank)
    files.check_key_folders(folders, settings)
    docs = np.array([f.docs for f in folders], dtype=np.int64)
    if docs.sum() >= _ROW_LIMIT:
        raise ValueError(f"a merge of {len(folders)} keys folders from unit {first_rank} holds {int(docs.sum()):,} "
                         f"documents, more than a keys folder can (2^32): lower [ingest.dedup] fan_in")
    base = np.cumsum(docs) - docs  # the first row of each input in this folder
    paths = [f.path for f in folders]
    band_rows = merge_records(paths, files.BANDS, files.BAND_INDEX, files.BAND_RECORD, partitions, tmp, buffer_rows,
                              ordinal_base=base)
    exact_rows = merge_records(paths, files.EXACT_ROWS, files.EXACT_INDEX, files.EXACT_RECORD, partitions, tmp,
                               buffer_rows, ordinal_base=base)
    _concat_signatures(folders, tmp / files.SIGNATURES, cfg.num_perm, window_rows)
    groups, digest = _concat_ids(folders, tmp / files.IDS)
    rank_docs = np.concatenate([f.rank_docs for f in folders])
    files.SignatureIndex(docs=int(docs.sum()), ids_groups=groups, ids_sha256=digest, first_rank=first_rank,
                         rank_docs=rank_docs.tolist()).write(tmp)
    written = sum(p.stat().st_size for p in tmp.iterdir() if p.is_file())
    return MergeStats(settings=settings, first_rank=first_rank, ranks=len(rank_docs), inputs=len(folders),
                      docs=int(docs.sum()), band_rows=band_rows, exact_rows=exact_rows, bytes_written=written)


def partition_ranges(rows: np.ndarray, buffer_rows: int) -> Iterator[tuple[int, int]]:
    """Consecutive partitions [p0, p1) of at most buffer_rows rows in all (a larger partition alone)."""
    p, n = 0, len(rows)
    cum = np.cumsum(rows)
    while p < n:
        before = int(cum[p - 1]) if p else 0
        q = max(int(np.searchsorted(cum, before + buffer_rows, side="right")), p + 1)
        yield p, q
        p = q


def merge_records(inputs: list[Path], name: str, index_name: str, dtype: np.dtype, partitions: int, out_dir: Path,
                  buffer_rows: int, *, ordinal_base: np.ndarray | None = None) -> int:
    """Merge files.PartitionedWriter files (`name` + `index_name` in each input folder) into one in `out_dir`
    with each partition's records in one span, in input order within it; its index has one flush: (partitions,
    1, 2) [first record, records]. `ordinal_base`: added to each input's records' `ordinal` (keys folders).
    Returns the records written. Also used for the components rounds' edges (components.merge_round_folders)."""
    folders = [Path(p) for p in inputs]
    indexes = [np.load(f / index_name, mmap_mode="r") for f in folders]  # (partitions, flushes, 2) each
    for f, index in zip(folders, indexes):
        if index.shape[0] != partitions:
            raise ValueError(f"{f / index_name}: {index.shape[0]} partitions, the settings say {partitions}")
    per_partition = np.zeros(partitions, dtype=np.int64)
    for index in indexes:
        if index.shape[1]:
            per_partition += np.asarray(index[:, :, 1]).sum(axis=1)
    counts = np.zeros(partitions, dtype=np.int64)
    with ExitStack() as stack, (out_dir / name).open("wb") as out:
        handles = [stack.enter_context((f / name).open("rb")) for f in folders]
        for p0, p1 in partition_ranges(per_partition, buffer_rows):
            single = p1 - p0 == 1  # a partition above buffer_rows alone: streamed, never held whole
            parts, records = [], []
            for i, (fh, index) in enumerate(zip(handles, indexes)):
                spans = np.asarray(index[p0:p1])  # (p1 - p0, flushes, 2)
                for flush in range(spans.shape[1]):
                    n = spans[:, flush, 1]
                    total = int(n.sum())
                    if not total:
                        continue
                    fh.seek(int(spans[0, flush, 0]) * dtype.itemsize)  # a flush holds p0..p1-1 in one run
                    chunk = buffer_rows if single else total
                    for rec in files.read_records(fh, dtype, total, chunk, folders[i] / name):
                        if ordinal_base is not None:
                            rec["ordinal"] += np.uint32(ordinal_base[i])
                        if single:
                            out.write(rec.tobytes())
                            counts[p0] += len(rec)
                        else:
                            records.append(rec)
                    if not single:
                        parts.append(np.repeat(np.arange(p0, p1), n))
            if not records:
                continue
            part = np.concatenate(parts)
            merged = np.concatenate(records)[np.argsort(part, kind="stable")]
            out.write(merged.tobytes())
            counts[p0:p1] += np.bincount(part - p0, minlength=p1 - p0)
    first = np.cumsum(counts) - counts
    np.save(out_dir / index_name, np.stack((first, counts), axis=1)[:, None, :])
    return int(counts.sum())


def _concat_signatures(folders: list[files.KeyFolder], path: Path, num_perm: int, window_rows: int) -> None:
    """The inputs' signature rows one after the other, read and written `window_rows` at a time."""
    total = sum(f.docs for f in folders)
    with path.open("wb") as out:
        np.lib.format.write_array_header_1_0(out, {"descr": np.lib.format.dtype_to_descr(np.dtype("<u4")),
                                                   "fortran_order": False, "shape": (total, num_perm)})
        for f in folders:
            with (f.path / files.SIGNATURES).open("rb") as src:
                np.lib.format.read_magic(src)
                (rows, width), _, _ = np.lib.format.read_array_header_1_0(src)
                if width != num_perm or rows != f.docs:
                    raise ValueError(f"{f.path / files.SIGNATURES}: {rows} x {width} signatures, its index says "
                                     f"{f.docs} x {num_perm}: rerun that step")
                left = rows * width * 4
                while left:
                    chunk = src.read(min(left, window_rows * width * 4))
                    if not chunk:
                        raise ValueError(f"{f.path / files.SIGNATURES} is truncated: rerun that step")
                    out.write(chunk)
                    left -= len(chunk)


def _concat_ids(folders: list[files.KeyFolder], path: Path) -> tuple[list[int], str]:
    """The inputs' ids in order, in row groups of files.IDS_GROUP: (first row of each group, digest)."""
    digest = hashlib.sha256()
    groups: list[int] = []
    pending: list[pa.Array] = []
    held = written = 0
    schema = pa.schema([("id", pa.string())])
    with pq.ParquetWriter(path, schema, compression="zstd", use_dictionary=False) as writer:
        def flush(rows: int) -> None:
            nonlocal pending, held, written
            ids = pa.concat_arrays(pending) if pending else pa.array([], pa.string())
            head, rest = ids.slice(0, rows), ids.slice(rows)
            groups.append(written)
            writer.write_table(pa.table({"id": head}, schema=schema), row_group_size=rows)
            written += rows
            pending, held = ([rest] if len(rest) else []), len(rest)

        for f in folders:
            pf = pq.ParquetFile(f.path / files.IDS, pre_buffer=False)
            for g in range(pf.num_row_groups):
                ids = pf.read_row_group(g, columns=["id"], use_threads=False).column("id").combine_chunks()
                files.digest_ids(digest, ids)
                pending.append(ids)
                held += len(ids)
                while held >= files.IDS_GROUP:
                    flush(files.IDS_GROUP)
        if held:
            flush(held)
    return groups, digest.hexdigest()
