"""The CLI contract: exit codes, one-line errors, not-implemented stages reported honestly, --from/--to/--force."""

from __future__ import annotations

import subprocess
import sys

from pipeline.cli import main
from pipeline.registry import downstream_of
from tests.conftest import udhr_source, write_config


def test_run_ranges_rerun_nothing_fresh_and_force_cascades(tmp_path, udhr_dir, capsys):
    cfg = write_config(tmp_path, udhr_source(udhr_dir) + '[tokenizer]\nvocab_size = 1000\nreserved_tokens = 0\n', languages='["de", "fr"]')
    assert main(["run", "--config", str(cfg), "--run-dir", str(tmp_path / "r"), "--to", "tokenizer"]) == 0
    out = capsys.readouterr().out
    assert "ingest: ran" in out and "tokenizer: ran" in out and "shards" not in out
    assert main(["run", "--run-dir", str(tmp_path / "r"), "--to", "shards"]) == 0
    out = capsys.readouterr().out
    assert "ingest: ran" not in out and "shards: ran" in out
    assert main(["run", "--run-dir", str(tmp_path / "r"), "--to", "shards"]) == 0
    assert "fresh, nothing to do" in capsys.readouterr().out
    assert main(["run", "--run-dir", str(tmp_path / "r"), "--to", "shards", "--force", "tokenizer"]) == 0
    out = capsys.readouterr().out
    assert "tokenizer: ran" in out and "shards: ran" in out and "ingest: ran" not in out
    assert main(["run", "--run-dir", str(tmp_path / "r"), "--from", "shards", "--to", "tokenizer"]) == 2
    assert "comes after" in capsys.readouterr().err


def test_bad_config_exits_2_with_one_line(tmp_path):
    cfg = write_config(tmp_path, "[ingest]\nbogus = true\n")
    out = subprocess.run([sys.executable, "-m", "pipeline.cli", "status", "--config", str(cfg)], capture_output=True, text=True)
    assert out.returncode == 2
    assert out.stderr.strip().count("\n") == 0 and "[ingest.bogus]: unknown key" in out.stderr and str(cfg) in out.stderr


def test_force_cascades_downstream():
    assert downstream_of("tokenizer") == ["tokenizer", "shards", "pretrain", "evaluate", "compliance"]
    assert downstream_of("evaluate") == ["evaluate", "compliance"]


def test_help_is_fast_and_imports_no_heavy_modules():
    code = "import sys, pipeline.cli as c; c._parser(); print(sorted(m for m in ('torch', 'prefect', 'pyarrow') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.stdout.strip() == "[]"
