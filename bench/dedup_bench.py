#!/usr/bin/env python3
"""LSH near-duplicate detection: today's in-memory index, the sort-based steps, and rensa, on the same documents.

Input: ~100k synthetic documents as sets of 32-bit token hashes (originals, near copies with ~8% of the tokens
replaced, exact copies), so no ../shared/data is needed. Our MinHash of each set is computed with the
signature code's own constants (minhash._constants), rensa's from the same token hashes (rensa hashes them its
own way; only its LSH step is timed). Measured, each in a fresh process (one core):
  today    minhash.find_duplicates: NearDuplicateIndex, a dict per band + the kept signatures
  sorted   the steps' in-memory core (band keys -> sort-based buckets -> verified pairs -> greedy rule),
           the functions stages/ingest/dedup/ runs per partition, here on one partition holding everything
  steps    waves 1-3 on disk (4 units, 4 partitions): Parquet writes and reads included
  rensa    RMinHashLSH.insert_matrix_and_query_duplicate_flags (16 bands x 8 rows), if rensa is installed
docs/s is per CPU second; memory is the peak RSS growth of the measured call over the process after loading
its input (Linux: peak reset with /proc/self/clear_refs), divided by the documents.

    .venv/bin/python bench/dedup_bench.py [--docs 100000] [--json bench/results/dedup_bench.json]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
RESULTS = ROOT / "bench" / "results"

import numpy as np  # noqa: E402

TOKENS = 100


def make_token_sets(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(tokens (n, TOKENS) uint32, role per document: 0 original, 1 near copy, 2 exact copy)."""
    rng = np.random.default_rng(seed)
    n_near, n_exact = n * 15 // 100, n * 5 // 100
    n_orig = n - n_near - n_exact
    tokens = rng.integers(0, 2**32, size=(n, TOKENS), dtype=np.uint64).astype(np.uint32)
    src = rng.integers(0, n_orig, size=n_near + n_exact)
    tokens[n_orig:] = tokens[src]
    changed = rng.random((n_near, TOKENS)) < 0.08
    tokens[n_orig : n_orig + n_near][changed] = rng.integers(0, 2**32, size=int(changed.sum()), dtype=np.uint64).astype(np.uint32)
    role = np.repeat([0, 1, 2], [n_orig, n_near, n_exact])
    perm = rng.permutation(n)
    return tokens[perm], role[perm]


def our_signatures(tokens: np.ndarray) -> np.ndarray:
    """minhash_signatures' permutation family applied to the token hashes (uint32 x, ((a x + b) mod 2^64) >> 32)."""
    from stages.ingest.minhash import DedupConfig, _constants

    cfg = DedupConfig()
    _, a, b = _constants(cfg.ngram, cfg.num_perm, cfg.seed)
    out = np.empty((len(tokens), cfg.num_perm), dtype=np.uint32)
    x = tokens.astype(np.uint64)
    for lo in range(0, len(tokens), 2048):
        v = x[lo : lo + 2048, :, None] * a[None, None, :] + b[None, None, :]
        out[lo : lo + 2048] = (v.min(axis=1) >> np.uint64(32)).astype(np.uint32)
    return out


