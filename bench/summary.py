#!/usr/bin/env python3
"""Every benchmark in one table: each stage's figure next to its reference, and the ratio.

    .venv/bin/python bench/summary.py [--no-run] [--only ingest,shards] [--data ../shared/data] [--setup-reference]
        [--record MACHINE [--command "how a --no-run result was made"]]

Runs bench/{ingest,ingest_scale,dedup,langid,tokenizer,shards,dataloader_scale,train,...}_bench.py one after the other
(each writes its figures to bench/results/<name>.json, removed first so nothing stale is shown), then prints the
table. `--no-run` only reads the results the scripts last wrote. A benchmark whose data is absent (../shared/data is
not part of a clone) says so and is listed as skipped under the table; one that fails is listed with its exit code.
The ingest reference (datatrove) needs its own venv: `--setup-reference` creates it (bench/reference/README.md).
Exit status: 0 unless a benchmark failed.

bench/results/ is a machine's scratch (git-ignored). `--record MACHINE` also writes each benchmark's figures to
bench/records/ as a `Record` (the machine, `git rev-parse HEAD`, the command), the committed history that
docs/benchmarks.md is generated from (bench/benchmarks_doc.py, `make docs`). With `--no-run` it records what a
bench script run by hand last wrote (e.g. ingest_scale_bench.py with its own --sizes), if that was after HEAD's
commit; `--command` says how it was run.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Callable, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench"
RESULTS = BENCH / "results"
RECORDS = BENCH / "records"
MACHINES = "machines.json"  # in the records folder: the machines records name, each with its cores and what it is
MANUAL = "manual"  # a record's `bench` when no bench script measured it (its `command` says how it was measured)


class Record(BaseModel):
    """One bench run, or one round of runs, as committed under bench/records/: what was measured, on which
    machine, of which commit. Figures go here rather than into docs or comments, so each stays next to the
    code and the machine that produced it."""

    model_config = ConfigDict(extra="forbid")

    bench: str  # <name> of bench/<name>_bench.py, or "manual"
    machine: str  # a key of bench/records/machines.json
    commit: Annotated[str, Field(pattern=r"^[0-9a-f]{40}$")]  # the code measured (`git rev-parse HEAD`)
    commit_note: str | None = None  # how `commit` was found when the run did not record it itself
    uncommitted_changes: bool = False  # the working tree differed from `commit` when it ran
    date: Annotated[str, Field(pattern=r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$")]
    time: str | None = None  # the machine's local time span, e.g. "19:27-20:05"
    title: str
    command: str | None = None
    source: Literal["bench run", "transcribed"]  # bench/summary.py --record, or copied from earlier notes
    results: dict[str, Any]  # the bench's own JSON, or `tables` of figures as the notes gave them
    notes: list[str] = []
    platform: dict[str, Any] | None = None  # what the run read about its machine (cores, OS, Python)


def read_machines(records: Path = RECORDS) -> dict[str, dict[str, Any]]:
    path = records / MACHINES
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}


def read_record(path: Path, machines: dict[str, Any]) -> Record:
    """A committed record, validated; a ValueError names the file, the field and the fix."""
    try:
        record = Record.model_validate_json(path.read_bytes())
    except ValidationError as e:
        err = e.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "(the whole file)"
        raise ValueError(f"{path}: {where}: {err['msg']}; see the Record model in bench/summary.py") from None
    if record.machine not in machines:
        raise ValueError(f"{path}: machine {record.machine!r} is not in {path.parent / MACHINES}; add it there "
                         f"(its cpus and a description) or name one of: {', '.join(sorted(machines))}")
    if record.bench != MANUAL and not (BENCH / f"{record.bench}_bench.py").exists():
        raise ValueError(f"{path}: bench {record.bench!r}: there is no bench/{record.bench}_bench.py; name the "
                         f"script that measured it, or {MANUAL!r} with a command that says how")
    return record


@dataclass(frozen=True)
class Head:
    """The commit checked out, what a run measures."""

    commit: str
    committed_at: float  # its commit time (a result file older than this measured an earlier commit)
    dirty: bool  # tracked files differ from it


def git_head() -> Head:
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=True).stdout.strip()

    try:
        return Head(git("rev-parse", "HEAD"), float(git("show", "-s", "--format=%ct", "HEAD")),
                    bool(git("status", "--porcelain", "--untracked-files=no")))
    except (OSError, subprocess.CalledProcessError) as e:
        raise SystemExit(f"--record needs a git checkout: a record names the commit it measured ({e})") from None


def write_record(name: str, results: dict[str, Any], *, machine: str, head: Head, span: tuple[float, float],
                 command: str, records: Path = RECORDS) -> Path:
    """bench/records/<date>-<name>-<commit>.json for one benchmark's figures (a suffix when that name is taken)."""
    start, end = (time.localtime(t) for t in span)
    commit = head.commit
    record = Record(bench=name, machine=machine, commit=commit, uncommitted_changes=head.dirty,
                    date=time.strftime("%Y-%m-%d", start),
                    time=f"{time.strftime('%H:%M', start)}-{time.strftime('%H:%M', end)}",
                    title=f"bench/{name}_bench.py", command=command, source="bench run",
                    results=results, platform={"cpus": os.cpu_count(), "system": platform.platform(),
                                               "python": platform.python_version()})
    stem = f"{record.date}-{name}-{commit[:7]}"
    path, n = records / f"{stem}.json", 2
    while path.exists():
        path, n = records / f"{stem}-{n}.json", n + 1
    records.mkdir(parents=True, exist_ok=True)
    path.write_text(record.model_dump_json(indent=1, exclude_none=True) + "\n", encoding="utf-8")
    return path


