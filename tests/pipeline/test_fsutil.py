"""The file primitives every layer shares (pipeline/fsutil.py): a folder appears whole or not at all, replaces
what stood there (a folder or a file) without leaving it behind, and a file's checksum reports its progress."""

from __future__ import annotations

import hashlib

import pytest

from pipeline.fsutil import atomic_dir, sha256_file


def test_a_folder_appears_whole_or_not_at_all(tmp_path):
    with pytest.raises(RuntimeError):
        with atomic_dir(tmp_path / "out") as tmp:
            (tmp / "half").write_text("x")
            raise RuntimeError("killed halfway")
    assert list(tmp_path.iterdir()) == []  # nothing under the final name, no temporary left
    with atomic_dir(tmp_path / "out") as tmp:
        (tmp / "whole").write_text("x")
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["whole"]


@pytest.mark.parametrize("before", ["folder", "file"])
def test_replace_swaps_out_a_folder_or_a_file_and_leaves_nothing_behind(tmp_path, before):
    target = tmp_path / "export"
    if before == "folder":
        target.mkdir()
        (target / "old").write_text("old")
    else:
        target.write_text("a file where the folder goes")
    with atomic_dir(target, replace=True) as tmp:
        (tmp / "new").write_text("new")
    assert [p.name for p in tmp_path.iterdir()] == ["export"]
    assert [p.name for p in target.iterdir()] == ["new"]


def test_without_replace_the_first_finished_copy_stays(tmp_path):
    with atomic_dir(tmp_path / "unit") as tmp:
        (tmp / "result").write_text("first")
    with atomic_dir(tmp_path / "unit") as tmp:  # a second worker finishing the same unit
        (tmp / "result").write_text("second")
    assert (tmp_path / "unit" / "result").read_text() == "first"
    assert [p.name for p in tmp_path.iterdir()] == ["unit"]


def test_sha256_file_reports_every_byte_it_reads(tmp_path):
    data = bytes(range(256)) * 5000
    (tmp_path / "f").write_bytes(data)
    seen: list[int] = []
    assert sha256_file(tmp_path / "f", chunk=1 << 16, on_read=seen.append) == hashlib.sha256(data).hexdigest()
    assert sum(seen) == len(data) and len(seen) == -(-len(data) // (1 << 16))


def test_remove_tree_deletes_nested_folders_and_links_without_following_them(tmp_path):
    from pipeline.fsutil import remove_tree

    kept = tmp_path / "elsewhere"
    kept.mkdir()
    (kept / "precious").write_text("x")
    root = tmp_path / "work"
    for i in range(50):
        (root / "step" / f"u{i:03d}" / "sub").mkdir(parents=True)
        (root / "step" / f"u{i:03d}" / "result.json").write_text("{}")
    (root / "link").symlink_to(kept, target_is_directory=True)
    remove_tree(root)
    assert not root.exists() and (kept / "precious").exists()
    remove_tree(root)  # already gone: nothing to do, no error