def _rss_kb(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def _measure(name: str, data_dir: str, queue) -> None:
    """One measurement in this (fresh) process: CPU seconds and peak RSS growth of the call."""
    from stages.ingest.minhash import DedupConfig

    cfg = DedupConfig()
    d = Path(data_dir)
    sigs = np.load(d / "sigs.npy")
    prepared = _prepare(name, d, sigs, cfg)
    import stages.ingest.dedup  # noqa: F401  (imports are not the measured work)
    import stages.ingest.minhash  # noqa: F401
    try:
        Path("/proc/self/clear_refs").write_text("5")  # reset the peak-RSS mark
    except OSError:
        pass
    rss0 = _rss_kb("VmRSS")
    t0, w0 = time.process_time(), time.perf_counter()
    result = _run(name, prepared, sigs, cfg, d)
    cpu, wall = time.process_time() - t0, time.perf_counter() - w0
    growth = max(0, _rss_kb("VmHWM") - rss0) * 1024
    if "step_peak_bytes" in result:  # the steps reset the peak mark themselves: the largest step is the figure
        growth = max(result["step_peak_bytes"].values())
    queue.put({"name": name, "cpu_s": cpu, "wall_s": wall, "peak_growth_bytes": growth, **result})


def _prepare(name, d, sigs, cfg):
    if name == "rensa":
        import rensa

        tokens = np.load(d / "tokens.npy").astype(np.uint64)
        offsets = np.arange(0, tokens.size + 1, TOKENS, dtype=np.uint64)
        return rensa.RMinHash.digest_matrix_from_flat_token_hashes(tokens.ravel(), offsets, cfg.num_perm, cfg.seed)
    if name == "steps":
        import pyarrow as pa
        import pyarrow.parquet as pq

        from stages.ingest.minhash import exact_key

        roles_keys = np.load(d / "exact_src.npy")
        kept = []
        for r, part in enumerate(np.array_split(np.arange(len(sigs)), 4)):
            path = d / f"kept-{r}.parquet"
            pq.write_table(pa.table({
                "id": [f"doc{i}" for i in part], "signature": [s.tobytes() for s in sigs[part]],
                "exact_key": [exact_key(f"text {roles_keys[i]}") for i in part]}), path)
            kept.append(path)
        return kept
    return None


def _run(name, prepared, sigs, cfg, d):
    if name == "today":
        from stages.ingest.minhash import find_duplicates

        dup = find_duplicates(sigs, cfg)
        np.save(d / "today.npy", dup)
        return {"duplicates": int((dup >= 0).sum())}
    if name == "sorted":
        dup, stats = sorted_core(sigs, cfg)
        np.save(d / "sorted.npy", dup)
        return {"duplicates": int((dup >= 0).sum()), **stats}
    if name == "steps":
        from stages.ingest.dedup import buckets, clusters, exact, signatures
        from tests.ingest.dedup_local import layout

        where = layout(d / "work", len(prepared), 4)
        peaks: dict[str, int] = {}

        def step(label, fn, *a):
            """Run one step; keep the largest peak RSS growth of any call of this step."""
            Path("/proc/self/clear_refs").write_text("5")
            rss0 = _rss_kb("VmRSS")
            r = fn(*a)
            peaks[label] = max(peaks.get(label, 0), (_rss_kb("VmHWM") - rss0) * 1024)
            return r

        for r, path in enumerate(prepared):
            step("1 signatures (per unit)", signatures.write_signatures, path, where.signatures[r], cfg, 4)
        ex = sum(step("2a exact (per partition)", exact.find_exact_duplicates, where.signatures, p,
                      where.exact[p], cfg, 4).dropped for p in range(4))
        for p in range(4):
            step("2b pairs (per partition)", buckets.find_candidate_pairs, where.signatures, p, where.pairs[p], cfg, 4)
        st = step("3 clusters (per language)", clusters.resolve_clusters, where.signatures, where.pairs,
                  where.clusters, cfg, 4)
        disk = sum(f.stat().st_size for f in (d / "work" / "1-signatures").rglob("*") if f.is_file())
        return {"duplicates": ex + st.dropped, "exact": ex, "near": st.dropped, "step1_disk_bytes": disk,
                "step_peak_bytes": peaks, "units": len(prepared), "partitions": 4}
    if name == "rensa":
        import rensa

        lsh = rensa.RMinHashLSH(threshold=cfg.threshold, num_perm=cfg.num_perm, num_bands=cfg.bands)
        flags = lsh.insert_matrix_and_query_duplicate_flags(prepared)
        return {"duplicates": int(np.asarray(flags, dtype=bool).sum())}
    raise ValueError(name)


def sorted_core(sigs: np.ndarray, cfg) -> tuple[np.ndarray, dict]:
    """The steps' per-partition core on everything at once: what step 2b + step 3 compute, in memory."""
    from stages.ingest.dedup import keys
    from stages.ingest.dedup.buckets import bucket_pairs
    from stages.ingest.dedup.clusters import greedy_first_kept

    n = len(sigs)
    live = np.flatnonzero(~keys.is_sentinel(sigs))
    bk = keys.band_keys(sigs[live], cfg)
    band = np.tile(np.arange(cfg.bands, dtype=np.uint16), len(live))
    order = np.repeat(live.astype(np.uint64), cfg.bands)
    found = bucket_pairs(band, bk.ravel(), order, order, 1 << 16, cfg.bucket_leaders)  # no exact pass: all distinct
    docs = found.docs
    del band, order
    pos = np.searchsorted(live.astype(np.uint64), docs)
    dk, ds = bk[pos], sigs[live[pos]]
    min_agree = int(np.ceil(cfg.threshold * cfg.num_perm - 1e-9))
    a_all, b_all = [], []
    for a, b, band_of in found.chunks:
        ia, ib = np.searchsorted(docs, a), np.searchsorted(docs, b)
        own = (dk[ia] == dk[ib]).argmax(axis=1) == band_of
        ia, ib, a, b = ia[own], ib[own], a[own], b[own]
        ok = np.count_nonzero(ds[ia] == ds[ib], axis=1) >= min_agree
        a_all.append(a[ok])
        b_all.append(b[ok])
    a = np.concatenate(a_all) if a_all else np.empty(0, np.uint64)
    b = np.concatenate(b_all) if b_all else np.empty(0, np.uint64)
    nodes = np.unique(np.concatenate((a, b)))
    dup_local, rounds = greedy_first_kept(np.searchsorted(nodes, a), np.searchsorted(nodes, b), len(nodes))
    dup = np.full(n, -1, dtype=np.int64)
    hit = dup_local >= 0
    dup[nodes[hit].astype(np.int64)] = nodes[dup_local[hit]].astype(np.int64)
    return dup, {"pairs": int(len(a)), "largest_bucket": found.largest, "rounds": rounds}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--docs", type=int, default=100_000)
    ap.add_argument("--json", type=Path, default=RESULTS / "dedup_bench.json")
    ap.add_argument("--data", type=Path, default=None, help=argparse.SUPPRESS)  # bench/summary.py passes it to every bench
    args = ap.parse_args()
    try:
        import rensa  # noqa: F401

        names = ["today", "sorted", "steps", "rensa"]
    except ImportError:
        names = ["today", "sorted", "steps"]
        print("rensa not installed (pip install rensa): not compared", file=sys.stderr)
    with tempfile.TemporaryDirectory(prefix="dedup-bench-") as tmp:
        d = Path(tmp)
        tokens, role = make_token_sets(args.docs)
        np.save(d / "tokens.npy", tokens)
        sigs = our_signatures(tokens)
        np.save(d / "sigs.npy", sigs)
        # exact copies share a text (-> exact key) with their source; everything else a text of its own
        _, first = np.unique(tokens, axis=0, return_inverse=True)
        np.save(d / "exact_src.npy", first.ravel())
        ctx = mp.get_context("spawn")
        out = {}
        for name in names:
            q = ctx.Queue()
            p = ctx.Process(target=_measure, args=(name, tmp, q))
            p.start()
            out[name] = q.get()
            p.join()
            r = out[name]
            r["docs_per_cpu_s"] = args.docs / r["cpu_s"]
            r["bytes_per_doc"] = r["peak_growth_bytes"] / args.docs
            print(f"{name:7s} {r['docs_per_cpu_s']:>10,.0f} docs/s  {r['bytes_per_doc']:>7,.0f} B/doc peak  "
                  f"{r['duplicates']:,} duplicates", file=sys.stderr)
            if name == "steps":
                for label, peak in r["step_peak_bytes"].items():
                    held = args.docs / (1 if "language" in label else 4)
                    print(f"        step {label}: peak {peak / 1e6:,.1f} MB for {held:,.0f} documents "
                          f"({peak / held:,.0f} B/doc)", file=sys.stderr)
                print("        (step 1's peak is capped by its buffer_rows, whatever the unit's size)", file=sys.stderr)
                print(f"        step-1 files on disk: {r['step1_disk_bytes'] / args.docs:,.0f} B/doc", file=sys.stderr)
        today, sorted_ = np.load(d / "today.npy"), np.load(d / "sorted.npy")
    result = {
        "docs": args.docs, "planted": {"near": int((role == 1).sum()), "exact": int((role == 2).sum())},
        "sorted_equals_today": bool(np.array_equal(today, sorted_)), **out,
        "speedup_sorted_vs_today": out["sorted"]["docs_per_cpu_s"] / out["today"]["docs_per_cpu_s"],
    }
    if "rensa" in out:
        result["sorted_vs_rensa"] = out["sorted"]["docs_per_cpu_s"] / out["rensa"]["docs_per_cpu_s"]
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2))
    print(f"sorted core gives find_duplicates' exact result: {result['sorted_equals_today']}; "
          f"{result['speedup_sorted_vs_today']:.1f}x its speed", file=sys.stderr)
    return 0 if result["sorted_equals_today"] else 1


if __name__ == "__main__":
    sys.exit(main())
