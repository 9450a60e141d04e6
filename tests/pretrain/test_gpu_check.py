"""bench/gpu_check.py without a GPU: its dry run goes through the real pretrain stage on CPU and writes the report;
on a machine that cannot run the check it says why in the report instead of crashing."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest

from pipeline.config import REPO_ROOT

SCRIPT = REPO_ROOT / "bench" / "gpu_check.py"


@pytest.fixture(scope="module")
def gpu_check():
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_dry_run_trains_through_the_stage_and_reports_against_the_planner(tmp_path, udhr_dir):
    out = tmp_path / "gpu_check.json"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--dry-run", "--steps", "5", "--data-dir", str(tmp_path / "data"),
                           "--out", str(out)], cwd=REPO_ROOT, env={**os.environ, "OMP_NUM_THREADS": "1"},
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    r = json.loads(out.read_text())
    assert r["status"] == "ok" and r["dry_run"] is True
    m, p = r["measured"], r["predicted"]
    assert m["steps_logged"] == 5 and m["tokens_per_s_per_gpu"] > 0 and m["peak_memory_gib"] > 0
    assert m["final_checkpoint"]["hashed_on_ranks"] == m["final_checkpoint"]["files"] >= 2
    assert p["tokens_per_s_per_gpu"]["pessimistic"] <= p["tokens_per_s_per_gpu"]["expected"] and p["memory_gib"] > 0
    assert r["measured_over_predicted"]["tokens_per_s"] > 0
    assert "unshard_async_op on" in r["paths"]["unshard_async_op"]
    assert any("GraphTrainer.Config" in n and "sac_and_offload" in n for n in r["notes"])
    assert r["layout"]["flavor"] == "tiny" and r["environment"]["missing_modules"] == []


def test_without_a_gpu_or_modules_the_report_says_why(gpu_check, tmp_path, monkeypatch):
    out = tmp_path / "r.json"
    if not gpu_check.probe().get("cuda_available"):
        assert gpu_check.main(["--out", str(out), "--data-dir", str(tmp_path)]) == 2
        r = json.loads(out.read_text())
        assert r["status"] == "no_gpu" and "--dry-run" in r["error"]
    monkeypatch.setattr(gpu_check, "REQUIRED", (*gpu_check.REQUIRED, "not_a_module_europa"))
    assert gpu_check.main(["--dry-run", "--out", str(out), "--data-dir", str(tmp_path)]) == 2
    r = json.loads(out.read_text())
    assert r["status"] == "missing_prerequisites" and "not_a_module_europa" in r["error"]
