"""bench/summary.py: one table from the benchmarks' JSON results; absent benchmark data is a skip, not a crash."""

from __future__ import annotations

import importlib.util
import json
import os
import sys

import pytest

from pipeline.config import REPO_ROOT


@pytest.fixture(scope="module")
def summary():
    spec = importlib.util.spec_from_file_location("bench_summary", REPO_ROOT / "bench" / "summary.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


RESULTS = {
    "ingest_bench.json": {"ours": {"chain_mb_per_s": 5.0, "minhash_mb_per_s": 10.0, "two_process_speedup": 1.8},
                          "datatrove": {"filters": {"mb_per_s": 0.2, "mb_per_cpu_s": 0.25}, "minhash": {"mb_per_s": 0.5}}},
    "tokenizer_bench.json": {"setup": {"parity_goal": 1.3}, "summary": {
        "balanced": {"max_parity": 1.4, "languages_within_goal": 22, "languages_measured": 24, "mean_fertility": 2.2},
        "proportional": {"max_parity": 2.0, "languages_within_goal": 5, "languages_measured": 24, "mean_fertility": 2.5}}},
    "shards_bench.json": {"raw_tokens_per_s": 800_000, "one_process_tokens_per_s": 760_000,
                          "two_process_tokens_per_s": 1_520_000, "read_tokens_per_s": 25e6},
    "dataloader_scale_bench.json": {
        "setup": {"world": 1536, "ranks": [0, 767, 1535], "folders": {"20000": {}, "40000": {}}},
        "goals": {"startup_s": 5.0, "peak_rss_mb": 1024.0, "open_shard_files": 256},
        "worst": {"startup_s": 0.5, "peak_rss_mb": 512.0, "open_shard_files": 48},
        "growth": {"peak_rss_mb": {"per_1000_shards": 1.2}}},
    "ingest_scale_bench.json": {"runs": {
        f"{size}x-{run}": {"size": size, "mb_in": size * 0.3, "mb_per_cpu_s": 6.6, "worker": w * 2**30, "wall_s": wall,
                           "recall_near": 0.99, "precision": 1.0}
        for size, run, w, wall in [(100, "p1", 0.4, 10), (7200, "p1", 0.5, 400), (7200, "p2", 0.6, 200)]}},
    "dedup_bench.json": {"docs": 1000, "sorted": {"cpu_s": 0.01}, "rensa": {"docs_per_cpu_s": 50_000},
                         "steps": {"peak_growth_bytes": 1_000_000}, "today": {"bytes_per_doc": 4000}},
    "orchestration_scale_bench.json": {
        "reference": "5d1c56d", "goals": {"task_runs": 2000, "europa_cpu_ms_per_unit": 1.0, "europa_peak_rss_mb": 1000,
                                          "rss_growth": 1.3, "database_mb": 500},
        "runs": [{"spec": {"units": n, "sleep_ms": 0, "runner": "processes", "workers": 2},
                  "new": {"server": "temporary", "task_runs": runs, "europa_cpu_ms_per_unit": cpu,
                          "europa_peak_rss_mb": rss, "database_mb": 6.0},
                  "reference": {"server": "temporary", "europa_cpu_ms_per_unit": cpu * 2}}
                 for n, runs, cpu, rss in [(10_000, 7, 0.3, 120.0), (100_000, 14, 0.2, 150.0)]]},
}
MEMORY = {"points": [{"model_type": "bpe", "vocab_size": 262_144, "chars": 64e6, "peak_mb": 900.0, "estimate_mb": 1200.0}],
          "full_run": {"vocab_size": 262_144, "budget_chars": 20e9, "estimated_peak_gb": 320.0}}


def test_table_from_results(summary, tmp_path, capsys):
    for name, data in RESULTS.items():
        (tmp_path / name).write_text(json.dumps(data))
    (tmp_path / "tokenizer_bench.json").write_text(json.dumps({**RESULTS["tokenizer_bench.json"], "memory": MEMORY}))
    assert summary.main(["--no-run", "--results", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    lines = {line.split("|")[2].strip(): line for line in out.splitlines() if line.startswith("| ") and "figure" not in line}
    assert "20.00x" in lines["filter chain, MB/s per core"] and "datatrove" in lines["filter chain, MB/s per core"]
    assert "20.00x" in lines["MinHash signatures, MB/s per core"]  # no per-CPU figure: wall-clock MB/s
    assert "0.70x" in lines["worst parity vs English, UniMax-balanced"] and "lower" in lines["worst parity vs English, UniMax-balanced"]
    assert "0.95x" in lines["tokenize + write shards, 1 process, tokens/s"]
    assert "2.50x" in lines["dataloader read (seq_len 4096), tokens/s"]
    assert "1.06x" in lines["tokenize + write, 1 process, x raw encode"]  # 0.95 of raw against the 0.9 goal
    assert "0.75x" in lines["SentencePiece bpe 262k peak MB, 64M-char sample"]  # measured / the model's estimate
    assert "320" in lines["full-run tokenizer peak GB (262k, 20G chars)"]
    start = next(k for k in lines if k.startswith("dataloader start-up s"))
    assert "0.10x" in lines[start] and "0.50x" in lines["dataloader peak RSS MB per rank, worst"]
    assert " 2.00 | " in lines["1 -> 2 workers, processes, wall (7200x)"]  # 400 s / 200 s
    assert " 1.50 | " in lines["peak RSS per worker, 7200x / 100x"] and "lower" in lines["peak RSS per worker, 7200x / 100x"]
    assert "2.00x" in lines["MinHash LSH (sort-based, the steps' core), docs/s per core"]  # 100k docs/s vs rensa's 50k
    at = "processes, temporary server, 100,000 units"
    assert "0.01x" in lines[f"task runs ({at})"] and "2,000" in lines[f"task runs ({at})"]
    assert " 1.25 | " in lines[f"europa peak RSS, 100,000 / 10,000 units ({at})"]  # 150 MB / 120 MB
    assert "0.50x" in lines[f"europa CPU ms per unit ({at}), against the reference"]
    assert "langid: skipped: no " in out


def test_absent_data_is_reported_as_skipped(summary, tmp_path, capsys):
    assert summary.main(["--only", "langid", "--data", str(tmp_path / "absent"), "--results", str(tmp_path / "r")]) == 0
    out = capsys.readouterr().out
    assert "no benchmark figures" in out and "- langid: skipped: langid bench skipped:" in out and "not found" in out


def test_unknown_benchmark_is_a_usage_error(summary):
    with pytest.raises(SystemExit):
        summary.main(["--only", "nonsense"])


@pytest.mark.skipif(not (REPO_ROOT / ".git").exists(), reason="a record names a commit: needs a git checkout")
def test_record_writes_the_results_with_machine_and_commit(summary, tmp_path, capsys):
    results, records = tmp_path / "results", tmp_path / "records"
    results.mkdir()
    records.mkdir()
    (results / "shards_bench.json").write_text(json.dumps(RESULTS["shards_bench.json"]))
    (records / "machines.json").write_text(json.dumps({"test-box": {"cpus": 2, "description": "a test machine"}}))
    argv = ["--no-run", "--only", "shards", "--results", str(results), "--records", str(records), "--record", "test-box",
            "--command", "bench/shards_bench.py --repeat 3"]
    assert summary.main(argv) == 0
    [path] = records.glob("*-shards-*.json")
    record = summary.read_record(path, summary.read_machines(records))
    head = summary.git_head()
    assert (record.machine, record.commit, record.source) == ("test-box", head.commit, "bench run")
    assert record.results == RESULTS["shards_bench.json"] and record.command == "bench/shards_bench.py --repeat 3"
    assert record.uncommitted_changes == head.dirty and record.platform["cpus"] >= 1
    assert "shards: recorded in " in capsys.readouterr().out


@pytest.mark.skipif(not (REPO_ROOT / ".git").exists(), reason="a record names a commit: needs a git checkout")
def test_record_refuses_results_older_than_the_commit(summary, tmp_path, capsys):
    results, records = tmp_path / "results", tmp_path / "records"
    results.mkdir()
    records.mkdir()
    (results / "shards_bench.json").write_text(json.dumps(RESULTS["shards_bench.json"]))
    os.utime(results / "shards_bench.json", (0, 0))  # written long before the commit checked out
    (records / "machines.json").write_text(json.dumps({"test-box": {"cpus": 2, "description": "a test machine"}}))
    argv = ["--no-run", "--only", "shards", "--results", str(results), "--records", str(records), "--record", "test-box"]
    assert summary.main(argv) == 1
    assert "shards: not recorded: its results are older than the commit checked out" in capsys.readouterr().out
    assert not list(records.glob("*-shards-*.json"))


def test_record_needs_a_described_machine(summary, tmp_path, capsys):
    (tmp_path / "machines.json").write_text(json.dumps({"test-box": {"cpus": 2, "description": "a test machine"}}))
    with pytest.raises(SystemExit):
        summary.main(["--no-run", "--records", str(tmp_path), "--record", "laptop"])
    assert "machine 'laptop' is not in" in capsys.readouterr().err
