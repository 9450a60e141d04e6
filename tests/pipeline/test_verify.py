"""`europa verify` and pipeline/verify.py: a truncated file, a flipped byte and a missing file, in any stage, named."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from pipeline.cli import main
from pipeline.manifest import Manifest, describe_outputs, output_digest
from pipeline.rundir import RunDir
from pipeline.verify import check_stage

DATA_STAGES = ("ingest", "tokenizer", "shards")


@pytest.fixture
def run(tmp_path, data_run) -> Path:
    copy = tmp_path / "run"
    shutil.copytree(data_run, copy, ignore=shutil.ignore_patterns(".lock"))
    return copy


def outputs(run: Path, stage: str) -> list[dict]:
    return sorted(json.loads((run / stage / "manifest.json").read_text())["outputs"], key=lambda o: -o["bytes"])


def damage(run: Path, stage: str) -> dict[str, str]:
    """Truncate the stage's largest file, flip a byte of the next, delete the third; what verify must say of each."""
    big, flipped, gone = (run / stage / o["path"] for o in outputs(run, stage)[:3])
    with open(big, "r+b") as f:
        f.truncate(big.stat().st_size - 1)
    data = bytearray(flipped.read_bytes())
    data[len(data) // 2] ^= 0x01
    flipped.write_bytes(bytes(data))
    gone.unlink()
    rel = lambda p: f"{stage}/{p.relative_to(run / stage).as_posix()}"  # noqa: E731
    return {rel(big): "size mismatch", rel(flipped): "checksum mismatch", rel(gone): "missing"}


def test_an_intact_run_verifies(run, capsys):
    assert main(["verify", "--run-dir", str(run)]) == 0
    out = capsys.readouterr().out
    for stage in DATA_STAGES:
        assert f"{stage:<11} verified:" in out
    assert "pretrain    not published" in out


@pytest.mark.parametrize("stage", DATA_STAGES)
def test_damage_in_any_stage_is_found_and_named(run, stage, capsys):
    expected = damage(run, stage)
    assert main(["verify", "--run-dir", str(run)]) == 1
    captured = capsys.readouterr()
    assert f"{stage:<11} DAMAGED: 3 of" in captured.out
    for path, problem in expected.items():
        assert f"  {path}: {problem}" in captured.out
    assert f"europa stage {stage} --force" in captured.err
    for other in set(DATA_STAGES) - {stage}:
        assert f"{other:<11} verified:" in captured.out

    # the cheap check (what `europa status` can afford): existence and sizes, not the flipped byte
    assert main(["verify", "--run-dir", str(run), "--stage", stage, "--sizes-only"]) == 1
    out = capsys.readouterr().out
    cheap = {d.path: d.problem for d in check_stage(RunDir(run), stage, checksums=False).damage}
    assert sorted(cheap.values()) == ["missing", "size"]
    assert sum(f"{stage}/{p}" in out for p in cheap) == 2 and "checksum mismatch" not in out


def test_a_stage_folder_of_any_kind_is_checked_from_its_manifest(tmp_path, capsys):
    """What verify knows of a stage is its manifest: a pretrain-like folder with a checkpoint file, hand-made."""
    rd = RunDir(tmp_path / "run")
    folder = rd.stage_dir("pretrain")
    (folder / "checkpoints" / "step-6").mkdir(parents=True)
    (folder / "checkpoints" / "step-6" / "__0_0.distcp").write_bytes(b"\x00" * 100_000)
    (folder / "metrics.jsonl").write_text('{"step": 1}\n')
    outs = describe_outputs(folder)
    manifest = Manifest("pretrain", "complete", "fp", output_digest(outs), {}, {}, "1", "0", None, "", "", 0.0, outs)
    (folder / "manifest.json").write_text(manifest.to_json())
    assert main(["verify", "--run-dir", str(rd.path), "--stage", "pretrain"]) == 0
    with open(folder / "checkpoints" / "step-6" / "__0_0.distcp", "r+b") as f:
        f.seek(99_999)
        f.write(b"\x01")
    assert main(["verify", "--run-dir", str(rd.path), "--stage", "pretrain"]) == 1
    assert "pretrain/checkpoints/step-6/__0_0.distcp: checksum mismatch" in capsys.readouterr().out
    assert main(["verify", "--run-dir", str(rd.path), "--stage", "evaluate"]) == 2  # nothing published to check
    assert "stage evaluate has not published anything" in capsys.readouterr().err
