"""The executor on a fake two-step stage (tests/pipeline/fake_stage.py): steps in order, each planned from the
results before it; units handed out largest first; a killed run resumes with only the unfinished units redone;
a second writer refused while a stage runs; failures recorded beside the published folder; payloads, results and
result files that break the step's models refused with the field named."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pipeline.config import REPO_ROOT
from pipeline.executor import execute_stage
from pipeline.rundir import RunDir, RunDirLocked
from pipeline.stage import StageError
from pipeline.status import statuses
from tests.pipeline import fake_stage
from tests.pipeline.fake_stage import NAME

WORDS = ["a", "bbb", "cc", "dddd", "e"]


@pytest.fixture(autouse=True)
def registered(monkeypatch):
    from pipeline import registry

    monkeypatch.setitem(registry._PARTS, NAME, registry._PARTS[NAME])  # restored after the test
    fake_stage.install()


def ran(log: Path) -> list[str]:
    return log.read_text(encoding="utf-8").split() if log.exists() else []


def run_in_subprocess(rd: RunDir, env: dict[str, str] | None = None, **settings) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), **(env or {})}
    return subprocess.Popen([sys.executable, "-m", "tests.pipeline.fake_stage", str(rd.path), json.dumps(settings)],
                            cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def test_steps_run_in_order_largest_unit_first_and_publish_once(tmp_path):
    rd, log = RunDir(tmp_path / "run"), tmp_path / "log"
    config = fake_stage.config(words=WORDS, log=str(log))
    manifest, did_run = execute_stage(rd, config, NAME)
    assert did_run
    # count units by cost (letters) descending, ids ascending among equals; then the one unit planned from them
    assert ran(log) == ["count/dddd", "count/bbb", "count/cc", "count/a", "count/e", "total/all"]
    assert manifest.statistics == {"words": 5, "letters": 11}
    assert (rd.stage_dir(NAME) / "total.txt").read_text() == "11\n"
    assert not (rd.path / ".work" / NAME).exists()  # the finished units go once published

    manifest2, did_run = execute_stage(rd, config, NAME)
    assert not did_run and manifest2.fingerprint == manifest.fingerprint
    assert len(ran(log)) == 6  # fresh: nothing ran again
    assert [s.state for s in statuses(rd, config, upto=(NAME,))] == ["fresh"]


def test_a_killed_run_resumes_with_only_the_unfinished_units(tmp_path):
    rd, log = RunDir(tmp_path / "run"), tmp_path / "log"
    proc = run_in_subprocess(rd, {"FAKE_KILL_AT": "cc"}, words=WORDS, log=str(log))
    proc.communicate(timeout=120)
    assert proc.returncode == -9
    assert ran(log) == ["count/dddd", "count/bbb", "count/cc"]
    config = fake_stage.config(words=WORDS, log=str(log))
    assert [s.state for s in statuses(rd, config, upto=(NAME,))] == ["interrupted"]
    assert rd.manifest(NAME) is None

    manifest, did_run = execute_stage(rd, config, NAME)
    assert did_run
    assert ran(log)[3:] == ["count/cc", "count/a", "count/e", "total/all"]  # dddd and bbb were done
    reference, _ = execute_stage(RunDir(tmp_path / "ref"), fake_stage.config(words=WORDS, log=str(tmp_path / "l2")), NAME)
    assert manifest.output_digest == reference.output_digest


def test_a_second_writer_is_refused_while_a_stage_runs(tmp_path):
    rd, log, go = RunDir(tmp_path / "run"), tmp_path / "log", tmp_path / "go"
    proc = run_in_subprocess(rd, {"FAKE_WAIT_FOR": str(go)}, words=WORDS, log=str(log))
    try:
        deadline = time.monotonic() + 60
        while not ran(log) and time.monotonic() < deadline:  # the first unit has started: the lock is held
            time.sleep(0.05)
        config = fake_stage.config(words=WORDS, log=str(log))
        assert [s.state for s in statuses(rd, config, upto=(NAME,))] == ["running"]
        with pytest.raises(RunDirLocked, match="run directory is in use by pid"):
            with rd.lock("a second writer"):
                pass
    finally:
        go.touch()
        out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, out
    assert [s.state for s in statuses(rd, config, upto=(NAME,))] == ["fresh"]


def test_a_failed_unit_is_recorded_and_leaves_the_published_stage_alone(tmp_path):
    rd, log = RunDir(tmp_path / "run"), tmp_path / "log"
    good, _ = execute_stage(rd, fake_stage.config(words=WORDS, log=str(log)), NAME)
    bad = fake_stage.config(words=WORDS + ["zz"], log=str(log), fail_at="zz")
    with pytest.raises(ValueError, match="'zz' is not allowed"):
        execute_stage(rd, bad, NAME)
    st = statuses(rd, bad, upto=(NAME,))[0]
    assert st.state == "failed" and "ValueError: the word 'zz' is not allowed" in st.reason
    assert rd.manifest(NAME).output_digest == good.output_digest  # the published folder is untouched
    assert (rd.stage_dir(NAME) / "total.txt").read_text() == "11\n"


def test_a_transient_failure_is_retried_and_counted(tmp_path, monkeypatch):
    rd, log = RunDir(tmp_path / "run"), tmp_path / "log"
    monkeypatch.setenv("FAKE_FLAKY_AT", "bbb")
    manifest, _ = execute_stage(rd, fake_stage.config(words=WORDS, log=str(log)), NAME)
    assert manifest.retries == {"count/bbb": 1}
    assert ran(log).count("count/bbb") == 2


def test_a_malformed_payload_is_refused_naming_the_field(tmp_path):
    config = fake_stage.config(words=WORDS, log=str(tmp_path / "log"), malformed="payload")
    with pytest.raises(StageError, match=r"stage ingest: step count: unit a: payload word: Field required .*"
                                         r"\(WordPayload\); this is a bug in the stage's plan"):
        execute_stage(RunDir(tmp_path / "run"), config, NAME)
    assert ran(tmp_path / "log") == []  # refused before any unit ran


def test_a_malformed_result_is_refused_naming_the_field(tmp_path):
    config = fake_stage.config(words=WORDS, log=str(tmp_path / "log"), malformed="result")
    with pytest.raises(StageError, match=r"step count: unit dddd: result letters: Input should be a valid integer"):
        execute_stage(RunDir(tmp_path / "run"), config, NAME)
    assert not list((tmp_path / "run" / ".work").rglob("result.json"))  # nothing was recorded as done


def test_a_result_file_of_another_version_is_refused_naming_the_file(tmp_path):
    rd, log = RunDir(tmp_path / "run"), tmp_path / "log"
    proc = run_in_subprocess(rd, {"FAKE_KILL_AT": "a"}, words=WORDS, log=str(log))
    proc.communicate(timeout=120)
    marker = next((rd.path / ".work").rglob("count/dddd/result.json"))
    marker.write_text(json.dumps({"word": "dddd", "count": 4}))  # what another version might have written
    with pytest.raises(StageError, match=rf"{marker}: letters: Field required .*another version of the stage"):
        execute_stage(rd, fake_stage.config(words=WORDS, log=str(log)), NAME)
