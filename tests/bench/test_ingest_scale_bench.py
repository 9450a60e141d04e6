"""bench/ingest_scale_bench.py's wait for a quiet machine: it gives up, saying so, when the machine stays slower."""

from __future__ import annotations

import importlib.util
import sys

import pytest

from pipeline.config import REPO_ROOT


@pytest.fixture
def bench():
    sys.path.insert(0, str(REPO_ROOT))  # the bench imports bench.* as the script does
    try:
        spec = importlib.util.spec_from_file_location("ingest_scale_bench", REPO_ROOT / "bench" / "ingest_scale_bench.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.path.remove(str(REPO_ROOT))


def test_wait_for_quiet_machine_gives_up_with_a_message(bench, capsys):
    # no machine does the fixed workload in 0 s; with no time to wait, one measurement and then give up
    assert bench.wait_for_quiet_machine(0.0, 0.0, pause_s=1, pairs=2) is False
    assert bench.wait_for_quiet_machine(1e9, 0.0, pause_s=1, pairs=2) is True
    err = capsys.readouterr().err
    assert "waiting for <= 0.00" in err and "not quiet enough within 0 min; nothing measured" in err


def test_bench_exits_3_measuring_nothing_when_the_machine_stays_slow(bench, tmp_path, monkeypatch, capsys):
    """The command's own exit status and message; the machine's speed is set, not measured (its measurement is
    what the test above runs)."""
    (tmp_path / "data" / "flores200").mkdir(parents=True)
    results = tmp_path / "results.json"
    monkeypatch.setattr(bench, "machine_scaling", lambda pairs: {"one_s": 9.0, "scaling": 1.7})
    monkeypatch.setattr(sys, "argv", ["ingest_scale_bench.py", "--data", str(tmp_path / "data"), "--json", str(results),
                                      "--quiet-below", "6.6", "--quiet-wait-max", "0"])
    assert bench.main() == 3
    err = capsys.readouterr().err
    assert "fixed workload 9.00 s alone (waiting for <= 6.60)" in err
    assert "not quiet enough within 0 min; nothing measured" in err
    assert not results.exists()