@dataclass
class Row:
    stage: str
    figure: str
    ours: float
    reference: float | None
    reference_is: str
    fmt: str = ",.2f"
    better: str = "higher"

    def cells(self) -> list[str]:
        ratio = f"{self.ours / self.reference:.2f}x" if self.reference else "-"
        ref = format(self.reference, self.fmt) if self.reference is not None else "-"
        return [self.stage, self.figure, format(self.ours, self.fmt), ref, ratio, self.better, self.reference_is]


def ingest_rows(r: dict[str, Any]) -> list[Row]:
    ours, dt = r["ours"], r.get("datatrove")
    name = "datatrove 0.10.1, same documents" if dt else "datatrove: not run (bench/ingest_bench.py --setup-reference)"

    def ref(part: str) -> float | None:
        return dt[part].get("mb_per_cpu_s", dt[part]["mb_per_s"]) if dt else None

    return [
        Row("ingest", "filter chain, MB/s per core", ours["chain_mb_per_s"], ref("filters"),
            name.replace("same", "FineWeb-2 filters, same")),
        Row("ingest", "MinHash signatures, MB/s per core", ours["minhash_mb_per_s"], ref("minhash"), name.replace("same", "MinHash, same")),
        Row("ingest", "chain speed-up, 1 -> 2 processes", ours["two_process_speedup"], 2.0, "linear scaling"),
    ] + _agreement_rows(r.get("agreement"))


def _agreement_rows(a: dict[str, Any] | None) -> list[Row]:
    if not a:
        return []
    goal = "goal (issue 14), same documents and thresholds"
    rows = [Row("ingest", "keep/drop agreement with datatrove's FineWeb-2 chain", a["agreement"], 0.99, goal, ".4f")]
    if a.get("fallback_languages"):
        rows.append(Row("ingest", f"... without {', '.join(a['fallback_languages'])} (a stand-in for datatrove's own tokenizer there)",
                        a["agreement_without_fallback"], 0.99, goal, ".4f"))
    return rows


