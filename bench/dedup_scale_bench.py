#!/usr/bin/env python3
"""Every dedup step after the documents, at scale and without text: peak RSS and files opened per unit.

N synthetic documents (signatures and exact keys, no text) in documents units of 2^16, with planted duplicates
(5% exact copies; near copies with 8 of 128 signature entries changed: pairs of 10% of the documents, chains of
100 for 2%, stars of 50 for 1%, one giant cluster of min(10^6, N / 10) as a two-level tree), in random order. The
real steps run on a pool of processes, each unit in a fresh process so its peak RSS is its own (and, at the
--dask-docs sizes, on a local Dask cluster too, whose drops must be the same bytes): step 1
(signatures), the keys merge (merge-NNN), exact + buckets per band partition, components in rounds (every group
in rounds: cluster_unit_pairs = 0) with the round merges, the labels, and the drops gather (gather-NNN), at
`[ingest.dedup] fan_in` (default 16 here so that 10^6 and 10^7 documents both merge; the stage's default is 256).
P = ceil(N / 500,000) partitions, as partition_docs gives. Per step: units, the largest unit's peak RSS, the most
folders a unit opened (the inputs it was given), bytes written, CPU seconds per 10^6 documents; the rounds to
converge. Checks: the near drops and their representatives against the planted truth (connected components of
the planted near edges: recall and precision), the rounds against a single-process union-find over the same
verified pairs (equal), the exact drops equal the planted copies; and how many buckets were capped at
bucket_leaders (the giant cluster's), with the pairs they left uncompared.

    .venv/bin/python bench/dedup_scale_bench.py [--docs 1000000,10000000] [--workers 2] [--fan-in 16]
        [--dask-docs 1000000] [--json FILE]
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

UNIT_DOCS = 1 << 16
PARTITION_DOCS = 500_000  # the default [ingest.dedup] partition_docs
CHANGED = 8  # signature entries a near copy changes (of 128): agreement 0.94 with its source
GOALS = {"unit_peak_rss_mb": 2048, "rss_growth": 1.3}  # issue 41
# English across FineWeb's dumps, as docs/scaling.md sizes it: ~66 TB at ~3.4 KB per document
ENGLISH = {"docs": 2e10, "bytes": 66e12, "unit_bytes": 2**30, "fan_in": 256, "cores_per_node": 288}


# --- the synthetic corpus -------------------------------------------------------------------------------
def planted(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(signatures (n, 128) uint32, exact key words (n, 2) uint64, exact source per doc or -1, near source or -1),
    documents in their final order."""
    rng = np.random.default_rng(seed)
    sigs = rng.integers(0, 2**32, size=(n, 128), dtype=np.uint32)
    words = rng.integers(0, 2**63, size=(n, 2), dtype=np.uint64)
    exact_src = np.full(n, -1, np.int64)
    near_src = np.full(n, -1, np.int64)
    perm = rng.permutation(n)
    at = 0

    def take(k: int) -> np.ndarray:
        nonlocal at
        at += k
        return perm[at - k:at]

    def near(src: np.ndarray, dst: np.ndarray) -> None:
        sigs[dst] = sigs[src]
        cols = rng.integers(0, 128, size=(len(dst), CHANGED))
        sigs[dst[:, None], cols] = rng.integers(0, 2**32, size=cols.shape, dtype=np.uint32)
        near_src[dst] = src

    giant = take(min(10**6, n // 10))
    hubs = giant[1:1 + max(1, len(giant) // 1000)]
    near(np.full(len(hubs), giant[0]), hubs)
    rest = giant[1 + len(hubs):]
    near(hubs[rng.integers(0, len(hubs), len(rest))], rest)
    pairs = take(n // 10 // 2 * 2).reshape(-1, 2)
    near(pairs[:, 0], pairs[:, 1])
    chains = take(n // 50 // 100 * 100).reshape(-1, 100)
    for k in range(1, 100):
        near(chains[:, k - 1], chains[:, k])
    stars = take(n // 100 // 50 * 50).reshape(-1, 50)
    near(np.repeat(stars[:, 0], 49), stars[:, 1:].ravel())
    copies = take(n // 20)
    src = perm[rng.integers(at, n, len(copies))]  # copies of untouched documents
    sigs[copies], words[copies], exact_src[copies] = sigs[src], words[src], src
    return sigs, words, exact_src, near_src


def write_kept(sigs: np.ndarray, words: np.ndarray, lo: int, hi: int, path: Path) -> None:
    """What step 1 reads of a documents unit: id, signature, exact_key (the 32 hex digits of the exact key)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    m = hi - lo
    sig = pa.FixedSizeBinaryArray.from_buffers(pa.binary(512), m, [None, pa.py_buffer(np.ascontiguousarray(sigs[lo:hi]))])
    hexes = [f"{a:016x}{b:016x}" for a, b in words[lo:hi].tolist()]
    pq.write_table(pa.table({"id": [f"doc-{i}" for i in range(lo, hi)], "signature": sig, "exact_key": hexes}),
                   path, row_group_size=4096, compression="none")


# --- one unit in its own process -----------------------------------------------------------------------
def _unit(job: tuple) -> dict:
    kind, args, out = job
    from stages.ingest.dedup import buckets, clusters, components, exact, gather, merge, signatures
    from stages.ingest.minhash import DedupConfig

    cfg = DedupConfig(cluster_unit_pairs=0)
    t0 = time.process_time()
    out = Path(out)
    result: dict = {}
    if kind == "signatures":
        kept, partitions = args
        signatures.write_signatures(Path(kept), out, cfg, partitions)
        opened = 1
    elif kind == "merge":
        inputs, first_rank, partitions = args
        merge.merge_key_folders([Path(x) for x in inputs], first_rank, out, cfg, partitions)
        opened = len(inputs)
    elif kind == "buckets":
        keys, p, partitions = args
        exact.find_exact_duplicates([Path(x) for x in keys], p, out / "exact", cfg, partitions)
        stats = buckets.find_candidate_pairs([Path(x) for x in keys], p, out / "pairs", cfg, partitions)
        result.update(verified=stats.verified, capped=stats.capped_buckets, uncompared=stats.uncompared)
        opened = len(keys)
    elif kind == "scatter":
        pairs_dir, p, partitions = args
        from stages.ingest.dedup.files import read_pair_chunks

        components.scatter_pairs(read_pair_chunks(Path(pairs_dir)), out, partitions, partition=p)
        opened = 1
    elif kind == "round":
        inputs, p, partitions, rnd = args
        result["violations"] = components.star_round([Path(x) for x in inputs], p, partitions, out, rnd).violations
        opened = len(inputs)
    elif kind == "round-merge":
        inputs, partitions, rnd, i = args
        components.merge_round_folders([Path(x) for x in inputs], out, partitions, rnd, i)
        opened = len(inputs)
    elif kind == "labels":
        keys, labels, first, partitions, rounds = args
        clusters.resolve_from_rounds([Path(x) for x in keys], Path(labels), Path(first), out, cfg, partitions, rounds)
        opened = len(keys) + 2
    else:  # gather
        exact_in, near_in, first, partitions = args
        gather.gather_drops([Path(x) for x in exact_in], [Path(x) for x in near_in], first, out, cfg, partitions)
        opened = len(exact_in) + (0 if near_in == exact_in else len(near_in))
    written = sum(f.stat().st_size for f in out.rglob("*") if f.is_file())
    return {"cpu_s": time.process_time() - t0, "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "bytes": written, "opened": opened, **result}


def _summary(step: str, done: list[dict], wall: float, n: int) -> dict:
    return {"step": step, "units": len(done), "unit_peak_rss_mb": max(d["peak_rss_mb"] for d in done),
            "opened_per_unit": max(d["opened"] for d in done), "bytes": sum(d["bytes"] for d in done),
            "cpu_s_per_million_docs": sum(d["cpu_s"] for d in done) / (n / 1e6), "wall_s": wall}


class _Processes:
    """A pool of fresh processes, one per unit: a unit's peak RSS is its own."""

    def __init__(self, workers: int):
        ctx = mp.get_context("forkserver")  # a fresh server process: a unit does not inherit the corpus in its RSS
        self.pool = ctx.Pool(workers, maxtasksperchild=1)

    def map(self, jobs: list[tuple]) -> list[dict]:
        return self.pool.map(_unit, jobs, chunksize=1)

    def close(self) -> None:
        self.pool.close()
        self.pool.join()


class _Dask:
    """A local Dask cluster of single-threaded worker processes, as `[orchestration] task_runner = "dask"` runs
    units. Workers live across units, so a unit's peak RSS here is its worker's so far (an upper bound)."""

    def __init__(self, workers: int):
        from dask.distributed import Client, LocalCluster

        self.cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None)
        self.client = Client(self.cluster)

    def map(self, jobs: list[tuple]) -> list[dict]:
        return self.client.gather(self.client.map(_unit, jobs, pure=False))

    def close(self) -> None:
        self.client.close()
        self.cluster.close()


def _digest(folders: list[Path]) -> str:
    """sha256 of every file under `folders`, in order: the same drops from two executors hash the same."""
    import hashlib

    h = hashlib.sha256()
    for folder in folders:
        for f in sorted(p for p in folder.rglob("*") if p.is_file() and p.name != "stats.json"):
            h.update(f.relative_to(folder).as_posix().encode())
            h.update(f.read_bytes())
    return h.hexdigest()


def run_size(n: int, workers: int, fan_in: int, scratch: Path, executor: str = "processes") -> dict:
    from stages.ingest.dedup import files
    from stages.ingest.dedup.clusters import connected_components
    from stages.ingest.dedup.merge import merge_levels

    t0 = time.monotonic()
    pool = _Processes(workers) if executor == "processes" else _Dask(workers)
    sigs, words, exact_src, near_src = planted(n)
    units = math.ceil(n / UNIT_DOCS)
    partitions = max(1, math.ceil(n / PARTITION_DOCS))
    for r in range(units):
        (scratch / "kept").mkdir(exist_ok=True)
        write_kept(sigs, words, r * UNIT_DOCS, min(n, (r + 1) * UNIT_DOCS), scratch / "kept" / f"{r:05d}.parquet")
    del sigs, words
    steps: list[dict] = []

    def wave(step: str, jobs: list[tuple]) -> list[dict]:
        t = time.monotonic()
        done = pool.map(jobs)
        steps.append(_summary(step, done, time.monotonic() - t, n))
        print(f"  {step:<18} {len(done):>4} units  peak RSS {steps[-1]['unit_peak_rss_mb']:7.0f} MB  "
              f"opened <= {steps[-1]['opened_per_unit']:>3}  {steps[-1]['bytes'] / 1e9:6.2f} GB  "
              f"{steps[-1]['cpu_s_per_million_docs']:6.1f} CPU s / 10^6 docs", flush=True)
        return done

    def folders(name: str, k: int) -> list[str]:
        return [str(scratch / name / f"{i:05d}") for i in range(k)]

    keys = folders("signatures", units)
    wave("signatures", [("signatures", (str(scratch / "kept" / f"{r:05d}.parquet"), partitions), keys[r])
                        for r in range(units)])
    shutil.rmtree(scratch / "kept")
    for level, k in enumerate(merge_levels(units, fan_in), start=1):
        out = folders(f"merge-{level}", k)
        wave(f"merge-{level:03d}", [("merge", (keys[i * fan_in:(i + 1) * fan_in], i * fan_in ** level, partitions),
                                     out[i]) for i in range(k)])
        keys = out
    bk = folders("buckets", partitions)
    done = wave("buckets", [("buckets", (keys, p, partitions), bk[p]) for p in range(partitions)])
    verified = sum(d["verified"] for d in done)
    capped, uncompared = sum(d["capped"] for d in done), sum(d["uncompared"] for d in done)
    previous = folders("round-000", partitions)
    wave("components-000", [("scatter", (bk[p] + "/pairs", p, partitions), previous[p]) for p in range(partitions)])
    round_levels = merge_levels(partitions, fan_in)
    rnd = 0
    while True:
        for level, k in enumerate(round_levels, start=1):
            out = folders(f"round-{rnd:03d}-m{level}", k)
            wave(f"components-merge-{rnd * 100 + level}",
                 [("round-merge", (previous[i * fan_in:(i + 1) * fan_in], partitions, rnd, i), out[i]) for i in range(k)])
            previous = out
        rnd += 1
        current = folders(f"round-{rnd:03d}", partitions)
        done = wave(f"components-{rnd:03d}", [("round", (previous, p, partitions, rnd), current[p])
                                              for p in range(partitions)])
        if all(d["violations"] == 0 for d in done):
            break
        previous = current
    labels = folders("labels", partitions)
    wave("clusters", [("labels", (keys, current[p], str(scratch / "round-001" / f"{p:05d}"), partitions, rnd),
                       labels[p]) for p in range(partitions)])
    exact_dirs, near_dirs = [d + "/exact" for d in bk], labels
    for level, k in enumerate(merge_levels(partitions, fan_in), start=1):
        out = folders(f"gather-{level}", k)
        wave(f"gather-{level:03d}", [("gather", (exact_dirs[i * fan_in:(i + 1) * fan_in],
                                                 near_dirs[i * fan_in:(i + 1) * fan_in], i * fan_in ** level, partitions),
                                      out[i]) for i in range(k)])
        exact_dirs = near_dirs = out
    pool.close()
    wall = time.monotonic() - t0

    # checks: the rounds against union-find over the same verified pairs; the drops against the planted truth
    import pyarrow.parquet as pq

    def order_key(i: np.ndarray) -> np.ndarray:
        i = i.astype(np.uint64)
        return ((i // np.uint64(UNIT_DOCS)) << np.uint64(32)) | (i % np.uint64(UNIT_DOCS))

    a = np.concatenate([pq.read_table(Path(d) / "pairs" / files.PAIRS).column("a").to_numpy() for d in bk])
    b = np.concatenate([pq.read_table(Path(d) / "pairs" / files.PAIRS).column("b").to_numpy() for d in bk])
    tables = [pq.read_table(Path(d) / files.NEAR_DROPS, columns=["doc", "rep"]) for d in near_dirs]
    node = np.concatenate([t.column("doc").to_numpy() for t in tables])
    label = np.concatenate([t.column("rep").to_numpy() for t in tables])
    nodes = np.unique(np.concatenate((a, b)))
    ref = connected_components(np.searchsorted(nodes, a), np.searchsorted(nodes, b), len(nodes))
    del a, b
    dropped = ref != np.arange(len(nodes))
    same_pairs = bool(np.array_equal(np.sort(node), nodes[dropped])
                      and np.array_equal(label[np.argsort(node)], nodes[ref[dropped]]))
    # the truth: connected components of the planted near edges (documents in final order, keys as step 1's)
    src = np.flatnonzero(near_src >= 0)
    truth = connected_components(near_src[src], src, n)  # smallest index = smallest order key
    want = truth != np.arange(n)
    want_doc, want_rep = order_key(np.flatnonzero(want)), order_key(truth[want])
    at = np.searchsorted(want_doc, node)
    hit = (at < len(want_doc)) & (want_doc[np.minimum(at, len(want_doc) - 1)] == node)
    right = int((label[hit] == want_rep[at[hit]]).sum())
    exact_docs = np.concatenate([pq.read_table(Path(d) / files.EXACT_DROPS, columns=["doc"]).column("doc").to_numpy()
                                 for d in exact_dirs])
    group = np.where(exact_src >= 0, exact_src, np.arange(n))  # a copy and its source: the first in order is kept
    ok = order_key(np.arange(n))
    first = np.full(n, np.iinfo(np.uint64).max, np.uint64)
    np.minimum.at(first, group, ok)
    planted_exact = np.sort(ok[first[group] != ok])
    return {
        "docs": n, "executor": executor, "drops_sha256": _digest([Path(d) for d in exact_dirs]
                                                                + ([] if near_dirs == exact_dirs else [Path(d) for d in near_dirs])),
        "units": units, "partitions": partitions, "fan_in": fan_in, "workers": workers, "rounds": rnd,
        "verified_pairs": verified, "docs_in_pairs": int(len(nodes)), "near_dropped": int(len(node)),
        "recall": right / max(1, len(want_doc)), "precision": right / max(1, len(node)),
        "rounds_equal_union_find": same_pairs,
        "exact_drops_as_planted": bool(np.array_equal(np.sort(exact_docs), planted_exact)),
        "capped_buckets": capped, "uncompared_pairs": uncompared,
        "unit_peak_rss_mb": max(s["unit_peak_rss_mb"] for s in steps),
        "files_opened_per_unit": max(s["opened_per_unit"] for s in steps),
        "bytes_written": sum(s["bytes"] for s in steps),
        "cpu_s_per_million_docs": sum(s["cpu_s_per_million_docs"] for s in steps),
        "wall_s": wall, "per_step": steps,
    }


def english_plan(run: dict) -> dict:
    """English from the largest run's per-document costs: the units and levels the stage would make (its formulas:
    documents units of 1 GiB, ceil(N / partition_docs) partitions, merges at fan_in 256), the CPU, scratch bytes
    and node-hours (288 cores: a JUPITER Booster node's four Grace CPUs) if every step costs per document what it
    cost here, and the unit memory measured here (a partition holds the same 500,000 documents at any N)."""
    from stages.ingest.dedup.merge import merge_levels

    n, e = run["docs"], ENGLISH
    units = math.ceil(e["bytes"] / e["unit_bytes"])
    partitions = math.ceil(e["docs"] / PARTITION_DOCS)
    cpu_s = sum(x["cpu_s_per_million_docs"] for x in run["per_step"]) * e["docs"] / 1e6
    scratch = run["bytes_written"] / n * e["docs"]
    return {"from_docs": n, "docs": e["docs"], "documents_units": units, "partitions": partitions,
            "keys_merge_levels": merge_levels(units, e["fan_in"]), "round_merge_levels": merge_levels(partitions, e["fan_in"]),
            "folders_per_unit": e["fan_in"], "rounds_measured": run["rounds"], "cpu_core_hours": cpu_s / 3600,
            "node_hours": cpu_s / 3600 / e["cores_per_node"], "scratch_tb": scratch / 1e12,
            "unit_peak_rss_mb": run["unit_peak_rss_mb"]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--docs", default="1000000,10000000")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--fan-in", type=int, default=16)
    ap.add_argument("--json", type=Path, default=RESULTS / "dedup_scale_bench.json")
    ap.add_argument("--scratch", type=Path, default=None, help="where the steps write (default: a temporary folder)")
    ap.add_argument("--data", help="unused: the corpus is generated (accepted for bench/summary.py)")
    ap.add_argument("--dask-docs", default=None,
                    help="sizes also run on a local Dask cluster, whose drops must equal the processes' "
                         "(default: the smallest of --docs; 0: none)")
    args = ap.parse_args()
    sizes = [int(x) for x in args.docs.split(",")]
    on_dask = {int(x) for x in args.dask_docs.split(",")} if args.dask_docs is not None else {min(sizes)}
    runs, same_on_dask = [], {}
    for n in sizes:
        for executor in ["processes"] + (["dask"] if n in on_dask else []):
            print(f"N = {n:,} documents on {executor}", flush=True)
            with tempfile.TemporaryDirectory(prefix="dedup-scale-", dir=args.scratch) as tmp:
                r = run_size(n, args.workers, args.fan_in, Path(tmp), executor)
            if executor == "dask":
                same_on_dask[n] = r["drops_sha256"] == runs[-1]["drops_sha256"]
                print(f"N={n:>12,}  Dask: the same drops as the processes: {same_on_dask[n]}  wall {r['wall_s']:.0f} s")
                runs[-1]["dask"] = {"same_drops": same_on_dask[n], "wall_s": r["wall_s"],
                                    "worker_peak_rss_mb": r["unit_peak_rss_mb"]}
                continue
            runs.append(r)
            print(f"N={n:>12,}  units {r['units']}  partitions {r['partitions']}  rounds {r['rounds']}  "
                  f"unit peak RSS {r['unit_peak_rss_mb']:.0f} MB  folders per unit <= {r['files_opened_per_unit']}  "
                  f"written {r['bytes_written'] / 1e9:.2f} GB  CPU {r['cpu_s_per_million_docs']:.1f} s per 10^6 docs  "
                  f"recall {r['recall']:.4f} precision {r['precision']:.4f} (planted)  rounds = union-find "
                  f"{r['rounds_equal_union_find']}  exact as planted {r['exact_drops_as_planted']}  capped buckets "
                  f"{r['capped_buckets']:,} ({r['uncompared_pairs']:,} pairs uncompared)  wall {r['wall_s']:.0f} s",
                  flush=True)
    if len(runs) > 1:
        growth = runs[-1]["unit_peak_rss_mb"] / runs[-2]["unit_peak_rss_mb"]
        print(f"unit peak RSS {runs[-1]['docs']:,} / {runs[-2]['docs']:,} documents: {growth:.2f}x "
              f"(goal <= {GOALS['rss_growth']}x; at most {GOALS['unit_peak_rss_mb']:,} MB)")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    plan = english_plan(runs[-1])
    print(f"English ({plan['docs']:.0e} documents) at these costs: {plan['documents_units']:,} documents units, "
          f"{plan['partitions']:,} partitions, keys merge levels {plan['keys_merge_levels']}, "
          f"{plan['cpu_core_hours']:,.0f} core-hours ({plan['node_hours']:,.0f} node-hours of 288 cores), "
          f"{plan['scratch_tb']:,.0f} TB of scratch")
    args.json.write_text(json.dumps({"goals": GOALS, "runs": runs, "english": plan}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
