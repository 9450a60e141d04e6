"""docs/benchmarks.md is generated from the records committed under bench/records/ and must not drift from them."""

from __future__ import annotations

import importlib
import json
import re
import sys

import pytest

from pipeline.config import REPO_ROOT


@pytest.fixture(scope="module")
def doc():
    sys.path.insert(0, str(REPO_ROOT))  # the generator imports bench.summary, as it does when run as a script
    try:
        yield importlib.import_module("bench.benchmarks_doc")
    finally:
        sys.path.remove(str(REPO_ROOT))


def test_committed_benchmarks_page_is_current(doc):
    current = doc.OUTPUT.read_text(encoding="utf-8") if doc.OUTPUT.exists() else ""
    assert current == doc.render(), (
        "docs/benchmarks.md is out of date with bench/records/ (a record was added or changed). Regenerate it with "
        f"`.venv/bin/{doc.GENERATOR}` (or `make docs`) and commit the result with the records."
    )


def test_every_record_names_a_described_machine_and_a_full_commit(doc):
    machines = json.loads((doc.RECORDS / "machines.json").read_text(encoding="utf-8"))
    loaded = doc.load()
    assert loaded, "bench/records/ holds no records"
    for path, record in loaded:
        assert record.machine in machines and machines[record.machine]["description"], path
        assert re.fullmatch(r"[0-9a-f]{40}", record.commit), path
        assert path.name.startswith(f"{record.date}-{record.bench}-{record.commit[:7]}"), path


def test_a_record_a_bench_run_writes_is_rendered(doc, tmp_path):
    summary = sys.modules["bench.summary"]
    (tmp_path / "machines.json").write_text(json.dumps({"test-box": {"cpus": 4, "description": "a test machine"}}))
    runs = {f"{size}x-{run}": {"size": size, "mb_in": size * 0.3, "mb_per_cpu_s": 6.6, "worker": w * 2**30, "wall_s": wall,
                               "recall_near": 0.99, "recall_exact": 1.0, "precision": 1.0}
            for size, run, w, wall in [(100, "p1", 0.25, 10), (7200, "p1", 0.3, 400), (7200, "p2", 0.31, 200)]}
    results = {"runs": runs, "machine": [{"one_s": 6.5, "scaling": 1.9, "chain_mb_per_s": 12.0}]}
    head = summary.Head("ab" * 20, 0.0, False)
    path = summary.write_record("ingest_scale", results, machine="test-box", head=head, span=(1e9, 1e9 + 60),
                                command="bench/summary.py --only ingest_scale --record test-box", records=tmp_path)
    again = summary.write_record("ingest_scale", results, machine="test-box", head=head, span=(1e9, 1e9 + 60),
                                 command="the same again", records=tmp_path)
    assert path.name.endswith(f"-ingest_scale-{'ab' * 3}a.json") and again.name.endswith("a-2.json")
    text = doc.render(tmp_path)
    assert "| `test-box` | 4 | a test machine |" in text
    assert f"commit `{'ab' * 20}`" in text and "`bench/summary.py --only ingest_scale --record test-box`" in text
    assert "| 7,200x (2,160 MB) | 6.60 / 6.60 / - / - | 400 / 200 / - / - | 0.30-0.31 | 0.990 / 1.000, 1.000 |" in text
    assert "- 1 -> 2 workers at 7,200x: processes 2.00x (400 -> 200 s)" in text
    assert "- The machine before the runs: fixed workload 6.5 s, 1 -> 2 processes 1.90x" in text


def test_a_record_of_another_machine_is_refused_naming_the_file(doc, tmp_path):
    (tmp_path / "machines.json").write_text(json.dumps({"test-box": {"cpus": 4, "description": "a test machine"}}))
    record = {"bench": "shards", "machine": "elsewhere", "commit": "0" * 40, "date": "2026-12-01", "title": "x",
              "source": "transcribed", "results": {"tables": []}}
    (tmp_path / "bad-record.json").write_text(json.dumps(record))
    with pytest.raises(ValueError, match=r"bad-record\.json: machine 'elsewhere' is not in .*machines\.json"):
        doc.render(tmp_path)
    (tmp_path / "bad-record.json").write_text(json.dumps({**record, "machine": "test-box", "commit": "abc"}))
    with pytest.raises(ValueError, match=r"bad-record\.json: commit: String should match pattern"):
        doc.render(tmp_path)
