"""A published manifest that is cut short, not JSON, or edited by hand is a damaged stage: `status` says so
naming the file, a run (or `--force`) rebuilds it, and nothing downstream reads it as a record."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline.executor import execute_stage
from pipeline.manifest import ManifestDamaged
from pipeline.rundir import RunDir
from pipeline.stage import StageError
from pipeline.status import build_context, statuses
from tests.pipeline import fake_stage
from tests.pipeline.fake_stage import NAME

WORDS = ["a", "bbb", "cc"]


@pytest.fixture(autouse=True)
def registered(monkeypatch):
    from pipeline import registry

    monkeypatch.setitem(registry._PARTS, NAME, registry._PARTS[NAME])
    fake_stage.install()


def published(tmp_path: Path):
    rd, config = RunDir(tmp_path / "run"), fake_stage.config(words=WORDS, log=str(tmp_path / "log"))
    manifest, _ = execute_stage(rd, config, NAME)
    return rd, config, manifest, rd.stage_dir(NAME) / "manifest.json"


def truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:200])


def edit_statistic(path: Path) -> None:
    data = json.loads(path.read_text(encoding="utf-8"))
    data["statistics"]["words"] = 777_777
    path.write_text(json.dumps(data, indent=2), encoding="utf-8")


@pytest.mark.parametrize("damage, why", [(truncate, "unreadable manifest"),
                                         (edit_statistic, "edited after it was published")])
def test_a_damaged_manifest_is_a_damaged_stage_that_a_run_rebuilds(tmp_path, damage, why):
    rd, config, before, path = published(tmp_path)
    damage(path)
    with pytest.raises(ManifestDamaged, match=why):
        rd.manifest(NAME)
    [status] = statuses(rd, config, upto=(NAME,))
    assert status.state == "damaged" and str(path) in status.reason and why in status.reason

    with pytest.raises(StageError, match=f"the {NAME} stage's manifest is damaged .*{why}.*europa run"):
        build_context(rd, config, "tokenizer")  # a consumer never reads it as a record

    after, did_run = execute_stage(rd, config, NAME)
    assert did_run and after.output_digest == before.output_digest
    assert rd.manifest(NAME).statistics == {"words": 3, "letters": 6}
    assert [s.state for s in statuses(rd, config, upto=(NAME,))] == ["fresh"]


def test_force_rebuilds_a_stage_whose_manifest_is_cut_short(tmp_path):
    rd, config, before, path = published(tmp_path)
    truncate(path)
    after, did_run = execute_stage(rd, config, NAME, force=True)
    assert did_run and after.output_digest == before.output_digest and rd.manifest(NAME) is not None


def test_status_and_run_on_the_command_line(tmp_path, capsys):
    run, cfg = tmp_path / "run", tmp_path / "config.toml"
    cfg.write_text(f'[run]\nname = "fake"\nlanguages = ["en"]\n\n[orchestration]\nengine = "local"\n\n'
                   f'[ingest]\nwords = {json.dumps(WORDS)}\nlog = "{tmp_path / "log"}"\n', encoding="utf-8")
    assert fake_stage.cli(["run", "--config", str(cfg), "--run-dir", str(run), "--to", NAME]) == 0
    truncate(run / NAME / "manifest.json")
    capsys.readouterr()
    assert fake_stage.cli(["status", "--run-dir", str(run)]) == 0
    out = capsys.readouterr().out
    assert "damaged" in out and "unreadable manifest" in out
    assert fake_stage.cli(["run", "--run-dir", str(run), "--to", NAME]) == 0
    assert RunDir(run).manifest(NAME).statistics == {"words": 3, "letters": 6}
