"""Issue 19: every failure loud and named, damaged outputs never "fresh", read-only commands that write nothing.

Each test drives the real CLI (`pipeline.cli.main`) on a real run directory and asserts the exit code and the
one line the user gets.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.cli import main
from tests.conftest import udhr_source, write_config

DATA = "[tokenizer]\nvocab_size = 600\nreserved_tokens = 0\n[shards]\nval_fraction = 0.1\n"


@pytest.fixture(scope="module")
def data_stages(tmp_path_factory, udhr_dir) -> tuple[Path, Path]:
    """(config, run dir) after ingest -> tokenizer -> shards on two languages, once; tests work on copies."""
    tmp = tmp_path_factory.mktemp("silent")
    cfg = write_config(tmp, udhr_source(udhr_dir) + DATA, languages='["de", "mt"]')
    assert main(["run", "--config", str(cfg), "--run-dir", str(tmp / "run"), "--to", "shards"]) == 0
    return cfg, tmp / "run"


@pytest.fixture
def run(data_stages, tmp_path) -> Path:
    dst = tmp_path / "run"
    shutil.copytree(data_stages[1], dst, ignore=shutil.ignore_patterns(".lock"))
    return dst


def status_of(run: Path, capsys) -> dict[str, dict]:
    capsys.readouterr()
    assert main(["status", "--run-dir", str(run), "--json"]) == 0
    return {s["stage"]: s for s in json.loads(capsys.readouterr().out)}


def outputs(run: Path, stage: str, suffix: str) -> Path:
    m = json.loads((run / stage / "manifest.json").read_text())
    return run / stage / next(o["path"] for o in m["outputs"] if o["path"].endswith(suffix))


@pytest.mark.parametrize("stage, suffix, damage", [
    ("ingest", ".parquet", "truncate"),
    ("tokenizer", "tokenizer.model", "delete"),
    ("shards", ".bin", "truncate"),
])
def test_damaged_outputs_are_never_fresh_and_a_run_repairs_them(run, capsys, stage, suffix, damage):
    target = outputs(run, stage, suffix)
    if damage == "delete":
        target.unlink()
    else:
        target.write_bytes(target.read_bytes()[: target.stat().st_size // 2])
    st = status_of(run, capsys)[stage]
    assert st["state"] == "damaged" and str(target) in st["reason"]
    assert main(["run", "--run-dir", str(run), "--to", "shards"]) == 0
    out = capsys.readouterr()
    assert f"{stage}: ran" in out.out and "rerunning the stage" in out.err
    assert all(s["state"] == "fresh" for name, s in status_of(run, capsys).items() if name in ("ingest", "tokenizer", "shards"))


def test_read_only_commands_refuse_a_missing_run_and_create_nothing(tmp_path, capsys):
    missing = tmp_path / "nonexistent"
    assert main(["status", "--run-dir", str(missing)]) == 2
    assert f"{missing}: no such run directory" in capsys.readouterr().err
    assert main(["evaluate", "--run-dir", str(missing)]) == 2
    assert f"{missing}: no such run directory" in capsys.readouterr().err
    assert not missing.exists()


def test_a_run_dir_that_is_a_file_is_one_clear_line(tmp_path, capsys):
    f = tmp_path / "afile"
    f.write_text("x")
    assert main(["run", "--run-dir", str(f), "--to", "ingest"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{f}: is a file, not a run directory" in err


@pytest.mark.parametrize("command", ["run", "status"])
def test_an_empty_run_dir_is_refused_not_taken_for_the_default(tmp_path, capsys, monkeypatch, command):
    monkeypatch.chdir(tmp_path)  # where the default runs/<name> would be made
    assert main([command, "--run-dir", ""]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--run-dir is empty" in err
    assert not (tmp_path / "runs").exists()


def test_a_run_says_which_config_it_uses(run, capsys):
    assert main(["run", "--run-dir", str(run), "--to", "shards"]) == 0
    assert f"europa: run directory {run}; the run's own {run / 'run.toml'}" in capsys.readouterr().out


def test_status_with_the_config_file_agrees_with_the_run_it_made(tmp_path, udhr_dir, capsys):
    """The run records its settings with secrets masked; the file it came from holds them: both are fresh."""
    cfg = write_config(tmp_path, udhr_source(udhr_dir).replace(
        'homepage = "https://www.unicode.org/udhr/"', 'homepage = "https://user:s3cret@www.unicode.org/udhr/"'), languages='["mt"]')
    run = tmp_path / "run"
    assert main(["run", "--config", str(cfg), "--run-dir", str(run), "--to", "ingest"]) == 0
    assert "s3cret" not in (run / "run.toml").read_text()
    capsys.readouterr()
    assert main(["status", "--config", str(cfg), "--run-dir", str(run), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["state"] == "fresh"


def test_an_interrupted_force_is_forgotten_once_a_rerun_finds_everything_fresh(run, capsys):
    from pipeline.rundir import RunDir

    rd = RunDir(run)
    fp = rd.manifest("tokenizer").fingerprint
    rd.record_attempt("tokenizer", "running", fp)  # what a killed `europa run --force tokenizer` leaves behind
    (rd.work_dir("tokenizer", fp) / "samples" / "sample-de").mkdir(parents=True)
    (rd.staging_dir("tokenizer")).mkdir(parents=True)
    (run / ".trash" / "tokenizer-1234").mkdir(parents=True)
    assert status_of(run, capsys)["tokenizer"]["state"] == "interrupted"
    assert main(["run", "--run-dir", str(run), "--to", "shards"]) == 0
    assert status_of(run, capsys)["tokenizer"]["state"] == "fresh"
    assert not (run / ".work" / "tokenizer").exists() and not rd.staging_dir("tokenizer").exists()
    assert not (run / ".trash" / "tokenizer-1234").exists()


@pytest.fixture
def tmpfs(tmp_path):
    """A small file system of our own (a full disk, a read-only one); skipped where mounting is not allowed."""
    mounted = []

    def mount(name: str, options: str) -> Path:
        point = tmp_path / name
        point.mkdir()
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(point)], capture_output=True, text=True)
        if r.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here ({r.stderr.strip() or 'not root'})")
        mounted.append(point)
        return point

    yield mount
    for point in mounted:
        subprocess.run(["umount", str(point)], capture_output=True)


def test_a_full_disk_is_one_line_and_nothing_half_published(tmpfs, udhr_dir, tmp_path, capsys):
    disk = tmpfs("full", "size=160k")
    cfg = write_config(tmp_path, udhr_source(udhr_dir), languages='["de", "fr", "it", "pl"]')
    assert main(["run", "--config", str(cfg), "--run-dir", str(disk / "run"), "--to", "ingest"]) == 1
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("europa: error")]
    assert len(err) == 1 and "no space left on the device" in err[0] and str(disk) in err[0]
    assert not (disk / "run" / "ingest").exists()


def test_a_full_disk_under_prefect_prints_its_line_not_a_traceback_per_log_record(tmpfs, udhr_dir, tmp_path):
    """The run log's first refused write stops the run log: it used to print a traceback per record, which
    Prefect's print-as-log turned into records of their own (thousands of lines, then RecursionError)."""
    disk = tmpfs("full", "size=160k")
    cfg = write_config(tmp_path, udhr_source(udhr_dir), engine="prefect", languages='["de", "fr", "it", "pl"]')
    r = subprocess.run([sys.executable, "-m", "pipeline.cli", "run", "--config", str(cfg), "--run-dir", str(disk / "run"),
                        "--to", "ingest"], capture_output=True, text=True, timeout=300,
                       env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert r.returncode == 1
    assert "Logging error" not in r.stderr and "Traceback" not in r.stderr and len(r.stderr.splitlines()) < 20, r.stderr
    (line,) = [x for x in r.stderr.splitlines() if x.startswith("europa: error")]
    assert "no space left on the device" in line and str(disk) in line


def test_a_read_only_run_dir_is_one_line(tmpfs, udhr_dir, tmp_path, capsys):
    ro = tmpfs("ro", "ro,size=64k")
    cfg = write_config(tmp_path, udhr_source(udhr_dir), languages='["de"]')
    assert main(["run", "--config", str(cfg), "--run-dir", str(ro / "run"), "--to", "ingest"]) == 2
    err = capsys.readouterr().err
    assert err.count("europa: error") == 1 and f"{ro / 'run'}: read-only file system; choose a writable --run-dir" in err


def test_a_config_that_is_not_utf8_names_the_file(tmp_path, capsys):
    cfg = tmp_path / "latin1.toml"
    cfg.write_bytes('[run]\nname = "caf\xe9"\n'.encode("latin-1"))
    assert main(["status", "--config", str(cfg), "--run-dir", str(tmp_path)]) == 2
    assert f"{cfg}: not UTF-8 text" in capsys.readouterr().err


def test_a_transient_failure_is_tried_again_and_counted(tmp_path, udhr_dir, monkeypatch):
    """A unit whose first try times out (a network blip) is retried; the output is what it would have been, the
    retry is in the manifest, and a failure that is not transient is never retried."""
    from stages.ingest.stage import IngestStage

    real, calls = IngestStage.run_unit, []

    def flaky(self, ctx, unit, out_dir):
        calls.append(unit.id)
        if unit.step == "documents" and unit.id.startswith("mt-") and calls.count(unit.id) == 1:
            raise TimeoutError("read timed out (injected)")
        return real(self, ctx, unit, out_dir)

    monkeypatch.setattr(IngestStage, "run_unit", flaky)
    body = udhr_source(udhr_dir)
    cfg = write_config(tmp_path, body, languages='["de", "mt"]')
    cfg.write_text(cfg.read_text().replace("max_workers = 2", "max_workers = 2\nretry_backoff_s = 0.0"))
    assert main(["run", "--config", str(cfg), "--run-dir", str(tmp_path / "run"), "--to", "ingest"]) == 0
    m = json.loads((tmp_path / "run" / "ingest" / "manifest.json").read_text())
    assert m["retries"] == {"documents/mt-udhr-00000": 1} and m["statistics"]["per_language"]["mt"]["kept"] > 0

    def broken(self, ctx, unit, out_dir):
        raise ValueError("not transient")

    monkeypatch.setattr(IngestStage, "run_unit", broken)
    calls.clear()
    assert main(["run", "--config", str(cfg), "--run-dir", str(tmp_path / "run2"), "--to", "ingest"]) == 1


def test_an_input_still_unreachable_after_the_last_try_is_a_recorded_skip(tmp_path, udhr_dir, monkeypatch):
    """A read that keeps timing out: tried again ([orchestration] retries), then, on the last try, the rest of that
    input is skipped with the reason "unreachable" and the documents read before the failure are kept; under
    on_error = "fail" the same is exit 2 naming the input."""
    from stages.ingest import readers

    real = readers._read_piece

    def blip(source, lang, piece):
        for i, item in enumerate(real(source, lang, piece)):
            if lang == "mt" and i == 3:
                raise TimeoutError("read timed out (injected)")
            yield item

    monkeypatch.setattr(readers, "_read_piece", blip)
    cfg = write_config(tmp_path, udhr_source(udhr_dir), languages='["de", "mt"]')
    cfg.write_text(cfg.read_text().replace("max_workers = 2", "max_workers = 2\nretries = 1\nretry_backoff_s = 0.0"))
    assert main(["run", "--config", str(cfg), "--run-dir", str(tmp_path / "run"), "--to", "ingest"]) == 0
    m = json.loads((tmp_path / "run" / "ingest" / "manifest.json").read_text())
    assert m["retries"] == {"documents/mt-udhr-00000": 1}
    [p] = [p for p in m["skipped"] if p["reason"] == "unreachable"]
    assert p["lang"] == "mt" and "TimeoutError" in p["message"] and "still after 2 tries" in p["message"]
    assert "after 3 document(s)" in p["message"]
    assert m["statistics"]["per_language"]["mt"]["docs_in"] == 3 and m["statistics"]["per_language"]["de"]["docs_in"] > 3

    cfg.write_text(cfg.read_text().replace("[[ingest.sources]]", "[ingest]\non_error = \"fail\"\n\n[[ingest.sources]]", 1))
    assert main(["run", "--config", str(cfg), "--run-dir", str(tmp_path / "run-fail"), "--to", "ingest"]) == 2


def test_a_malformed_json_line_is_named_once_with_its_column(tmp_path, udhr_dir):
    from stages.ingest.config import SourceConfig
    from stages.ingest.readers import InputProblem, read_input

    f = tmp_path / "de.jsonl"
    f.write_text('{"text": "unterminated\n', encoding="utf-8")
    source = SourceConfig.model_validate({"name": "t", "kind": "jsonl", "path": str(tmp_path / "{lang}.jsonl"),
                                          "licence": "x", "collected": "2026-01"})
    problem = next(p for p in read_input(source, "de", str(f)) if isinstance(p, InputProblem))
    assert problem.message.startswith(f"{f}:1: malformed JSON at column ") and " at at " not in problem.message


def test_the_live_display_redraws_one_line_on_a_terminal_and_prints_lines_elsewhere(monkeypatch):
    import io

    from pipeline import progress

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    for stream, redraws in ((Terminal(), True), (io.StringIO(), False)):
        monkeypatch.setattr("sys.stderr", stream)
        monkeypatch.setattr(progress, "MIN_INTERVAL_S", 0.0)
        monkeypatch.setenv("TERM", "xterm")
        progress.stage_started("shards", 3)
        for i in (1, 2, 3):
            progress._last.clear()
            progress.unit_done("shards", i, 3, f"u{i}", (1000.0, "tokens"))
        progress.note("shards", "a note stays")
        out = stream.getvalue()
        assert ("\r\x1b[K[shards] 2/3 units" in out) == redraws
        assert "[shards] 3/3 units (100%)" in out and "tokens/s" in out and "[shards] a note stays\n" in out
        if not redraws:
            assert "\r" not in out and out.count("\n") == 5


def test_artifact_keys_are_per_run_directory(tmp_path):
    from flows.stages import artifact_key
    from pipeline.rundir import RunDir

    a, b = artifact_key(RunDir(tmp_path / "x" / "demo"), "ingest-summary"), artifact_key(RunDir(tmp_path / "y" / "demo"), "ingest-summary")
    assert a != b and a.startswith("demo-") and a.endswith("-ingest-summary")
    import re

    assert re.fullmatch(r"[a-z0-9-]+", artifact_key(RunDir(tmp_path / "Run_Dir.2"), "evaluation-report"))