def ingest_scale_rows(r: dict[str, Any]) -> list[Row]:
    """The largest corpus of bench/ingest_scale_bench.py (its 2-worker process run where there is one)."""
    runs = r["runs"]
    largest = max(m["size"] for m in runs.values())
    at = {k.split("-")[1]: m for k, m in runs.items() if m["size"] == largest}
    best = at.get("p2") or next(iter(at.values()))
    base = [m["worker"] for m in runs.values() if m["size"] == 100]
    goal = "goal (issue 14)"
    rows = [
        Row("ingest", f"end to end, MB/s per core ({largest}x demo = {best['mb_in']:,.0f} MB)", best["mb_per_cpu_s"], 6.0, goal),
        Row("ingest", f"peak RSS per worker, GiB ({largest}x)", max(m["worker"] for m in at.values()) / 2**30, 1.5 / 1.073741824,
            goal + " (1.5 GB)", ".2f", "lower"),
        Row("ingest", "dedup recall, planted near duplicates", best["recall_near"], 0.95, goal, ".4f"),
        Row("ingest", "dedup precision", best["precision"], 0.99, goal, ".4f"),
    ]
    if base:
        rows.append(Row("ingest", f"peak RSS per worker, {largest}x / 100x", max(m["worker"] for m in at.values()) / max(base),
                        1.3, goal, ".2f", "lower"))
    for runner, name in (("p", "processes"), ("d", "Dask")):
        if f"{runner}1" in at and f"{runner}2" in at:
            rows.append(Row("ingest", f"1 -> 2 workers, {name}, wall ({largest}x)", at[f"{runner}1"]["wall_s"] / at[f"{runner}2"]["wall_s"],
                            1.8, goal))
    return rows


def dedup_rows(r: dict[str, Any]) -> list[Row]:
    docs = r["docs"]
    return [
        Row("ingest", "MinHash LSH (sort-based, the steps' core), docs/s per core", docs / r["sorted"]["cpu_s"],
            r["rensa"]["docs_per_cpu_s"] if r.get("rensa") else None, "rensa's LSH, same documents", ",.0f"),
        Row("ingest", "dedup steps, peak bytes per document", r["steps"]["peak_growth_bytes"] / docs,
            r["today"]["bytes_per_doc"], "single-process LSH index", ",.0f", "lower"),
    ]


def langid_rows(r: dict[str, Any]) -> list[Row]:
    return [
        Row("ingest", f"language ID, lowest accuracy of {len(r['per_language'])} languages", r["min_accuracy"],
            r["required_accuracy"], "goal (issue 2), FLORES-200 devtest ~1 KB docs", ".4f"),
        Row("ingest", "language ID, MB/s per core", r["mb_per_s_per_core"], None, "", ",.1f"),
    ]


def tokenizer_rows(r: dict[str, Any]) -> list[Row]:
    s = r["summary"]
    skewed = s["proportional"]
    ref = "32k BPE trained on a web-skewed mix, same budget"
    n = skewed["languages_measured"]
    rows = [
        Row("tokenizer", "worst parity vs English, UniMax-balanced", s["balanced"]["max_parity"], skewed["max_parity"], ref, ".3f", "lower"),
    ]
    if "parity_weights" in s:
        pw = s["parity_weights"]
        rows.append(Row("tokenizer", "worst parity vs English, parity-weights", pw["max_parity"], 1.15, "goal (issue 46)", ".3f", "lower"))
        rows.append(Row("tokenizer", "mean fertility, parity-weights", pw["mean_fertility"],
                        round(s["balanced"]["mean_fertility"] * 1.02, 4), "balanced + 2% (issue 46)", ".3f", "lower"))
        if "parity_gini" in pw:
            rows.append(Row("tokenizer", "Gini of per-language parity, parity-weights", pw["parity_gini"],
                            s["balanced"]["parity_gini"], "balanced", ".3f", "lower"))
    for key, label in (("parity_merges", "parity-merges"), ("parity_weights_merges", "parity-weights+merges")):
        if key in s:
            m = s[key]
            rows.append(Row("tokenizer", f"worst parity vs English, {label}", m["max_parity"], 1.15, "goal (issue 46)", ".3f", "lower"))
            rows.append(Row("tokenizer", f"mean fertility, {label}", m["mean_fertility"],
                            round(s["balanced"]["mean_fertility"] * 1.02, 4), "balanced + 2% (issue 46)", ".3f", "lower"))
            rows.append(Row("tokenizer", f"training s, {label} (balanced: {s['balanced']['train_seconds']:.1f} s)",
                            m["train_seconds"], s["balanced"]["train_seconds"], "balanced SentencePiece", ".1f", "lower"))
    for vocab, part in sorted(r.get("by_vocab", {}).items(), key=lambda kv: int(kv[0])):
        if vocab == str(r["setup"]["vocab_size"]):
            continue
        for key, label in (("balanced", "balanced"), ("parity_weights_merges", "parity-weights+merges")):
            if key in part["summary"]:
                rows.append(Row("tokenizer", f"worst parity vs English at {int(vocab) // 1000}k, {label}",
                                part["summary"][key]["max_parity"], 1.15, "goal (issue 46, stated at 32k)", ".3f", "lower"))
    goal = r["setup"].get("parity_goal", 1.3)
    rows += [
        Row("tokenizer", f"languages (of {n}) with parity <= {goal}, balanced", s["balanced"]["languages_within_goal"],
            skewed["languages_within_goal"], ref, "d"),
        Row("tokenizer", "mean fertility (tokens per word), balanced", s["balanced"]["mean_fertility"], skewed["mean_fertility"], ref, ".3f", "lower"),
    ]
    return rows + tokenizer_memory_rows(r["memory"]) if "memory" in r else rows


