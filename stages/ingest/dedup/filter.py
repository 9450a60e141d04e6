"""Step 4, per input unit: the unit's kept documents minus its duplicates, and the duplicates with their reason.

Why per unit: the decisions of steps 2a (exact, per partition) and 3 (near, per language) are files sorted by
order key, so a unit reads only its own range of each (row-group statistics skip the rest) and streams its
kept.parquet once in batches. The outputs are the stage's published parts (DOCUMENT_SCHEMA for kept rows,
REJECTED_SCHEMA with `reason` and `duplicate_of` for duplicates, at most `part_rows` rows a file), in document
order: concatenated in unit order they are the single-process dedup's data/<lang> table and the duplicate part of
its rejected/<lang> table. The unit also sums what the stage's record needs of its kept rows
(bytes, characters, words; bytes per registrable domain).

Output (`out_dir`): kept-NNNNN.parquet, duplicates-NNNNN.parquet, domains.parquet (domain, bytes), stats.json.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from stages.ingest.dedup import files, keys
from stages.ingest.dedup.gather import covered_run
from stages.ingest.minhash import DedupConfig
from stages.ingest.parts import PartWriter
from stages.ingest.process import BATCH_DOCS, NO_DOMAIN
from stages.ingest.reasons import EXACT_DUP, NEAR_DUP
from stages.ingest.schema import CLUSTER_SIZE, DOCUMENT_FIELD_NAMES, DOCUMENT_SCHEMA, REJECTED_SCHEMA
from stages.ingest.units import FilterStats, SignatureStats

DOMAIN_SCHEMA = pa.schema([("domain", pa.string()), ("bytes", pa.int64())])


def filter_unit(kept: Path, signatures_dir: Path, rank: int, exact_dirs: Sequence[Path],
                near_dir: Path | Sequence[Path] | None, out_dir: Path, cfg: DedupConfig, partitions: int, *,
                batch_rows: int = BATCH_DOCS, part_rows: int = 2**62, keep_duplicates: bool = True) -> FilterStats:
    """`kept`: the unit's kept.parquet (as given to step 1); `signatures_dir`: its step-1 folder; `rank`: its
    position in the language's units; `exact_dirs`: all P step-2a folders, or the gather folders holding them
    (ignored with exact off); `near_dir`: the group's step-3 folder, or the folders of its partitions (or the gather
    folders holding them) when it was clustered in rounds (None with near off); `keep_duplicates`: write the
    duplicates' rows (they are counted either way)."""
    return files.run_step(out_dir, lambda folder: _filter(Path(kept), Path(signatures_dir), rank,
                                                          list(map(Path, exact_dirs)), near_dir,
                                                          folder, cfg, partitions, batch_rows, part_rows,
                                                          keep_duplicates))


def unit_drops(rank: int, exact_dirs: list[Path], near_dir: Path | Sequence[Path] | None, cfg: DedupConfig,
               partitions: int) -> tuple[np.ndarray, np.ndarray, pa.Array]:
    """(ordinals, reasons 0 exact / 1 near, duplicate_of ids) of one unit's dropped documents, by ordinal."""
    settings = files.settings_record(cfg, partitions)
    first, last = keys.unit_range(rank)
    tables, reasons = [], []
    if cfg.exact:
        seen = sorted(covered_run(exact_dirs, "exact", settings))
        if seen != list(range(partitions)):
            raise ValueError(f"step 4 needs the exact drops of each of the {partitions} partitions once; got {seen}")
        for d in exact_dirs:
            t = files.read_range(d / files.EXACT_DROPS, "doc", first, last)
            tables.append(t)
            reasons.append(np.zeros(t.num_rows, dtype=np.int8))
    if cfg.near:
        near_dirs = [near_dir] if isinstance(near_dir, (str, Path)) else list(near_dir or [])
        if not near_dirs:
            raise ValueError("near dedup is on: step 4 needs the group's step-3 folder(s)")
        covered_run(near_dirs, "near", settings)  # each finished, under these settings
        for d in map(Path, near_dirs):  # one per group, or per partition (or gathered run) of one clustered in rounds
            t = files.read_range(d / files.NEAR_DROPS, "doc", first, last)
            tables.append(t)
            reasons.append(np.ones(t.num_rows, dtype=np.int8))
    if not tables:
        return np.empty(0, np.int64), np.empty(0, np.int8), pa.array([], pa.string())
    table = pa.concat_tables(tables)
    ordinals = keys.ordinal(table.column("doc").to_numpy())
    reason = np.concatenate(reasons)
    order = np.argsort(ordinals, kind="stable")
    ordinals, reason = ordinals[order], reason[order]
    if len(ordinals) > 1 and (np.diff(ordinals) == 0).any():
        raise ValueError(f"unit {rank}: a document is dropped twice (exact and near outputs overlap)")
    return ordinals, reason, table.column("rep_id").take(pa.array(order)).combine_chunks()


