#!/usr/bin/env python3
"""The real `europa stage ingest` on synthetic corpora of growing size: memory per worker, speed per core,
scaling from 1 to 2 workers and dedup quality against planted duplicates (issue 14's goals).

Corpora (bench/scale_corpus.py): 24 languages of FLORES-200 + NTREX-128 sentences from ../shared/data, originals
plus planted exact copies (4%) and near copies (6%, a span of 2-5% of the words replaced), as JSONL files of
8 MB, at multiples of the demo's input (the UDHR in 24 languages, 298,274 bytes). Each size is run with the
production defaults (256 MiB units, 500k documents per band partition) on:
  p1, p2   Prefect's process pool with 1 / 2 worker processes
  d1, d2   a local Dask cluster with 1 / 2 single-threaded worker processes
Measured per run, from outside (`europa` is a child process; its process tree is sampled every 0.25 s):
  peak RSS per worker   the largest VmHWM (the kernel's high-water mark, not a sample) of a worker process;
                        the `europa` process itself (planning, finalize) and Prefect's server are shown apart
  MB/s per core         input MB / CPU seconds of the whole tree (every process, the Prefect server included:
                        getrusage of the finished children, or the sampled per-process CPU when larger, as for
                        processes that outlive their parent), which a shared machine's load does not change
  MB/s wall             input MB / wall seconds; 1 -> 2 workers = wall(1) / wall(2) of the same runner
  recall, precision     per family (an original and its copies): a planted pair is resolved when not both
                        documents were kept; precision = duplicates whose duplicate_of is in their own family
Measured before and after the runs, beside which the table is read (this VM's speed has moved by 2x from one day
to the next, and by tens of % within minutes):
  scaling               how much two processes at once get done against one on this machine at that time
                        (bench/machine_scaling.py; 2.00 on two free cores, less on SMT siblings or a busy host)
  chain alone           MB/s per core of the document chain alone (normalize, language ID, quality filters, PII;
                        bench/ingest_bench.py's run_chain, one process, fastest of 3) on the first documents of each
                        language of the corpus: how fast this machine runs the same code now (issue 14 quotes 7.8-11
                        for the day it was filed; 15.5-16.1 were measured on 2026-11-29/30)
Goals (issue 14): peak RSS flat (largest <= 1.3x the 100x run) and <= 1.5 GB; >= 6 MB/s per core; 1 -> 2
workers >= 1.8x; recall >= 0.95, precision >= 0.99; no exact group kept twice.

    flock /work/bench.lock .venv/bin/python bench/ingest_scale_bench.py [--sizes 10,100,1000,7200] [--runs p1,p2,d1,d2]
        [--repeat 2]   # rounds p1 p2 d1 d2, p1 p2 d1 d2: fastest time, largest memory per cell
        [--quiet-below 6.6 --quiet-wait-max 90]   # start once the machine's fixed workload takes <= 6.6 s
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import textwrap
import threading
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
RESULTS = ROOT / "bench" / "results"
DEMO_BYTES = 298_274  # the demo's input: the UDHR's 744 documents in 24 languages (bytes_in of configs/demo.toml)
GOALS = {"rss_gb": 1.5, "rss_flat": 1.3, "mb_per_core": 6.0, "speedup": 1.8, "recall": 0.95, "precision": 0.99}

from bench.machine_scaling import describe, machine_scaling  # noqa: E402
from bench.ingest_bench import run_chain, timed  # noqa: E402
from bench.scale_corpus import write_corpus  # noqa: E402

RUNNERS = {"p1": ("processes", 1), "p2": ("processes", 2), "d1": ("dask", 1), "d2": ("dask", 2)}


def config(corpus: Path, runner: str, workers: int) -> str:
    return textwrap.dedent(f"""
        [run]
        name = "ingest-scale"
        languages = ["all"]
        [orchestration]
        engine = "prefect"
        task_runner = "{runner}"
        max_workers = {workers}
        [[ingest.sources]]
        name = "synthetic"
        kind = "jsonl"
        path = "{corpus}/data/{{lang}}/*.jsonl"
        id_field = "id"
        licence = "CC-BY-SA-4.0"
        collected = "2025-01"
        category = "public_dataset"
        """)


_TICK = os.sysconf("SC_CLK_TCK")


def _proc(pid: int) -> tuple[int, str, int, float] | None:
    """(VmHWM bytes, command line, parent pid, CPU seconds so far) of a live process, or None."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    hwm = int(fields.get("VmHWM", "0 kB").split()[0]) * 1024
    return hwm, cmd, int(fields.get("PPid", "0")), (int(stat[11]) + int(stat[12])) / _TICK  # utime + stime


