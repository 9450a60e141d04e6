#!/usr/bin/env python3
"""docs/benchmarks.md, generated from the result files committed under bench/records/.

    .venv/bin/python bench/benchmarks_doc.py            # rewrite docs/benchmarks.md (`make docs` runs it)
    .venv/bin/python bench/benchmarks_doc.py --check    # exit 1 when the committed page is out of date

Measured figures live in those files, each naming its machine and the commit it measured (bench/summary.py's
`Record`, which `bench/summary.py --record` writes); the other docs and the code's comments say what is and
point here. This lives in bench/, beside the records and the summary table a run's figures are shown with: the
pipeline package knows nothing of benchmarks. tests/bench/test_benchmarks_doc.py fails when the page drifts.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.summary import BENCHMARKS, MACHINES, MANUAL, RECORDS, Record, read_machines, read_record, table  # noqa: E402

OUTPUT = ROOT / "docs" / "benchmarks.md"
GENERATOR = "python bench/benchmarks_doc.py"

# A section per bench script, in pipeline order; each says what its figures mean.
SECTIONS: dict[str, tuple[str, str]] = {
    "ingest_scale": ("The ingest at scale (bench/ingest_scale_bench.py)", (
        "The real `europa stage ingest` with production defaults on synthetic 24-language corpora "
        "(bench/scale_corpus.py: FLORES-200 and NTREX-128 prose with 4% planted exact and 6% planted near copies) "
        "at multiples of the demo's input (298 KB). p1 / p2: Prefect's process pool with 1 / 2 workers; d1 / d2: a "
        "local Dask cluster with 1 / 2 single-threaded workers. *MB/s per core* is input MB over the CPU seconds of "
        "every process of the run (workers, `europa`, Prefect's server), so a busy machine does not change it; a "
        "cell of several rounds gives its fastest round's time and CPU and its largest round's memory. *Peak RSS* "
        "is the kernel's high-water mark of the largest worker. *Recall* counts the planted pairs of which not both "
        "documents were kept; *precision* the duplicates whose `duplicate_of` is in their own family. *1 -> 2 "
        "workers* is wall(1) / wall(2) of one runner. *The machine* before and after the runs: "
        "bench/machine_scaling.py's fixed CPU workload on one core (seconds), how much two processes at once get "
        "done against one, and the document chain alone (MB/s per core). Goals (issue 14): >= 6 MB/s per core, "
        "1 -> 2 workers >= 1.8x, peak per worker <= 1.3x the 100x run and <= 1.5 GB, recall >= 0.95, precision "
        ">= 0.99.")),
    "ingest": ("The ingest chain against datatrove (bench/ingest_bench.py)", ""),
    "dedup": ("Deduplication (bench/dedup_bench.py)", ""),
    "langid": ("Language identification (bench/langid_bench.py)", ""),
    "tokenizer": ("The tokenizer (bench/tokenizer_bench.py)", ""),
    "shards": ("Shards (bench/shards_bench.py)", ""),
    "dataloader_scale": ("The dataloader at scale (bench/dataloader_scale_bench.py)", ""),
    "train": ("Training overhead against torchtitan (bench/train_bench.py)", ""),
    "orchestration_scale": ("Orchestration at the full run's size (bench/orchestration_scale_bench.py)", (
        "N no-op units of a stage (bench/noop_stage.py) through the real executor, the Prefect mapper and a real "
        "Prefect server: the temporary one a run starts, or an external `prefect server start` (SQLite), each "
        "run in a fresh process and PREFECT_HOME, 2 workers. *Task runs* are counted in the server's database; "
        "*europa CPU* is the `europa` process's own CPU per unit (with threads, the workers' too); *peak RSS* its "
        "high-water mark; *server CPU* the server process's. Each cell: this commit (the reference commit, "
        "this / reference), both measured in the same bench run, alternating. Goals (issue 42), at 10^5 units: "
        "<= 2,000 task runs, <= 1 ms of `europa` CPU per unit, peak RSS <= 1 GB and <= 1.3x its 10^4 figure, "
        "database <= 500 MB.")),
    "dedup_rounds": ("Connected components in rounds (bench/dedup_rounds_bench.py)", (
        "Verified pairs generated without text for N documents with a planted structure (pairs, chains of 100, "
        "stars of 50, one cluster of min(10^6, N / 10)), scattered as the buckets step does into ceil(N / 500,000) "
        "partitions, then the real rounds of stages/ingest/dedup/components.py on 2 processes, each unit in a fresh "
        "process (its peak RSS is its own). Recall and precision compare the dropped documents and their "
        "representatives with single-process connected components over the same pairs. Goals (issue 41): every "
        "unit <= 2 GB and within 1.3x of the 10x smaller run.")),
    "dedup_scale": ("Every dedup step at scale (bench/dedup_scale_bench.py)", (
        "Synthetic signatures without text for N documents in units of 2^16 (5% exact copies; near copies with 8 "
        "of 128 entries changed: pairs, chains of 100, stars of 50, one cluster of min(10^6, N / 10)), through the "
        "real steps after the documents: signatures, the keys merge, exact + buckets per band partition, the "
        "components rounds with their merges, the labels and the drops gather, each unit in a fresh process on 2 "
        "workers. Recall and precision compare the near drops and their representatives with the planted "
        "components. Goals (issue 41): every unit <= 2 GB and within 1.3x of the 10x smaller run (at 10^6 "
        "documents, 2 partitions each see every duplicate; from 16 partitions on, 16 bands spread them), no unit "
        "opening more than fan_in folders of one kind (a gather unit opens fan_in exact and fan_in near drops "
        "folders). 10^8 documents need ~330 GB of scratch, more than this machine's disk.")),
    MANUAL: ("Measurements by hand", (
        "Figures measured without a bench script: old and new code alternating in one process, profiles, timings "
        "of the tests. Each record's command says how.")),
}
RUNNERS = ("p1", "p2", "d1", "d2")


def value(v: Any, fmt: str = "") -> str:
    """One cell: a number in `fmt`, a range ({"low", "high"}), a list (rounds), {what: value} parts, or text."""
    if v is None:
        return "-"
    if isinstance(v, (bool, str)):
        return str(v)
    if isinstance(v, (int, float)):
        if fmt:
            return format(v, fmt)
        return f"{v:,}" if isinstance(v, int) else str(v)
    if isinstance(v, list):
        return ", ".join(value(x, fmt) for x in v)
    if isinstance(v, dict) and set(v) == {"low", "high"}:
        return f"{value(v['low'], fmt)}-{value(v['high'], fmt)}"
    if isinstance(v, dict):
        return " / ".join(f"{value(x, fmt)} ({k})" for k, x in v.items())
    raise TypeError(f"no way to show {v!r} in a table")


def _numeric(v: Any) -> bool:
    return v in (None, "") or (isinstance(v, (int, float)) and not isinstance(v, bool)) or (
        isinstance(v, dict) and set(v) == {"low", "high"})


def markdown_table(columns: list[str], rows: list[list[Any]], right: set[int] | None = None) -> list[str]:
    """A markdown table; by default the columns of numbers (and ranges) are right-aligned."""
    if right is None:
        right = {i for i in range(1, len(columns)) if all(_numeric(row[i]) for row in rows)}
    sep = ["---:" if i in right else "---" for i in range(len(columns))]
    return ["| " + " | ".join(columns) + " |", "|" + "|".join(sep) + "|",
            *("| " + " | ".join(value(c) for c in row) + " |" for row in rows)]


def tables_section(results: dict[str, Any]) -> list[str]:
    """Figures as the notes gave them: `tables`, each with `columns`, `rows` and an optional `title`."""
    lines: list[str] = []
    for t in results["tables"]:
        if t.get("title"):
            lines += [t["title"] + ":", ""]
        lines += [*markdown_table(t["columns"], t["rows"]), ""]
    return lines


def _sizes(results: dict[str, Any]) -> dict[int, dict[str, Any]]:
    """Per input size: what the record states for the size as a whole (`sizes`), else what its runs give."""
    runs, stated = results.get("runs", {}), results.get("sizes", {})
    out: dict[int, dict[str, Any]] = {}
    for size in sorted({m["size"] for m in runs.values()} | {int(s) for s in stated}):
        at = {k.split("-", 1)[1]: m for k, m in runs.items() if m["size"] == size}
        derived: dict[str, Any] = {"runs": at}
        mb = [m["mb_in"] for m in at.values() if "mb_in" in m]
        if mb:
            derived["mb_in"] = max(mb)
        workers = [m["worker"] / 2**30 for m in at.values() if "worker" in m]
        if workers:
            derived["worker_gib"] = {"low": min(workers), "high": max(workers)} if len(workers) > 1 else workers[0]
        for key in ("recall_near", "recall_exact", "precision"):
            got = [m[key] for m in at.values() if m.get(key) is not None]
            if got:
                derived[key] = min(got)
        out[size] = {**derived, **stated.get(str(size), {}), "stated": str(size) in stated}
    return out


def _speedup(name: str, runner: str, s: dict[str, Any]) -> str | None:
    one, two = s["runs"].get(f"{runner}1", {}), s["runs"].get(f"{runner}2", {})
    walls = ""
    if "wall_s" in one and "wall_s" in two:
        walls = f" ({value(one['wall_s'], ',.0f')} -> {value(two['wall_s'], ',.0f')} s)"
    ratio = s.get("speedup", {}).get(name)
    if ratio is None and walls and not s["stated"]:  # a transcribed size gives the ratios it had, from unrounded walls
        ratio = one["wall_s"] / two["wall_s"]
    return None if ratio is None else f"{'processes' if runner == 'p' else 'Dask'} {ratio:.2f}x{walls}"


def ingest_scale_section(results: dict[str, Any]) -> list[str]:
    """bench/ingest_scale_bench.py's JSON (`runs` by "<size>x-<runner>", `machine` before and after), with what a
    transcribed round states per size instead (`sizes`)."""
    sizes = _sizes(results)
    runs = [m for s in sizes.values() for m in s["runs"].values()]
    mb_rounds = any("mb_per_cpu_s_rounds" in m for m in runs)
    wall_rounds = not mb_rounds and any(len(m.get("wall_rounds_s", [])) > 1 for m in runs)
    europa = any("europa_gib" in s for s in sizes.values())
    columns = ["input", "MB/s per core, end to end (p1 / p2 / d1 / d2)", "wall s (p1 / p2 / d1 / d2)"]
    columns += ["rounds, MB/s per core (p1 / p2 / d1 / d2)"] if mb_rounds else []
    columns += ["rounds, wall s (p1 / p2 / d1 / d2)"] if wall_rounds else []
    columns += ["peak RSS per worker, GiB", *(["`europa` process, GiB"] if europa else []),
                "recall (near / exact), precision"]
    rows = []
    for size, s in sizes.items():
        at = s["runs"]
        per_run = [value(at.get(r, {}).get("mb_per_cpu_s"), ".2f") for r in RUNNERS]
        speed = value(s["mb_per_cpu_s"], ".2f") + " (every cell)" if "mb_per_cpu_s" in s else " / ".join(per_run)
        row = [f"{size:,}x" + (f" ({s['mb_in']:,.0f} MB)" if "mb_in" in s else ""), speed,
               " / ".join(value(at.get(r, {}).get("wall_s"), ",.0f") for r in RUNNERS)]
        if mb_rounds:
            row.append(" / ".join(value(at.get(r, {}).get("mb_per_cpu_s_rounds"), ".2f") for r in RUNNERS))
        if wall_rounds:
            row.append(" / ".join(value(at.get(r, {}).get("wall_rounds_s"), ",.0f") for r in RUNNERS))
        row.append(value(s.get("worker_gib"), ".2f"))
        if europa:
            row.append(value(s.get("europa_gib"), ".2f"))
        quality = [value(s.get(k), ".3f") for k in ("recall_near", "recall_exact", "precision")]
        row.append("-" if quality == ["-"] * 3 else f"{quality[0]} / {quality[1]}, {quality[2]}")
        rows.append(row)
    lines = [*markdown_table(columns, rows, right=set(range(1, len(columns) - 1))), ""]
    for size, s in sizes.items():
        ratios = [r for r in (_speedup("processes", "p", s), _speedup("dask", "d", s)) if r]
        if ratios:
            lines.append(f"- 1 -> 2 workers at {size:,}x: {', '.join(ratios)}")
    for when, m in zip(("before", "after"), results.get("machine", [])):
        parts = [f"fixed workload {m['one_s']:.3g} s" if "one_s" in m else "",
                 f"1 -> 2 processes {m['scaling']:.2f}x" if "scaling" in m else "",
                 f"document chain alone {m['chain_mb_per_s']:.1f} MB/s per core" if "chain_mb_per_s" in m else ""]
        if any(parts):
            lines.append(f"- The machine {when} the runs: {', '.join(p for p in parts if p)}")
    return lines + ([""] if lines[-1] else [])


ORCHESTRATION_FIGURES = (("task_runs", "task runs", ",d"), ("europa_cpu_ms_per_unit", "europa CPU ms/unit", ".3f"),
                         ("europa_peak_rss_mb", "europa peak RSS MB", ",.0f"), ("server_cpu_s", "server CPU s", ",.1f"),
                         ("database_mb", "database MB", ",.1f"), ("wall_s", "wall s", ",.0f"))


def orchestration_scale_section(results: dict[str, Any]) -> list[str]:
    """bench/orchestration_scale_bench.py's JSON: every run, each figure beside the reference commit's."""

    def cell(new: dict[str, Any], old: dict[str, Any] | None, key: str, fmt: str) -> str:
        if new.get(key) is None:
            return "-"
        if not old or not old.get(key):
            return format(new[key], fmt)
        return f"{format(new[key], fmt)} ({format(old[key], fmt)}, {new[key] / old[key]:.2f}x)"

    rows = []
    for x in results["runs"]:
        spec, new, old = x["spec"], x["new"], x.get("reference")
        rows.append([spec["runner"], new["server"], f"{spec['units']:,}", f"{spec['sleep_ms']:g}",
                     *(cell(new, old, k, f) for k, _, f in ORCHESTRATION_FIGURES)])
    columns = ["runner", "server", "units", "sleep ms", *(name for _, name, _ in ORCHESTRATION_FIGURES)]
    ref = results.get("reference")
    lines = [f"Reference: commit `{ref}`." if ref else "No reference commit in this run.", ""]
    lines += [*markdown_table(columns, rows, right=set(range(2, len(columns)))), ""]
    goal_rows = BENCHMARKS["orchestration_scale"](results)
    return lines + ([table([r for r in goal_rows if r.reference_is.startswith("goal")]), ""] if goal_rows else [])


def dedup_scale_section(results: dict[str, Any]) -> list[str]:
    """bench/dedup_scale_bench.py's JSON: the largest run step by step, the goals, and English projected from it."""
    top = max(results["runs"], key=lambda x: x["docs"])
    rows = [[x["step"], x["units"], x["unit_peak_rss_mb"], x["opened_per_unit"], x["bytes"] / 1e9,
             x["cpu_s_per_million_docs"]] for x in top["per_step"] if x["cpu_s_per_million_docs"] >= 0.05]
    lines = [f"Per step at {top['docs']:,} documents ({top['units']} units, {top['partitions']} partitions, fan-in "
             f"{top['fan_in']}, {top['rounds']} rounds; rounds of under 0.05 CPU s per 10^6 documents left out):", ""]
    lines += [*markdown_table(["step", "units", "peak RSS MB", "folders opened", "GB written", "CPU s / 10^6 docs"],
                              [[r[0], r[1], round(r[2]), r[3], round(r[4], 2), round(r[5], 1)] for r in rows]), ""]
    lines += [table(BENCHMARKS["dedup_scale"](results)), ""]
    e = results.get("english")
    if e:
        lines += [f"English projected from the {e['from_docs']:,}-document run (bench/dedup_scale_bench.py "
                  "english_plan: the stage's unit formulas, this run's costs per document):", ""]
        lines += [*markdown_table(["documents", "documents units", "partitions", "keys merge levels",
                                   "round merge levels", "folders per unit", "core-hours", "node-hours (288 cores)",
                                   "scratch TB", "unit peak RSS MB"],
                                  [[f"{e['docs']:.0e}", f"{e['documents_units']:,}", f"{e['partitions']:,}",
                                    str(e["keys_merge_levels"]), str(e["round_merge_levels"]), e["folders_per_unit"],
                                    f"{e['cpu_core_hours']:,.0f}", f"{e['node_hours']:,.0f}", f"{e['scratch_tb']:,.0f}",
                                    f"{e['unit_peak_rss_mb']:,.0f}"]]), ""]
    return lines