def tokenizer_memory_rows(m: dict[str, Any]) -> list[Row]:
    rows = []
    for model_type, vocab in (("bpe", 32_000), ("bpe", 262_144)):
        points = [p for p in m["points"] if (p["model_type"], p["vocab_size"]) == (model_type, vocab) and not p.get("error")]
        if points:
            p = max(points, key=lambda q: q["chars"])
            rows.append(Row("tokenizer", f"SentencePiece {model_type} {vocab // 1000}k peak MB, {p['chars'] / 1e6:.0f}M-char sample",
                            p["peak_mb"], p["estimate_mb"], "stages/tokenizer/memory.py estimate (must cover)", ",.0f", "lower"))
    full = m["full_run"]
    rows.append(Row("tokenizer", f"full-run tokenizer peak GB ({full['vocab_size'] // 1000}k, {full['budget_chars'] / 1e9:.0f}G chars)",
                    full["estimated_peak_gb"], None, "estimate from the measured model", ",.0f", "lower"))
    return rows


def shards_rows(r: dict[str, Any]) -> list[Row]:
    raw = r["raw_tokens_per_s"]
    return [
        Row("shards", "tokenize + write shards, 1 process, tokens/s", r["one_process_tokens_per_s"], raw, "raw SentencePiece encode, 1 thread", ",.0f"),
        Row("shards", "tokenize + write shards, 2 processes, tokens/s", r["two_process_tokens_per_s"], raw, "raw SentencePiece encode, 1 thread", ",.0f"),
        Row("shards", "dataloader read (seq_len 4096), tokens/s", r["read_tokens_per_s"], 10e6, "goal (issue 4)", ",.0f"),
        Row("shards", "tokenize + write, 1 process, x raw encode", r["one_process_tokens_per_s"] / raw, 0.9, "goal (issue 15)", ".2f"),
        Row("shards", "tokenize + write, 2 processes, x raw encode", r["two_process_tokens_per_s"] / raw, 1.8, "goal (issue 15)", ".2f"),
    ]


def train_rows(r: dict[str, Any]) -> list[Row]:
    ref = "torchtitan's own Trainer, same model, batch, threads"
    return [
        Row("pretrain", "training step, CPU ms (tiny, 8 x 128 tokens)", r["ours_step_cpu_s"] * 1e3,
            r["torchtitan_step_cpu_s"] * 1e3, ref + f" (goal ratio <= {r['setup']['goal']})", ",.1f", "lower"),
        Row("pretrain", "final checkpoint save, s (ours hashes while writing)", r["ours_checkpoint_s"],
            r["torchtitan_checkpoint_s"], "torchtitan's CheckpointManager, same state", ",.3f", "lower"),
    ]


def dataloader_scale_rows(r: dict[str, Any]) -> list[Row]:
    goals, worst = r["goals"], r["worst"]
    sizes = ", ".join(f"{int(n):,}" for n in r["setup"]["folders"])
    where = f"{sizes} shards, ranks {'/'.join(map(str, r['setup']['ranks']))} of {r['setup']['world']:,}"
    rows = [
        Row("shards", f"dataloader start-up s, worst ({where})", worst["startup_s"], goals["startup_s"], "goal (issue 15)", ".2f", "lower"),
        Row("shards", "dataloader peak RSS MB per rank, worst", worst["peak_rss_mb"], goals["peak_rss_mb"], "goal (issue 15)", ",.0f", "lower"),
        Row("shards", "dataloader open shard files per rank, worst", worst["open_shard_files"], goals["open_shard_files"],
            "goal (issue 15), ulimit -n 1024", "d", "lower"),
    ]
    if "peak_rss_mb" in r.get("growth", {}):
        rows.append(Row("shards", "dataloader peak RSS MB per 1,000 more shards", r["growth"]["peak_rss_mb"]["per_1000_shards"], None,
                        "", ".2f", "lower"))
    return rows


