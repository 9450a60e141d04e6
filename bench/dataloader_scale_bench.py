#!/usr/bin/env python3
"""The training dataloader at 1,536 ranks: start-up, memory, open files and mappings until the first batch.

    .venv/bin/python bench/dataloader_scale_bench.py [--sizes 20000,40000] [--docs-per-shard 10000]
                                                     [--ranks 0,767,1535] [--world 1536] [--work DIR] [--keep]

Builds a synthetic shards folder per size with a realistic index: 24 languages, N training shards, each with
--docs-per-shard documents (20,000 shards x 10,000 = 200M documents' offsets), uint32 tokens (a 262k
vocabulary) and ~1,000-token documents, so each .bin is ~40 MB: 0.8 TB of tokens per 20,000 shards, written
as sparse files (truncate: no disk used, reads return zeros), while the .idx files hold real offsets
(80 KB per shard, 1.6 GB per 20,000 shards). index.json and mixture.json are what the shards stage writes.

Then, for each order (global: the default; per_rank), rank of the --world layout and size (interleaved,
--repeats times, keeping the fastest start-up and the largest RSS: the machine is shared), a child process
with `ulimit -n 1024` builds the real EuropaShardsDataLoader (torchtitan's ParallelAwareDataloader, seq_len 4096,
local batch 1, as configs/jupiter-1t.toml) and takes its first batch. Measured in the child:
  start-up   seconds from building the loader to holding the first batch (imports excluded, shown apart)
  peak RSS   the child's VmHWM (peak resident memory since its exec), and that after the imports alone
             (Python + torch + torchtitan)
  open files shard files open at the first batch (/proc/self/fd) and the most open at once (the pool's peak)
  mappings   shard mappings at the first batch and all of the process's mappings (/proc/self/maps)
Goals (issue 15): start-up < 5 s, peak RSS < 1 GB, < 256 open shard files per rank, independent of the
number of shards (compare the sizes). Writes bench/results/dataloader_scale_bench.json.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
RESULTS = ROOT / "bench" / "results"
LANGUAGES = ("bg", "cs", "da", "de", "el", "en", "es", "et", "fi", "fr", "ga", "hr", "hu", "it", "lt", "lv", "mt",
             "nl", "pl", "pt", "ro", "sk", "sl", "sv")
NOFILE = 1024
GOALS = {"startup_s": 5.0, "peak_rss_mb": 1024.0, "open_shard_files": 256}


def build_folder(folder: Path, n_shards: int, docs_per_shard: int) -> dict:
    """A shards folder as the stage writes it (train split), cheaply: sparse .bin, real .idx, no .ids."""
    import numpy as np

    t0 = time.perf_counter()
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    variants = []  # a few document-length patterns (lognormal around 1,000 tokens, as web documents)
    for _ in range(16):
        lengths = np.maximum(1, rng.lognormal(np.log(700), 0.9, docs_per_shard).astype(np.int64))
        offsets = np.zeros(docs_per_shard + 1, "<i8")
        np.cumsum(lengths, out=offsets[1:])
        variants.append(offsets)
    shards, per_lang = [], {}
    for i in range(n_shards):
        lang = LANGUAGES[i % len(LANGUAGES)]
        k = per_lang.get(lang, 0)
        per_lang[lang] = k + 1
        rel = f"train/{lang}/shard-{k:05d}"
        prefix = folder / rel
        prefix.parent.mkdir(parents=True, exist_ok=True)
        offsets = variants[i % len(variants)]
        offsets.tofile(prefix.with_suffix(".idx"))
        with open(prefix.with_suffix(".bin"), "wb") as f:
            f.truncate(int(offsets[-1]) * 4)  # sparse: reads give zeros, no disk is used
        shards.append({"path": rel, "split": "train", "lang": lang, "dtype": "<u4", "tokens": int(offsets[-1]),
                       "docs": docs_per_shard, "ids_bytes": 0, "sha256_bin": "0" * 64, "sha256_idx": "0" * 64, "sha256_ids": "0" * 64})
    index = {"format": 1, "vocab_size": 262144, "bos_id": 1, "eos_id": 2, "pad_id": 3, "dtype": "<u4", "seed": 1234, "shards": shards}
    (folder / "index.json").write_text(json.dumps(index, indent=2) + "\n")
    tokens = {lang: sum(s["tokens"] for s in shards if s["lang"] == lang) for lang in per_lang}
    mixture = {"policy": "unimax", "languages": {lang: {"weight": 1 / len(per_lang), "tokens": t, "available_tokens": t,
                                                        "expected_epochs": 1.0} for lang, t in tokens.items()}}
    (folder / "mixture.json").write_text(json.dumps(mixture, indent=2) + "\n")
    return {"shards": n_shards, "documents": n_shards * docs_per_shard, "tokens": sum(tokens.values()),
            "index_json_mb": round((folder / "index.json").stat().st_size / 1e6, 1),
            "idx_mb": round((docs_per_shard + 1) * 8 * n_shards / 1e6, 1),
            "build_seconds": round(time.perf_counter() - t0, 1)}


def vm_hwm_kb() -> int:
    """Peak resident memory since exec (VmHWM); ru_maxrss would include the parent's size at fork."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def child(args: argparse.Namespace) -> int:
    """One rank: the loader until its first batch, measured from inside."""
    resource.setrlimit(resource.RLIMIT_NOFILE, (NOFILE, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
    t_import = time.perf_counter()
    from europa_model.data.loader import EuropaShardsDataLoader

    imports_s = time.perf_counter() - t_import
    rss_imports = vm_hwm_kb() / 1024
    folder = Path(args.shards_dir).resolve()
    t0 = time.perf_counter()
    cfg = EuropaShardsDataLoader.Config(dataset_path=str(folder), seed=1234, order=args.order)
    dl = cfg.build(dp_world_size=args.world, dp_rank=args.rank, tokenizer=None, seq_len=4096, local_batch_size=1)
    built_s = time.perf_counter() - t0
    inputs, labels = next(iter(dl))
    startup_s = time.perf_counter() - t0
    assert tuple(inputs["input"].shape) == (1, 4096) and tuple(labels.shape) == (1, 4096)
    root = str(folder)
    fds = [os.readlink(f"/proc/self/fd/{fd}") for fd in os.listdir("/proc/self/fd") if os.path.exists(f"/proc/self/fd/{fd}")]
    maps = Path("/proc/self/maps").read_text().splitlines()
    pool = dl.dataset.pool
    out = {"rank": args.rank, "order": args.order, "imports_s": round(imports_s, 2), "build_s": round(built_s, 3),
           "startup_s": round(startup_s, 3), "peak_rss_mb": round(vm_hwm_kb() / 1024, 1),
           "rss_after_imports_mb": round(rss_imports, 1),
           "open_shard_files": sum(1 for f in fds if f.startswith(root)), "open_files": len(fds),
           "shard_mappings": sum(1 for line in maps if line.split()[-1].startswith(root)), "mappings": len(maps),
           "shards_open_peak": pool.peak, "shards_opened": pool.opened, "max_open_shards": pool.max_open,
           "nofile_limit": resource.getrlimit(resource.RLIMIT_NOFILE)[0]}
    print("RESULT " + json.dumps(out))
    return 0


def run_child(folder: Path, rank: int, world: int, order: str) -> dict:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--_child", "--shards-dir", str(folder), "--rank", str(rank),
           "--world", str(world), "--order", order]
    p = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    if p.returncode != 0:
        raise SystemExit(f"rank {rank} ({order}) failed with exit code {p.returncode}:\n{p.stderr[-3000:]}")
    return json.loads(next(line[7:] for line in p.stdout.splitlines() if line.startswith("RESULT ")))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="20000,40000", help="Numbers of training shards, comma-separated.")
    ap.add_argument("--docs-per-shard", type=int, default=10_000)
    ap.add_argument("--ranks", default="0,767,1535")
    ap.add_argument("--world", type=int, default=1536)
    ap.add_argument("--orders", default="global,per_rank")
    ap.add_argument("--work", type=Path, default=None, help="Where to build the folders (default: a temporary folder).")
    ap.add_argument("--keep", action="store_true", help="Keep the synthetic folders.")
    ap.add_argument("--repeats", type=int, default=2, help="Children per configuration; the fastest start-up is kept, the largest RSS.")
    ap.add_argument("--data", type=Path, default=None, help=argparse.SUPPRESS)  # bench/summary.py passes it to every bench
    ap.add_argument("--json", type=Path, default=RESULTS / "dataloader_scale_bench.json")
    ap.add_argument("--_child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--shards-dir", help=argparse.SUPPRESS)
    ap.add_argument("--rank", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--order", default="global", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args._child:
        return child(args)

    sizes = [int(x) for x in args.sizes.split(",")]
    ranks = [int(x) for x in args.ranks.split(",")]
    orders = args.orders.split(",")
    work = Path(tempfile.mkdtemp(prefix="dataloader-scale-", dir=args.work))
    folders, results = {}, []
    try:
        for n in sizes:
            print(f"building {n:,} shards x {args.docs_per_shard:,} documents ...", flush=True)
            folders[n] = build_folder(work / f"shards-{n}", n, args.docs_per_shard)
            print(f"  {folders[n]}", flush=True)
        os.sync()  # the folders' writeback must not run during the measurements
        # Interleaved over the sizes and repeated, keeping each configuration's fastest start-up: the machine is
        # shared, and a comparison of sizes must not be a comparison of two moments' load.
        for order in orders:
            for rank in ranks:
                for n in sizes:
                    runs = [run_child(work / f"shards-{n}", rank, args.world, order) for _ in range(args.repeats)]
                    r = min(runs, key=lambda x: x["startup_s"])
                    r["peak_rss_mb"] = max(x["peak_rss_mb"] for x in runs)
                    results.append({"shards": n, **r})
                    print(f"  {n:>7,} shards, {order:<8} rank {rank:>5}: start-up {r['startup_s']:.2f} s, peak RSS {r['peak_rss_mb']:.0f} MB, "
                          f"{r['open_shard_files']} shard files open (peak {r['shards_open_peak']} shards), "
                          f"{r['shard_mappings']} shard mappings of {r['mappings']}", flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    results.sort(key=lambda r: (r["shards"], orders.index(r["order"]), r["rank"]))

    print(f"\n{'shards':>7} {'order':<9}{'rank':>6}{'start-up s':>12}{'peak RSS MB':>13}{'(imports)':>11}"
          f"{'open shard files':>18}{'peak open':>11}{'shard maps':>12}{'all maps':>10}")
    for r in results:
        print(f"{r['shards']:>7,} {r['order']:<9}{r['rank']:>6}{r['startup_s']:>12.2f}{r['peak_rss_mb']:>13.0f}"
              f"{r['rss_after_imports_mb']:>11.0f}{r['open_shard_files']:>18}{r['shards_open_peak']:>11}"
              f"{r['shard_mappings']:>12}{r['mappings']:>10}")
    worst = {"startup_s": max(r["startup_s"] for r in results), "peak_rss_mb": max(r["peak_rss_mb"] for r in results),
             "open_shard_files": max(max(r["open_shard_files"], 2 * r["shards_open_peak"]) for r in results)}
    growth = {}
    if len(sizes) > 1:
        small, large = min(sizes), max(sizes)
        for key in ("startup_s", "peak_rss_mb"):
            a = max(r[key] for r in results if r["shards"] == small)
            b = max(r[key] for r in results if r["shards"] == large)
            growth[key] = {"small": a, "large": b, "per_1000_shards": round((b - a) / (large - small) * 1000, 4)}
    met = {k: worst[k] < GOALS[k] for k in GOALS}
    print(f"\nworst over ranks and sizes: start-up {worst['startup_s']:.2f} s (goal < {GOALS['startup_s']:.0f}), "
          f"peak RSS {worst['peak_rss_mb']:.0f} MB (goal < {GOALS['peak_rss_mb']:.0f}), "
          f"open shard files {worst['open_shard_files']} (goal < {GOALS['open_shard_files']}; 2 per open shard)")
    for key, g in growth.items():
        print(f"{key}: {g['small']} at {min(sizes):,} shards, {g['large']} at {max(sizes):,}: {g['per_1000_shards']:+} per 1,000 shards")
    print(f"goals {'MET' if all(met.values()) else 'NOT met'}: " + ", ".join(f"{k} {'ok' if v else 'NOT met'}" for k, v in met.items()))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"setup": {"world": args.world, "ranks": ranks, "orders": orders, "seq_len": 4096,
                                               "local_batch_size": 1, "nofile_limit": NOFILE, "folders": folders},
                                     "results": results, "worst": worst, "growth": growth, "goals": GOALS, "goals_met": met}, indent=2))
    return 0 if all(met.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