def results_section(record: Record) -> list[str]:
    if "tables" in record.results:
        return tables_section(record.results)
    if record.bench == "ingest_scale":
        return ingest_scale_section(record.results)
    if record.bench == "orchestration_scale":
        return orchestration_scale_section(record.results)
    if record.bench == "dedup_scale":
        return dedup_scale_section(record.results)
    if record.bench in BENCHMARKS:
        return [table(BENCHMARKS[record.bench](record.results)), ""]
    raise ValueError(f"bench/records: a {record.bench!r} record needs its figures as `tables` (no renderer knows its "
                     f"results)")


def record_section(path: Path, record: Record) -> list[str]:
    when = record.date + (f" {record.time}" if record.time else "")
    about = [f"machine `{record.machine}`", f"commit `{record.commit}`" +
             (" with uncommitted changes" if record.uncommitted_changes else ""), f"`bench/records/{path.name}`"]
    lines = [f"### {when}, {record.commit[:7]}: {record.title}", "", ", ".join(about) +
             (" (transcribed from earlier notes)" if record.source == "transcribed" else "") + ".", ""]
    if record.commit_note:
        lines += [f"Commit: {record.commit_note}", ""]
    if record.command:
        lines += [f"`{record.command}`" if "`" not in record.command else f"How: {record.command}.", ""]
    lines += results_section(record)
    lines += [f"- {note}" for note in record.notes]
    return lines + ([""] if record.notes else [])


