"""A credential in a source's settings never reaches the run's log file, its state file or Prefect's database:
not when the source fails the run at plan time (before Prefect starts), nor when, optional, it is recorded as a
skipped input by a stage that runs under Prefect (its messages and the stage's records reach both)."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys

from pipeline.config import REPO_ROOT
from tests.conftest import write_config

SECRET = "pa55SECRET"


def test_a_credential_in_a_source_path_is_masked_everywhere_the_run_records(tmp_path, udhr_dir):
    cfg = write_config(tmp_path, f"""
        [[ingest.sources]]
        name = "udhr"
        kind = "udhr"
        path = "{udhr_dir}"
        licence = "public-domain-text"
        homepage = "https://alice:{SECRET}@www.unicode.org/udhr/"
        domain = "unicode.org"
        collected = "2024-05"
        category = "public_dataset"
        opt_out = {{ protocols = [], honoured_by = "not_applicable", notes = "n" }}

        [[ingest.sources]]
        name = "web"
        kind = "jsonl"
        path = "https://bob:{SECRET}@example.com/data/*.jsonl"
        licence = "x"
        homepage = "https://example.com/"
        domain = "example.com"
        collected = "2024-05"
        category = "public_dataset"
        opt_out = {{ protocols = [], honoured_by = "not_applicable", notes = "n" }}
        """, engine="prefect", languages='["en", "de"]')
    home, run = tmp_path / "prefect-home", tmp_path / "run"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_API")}
    env.update({"PREFECT_HOME": str(home), "OMP_NUM_THREADS": "1"})
    proc = subprocess.run([sys.executable, "-m", "pipeline.cli", "run", "--config", str(cfg), "--run-dir", str(run),
                           "--to", "ingest"], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr
    assert "https://***@example.com/data/*.jsonl" in proc.stderr and SECRET not in proc.stdout + proc.stderr

    written = [p for p in run.rglob("*") if p.is_file()]
    assert any(p.parent.name == "logs" for p in written) and (run / ".state" / "ingest.json").exists()
    assert not [p for p in written if SECRET.encode() in p.read_bytes()]
    assert "https://***@example.com" in (run / ".state" / "ingest.json").read_text()
    assert not home.exists()  # refused before any engine started

    cfg.write_text(cfg.read_text().replace('name = "web"', 'name = "web"\noptional = true'))
    proc = subprocess.run([sys.executable, "-m", "pipeline.cli", "run", "--config", str(cfg), "--run-dir", str(run),
                           "--to", "ingest"], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert SECRET not in proc.stdout + proc.stderr
    written = [p for p in run.rglob("*") if p.is_file()]
    assert not [p for p in written if SECRET.encode() in p.read_bytes()]
    assert "https://***@example.com" in (run / "ingest" / "manifest.json").read_text()  # the skip, recorded

    with sqlite3.connect(home / "prefect.db") as db:
        tables = [r[0] for r in db.execute("select name from sqlite_master where type = 'table'")]
        assert int(db.execute("select count(*) from log").fetchone()[0]) > 0  # the engine did record the failure
        hits = {t: n for t in tables
                if (n := sum(SECRET in str(v) for row in db.execute(f'select * from "{t}"') for v in row))}
    assert hits == {}