def orchestration_scale_rows(r: dict[str, Any]) -> list[Row]:
    """Per runner and server, the largest N's figures against issue 42's bar (the full table of every N with the
    reference commit beside it is in docs/benchmarks.md)."""
    goals, runs = r["goals"], [x for x in r["runs"] if x["spec"]["sleep_ms"] == 0]
    if not runs:
        return []
    top = max(x["spec"]["units"] for x in runs)
    rows: list[Row] = []
    for x in (x for x in runs if x["spec"]["units"] == top):
        spec, new, old = x["spec"], x["new"], x.get("reference")
        where = f"{spec['runner']}, {new['server']} server, {top:,} units"
        rows += [
            Row("orchestration", f"task runs ({where})", new["task_runs"], goals["task_runs"], "goal (issue 42)", ",d", "lower"),
            Row("orchestration", f"europa CPU ms per unit ({where})", new["europa_cpu_ms_per_unit"],
                goals["europa_cpu_ms_per_unit"], "goal (issue 42)", ".3f", "lower"),
            Row("orchestration", f"europa peak RSS MB ({where})", new["europa_peak_rss_mb"], goals["europa_peak_rss_mb"],
                "goal (issue 42)", ",.0f", "lower"),
            Row("orchestration", f"database MB ({where})", new["database_mb"], goals["database_mb"], "goal (issue 42)",
                ",.1f", "lower"),
        ]
        tenth = [y for y in runs if y["spec"]["units"] * 10 == top and y["spec"]["runner"] == spec["runner"]
                 and y["new"]["server"] == new["server"]]
        if tenth:
            rows.append(Row("orchestration", f"europa peak RSS, {top:,} / {top // 10:,} units ({where})",
                            new["europa_peak_rss_mb"] / tenth[0]["new"]["europa_peak_rss_mb"], goals["rss_growth"],
                            "goal (issue 42)", ".2f", "lower"))
        if old:
            rows.append(Row("orchestration", f"europa CPU ms per unit ({where}), against the reference",
                            new["europa_cpu_ms_per_unit"], old["europa_cpu_ms_per_unit"],
                            f"commit {r['reference']}, same run", ".3f", "lower"))
    return rows


def _largest_and_tenth(r: dict[str, Any]) -> tuple[dict[str, Any] | None, dict[str, Any] | None, str]:
    """(the largest N's run, the 10x smaller N's run or None, "N documents, P partitions") of a scale bench."""
    runs = sorted(r["runs"], key=lambda x: x["docs"])
    if not runs:
        return None, None, ""
    top = runs[-1]
    tenth = next((x for x in runs if x["docs"] * 10 == top["docs"]), None)
    return top, tenth, f"{top['docs']:,} documents, {top['partitions']} partitions"


def _unit_rss_growth_row(what: str, top: dict[str, Any], tenth: dict[str, Any], goals: dict[str, Any]) -> Row:
    return Row("dedup", f"{what}: unit peak RSS, {top['docs']:,} / {tenth['docs']:,} documents",
               top["unit_peak_rss_mb"] / tenth["unit_peak_rss_mb"], goals["rss_growth"], "goal (issue 41)", ".2f",
               "lower")


def dedup_rounds_rows(r: dict[str, Any]) -> list[Row]:
    """The largest N's unit memory against issue 41's bar, its growth over the 10x smaller N, and the labels'
    agreement with single-process connected components."""
    top, tenth, where = _largest_and_tenth(r)
    if top is None:
        return []
    goals = r["goals"]
    rows = [Row("dedup", f"components rounds: largest unit's peak RSS MB ({where})", top["unit_peak_rss_mb"],
                goals["unit_peak_rss_mb"], "goal (issue 41)", ",.0f", "lower"),
            Row("dedup", f"components rounds: recall of union-find's drops ({where})", top["recall"], 1.0,
                "single-process components, same pairs", ".4f"),
            Row("dedup", f"components rounds: precision ({where})", top["precision"], 1.0,
                "single-process components, same pairs", ".4f")]
    if tenth:
        rows.append(_unit_rss_growth_row("components rounds", top, tenth, goals))
    return rows


