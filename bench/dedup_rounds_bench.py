#!/usr/bin/env python3
"""Connected components in rounds of partitioned units (stages/ingest/dedup/components.py) at scale, without text.

Verified pairs are generated for N documents (order keys of units of 2^20 documents) with a planted structure:
pairs (10% of the documents), chains of 100 (2%), stars of 50 (1%) and one giant cluster (min(10^6, N / 10)
documents, a random tree plus 10% extra edges), node ids in random order. Written as the buckets step writes them
(round 0: one scatter folder per band partition, P = ceil(N / 500,000) as [ingest.dedup] partition_docs
gives), then the real rounds run on a pool of processes, each unit in a fresh process so its peak RSS is its own.
Per round: units, the largest unit's peak RSS, input folders each unit opened, bytes written, CPU seconds; the
labels are checked against a single-process connected components over the same pairs (recall and precision of
the dropped documents and their representatives: 1.0 means identical).

    .venv/bin/python bench/dedup_rounds_bench.py [--docs 1000000,10000000] [--workers 2] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing as mp
import os
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
RESULTS = ROOT / "bench" / "results"

import numpy as np  # noqa: E402

PARTITION_DOCS = 500_000  # the default [ingest.dedup] partition_docs
GOALS = {"unit_peak_rss_mb": 2048, "rss_growth": 1.3}  # issue 41: at most 2 GB per unit, within 1.3x of the 10x smaller run


def planted_pairs(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(a, b) with a < b: the planted structures over a random order of n document keys."""
    rng = np.random.default_rng(seed)
    ids = np.arange(n, dtype=np.uint64)
    nodes = ((ids >> np.uint64(20)) << np.uint64(32)) | (ids & np.uint64(2**20 - 1))
    nodes = nodes[rng.permutation(n)]
    at, a_parts, b_parts = 0, [], []

    def take(k: int) -> np.ndarray:
        nonlocal at
        at += k
        return nodes[at - k:at]

    def add(x: np.ndarray, y: np.ndarray) -> None:
        a_parts.append(np.minimum(x, y))
        b_parts.append(np.maximum(x, y))

    giant = take(min(10**6, n // 10))
    parent = (rng.random(len(giant) - 1) * np.arange(1, len(giant))).astype(np.int64)
    add(giant[1:], giant[parent])
    extra = len(giant) // 10
    add(giant[rng.integers(0, len(giant), extra)], giant[rng.integers(0, len(giant), extra)])
    p = take(n // 10 // 2 * 2).reshape(-1, 2)
    add(p[:, 0], p[:, 1])
    c = take(n // 50 // 100 * 100).reshape(-1, 100)
    add(c[:, :-1].ravel(), c[:, 1:].ravel())
    s = take(n // 100 // 50 * 50).reshape(-1, 50)
    add(np.repeat(s[:, 25], 49), np.delete(s, 25, axis=1).ravel())
    a, b = np.concatenate(a_parts), np.concatenate(b_parts)
    keep = a != b
    return a[keep], b[keep]


def _unit(job: tuple) -> dict:
    """One unit in its own process (maxtasksperchild=1): its peak RSS and CPU are its own."""
    kind, args = job
    from stages.ingest.dedup import components

    t0 = time.process_time()
    if kind == "scatter":
        a_path, b_path, lo, hi, out, partitions = args
        a, b = np.load(a_path, mmap_mode="r"), np.load(b_path, mmap_mode="r")
        chunks = ((np.array(a[i:min(i + 2**20, hi)]), np.array(b[i:min(i + 2**20, hi)])) for i in range(lo, hi, 2**20))
        stats = components.scatter_pairs(chunks, Path(out), partitions)
    else:
        inputs, p, partitions, out, rnd = args
        stats = components.star_round([Path(x) for x in inputs], p, partitions, Path(out), rnd)
    written = sum(f.stat().st_size for f in Path(args[-2]).iterdir())
    return {"cpu_s": time.process_time() - t0, "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "violations": stats.violations, "bytes": written, "opened": 0 if kind == "scatter" else len(args[0])}


def run_size(n: int, workers: int, scratch: Path) -> dict:
    from stages.ingest.dedup import components
    from stages.ingest.dedup.clusters import connected_components

    t0 = time.monotonic()
    a, b = planted_pairs(n)
    partitions = max(1, math.ceil(n / PARTITION_DOCS))
    np.save(scratch / "a.npy", a)
    np.save(scratch / "b.npy", b)
    bounds = np.linspace(0, len(a), partitions + 1).astype(np.int64)
    rounds: list[dict] = []
    ctx = mp.get_context("forkserver")  # a fresh server process: a unit does not inherit this one's pairs in its RSS
    with ctx.Pool(workers, maxtasksperchild=1) as pool:
        jobs = [("scatter", (str(scratch / "a.npy"), str(scratch / "b.npy"), int(bounds[q]), int(bounds[q + 1]),
                             str(scratch / "r000" / f"p{q:05d}"), partitions)) for q in range(partitions)]
        t = time.monotonic()
        done = pool.map(_unit, jobs, chunksize=1)
        rounds.append(_summary(0, done, time.monotonic() - t))
        previous = [scratch / "r000" / f"p{q:05d}" for q in range(partitions)]
        rnd = 0
        while True:
            rnd += 1
            current = [scratch / f"r{rnd:03d}" / f"p{q:05d}" for q in range(partitions)]
            jobs = [("round", ([str(x) for x in previous], q, partitions, str(current[q]), rnd)) for q in range(partitions)]
            t = time.monotonic()
            done = pool.map(_unit, jobs, chunksize=1)
            rounds.append(_summary(rnd, done, time.monotonic() - t))
            if all(d["violations"] == 0 for d in done):
                break
            shutil.rmtree(scratch / f"r{rnd - 1:03d}")
            previous = current
    wall = time.monotonic() - t0
    node, label = components.read_labels(current)

    nodes = np.unique(np.concatenate((a, b)))
    ref = connected_components(np.searchsorted(nodes, a), np.searchsorted(nodes, b), len(nodes))
    dropped = ref != np.arange(len(nodes))
    ref_node, ref_label = nodes[dropped], nodes[ref[dropped]]
    same = np.isin(node, ref_node)
    agree = int((label[same] == ref_label[np.searchsorted(ref_node, node[same])]).sum())
    return {
        "docs": n, "pairs": int(len(a)), "partitions": partitions, "workers": workers, "rounds": rnd,
        "docs_in_pairs": int(len(nodes)), "dropped": int(len(node)),
        "recall": agree / max(1, len(ref_node)), "precision": agree / max(1, len(node)),
        "unit_peak_rss_mb": max(r["unit_peak_rss_mb"] for r in rounds),
        "files_opened_per_unit": max(r["opened_per_unit"] for r in rounds),
        "bytes_written": sum(r["bytes"] for r in rounds),
        "cpu_s_per_million_docs": sum(r["cpu_s"] for r in rounds) / (n / 1e6),
        "wall_s": wall, "per_round": rounds,
    }


def _summary(rnd: int, done: list[dict], wall: float) -> dict:
    return {"round": rnd, "units": len(done), "unit_peak_rss_mb": max(d["peak_rss_mb"] for d in done),
            "opened_per_unit": max(d["opened"] for d in done), "bytes": sum(d["bytes"] for d in done),
            "cpu_s": sum(d["cpu_s"] for d in done), "wall_s": wall,
            "violations": sum(d["violations"] for d in done)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--docs", default="1000000,10000000")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--json", type=Path, default=RESULTS / "dedup_rounds_bench.json")
    ap.add_argument("--data", help="unused: the pairs are generated (accepted for bench/summary.py)")
    args = ap.parse_args()
    runs = []
    for n in (int(x) for x in args.docs.split(",")):
        with tempfile.TemporaryDirectory(prefix="dedup-rounds-") as tmp:
            r = run_size(n, args.workers, Path(tmp))
        runs.append(r)
        print(f"N={n:>12,}  pairs {r['pairs']:,}  partitions {r['partitions']}  rounds {r['rounds']}  "
              f"unit peak RSS {r['unit_peak_rss_mb']:.0f} MB  files per unit {r['files_opened_per_unit']}  "
              f"written {r['bytes_written'] / 1e9:.2f} GB  CPU {r['cpu_s_per_million_docs']:.1f} s per 10^6 docs  "
              f"recall {r['recall']:.4f} precision {r['precision']:.4f}  wall {r['wall_s']:.0f} s", flush=True)
    if len(runs) > 1:
        growth = runs[-1]["unit_peak_rss_mb"] / runs[-2]["unit_peak_rss_mb"]
        print(f"unit peak RSS {runs[-1]['docs']:,} / {runs[-2]['docs']:,} documents: {growth:.2f}x "
              f"(goal <= {GOALS['rss_growth']}x; at most {GOALS['unit_peak_rss_mb']:,} MB)")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"goals": GOALS, "runs": runs}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