def load(records: Path = RECORDS) -> list[tuple[Path, Record]]:
    machines = read_machines(records)
    return [(p, read_record(p, machines)) for p in sorted(records.glob("*.json")) if p.name != MACHINES]


def render(records: Path = RECORDS) -> str:
    machines = read_machines(records)
    loaded = load(records)
    lines = [
        "# Benchmark results",
        "",
        "Every figure measured on this project, one section per bench script, newest first. Each comes from a "
        "result file in `bench/records/`, which names the machine and the commit it measured; the other pages say "
        "what the code does and link here. A machine's speed is part of every figure: compare runs of one round, "
        "beside what the machine itself gave then.",
        "",
        "Add a run with `bench/summary.py --record MACHINE` (it runs the benchmarks and writes one record per "
        "benchmark with `git rev-parse HEAD`; `--no-run --record MACHINE --command \"...\"` records what a bench "
        "script run by hand last wrote), then `make docs`, and commit the records with this page. This page is "
        "generated (`" + GENERATOR + "`); a test fails when it is out of date.",
        "",
        "## Machines",
        "",
        *markdown_table(["name", "cores", "what it is"],
                        [[f"`{name}`", m.get("cpus"), m.get("description", "")] for name, m in sorted(machines.items())],
                        right={1}),
        "",
    ]
    benches = {r.bench for _, r in loaded}
    order = [b for b in SECTIONS if b in benches and b != MANUAL] + sorted(benches - set(SECTIONS))
    for bench in order + ([MANUAL] if MANUAL in benches else []):
        title, intro = SECTIONS.get(bench, (f"bench/{bench}_bench.py", ""))
        lines += [f"## {title}", ""] + ([intro, ""] if intro else [])
        mine = sorted(((p, r) for p, r in loaded if r.bench == bench),
                      key=lambda pr: (pr[1].date, pr[1].time or "", pr[0].name), reverse=True)
        for path, record in mine:
            lines += record_section(path, record)
    return "\n".join(lines).rstrip("\n") + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog=GENERATOR, description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="Compare with the committed page instead of writing it.")
    ap.add_argument("--output", type=Path, default=OUTPUT)
    ap.add_argument("--records", type=Path, default=RECORDS)
    args = ap.parse_args(argv)
    try:
        text = render(args.records)
    except ValueError as e:
        print(e, file=sys.stderr)
        return 2
    if args.check:
        current = args.output.read_text(encoding="utf-8") if args.output.exists() else ""
        if current != text:
            print(f"{args.output} is out of date with {args.records}; run `{GENERATOR}` and commit it", file=sys.stderr)
            return 1
        print(f"{args.output} is up to date")
        return 0
    args.output.write_text(text, encoding="utf-8")
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
