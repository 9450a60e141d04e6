"""Fixtures of the compliance tests: one real upstream run per session, copied per test with fake later records."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from pipeline.cli import main
from pipeline.manifest import Manifest
from pipeline.rundir import RunDir
from stages.compliance.config import ComplianceConfig
from tests.compliance.fake_records import LANGS, demo_compliance_section, upstream_config, write_evaluate, write_pretrain
from tests.conftest import write_config


@pytest.fixture(scope="session")
def upstream_run(tmp_path_factory, udhr_dir) -> Path:
    """ingest -> tokenizer -> shards for real on three UDHR languages (~2 s)."""
    tmp = tmp_path_factory.mktemp("compliance-upstream")
    cfg = write_config(tmp, upstream_config(udhr_dir), languages=LANGS)
    run = tmp / "run"
    assert main(["run", "--config", str(cfg), "--run-dir", str(run), "--to", "shards"]) == 0
    return run


@pytest.fixture
def run(upstream_run, tmp_path) -> Path:
    """A private copy of the upstream run with pretrain and evaluate manifests of the contract."""
    dst = tmp_path / "run"
    shutil.copytree(upstream_run, dst, ignore=shutil.ignore_patterns(".lock", ".work", ".state", ".staging"))
    write_pretrain(dst)
    write_evaluate(dst, json.loads(LANGS))
    return dst


@pytest.fixture
def demo_settings() -> ComplianceConfig:
    """The demo config's [compliance] declarations (all person-only fields filled), without the release export:
    the fake pretrain record has no checkpoint to export (test_compliance_real_pretrain.py exports a real one)."""
    section = demo_compliance_section()
    section["model"].pop("release_export", None)
    return ComplianceConfig.model_validate(section)


def settings_without(section: dict, dotted: str) -> ComplianceConfig:
    """The declarations with one key removed, e.g. "provider.name"."""
    data = json.loads(json.dumps(section, default=str))
    *parents, last = dotted.split(".")
    d = data
    for p in parents:
        d = d[p]
    del d[last]
    return ComplianceConfig.model_validate(data)


def edit_manifest(run: Path, stage: str, edit) -> None:
    """Change a record in place (tests of rules that need other data than the demo corpus has), written back as
    a stage would publish it (with its content digest: a hand edit is a damaged stage)."""
    path = run / stage / "manifest.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    edit(data)
    path.write_text(Manifest.from_dict(data).to_json(), encoding="utf-8")


@pytest.fixture
def rundir(run) -> RunDir:
    return RunDir(run)