def _children(pid: int) -> list[int]:
    out = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            out += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            pass
    return out


class TreeMonitor(threading.Thread):
    """Samples the process tree under `root`: the high-water mark and command line of every process seen."""

    def __init__(self, root: int, every: float = 0.25):
        super().__init__(daemon=True)
        self.root, self.every, self.stop = root, every, threading.Event()
        self.seen: dict[int, dict] = {}

    def run(self) -> None:
        while not self.stop.is_set():
            todo = [self.root]
            while todo:
                pid = todo.pop()
                info = _proc(pid)
                if info is not None:
                    hwm, cmd, ppid, cpu = info
                    rec = self.seen.setdefault(pid, {"cmd": cmd, "ppid": ppid, "hwm": 0, "cpu": 0.0})
                    rec["hwm"], rec["cpu"] = max(rec["hwm"], hwm), max(rec["cpu"], cpu)
                todo += _children(pid)
            self.stop.wait(self.every)

    def roles(self) -> dict[str, int]:
        """Peak RSS of the europa process, of the largest worker, of Prefect's server."""
        out = {"europa": self.seen.get(self.root, {}).get("hwm", 0), "worker": 0, "server": 0, "workers_seen": 0,
               "cpu_sampled_s": sum(rec["cpu"] for rec in self.seen.values()),
               "server_cpu_s": sum(rec["cpu"] for rec in self.seen.values() if "prefect server" in rec["cmd"] or "uvicorn" in rec["cmd"])}
        cpus = []
        for pid, rec in self.seen.items():
            if pid == self.root:
                continue
            role = "server" if ("uvicorn" in rec["cmd"] or "prefect server" in rec["cmd"] or "server.api" in rec["cmd"]) else "worker"
            out[role] = max(out[role], rec["hwm"])
            out["workers_seen"] += role == "worker"
            if role == "worker" and rec["cpu"] > 1.0:  # a process that ran units (not a Dask nanny or a helper)
                cpus.append(rec["cpu"])
        out["europa_cpu_s"] = self.seen.get(self.root, {}).get("cpu", 0.0)
        out["worker_cpu_s"] = sorted(cpus, reverse=True)
        return out