def dedup_scale_rows(r: dict[str, Any]) -> list[Row]:
    """The largest N through every dedup step: unit memory and folders against issue 41's bars, its growth and
    CPU over the 10x smaller N, the drops against the planted truth, and Dask's drops against the processes'."""
    top, tenth, where = _largest_and_tenth(r)
    if top is None:
        return []
    goals = r["goals"]
    rows = [Row("dedup", f"all steps: largest unit's peak RSS MB ({where})", top["unit_peak_rss_mb"],
                goals["unit_peak_rss_mb"], "goal (issue 41)", ",.0f", "lower"),
            Row("dedup", f"all steps: folders a unit opened ({where})", top["files_opened_per_unit"],
                2 * top["fan_in"], "2 x fan_in: a gather unit's exact + near drops folders", ",d", "lower"),
            Row("dedup", f"all steps: recall of the planted near duplicates ({where})", top["recall"], 1.0,
                "planted components", ".4f"),
            Row("dedup", f"all steps: precision ({where})", top["precision"], 1.0, "planted components", ".4f")]
    if tenth:
        rows += [_unit_rss_growth_row("all steps", top, tenth, goals),
                 Row("dedup", f"all steps: CPU s per 10^6 documents ({where})", top["cpu_s_per_million_docs"],
                     tenth["cpu_s_per_million_docs"], f"the same at {tenth['docs']:,} (linear scaling)", ",.1f",
                     "lower")]
    for x in r["runs"]:
        if "dask" in x:
            rows.append(Row("dedup", f"all steps on Dask: the same drop bytes ({x['docs']:,} documents)",
                            float(x["dask"]["same_drops"]), 1.0, "the process pool's run", ".0f"))
    return rows


BENCHMARKS: dict[str, Callable[[dict[str, Any]], list[Row]]] = {
    "ingest": ingest_rows, "ingest_scale": ingest_scale_rows, "dedup": dedup_rows, "langid": langid_rows,
    "tokenizer": tokenizer_rows, "shards": shards_rows, "dataloader_scale": dataloader_scale_rows, "train": train_rows,
    "orchestration_scale": orchestration_scale_rows, "dedup_rounds": dedup_rounds_rows,
    "dedup_scale": dedup_scale_rows,
}


def run(name: str, args: argparse.Namespace) -> tuple[int, str, float]:
    """Run bench/<name>_bench.py; its output streams to stderr; returns (exit code, last line it printed, seconds)."""
    result = args.results / f"{name}_bench.json"
    result.unlink(missing_ok=True)
    cmd = [sys.executable, str(BENCH / f"{name}_bench.py"), "--json", str(result)]
    if args.data is not None:
        cmd += ["--data", str(args.data)]
    if name == "ingest" and args.setup_reference:
        cmd.append("--setup-reference")
    print(f"== {' '.join(os.path.relpath(c, ROOT) if c.startswith(str(ROOT)) else c for c in cmd[1:])}", file=sys.stderr, flush=True)
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")})
    last = ""
    for line in proc.stdout:
        sys.stderr.write(line)
        last = line.strip() or last
    return proc.wait(), last, time.monotonic() - t0


def table(rows: list[Row]) -> str:
    header = ["stage", "figure", "ours", "reference", "ratio", "better", "reference is"]
    body = [r.cells() for r in rows]
    widths = [max(len(c[i]) for c in [header, *body]) for i in range(len(header))]
    right = {2, 3, 4}

    def line(cells: list[str]) -> str:
        return "| " + " | ".join(c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths))) + " |"

    sep = "|" + "|".join(("-" * (w + 1) + ":") if i in right else "-" * (w + 2) for i, w in enumerate(widths)) + "|"
    return "\n".join([line(header), sep, *(line(c) for c in body)])


