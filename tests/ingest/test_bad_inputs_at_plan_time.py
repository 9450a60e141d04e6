"""Inputs that cannot work are refused before any work (exit 2, one line, checked before an engine starts), and
inputs that are one file's problem stay that file's problem: no source, a missing block list, a file that would be
cut into thousands of units, an input folder this user cannot list, a file it cannot read, and a run directory
inside the input glob, whose own logs and Parquet must never be read as input."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pipeline.cli import main
from tests.conftest import write_config
from tests.ingest.test_ingest_stage import jsonl_source, manifest, read_lang, run_ingest

TOPICS = ["the weather and the sea", "a market in the old town", "trains that leave at dawn", "a garden in spring",
          "the history of bridges", "music played in small halls"]


def write_inputs(folder: Path, name: str = "a.jsonl", n: int = 6) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps({"text": f"An ordinary English paragraph about {TOPICS[i % len(TOPICS)]}, written plainly so "
                                 "that it passes every filter here.", "url": f"https://example.com/{name}/{i}"})
             for i in range(n)]
    (folder / name).write_text("\n".join(lines) + "\n", encoding="utf-8")
    return folder / name


def config(tmp_path: Path, path: str, extra: str = "") -> Path:
    return write_config(tmp_path, jsonl_source("web", path) + extra + "\n[ingest.quality]\nmin_words = 5\n",
                        languages='["en"]')


def one_error_line(capsys) -> str:
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("europa: error:")]
    assert len(err) == 1, err
    return err[0]


def test_a_config_without_sources_is_exit_2_before_any_engine_starts(tmp_path, capsys):
    cfg = write_config(tmp_path, "", languages='["en"]')
    t0 = time.monotonic()
    assert main(["run", "--config", str(cfg), "--run-dir", str(tmp_path / "run")]) == 2
    assert time.monotonic() - t0 < 5  # refused at plan time: no Prefect server was started (it takes seconds)
    assert "declares no source; add an [[ingest.sources]] table" in one_error_line(capsys)


def test_a_missing_block_list_is_exit_2(tmp_path, capsys):
    write_inputs(tmp_path / "in")
    cfg = config(tmp_path, f"{tmp_path}/in/*.jsonl", f"""
        [[ingest.blocklists]]
        name = "adult"
        path = "{tmp_path}/lists/adult.txt"
        """)
    assert run_ingest(cfg, tmp_path / "run") == 2
    line = one_error_line(capsys)
    assert "[[ingest.blocklists]] adult" in line and f"{tmp_path}/lists/adult.txt" in line


def test_a_file_that_would_splinter_into_thousands_of_units_is_refused(tmp_path, capsys):
    """One 2 MB line at max_unit_bytes = 1000: 2,000 pieces of which all but one are empty; each piece finds its
    first line from the file's start. The message names the file and the setting that works."""
    big = tmp_path / "in" / "big.jsonl"
    big.parent.mkdir()
    big.write_text(json.dumps({"text": "word " * 400_000}) + "\n")
    cfg = config(tmp_path, f"{tmp_path}/in/*.jsonl", "\n[ingest]\nmax_unit_bytes = 1000\n")
    assert run_ingest(cfg, tmp_path / "run") == 2
    line = one_error_line(capsys)
    assert str(big) in line and "would be cut into 2,001 units" in line and "raise [ingest] max_unit_bytes to 2,001" in line
    assert not (tmp_path / "run" / ".work" / "ingest").exists() or not list((tmp_path / "run" / ".work" / "ingest").rglob("*.parquet"))


def test_a_run_directory_inside_the_input_glob_is_not_read_as_input(tmp_path, capsys):
    """`in/**/*` with the run directory in/run: the run's logs, state and Parquet are never inputs, so the second
    run finds ingest fresh and the first one read only the six documents."""
    write_inputs(tmp_path / "in" / "sub")
    run_dir = tmp_path / "in" / "run"
    cfg = config(tmp_path, f"{tmp_path}/in/**/*")
    assert run_ingest(cfg, run_dir) == 0
    out = capsys.readouterr()
    assert "reaches into the run directory" in out.err
    assert len(read_lang(run_dir, "en")) == 6 and manifest(run_dir)["skipped"] == []
    assert run_ingest(cfg, run_dir) == 0
    assert "ingest: fresh, nothing to do" in capsys.readouterr().out


# --- permissions: root reads every file, so as root the child runs without the capabilities that let it -------

def europa_without_file_capabilities(args: list[str], tmp_path: Path) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "pipeline.cli", *args]
    if os.geteuid() == 0:
        if shutil.which("setpriv") is None:
            pytest.skip("running as root without setpriv (util-linux): permissions cannot be tested")
        caps = "-dac_override,-dac_read_search"
        cmd = ["setpriv", f"--inh-caps={caps}", f"--bounding-set={caps}", *cmd]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)


def test_an_unreadable_input_folder_is_exit_2_not_no_file(tmp_path):
    write_inputs(tmp_path / "in" / "closed")
    write_inputs(tmp_path / "in" / "open", "b.jsonl")
    cfg = config(tmp_path, f"{tmp_path}/in/*/*.jsonl")
    (tmp_path / "in" / "closed").chmod(0)
    try:
        r = europa_without_file_capabilities(["stage", "ingest", "--config", str(cfg), "--run-dir", str(tmp_path / "run")],
                                             tmp_path)
    finally:
        (tmp_path / "in" / "closed").chmod(0o755)
    assert r.returncode == 2, r.stderr
    (line,) = [x for x in r.stderr.splitlines() if x.startswith("europa: error:")]
    assert f"cannot read folder {tmp_path}/in/closed (permission denied)" in line and "Traceback" not in r.stderr


@pytest.mark.parametrize("on_error", ["skip", "fail"])
def test_an_unreadable_input_file_is_that_files_problem(tmp_path, on_error):
    """Under skip the run goes on with the other file and records why the closed one was left out; under fail it
    stops with exit 2 naming the file."""
    closed = write_inputs(tmp_path / "in", "closed.jsonl")
    write_inputs(tmp_path / "in", "open.jsonl")
    cfg = config(tmp_path, f"{tmp_path}/in/*.jsonl", f'\n[ingest]\non_error = "{on_error}"\n')
    closed.chmod(0)
    run_dir = tmp_path / "run"
    try:
        r = europa_without_file_capabilities(["stage", "ingest", "--config", str(cfg), "--run-dir", str(run_dir)],
                                             tmp_path)
    finally:
        closed.chmod(0o644)
    if on_error == "fail":
        assert r.returncode == 2, r.stderr
        assert str(closed) in r.stderr and "permission denied" in r.stderr and "Traceback" not in r.stderr
        assert not (run_dir / "ingest").exists()
        return
    assert r.returncode == 0, r.stderr
    (problem,) = manifest(run_dir)["skipped"]
    assert (Path(problem["input"]).name, problem["reason"]) == ("closed.jsonl", "unreadable_file")
    assert len(read_lang(run_dir, "en")) == 6