def run_ingest(cfg: Path, run_dir: Path, log: Path) -> dict:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    with log.open("w") as out:
        proc = subprocess.Popen([str(ROOT / ".venv" / "bin" / "europa"), "stage", "ingest", "--config", str(cfg),
                                 "--run-dir", str(run_dir)], stdout=out, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
        mon = TreeMonitor(proc.pid)
        mon.start()
        rc = proc.wait()
        mon.stop.set()
        mon.join()
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    waited = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if rc:
        raise SystemExit(f"europa stage ingest failed (exit {rc}); see {log}")
    roles = mon.roles()
    # processes that outlive their parent (a Dask worker, a server) are not in getrusage: the larger count wins
    return {"wall_s": wall, "cpu_s": max(waited, roles["cpu_sampled_s"]), "cpu_waited_s": waited, **roles}


def dedup_quality(stage_dir: Path) -> dict:
    """Resolved planted pairs and correct drops, from the published data/ and rejected/ parts."""
    import pyarrow.parquet as pq

    kept_ids: set[str] = set()
    family_of_id: dict[str, str] = {}
    dropped: list[tuple[str, str]] = []  # (source_doc_id, duplicate_of id)
    reached: dict[str, dict[str, str]] = {}  # family -> kind -> "kept" | "dup"
    for kind in ("data", "rejected"):
        for part in sorted(stage_dir.glob(f"{kind}/*/part-*.parquet")):
            cols = ["id", "source_doc_id"] + (["reason", "duplicate_of"] if kind == "rejected" else [])
            t = pq.read_table(part, columns=cols).to_pydict()
            for i, sid in enumerate(t["source_doc_id"]):
                lang = part.parent.name
                fam, _, k = sid.split(":")
                fam = f"{lang}:{fam}"
                family_of_id[t["id"][i]] = fam
                if kind == "data":
                    kept_ids.add(t["id"][i])
                    reached.setdefault(fam, {})[k] = "kept"
                elif t["reason"][i] in ("exact_duplicate", "near_duplicate"):
                    dropped.append((fam, t["duplicate_of"][i]))
                    reached.setdefault(fam, {})[k] = "dup"
    correct = sum(family_of_id.get(rep) == fam for fam, rep in dropped)
    pairs = Counter()
    for members in reached.values():
        for copy in ("e", "n"):
            if "o" in members and copy in members:
                pairs[f"{copy}_total"] += 1
                pairs[f"{copy}_resolved"] += not (members["o"] == "kept" and members[copy] == "kept")
    return {"drops": len(dropped), "precision": correct / len(dropped) if dropped else 1.0,
            "recall_near": pairs["n_resolved"] / pairs["n_total"] if pairs["n_total"] else None,
            "recall_exact": pairs["e_resolved"] / pairs["e_total"] if pairs["e_total"] else None,
            "exact_kept_twice": pairs["e_total"] - pairs["e_resolved"], "near_pairs": pairs["n_total"],
            "exact_pairs": pairs["e_total"]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="10,100,1000,7200", help="multiples of the demo's input bytes (7200x = 2.15 GB)")
    ap.add_argument("--runs", default="p1,p2,d1,d2", help="runners per size (p: processes, d: local Dask; 1/2 workers)")
    ap.add_argument("--runs-largest", default=None, help="runners for the largest size only (default: --runs)")
    ap.add_argument("--work", type=Path, default=Path("/tmp/europa-ingest-scale"), help="corpora and run directories")
    ap.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data")
    ap.add_argument("--json", type=Path, default=RESULTS / "ingest_scale_bench.json")
    ap.add_argument("--repeat", type=int, default=1, help="rounds of every runner per size; a cell reports its fastest "
                    "round's time and CPU and its largest round's memory")
    ap.add_argument("--quiet-below", type=float, default=None, metavar="S",
                    help="first wait until bench/machine_scaling.py's fixed workload takes <= S seconds on one core "
                    "(a shared VM's speed moves by a third within hours; ~6.5 s on this VM's fast hours)")
    ap.add_argument("--quiet-wait-max", type=float, default=60, metavar="MINUTES",
                    help="with --quiet-below: give up, measuring nothing, after this long (default 60)")
    args = ap.parse_args()
    if not (args.data / "flores200").is_dir():
        print(f"benchmark data not found at {args.data} (../shared/data is not part of a clone); nothing measured")
        return 0
    if args.quiet_below is not None and not wait_for_quiet_machine(args.quiet_below, args.quiet_wait_max * 60):
        return 3
    sizes = [int(x) for x in args.sizes.split(",")]
    results = json.loads(args.json.read_text()) if args.json.exists() else {}
    results.setdefault("runs", {})
    # what the machine itself gives, before and after the runs (a VM's speed drifts): this invocation's only
    results["machine"] = []
    for size in sizes:
        corpus = args.work / f"corpus-{size}x"
        t0 = time.perf_counter()
        truth = write_corpus(args.data, corpus, size * DEMO_BYTES)
        mb = sum(v["bytes"] for v in truth.values()) / 1e6
        print(f"{size}x: corpus {mb:,.0f} MB ({time.perf_counter() - t0:.0f} s to write or find)", file=sys.stderr, flush=True)
        if not results["machine"]:
            results["machine"].append(measure_machine(corpus))
        runs = (args.runs_largest or args.runs) if size == max(sizes) else args.runs
        rounds: dict[str, list[dict]] = {}
        for round_ in range(args.repeat):  # rounds interleave the runners: a drift of the machine hits them alike
            for name in runs.split(","):
                m = measure(args.work, corpus, size, name)
                rounds.setdefault(name, []).append(m)
                print(f"  {name}{f' (round {round_ + 1}/{args.repeat})' if args.repeat > 1 else ''}: {m['wall_s']:.0f} s wall, "
                      f"{m['cpu_s']:.0f} CPU s, {m['mb_per_cpu_s']:.2f} MB/s per core, worker peak "
                      f"{m['worker'] / 2**30:.2f} GiB, europa {m['europa'] / 2**30:.2f} GiB, recall near {m['recall_near']:.4f} "
                      f"exact {m['recall_exact']:.4f}, precision {m['precision']:.4f}", file=sys.stderr, flush=True)
                results["runs"][f"{size}x-{name}"] = combine(rounds[name])
                args.json.parent.mkdir(parents=True, exist_ok=True)
                args.json.write_text(json.dumps(results, indent=1))
    results["machine"].append(measure_machine(corpus))
    args.json.write_text(json.dumps(results, indent=1))
    print_table(results)
    return 0


def wait_for_quiet_machine(limit_s: float, max_wait_s: float, pause_s: float = 200, pairs: int = 30) -> bool:
    """Whether the machine's fixed workload took <= `limit_s` on one core before `max_wait_s` ran out, measured
    every `pause_s`. Why wait at all: on a shared VM the same 2 GB ingest took 281 to 386 CPU s from one hour to
    the next, more than the figures' margin over their goals; a round started on a slow hour measures the hour."""
    deadline = time.monotonic() + max_wait_s
    while True:
        m = machine_scaling(pairs=pairs)
        print(f"machine: fixed workload {m['one_s']:.2f} s alone (waiting for <= {limit_s:.2f}), 1 -> 2 "
              f"{m['scaling']:.2f}x", file=sys.stderr, flush=True)
        if m["one_s"] <= limit_s:
            return True
        if time.monotonic() + pause_s > deadline:
            print(f"machine: not quiet enough within {max_wait_s / 60:.0f} min; nothing measured", file=sys.stderr)
            return False
        time.sleep(pause_s)


def chain_speed(corpus: Path, docs_per_language: int = 400) -> float:
    """MB/s per core of the document chain alone on the first documents of every language of `corpus`."""
    docs = []
    for path in sorted(corpus.glob("data/*/0000.jsonl")):
        with path.open(encoding="utf-8") as f:
            for _, line in zip(range(docs_per_language), f):
                docs.append({"lang": path.parent.name, "text": json.loads(line)["text"]})
    run_chain(docs[:50])  # imports, compiled regexes, cld2's tables
    _, seconds = timed(run_chain, docs, repeat=3)
    return sum(len(d["text"].encode("utf-8")) for d in docs) / 1e6 / seconds


def measure_machine(corpus: Path) -> dict:
    m = {**machine_scaling(), "chain_mb_per_s": chain_speed(corpus)}
    print(describe_machine(m), file=sys.stderr, flush=True)
    return m


def describe_machine(m: dict) -> str:
    chain = f"; the document chain alone ran at {m['chain_mb_per_s']:.1f} MB/s per core" if "chain_mb_per_s" in m else ""
    return describe(m) + chain


def measure(work: Path, corpus: Path, size: int, name: str) -> dict:
    """One run of `europa stage ingest` with runner `name` on the corpus: its measurements."""
    runner, workers = RUNNERS[name]
    folder = work / f"run-{size}x-{name}"
    subprocess.run(["rm", "-rf", str(folder)], check=True)
    folder.mkdir(parents=True)
    cfg = folder / "config.toml"
    cfg.write_text(config(corpus, runner, workers))
    m = run_ingest(cfg, folder / "run", folder / "europa.log")
    manifest = json.loads((folder / "run" / "ingest" / "manifest.json").read_text())
    m.update(dedup_quality(folder / "run" / "ingest"))
    m.update({"size": size, "runner": runner, "workers": workers, "mb_in": manifest["statistics"]["totals"]["bytes_in"] / 1e6,
              "docs_in": manifest["statistics"]["totals"]["docs_in"], "kept": manifest["statistics"]["totals"]["kept"],
              "load_avg": os.getloadavg()[0]})
    m["mb_per_cpu_s"] = m["mb_in"] / m["cpu_s"]
    m["mb_per_wall_s"] = m["mb_in"] / m["wall_s"]
    subprocess.run(["rm", "-rf", str(folder / "run")], check=True)
    return m


def combine(rounds: list[dict]) -> dict:
    """The cell of several rounds: time and CPU of the fastest (the machine's noise only ever adds time), peak
    memory of the largest (memory is deterministic up to the allocator, so the worst is reported), every wall."""
    if len({m["drops"] for m in rounds}) > 1:
        raise SystemExit(f"the rounds dropped different numbers of documents ({[m['drops'] for m in rounds]}): "
                         "the dedup must not depend on the run")
    fastest = dict(min(rounds, key=lambda m: m["wall_s"]))
    for key in ("worker", "europa", "server"):
        fastest[key] = max(m[key] for m in rounds)
    fastest["wall_rounds_s"] = [round(m["wall_s"], 1) for m in rounds]
    return fastest


def print_table(results: dict) -> None:
    runs = results["runs"]
    print(f"\n{'size':>6} {'run':>4} {'MB in':>8} {'wall s':>7} {'MB/s/core':>10} {'MB/s wall':>10} {'worker GiB':>11} "
          f"{'europa GiB':>11} {'recall n/e':>12} {'precision':>10} {'exact x2':>9}")
    for key, m in sorted(runs.items(), key=lambda kv: (kv[1]["size"], kv[0])):
        print(f"{str(m['size']) + 'x':>6} {key.split('-')[1]:>4} {m['mb_in']:>8,.0f} {m['wall_s']:>7.0f} {m['mb_per_cpu_s']:>10.2f} "
              f"{m['mb_per_wall_s']:>10.2f} {m['worker'] / 2**30:>11.2f} {m['europa'] / 2**30:>11.2f} "
              f"{m['recall_near']:>6.3f}/{m['recall_exact']:.3f} {m['precision']:>10.4f} {m['exact_kept_twice']:>9}")
    sizes = sorted({m["size"] for m in runs.values()})
    lines = []
    for key, m in sorted(runs.items()):  # how evenly the units spread: 1.0 = every worker did as much work
        cpus = m.get("worker_cpu_s", [])[: m["workers"]]
        if m["workers"] > 1 and len(cpus) == m["workers"]:
            lines.append(f"{key}: worker CPU {', '.join(f'{c:.0f}' for c in cpus)} s, balance {sum(cpus) / (len(cpus) * max(cpus)):.2f}; "
                         f"speed-up on idle cores <= {(m['europa_cpu_s'] + sum(cpus)) / (m['europa_cpu_s'] + max(cpus)):.2f}x "
                         f"(europa's own {m['europa_cpu_s']:.0f} CPU s counted as serial)")
    for runner in ("p", "d"):
        for size in sizes:
            one, two = runs.get(f"{size}x-{runner}1"), runs.get(f"{size}x-{runner}2")
            if one and two:
                walls = "".join(f"; {runner}{m['workers']} " + " / ".join(f"{w:.0f}" for w in m["wall_rounds_s"]) + " s"
                                for m in (one, two) if len(m.get("wall_rounds_s", [])) > 1)
                lines.append(f"1 -> 2 workers ({'processes' if runner == 'p' else 'dask'}, {size}x): "
                             f"{one['wall_s'] / two['wall_s']:.2f}x{' (fastest rounds' + walls + ')' if walls else ''}")
    for when, m in zip(("before the runs", "after the runs"), results.get("machine", [])):
        lines.append(f"{when}, {describe_machine(m)}: what the machine itself gave then, beside the figures above")
    peaks = {s: max(m["worker"] for m in runs.values() if m["size"] == s) for s in sizes}
    if 100 in peaks and len(sizes) > 1:
        lines.append(f"worker peak, largest / 100x: {peaks[max(sizes)] / peaks[100]:.2f} (goal <= {GOALS['rss_flat']}); "
                     f"largest {peaks[max(sizes)] / 2**30:.2f} GiB (goal <= {GOALS['rss_gb']} GB)")
    print("\n".join(lines))


if __name__ == "__main__":
    sys.exit(main())
