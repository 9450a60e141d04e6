"""The fake two-step stage (tests/pipeline/fake_stage.py) through the Prefect engine: its units run as tasks in
worker processes that never registered it (the stage travels with its context), with the same outputs as the
in-process engine."""

from __future__ import annotations

import pytest

from flows.stages import run_stages
from pipeline.executor import execute_stage
from pipeline.rundir import RunDir
from tests.pipeline import fake_stage
from tests.pipeline.fake_stage import NAME

WORDS = [f"w{'x' * (i % 7)}{i:03d}" for i in range(40)]


@pytest.fixture(autouse=True)
def registered(monkeypatch):
    from pipeline import registry

    monkeypatch.setitem(registry._PARTS, NAME, registry._PARTS[NAME])
    fake_stage.install()


@pytest.mark.parametrize("runner", ["processes"])
def test_a_stage_registered_here_runs_in_worker_processes(prefect_harness, tmp_path, runner):
    log = tmp_path / "log"
    config = fake_stage.config({"engine": "prefect", "task_runner": runner, "max_workers": 2}, words=WORDS, log=str(log))
    rd = RunDir(tmp_path / "run")
    with rd.lock("test"):
        results = run_stages(rd, config, [NAME], [])
    assert results[0]["ran"]
    assert sorted(log.read_text().split()) == sorted([f"count/{w}" for w in WORDS] + ["total/all"])
    reference, _ = execute_stage(RunDir(tmp_path / "ref"), fake_stage.config(words=WORDS, log=str(tmp_path / "l")), NAME)
    assert rd.manifest(NAME).output_digest == reference.output_digest