def unit_copies(rank: int, exact_dirs: list[Path], near_dir: Path | Sequence[Path] | None,
                cfg: DedupConfig) -> tuple[np.ndarray, np.ndarray]:
    """(ordinals, documents dropped in their favour) of the unit's representatives, by ordinal: exact copies of
    the document plus the near duplicates dropped for it (summed over the partitions that name it)."""
    first, last = keys.unit_range(rank)
    sources = [(Path(d), files.EXACT_COPIES) for d in exact_dirs] if cfg.exact else []
    if cfg.near:
        near = [near_dir] if isinstance(near_dir, (str, Path)) else list(near_dir or [])
        sources += [(Path(d), files.NEAR_COPIES) for d in near]
    reps, counts = [], []
    for d, name in sources:
        t = files.read_range(d / name, "rep", first, last)
        reps.append(t.column("rep").to_numpy())
        counts.append(t.column("copies").to_numpy())
    if not reps:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    ordinals, inverse = np.unique(keys.ordinal(np.concatenate(reps)), return_inverse=True)
    return ordinals, np.bincount(inverse, weights=np.concatenate(counts)).astype(np.int64)


def _filter(kept: Path, signatures_dir: Path, rank: int, exact_dirs: list[Path],
            near_dir: Path | Sequence[Path] | None, tmp: Path, cfg: DedupConfig, partitions: int, batch_rows: int, part_rows: int, keep_duplicates: bool) -> FilterStats:
    import pyarrow.compute as pc

    settings = files.settings_record(cfg, partitions)
    files.read_finished(signatures_dir, "step-1 folder", SignatureStats, settings)
    step1 = files.read_index(signatures_dir)
    drop_ord, drop_reason, drop_rep = unit_drops(rank, exact_dirs, near_dir, cfg, partitions)
    rep_ord, rep_copies = unit_copies(rank, exact_dirs, near_dir, cfg)
    reason_names = pa.array([EXACT_DUP, NEAR_DUP], pa.string())
    digest = hashlib.sha256()
    start = 0
    kept_out = PartWriter(tmp, files.KEPT_PARTS, DOCUMENT_SCHEMA, part_rows)
    dup_out = PartWriter(tmp, files.DUPLICATE_PARTS, REJECTED_SCHEMA, part_rows, enabled=keep_duplicates)
    kept_docs = kept_bytes = kept_chars = kept_words = 0
    domains: dict[str, int] = {}
    # One batch at a time (by default one row group of kept.parquet), only the columns written (not the dedup
    # keys), decoded on this thread: Arrow's reader threads cost a worker of one core memory, not time.
    batches = pq.ParquetFile(kept, pre_buffer=False).iter_batches(batch_size=batch_rows, columns=DOCUMENT_FIELD_NAMES,
                                                                  use_threads=False)
    for batch in batches:
        m = batch.num_rows
        files.digest_ids(digest, batch.column("id"))
        lo, hi = np.searchsorted(drop_ord, [start, start + m])
        is_dup = np.zeros(m, dtype=bool)
        is_dup[drop_ord[lo:hi] - start] = True
        table = pa.Table.from_batches([batch])
        size = np.ones(m, dtype=np.int32)  # the cluster each document represents: itself + what was dropped for it
        a, b = np.searchsorted(rep_ord, [start, start + m])
        size[rep_ord[a:b] - start] += rep_copies[a:b].astype(np.int32)
        keep = table.append_column(CLUSTER_SIZE, pa.array(size)).filter(pa.array(~is_dup)).cast(DOCUMENT_SCHEMA)
        if keep.num_rows:
            kept_out.write(keep)
            kept_docs += keep.num_rows
            kept_bytes += int(pc.sum(keep.column("n_bytes")).as_py() or 0)
            kept_chars += int(pc.sum(keep.column("n_chars")).as_py() or 0)
            kept_words += int(pc.sum(keep.column("n_words")).as_py() or 0)
            domain = pc.if_else(pc.equal(pc.fill_null(keep.column("domain"), ""), ""), NO_DOMAIN, keep.column("domain"))
            grouped = pa.table({"domain": domain, "n_bytes": keep.column("n_bytes")}).group_by("domain").aggregate([("n_bytes", "sum")])
            for d, b in zip(grouped.column("domain").to_pylist(), grouped.column("n_bytes_sum").to_pylist()):
                domains[d] = domains.get(d, 0) + b
        if hi > lo and keep_duplicates:
            dups = table.take(pa.array(drop_ord[lo:hi] - start))
            dups = dups.append_column("reason", reason_names.take(pa.array(drop_reason[lo:hi])))
            dups = dups.append_column("duplicate_of", drop_rep.slice(lo, hi - lo))
            dup_out.write(dups.cast(REJECTED_SCHEMA))
        start += m
    parts, dup_parts = kept_out.close(), dup_out.close()
    if start != step1.docs or digest.hexdigest() != step1.ids_sha256:
        raise ValueError(f"{kept} is not the file step 1 read into {signatures_dir} (other rows or order): "
                         "rerun step 1 on it")
    names = sorted(domains)
    pq.write_table(pa.table({"domain": names, "bytes": [domains[d] for d in names]}, schema=DOMAIN_SCHEMA),
                   tmp / files.DOMAINS)
    return FilterStats(settings=settings, docs=start, kept=kept_docs, kept_bytes=kept_bytes, kept_chars=kept_chars,
                       kept_words=kept_words, exact_duplicate=int((drop_reason == 0).sum()),
                       near_duplicate=int((drop_reason == 1).sum()), parts=parts, duplicate_parts=dup_parts)
