"""bench/summary.py: one table from the benchmarks' JSON results; absent benchmark data is a skip, not a crash."""

from __future__ import annotations

import importlib.util
import json
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
}


def test_table_from_results(summary, tmp_path, capsys):
    for name, data in RESULTS.items():
        (tmp_path / name).write_text(json.dumps(data))
    assert summary.main(["--no-run", "--results", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    lines = {line.split("|")[2].strip(): line for line in out.splitlines() if line.startswith("| ") and "figure" not in line}
    assert "20.00x" in lines["filter chain, MB/s per core"] and "datatrove" in lines["filter chain, MB/s per core"]
    assert "20.00x" in lines["MinHash signatures, MB/s per core"]  # no per-CPU figure: wall-clock MB/s
    assert "0.70x" in lines["worst parity vs English, UniMax-balanced"] and "lower" in lines["worst parity vs English, UniMax-balanced"]
    assert "0.95x" in lines["tokenize + write shards, 1 process, tokens/s"]
    assert "2.50x" in lines["dataloader read (seq_len 4096), tokens/s"]
    assert "langid: skipped: no " in out


def test_absent_data_is_reported_as_skipped(summary, tmp_path, capsys):
    assert summary.main(["--only", "langid", "--data", str(tmp_path / "absent"), "--results", str(tmp_path / "r")]) == 0
    out = capsys.readouterr().out
    assert "no benchmark figures" in out and "- langid: skipped: langid bench skipped:" in out and "not found" in out


def test_unknown_benchmark_is_a_usage_error(summary):
    with pytest.raises(SystemExit):
        summary.main(["--only", "nonsense"])
