"""Checkpoint digests computed while DCP writes: they equal the files' sha256, cover every file, and what they do
not cover (or what changed since) is reported rather than trusted."""

from __future__ import annotations

import json
import os

os.environ["OMP_NUM_THREADS"] = "1"

import torch  # noqa: E402
import torch.distributed.checkpoint as dcp  # noqa: E402

from europa_model.checkpoint_digests import HashingFileSystemWriter, write_rank_checksums  # noqa: E402
from europa_model.checkpoints import rank_checksums_name, recorded_digests  # noqa: E402
from pipeline.fsutil import sha256_file  # noqa: E402


def _save(folder, rank=0):
    state = {"w": torch.randn(64, 33), "step": torch.tensor(7), "nested": {"b": torch.arange(100.0)}}
    writer = HashingFileSystemWriter(str(folder))
    dcp.save(state, storage_writer=writer, checkpoint_id=str(folder), no_dist=True)
    return write_rank_checksums(folder, rank, writer.fs.written)


def test_digests_recorded_while_saving_equal_the_files(tmp_path):
    folder = tmp_path / "step-3"
    path = _save(folder)
    assert path.name == rank_checksums_name(0)
    recorded = json.loads(path.read_text())["files"]
    on_disk = sorted(p.name for p in folder.iterdir() if p.name != path.name)
    assert sorted(recorded) == on_disk and ".metadata" in recorded and any(n.endswith(".distcp") for n in recorded)
    for name, f in recorded.items():
        assert f["sha256"] == sha256_file(folder / name) and f["bytes"] == (folder / name).stat().st_size
    covered, missing = recorded_digests(folder)
    assert sorted(covered) == on_disk and missing == []
    # the checkpoint is an ordinary DCP folder
    back = {"w": torch.empty(64, 33), "step": torch.tensor(0), "nested": {"b": torch.empty(100)}}
    dcp.load(back, checkpoint_id=str(folder), no_dist=True)
    assert int(back["step"]) == 7


def test_files_no_rank_recorded_or_changed_since_are_not_trusted(tmp_path):
    folder = tmp_path / "step-6"
    _save(folder)
    shard = next(folder.glob("*.distcp"))
    with open(shard, "ab") as f:
        f.write(b"x")  # changed after the rank recorded it
    (folder / "extra.bin").write_bytes(b"written by someone else")
    covered, missing = recorded_digests(folder)
    assert {p.name for p in missing} == {shard.name, "extra.bin"} and ".metadata" in covered
    (folder / rank_checksums_name(0)).write_text("{not json")  # a damaged record: nothing is trusted
    covered, missing = recorded_digests(folder)
    assert covered == {} and len(missing) == 3
