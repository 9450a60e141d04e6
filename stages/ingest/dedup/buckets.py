"""Step 2b, per partition: verified near-duplicate pairs from the band rows of one partition, all units.

A document is a near duplicate of an earlier *kept* document sharing a band key whose signature agrees on
>= threshold of its entries; which documents are kept is step 3's decision, so this step emits every verified
pair that could matter:
- rows sorted by (band, key, exact key, order key): a bucket is a run of equal (band, key), sort-based, no dict;
- exact copies collapse to their first occurrence (identical texts have identical signatures, and the exact
  pass removes the others before the near pass);
- a member is paired only with the first `bucket_leaders` members of its bucket: linear in the rows whatever
  the largest bucket (the pairs left out are counted);
- a pair that shares several bands is emitted only in the lowest band it shares (whose rows are equal), so each
  pair appears once in the whole language;
- verification reads only the signature rows of one chunk's documents, through memory maps of bounded windows.
Pairs are generated, verified and written in chunks of `chunk_pairs`: memory is the partition's band keys, 8
bytes per candidate document and one chunk's signatures, never a language (nor the partition's candidates'
signatures: a cluster of 10^6 near copies puts half of them in every partition).

Output (`out_dir`): pairs.parquet (a, b) with a < b order keys, and stats.json.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np
import pyarrow as pa

from stages.ingest.dedup import files
from stages.ingest.minhash import DedupConfig
from stages.ingest.units import PairStats


def find_candidate_pairs(units: Sequence[Path], partition: int, out_dir: Path, cfg: DedupConfig, partitions: int,
                         *, chunk_pairs: int = 65_536) -> PairStats:
    """`units`: the keys folders of one group in rank order (step 1's, or its last merge level's)."""
    if not 0 <= partition < partitions:
        raise ValueError(f"partition {partition} not in 0..{partitions - 1}")
    return files.run_step(out_dir, lambda folder: _find(list(map(Path, units)), partition, folder, cfg, partitions,
                                                        chunk_pairs))


@dataclass
class Buckets:
    """What bucket_pairs found before streaming its pairs."""

    docs: np.ndarray  # sorted order keys of the documents in a bucket of two or more
    largest: int  # documents in the largest bucket
    capped: int  # buckets of more than leaders + 1 documents
    uncompared: int  # pairs of the capped buckets not generated
    chunks: Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]  # (a, b, band) candidate pairs, a < b


def bucket_pairs(band: np.ndarray, key: np.ndarray, exact: np.ndarray, order: np.ndarray,
                 chunk_pairs: int, leaders: int) -> Buckets:
    """In-memory core. `exact` equal within a bucket means the same text: only the smallest order key of it takes
    part. Each member pairs with the later members only if it is one of its bucket's first `leaders`.
    """
    # Nearly every band key occurs once: one plain sort of the keys finds the few rows that share theirs,
    # and only those are sorted fully (memory ~3 words per row instead of lexsort's copies of every column).
    by_key = np.argsort(key)
    sorted_key = key[by_key]
    same = sorted_key[1:] == sorted_key[:-1]
    del sorted_key
    shared = np.zeros(len(key), dtype=bool)
    shared[1:] |= same
    shared[:-1] |= same
    sub = by_key[shared]
    del by_key, shared, same
    band, key, exact, order = band[sub], key[sub], exact[sub], order[sub]
    idx = np.lexsort((order, exact, key, band))
    band, key, exact, order = band[idx], key[idx], exact[idx], order[idx]
    n = len(idx)
    first_copy = np.ones(n, dtype=bool)
    first_copy[1:] = (band[1:] != band[:-1]) | (key[1:] != key[:-1]) | (exact[1:] != exact[:-1])
    band, key, order = band[first_copy], key[first_copy], order[first_copy]
    idx = np.lexsort((order, key, band))  # members in order-key order: the leaders are the bucket's first documents
    band, key, order = band[idx], key[idx], order[idx]
    n = len(order)
    starts_mask = np.ones(n, dtype=bool)
    starts_mask[1:] = (band[1:] != band[:-1]) | (key[1:] != key[:-1])
    starts = np.flatnonzero(starts_mask)
    sizes = np.diff(np.append(starts, n))
    multi = sizes >= 2
    starts, sizes = starts[multi], sizes[multi]
    members = np.repeat(starts, sizes) + (np.arange(int(sizes.sum())) - np.repeat(np.cumsum(sizes) - sizes, sizes))
    band, order = band[members], order[members]
    starts = np.cumsum(sizes) - sizes
    docs = np.unique(order)
    big = sizes > leaders + 1
    capped_sizes = sizes[big].astype(np.int64)
    uncompared = int(((capped_sizes - leaders) * (capped_sizes - leaders - 1) // 2).sum())

    def chunks() -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """Exactly chunk_pairs pairs at a time (the last fewer), in (member, partner) order: a leader of a bucket of
        10^6 is split over chunks like any other run of pairs."""
        m = len(order)
        if not m:
            return
        offset = np.arange(m) - np.repeat(starts, sizes)
        later = np.where(offset < leaders, np.repeat(sizes, sizes) - 1 - offset, 0)  # partners after each member
        cum = np.cumsum(later)
        total = int(cum[-1])
        for p0 in range(0, total, chunk_pairs):
            k = np.arange(p0, min(total, p0 + chunk_pairs))
            lo = np.searchsorted(cum, k, side="right")  # the member of pair k
            hi = lo + 1 + (k - (cum[lo] - later[lo]))
            a, b = order[lo], order[hi]
            yield np.minimum(a, b), np.maximum(a, b), band[lo]

    return Buckets(docs=docs, largest=int(sizes.max(initial=0)), capped=int(big.sum()), uncompared=uncompared,
                   chunks=chunks())


def _gather_signatures(folders: list[files.KeyFolder], docs: np.ndarray, num_perm: int,
                       window_rows: int = 16_384) -> np.ndarray:
    """Signature rows of `docs` (sorted order keys), through memory maps of at most `window_rows` rows.

    Why windows: the pages a map touches count as the worker's resident memory until the map is closed, and a
    partition's candidates touch nearly every page of a unit's signatures.npy.
    """
    out = np.empty((len(docs), num_perm), dtype=np.uint32)
    for folder, lo, hi in files.folder_runs(folders, docs):
        rows_of = folder.rows(docs[lo:hi])
        path = folder.path / files.SIGNATURES
        with open(path, "rb") as f:
            np.lib.format.read_magic(f)
            (rows, width), _, dtype = np.lib.format.read_array_header_1_0(f)
            header = f.tell()
        if width != num_perm:
            raise ValueError(f"{path}: signatures of {width} hash functions, the settings say {num_perm}")
        i = 0
        while i < len(rows_of):
            first = int(rows_of[i])
            j = int(np.searchsorted(rows_of, first + window_rows))
            mm = np.memmap(path, dtype=dtype, mode="r", offset=header + first * width * dtype.itemsize,
                           shape=(min(window_rows, rows - first), width))
            out[lo + i:lo + j] = mm[rows_of[i:j] - first]
            del mm
            i = j
    return out


# A chunk's documents are sparse in the signature files at scale: wider windows cost fewer maps, and a map holds
# only the pages its rows touch (at most this / 8 pages of 4 KiB: 32 MiB).
CHUNK_WINDOW_ROWS = 1 << 16

COLUMNS = {"band": np.uint16, "key": np.uint64, "exact": np.uint64, "order": np.uint64}  # of the band rows held


def _shared_band_rows(folders: list[files.KeyFolder], partition: int) -> tuple[int, list[np.ndarray]]:
    """(rows in the partition, the COLUMNS of its rows whose band key occurs more than once), in two passes.

    Why two passes: nearly every band key occurs once, and only the rest can form a bucket. The first pass keeps
    only the keys (sorted in place), the second the rows whose key is shared, reading the partition's records
    again, one flush of step 1 at a time; holding every column of every row would cost several times more.
    """
    def records(folder: files.KeyFolder) -> Iterator[np.ndarray]:  # one flush of step 1 at a time
        return files.iter_partition(folder.path, files.BANDS, files.BAND_INDEX, files.BAND_RECORD, partition)

    counts = [files.partition_records(f.path, files.BAND_INDEX, partition) for f in folders]
    all_keys = np.empty(sum(counts), dtype=np.uint64)
    at = 0
    for folder in folders:
        for rec in records(folder):
            all_keys[at:at + len(rec)] = rec["key"]
            at += len(rec)
    all_keys.sort()
    shared = np.unique(all_keys[1:][all_keys[1:] == all_keys[:-1]])
    del all_keys
    cols: dict[str, list[np.ndarray]] = {name: [] for name in COLUMNS}
    for folder in folders if len(shared) else ():
        for rec in records(folder):
            at_key = np.minimum(np.searchsorted(shared, rec["key"]), len(shared) - 1)
            rec = rec[shared[at_key] == rec["key"]]
            for name in ("band", "key", "exact"):
                cols[name].append(np.ascontiguousarray(rec[name]))
            cols["order"].append(folder.order_keys(rec["ordinal"]))
    return sum(counts), [np.concatenate(cols[k]) if cols[k] else np.empty(0, t) for k, t in COLUMNS.items()]


@dataclass
class _PairCounts:
    """Counted while the candidate chunks stream through verification."""

    candidates: int = 0
    first_shared_band: int = 0  # candidates emitted in the lowest band their pair shares
    verified: int = 0


def _find(units: list[Path], partition: int, tmp: Path, cfg: DedupConfig, partitions: int,
          chunk_pairs: int) -> PairStats:
    settings = files.settings_record(cfg, partitions)
    folders = files.key_folders(units)
    files.check_key_folders(folders, settings)
    if cfg.near:
        rows_read, (band, key, exact, order) = _shared_band_rows(folders, partition)
    else:
        rows_read, (band, key, exact, order) = 0, [np.empty(0, t) for t in COLUMNS.values()]
    if not cfg.exact:  # no exact pass before the near pass: copies are separate documents
        exact = order
    found = bucket_pairs(band, key, exact, order, chunk_pairs, cfg.bucket_leaders)
    del band, key, exact, order
    min_agree = int(np.ceil(cfg.threshold * cfg.num_perm - 1e-9))  # NearDuplicateIndex.add's rule
    counts = _PairCounts()

    def verified() -> Iterator[pa.Table]:
        for a, b, band_of in found.chunks:
            counts.candidates += len(a)
            need = np.union1d(a, b)  # the chunk's documents: signatures held per chunk, not per partition
            sigs = _gather_signatures(folders, need, cfg.num_perm, window_rows=CHUNK_WINDOW_ROWS)
            ia, ib = np.searchsorted(need, a), np.searchsorted(need, b)
            agree = sigs[ia] == sigs[ib]
            # a band is shared when its rows are equal (its key is their 64-bit hash): no keys to recompute
            shared = agree.reshape(len(a), cfg.bands, cfg.rows).all(axis=2)
            own = (shared.argmax(axis=1) == band_of) & shared[np.arange(len(a)), band_of]
            a, b, agree = a[own], b[own], agree[own]
            counts.first_shared_band += len(a)
            ok = np.count_nonzero(agree, axis=1) >= min_agree
            counts.verified += int(ok.sum())
            yield pa.table({"a": a[ok], "b": b[ok]}, schema=files.PAIR_SCHEMA)

    files.write_batches(tmp / files.PAIRS, files.PAIR_SCHEMA, verified())
    return PairStats(settings=settings, partition=partition, rows_read=rows_read, candidate_docs=int(len(found.docs)),
                     largest_bucket=found.largest, capped_buckets=found.capped, uncompared=found.uncompared,
                     candidates=counts.candidates, first_shared_band=counts.first_shared_band,
                     verified=counts.verified)