def record(name: str, figures: dict[str, Any], span: tuple[float, float], head: Head, args: argparse.Namespace,
           argv: list[str] | None, notes: list[str]) -> bool:
    """--record: one benchmark's figures into bench/records/; False when they cannot be of the commit checked out."""
    if span[1] < head.committed_at:
        notes.append(f"{name}: not recorded: its results are older than the commit checked out ({head.commit[:7]}), "
                     f"so they measured another one; run it again")
        return False
    command = args.command or " ".join(["bench/summary.py", *(argv if argv is not None else sys.argv[1:])])
    path = write_record(name, figures, machine=args.record, head=head, span=span, command=command, records=args.records)
    notes.append(f"{name}: recorded in {os.path.relpath(path, ROOT)} (run `make docs` and commit both)")
    return True


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--no-run", action="store_true", help="Summarize bench/results/*.json as the scripts last wrote them.")
    ap.add_argument("--only", default=",".join(BENCHMARKS), help=f"Comma-separated subset of {', '.join(BENCHMARKS)}.")
    ap.add_argument("--data", type=Path, default=None, help="Benchmark data folder (default: each script's, ../shared/data).")
    ap.add_argument("--setup-reference", action="store_true", help="Create the datatrove venv for the ingest reference if missing.")
    ap.add_argument("--results", type=Path, default=RESULTS, help="Folder of the <name>_bench.json files.")
    ap.add_argument("--record", metavar="MACHINE", default=None,
                    help="Also write each benchmark's figures to bench/records/ as a committed record naming MACHINE "
                    "(a key of bench/records/machines.json) and the commit checked out; then `make docs`.")
    ap.add_argument("--records", type=Path, default=RECORDS, help="Folder --record writes to.")
    ap.add_argument("--command", default=None, help="With --no-run --record: how the results were made (the bench "
                    "script's command line).")
    args = ap.parse_args(argv)
    names = [n.strip() for n in args.only.split(",") if n.strip()]
    unknown = [n for n in names if n not in BENCHMARKS]
    if unknown:
        ap.error(f"unknown benchmark {unknown[0]!r}; choose from {', '.join(BENCHMARKS)}")
    head = None
    if args.record is not None:
        machines = read_machines(args.records)
        if args.record not in machines:
            ap.error(f"machine {args.record!r} is not in {args.records / MACHINES}; add it there (its cpus and a "
                     f"description) or name one of: {', '.join(sorted(machines)) or '(none yet)'}")
        head = git_head()

    rows: list[Row] = []
    notes: list[str] = []
    failed = False
    for name in names:
        result = args.results / f"{name}_bench.json"
        shown = os.path.relpath(result, ROOT)
        span = None
        if not args.no_run:
            started = time.time()
            rc, last, seconds = run(name, args)
            span = (started, time.time())
            if not result.exists():
                failed |= rc != 0
                notes.append(f"{name}: {'failed (exit ' + str(rc) + ')' if rc else 'skipped'}: {last or 'no output'}")
                continue
            if rc:  # figures written, but the script's own check failed (e.g. langid below its accuracy bar)
                notes.append(f"{name}: exit {rc} after writing its figures: {last}")
                failed = True
            notes.append(f"{name}: measured in {seconds:.0f} s")
        elif not result.exists():
            notes.append(f"{name}: skipped: no {shown} (run without --no-run)")
            continue
        else:
            stamp = time.strftime("%Y-%m-%d %H:%M", time.localtime(result.stat().st_mtime))
            notes.append(f"{name}: from {shown} ({stamp})")
            span = (result.stat().st_mtime,) * 2
        try:
            figures = json.loads(result.read_text(encoding="utf-8"))
            rows += BENCHMARKS[name](figures)
        except (KeyError, TypeError, ValueError) as e:
            notes.append(f"{name}: {shown} has an unexpected shape ({type(e).__name__}: {e}); rerun it")
            failed = True
            continue
        if head is not None and span is not None:
            failed |= not record(name, figures, span, head, args, argv, notes)

    print()
    print(table(rows) if rows else "no benchmark figures (see below)")
    print("\nratio = ours / reference; better: which direction is good.")
    print("\n".join(f"- {n}" for n in notes))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
