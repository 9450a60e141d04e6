"""Output checksums: every file of a stage folder, hashed on threads, or taken from what the stage computed."""

import hashlib

from pipeline.fsutil import sha256_files
from pipeline.manifest import MANIFEST_NAME, describe_outputs


def test_describe_outputs(tmp_path):
    files = {"a.parquet": b"x" * 3_000_000, "sub/b.txt": b"hello", "sub/deep/c.bin": b""}
    for rel, data in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_bytes(data)
    (tmp_path / MANIFEST_NAME).write_text("{}")  # never describes itself

    outputs = describe_outputs(tmp_path, rows={"a.parquet": 7})
    assert [o.path for o in outputs] == sorted(files)
    for o in outputs:
        assert o.sha256 == hashlib.sha256(files[o.path]).hexdigest() and o.bytes == len(files[o.path])
    assert outputs[0].rows == 7 and outputs[1].rows is None

    # a checksum the stage already computed is taken as given: the file is not read again
    known = describe_outputs(tmp_path, known={"sub/b.txt": "0" * 64})
    assert [o.sha256 for o in known] == [outputs[0].sha256, "0" * 64, outputs[2].sha256]


def test_sha256_files_keeps_order(tmp_path):
    paths = []
    for i in range(20):
        paths.append(tmp_path / f"{i}.bin")
        paths[-1].write_bytes(bytes([i]) * (i * 100_000))
    assert sha256_files(paths) == [hashlib.sha256(p.read_bytes()).hexdigest() for p in paths]
    assert sha256_files([]) == []
