"""Pieces of input files (stages/ingest/inputs.py, readers.py): however a file is cut, its pieces yield each
document and each problem exactly once, with the line / row number a reader of the whole file gives it."""

from __future__ import annotations

import gzip
import json
import random

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from stages.ingest.config import SourceConfig
from stages.ingest.inputs import InputFile, list_files, split_files
from stages.ingest.readers import RawDoc, read_piece
from stages.ingest.units import Piece
from stages.ingest.stage import _pack


def source(kind: str, path: str, **kw) -> SourceConfig:
    return SourceConfig(name="s", kind=kind, path=path, licence="x", collected="2025-01", **kw)


def read_all(src: SourceConfig, pieces: list[Piece]) -> list[tuple]:
    out = []
    for p in pieces:
        for item in read_piece(src, "de", p):
            out.append(("doc", item.index, item.text) if isinstance(item, RawDoc) else ("problem", item.line, item.reason))
    return out


def cuts(size: int) -> list[int]:
    """max_unit_bytes values from one piece to pieces far smaller than a line."""
    return [size + 1, size // 2 + 1, size // 3, size // 7, 97, 13, 5, 1]


def test_jsonl_pieces_split_at_line_starts(tmp_path):
    rng = random.Random(0)
    lines = []
    for i in range(60):
        if i % 17 == 5:
            lines.append(b"")  # blank lines are skipped, but counted
        elif i % 19 == 7:
            lines.append(b'{"text": "broken')
        elif i % 23 == 11:
            lines.append(b'{"text": "bad \xff byte"}')
        else:
            text = " ".join(rng.choice(["Wort", "Satz", "ä", "über", "x" * rng.randrange(1, 40)]) for _ in range(rng.randrange(1, 30)))
            lines.append(json.dumps({"text": text, "url": f"https://e.de/{i}"}, ensure_ascii=False).encode())
    path = tmp_path / "a.jsonl"
    path.write_bytes(b"\n".join(lines))  # no newline at the end
    src = source("jsonl", str(path))
    files, _ = list_files(src, "de")
    whole = read_all(src, split_files(files, 10**9))
    assert sum(k == "doc" for k, *_ in whole) > 40 and {r for k, _, r in whole if k == "problem"} == {"malformed_json", "invalid_utf8"}
    for max_bytes in cuts(files[0].size):
        assert read_all(src, split_files(files, max_bytes)) == whole, max_bytes


def test_jsonl_lines_read_as_pythons_json_reads_them(tmp_path):
    """The fast parser (orjson) must not change a document: lines only Python's json accepts (NaN, a lone
    surrogate, 1e400) still parse, and an id beyond 64 bits keeps its digits instead of becoming a float."""
    lines = [
        b'{"text": "eins", "id": 123456789012345678901234567890}',
        b'{"text": "zwei", "id": 7, "score": NaN}',
        b'{"text": "drei \\ud800 x", "id": "a"}',
        b'{"text": "vier", "id": 1.5, "big": 1e400}',
        b'{"text": "f\\u00fcnf", "id": -3, "nested": {"x": [1, 2.5]}}',
        '{"text": "sechs ü €", "url": "https://e.de/ü"}'.encode(),
        b'["not", "an", "object"]',
        b'\xef\xbb\xbf{"text": "bom"}',
    ]
    path = tmp_path / "a.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    src = source("jsonl", str(path), id_field="id", url_field="url")
    files, _ = list_files(src, "de")
    got = [(d.index, d.text, d.source_doc_id, d.url) if isinstance(d, RawDoc) else (d.line, d.reason)
           for d in read_piece(src, "de", split_files(files, 10**9)[0])]
    want = []
    for n, raw in enumerate(lines, start=1):
        try:
            obj = json.loads(raw.decode("utf-8"))
        except ValueError:
            want.append((n, "malformed_json"))
            continue
        if not isinstance(obj, dict):
            want.append((n, "malformed_json"))
            continue
        text = "".join(c for c in obj["text"] if not 0xD800 <= ord(c) <= 0xDFFF)  # no UTF-8 writer takes one
        want.append((n, text, None if obj.get("id") is None else str(obj["id"]), obj.get("url")))
    assert got == want
    assert got[0][2] == "123456789012345678901234567890" and got[2][1] == "drei  x"


def whole_file_reference(data: bytes, unit: str) -> list[tuple]:
    """The reader of whole files the pieces replaced (one split of the file's bytes)."""
    lines = data.split(b"\n")
    if unit == "line":
        return [("doc", n, raw.decode()) for n, raw in enumerate(lines, start=1) if raw.strip()]
    out, start, buf = [], 1, []
    for n, raw in enumerate(lines + [b""], start=1):
        if raw.strip():
            start = start if buf else n
            buf.append(raw)
        elif buf:
            out.append(("doc", start, b"\n".join(buf).decode()))
            buf = []
    return out


@pytest.mark.parametrize("unit", ["line", "paragraph"])
def test_text_pieces_split_at_line_and_paragraph_starts(tmp_path, unit):
    rng = random.Random(1)
    chunks = []
    for i in range(40):
        para = "\n".join(" ".join(rng.choice(["ein", "Absatz", "é", "Zeile"]) for _ in range(rng.randrange(1, 12)))
                         for _ in range(rng.randrange(1, 5)))
        chunks.append(para + rng.choice(["\n\n", "\n \n", "\n\t\n\n", "\r\n\r\n"]))
    path = tmp_path / "t.txt"
    path.write_text("\n\n" + "".join(chunks), encoding="utf-8")
    src = source("text", str(path), text_unit=unit)
    files, _ = list_files(src, "de")
    whole = read_all(src, split_files(files, 10**9))
    assert whole == whole_file_reference(path.read_bytes(), unit) and len(whole) >= 40
    for max_bytes in cuts(files[0].size):
        assert read_all(src, split_files(files, max_bytes)) == whole, max_bytes


def test_parquet_pieces_split_by_row_groups(tmp_path):
    path = tmp_path / "p.parquet"
    pq.write_table(pa.table({"text": [f"doc {i}" for i in range(50)]}), path, row_group_size=6)
    src = source("parquet", str(path))
    files, _ = list_files(src, "de")
    whole = read_all(src, split_files(files, 10**9))
    assert [i for _, i, _ in whole] == list(range(1, 51))
    for max_bytes in cuts(files[0].size):
        assert read_all(src, split_files(files, max_bytes)) == whole, max_bytes
    (tmp_path / "bad.parquet").write_bytes(path.read_bytes()[:200])  # a damaged file is reported once, by piece 0
    bad = source("parquet", str(tmp_path / "bad.parquet"))
    assert read_all(bad, split_files(list_files(bad, "de")[0], 50)) == [("problem", None, "unreadable_parquet")]


def test_compressed_and_one_document_files_are_never_split(tmp_path):
    with gzip.open(tmp_path / "a.jsonl.gz", "wt", encoding="utf-8") as f:
        f.write("".join(json.dumps({"text": f"doc {i}"}) + "\n" for i in range(30)))
    gz = source("jsonl", str(tmp_path / "*.jsonl.gz"))
    (pieces,) = [split_files(list_files(gz, "de")[0], 10)]
    assert len(pieces) == 1 and [i for _, i, _ in read_all(gz, pieces)] == list(range(1, 31))
    (tmp_path / "one.txt").write_text("a whole file\nis one document\n" * 50)
    doc = source("text", str(tmp_path / "one.txt"), text_unit="file")
    assert len(split_files(list_files(doc, "de")[0], 10)) == 1


def test_units_pack_small_files_and_split_large_ones():
    files = [InputFile(f"f{i}", f"f{i}", size, "jsonl") for i, size in enumerate([10, 10, 10, 95, 10, 10])]
    units = _pack(split_files(files, 40), 40, 2)
    assert [[(p.ref, p.part) for p in u] for u in units] == [
        [("f0", 0), ("f1", 0)], [("f2", 0)], [("f3", 0)], [("f3", 1)], [("f3", 2)], [("f4", 0), ("f5", 0)]]
    assert all(sum(p.bytes for p in u) <= 40 for u in units)
    assert sum(p.bytes for u in units for p in u) == 145


def test_a_documents_unit_streams_in_bounded_batches(tmp_path, monkeypatch):
    """The unit's peak memory is its batch, not its size: 4x the documents, about the same peak."""
    import tracemalloc

    from stages.ingest import process
    from stages.ingest.config import IngestConfig

    from stages.ingest import minhash

    monkeypatch.setattr(process, "BATCH_DOCS", 200)  # with 10**6 (everything in one batch) the peak grows 7x
    monkeypatch.setattr(minhash, "_CHUNK_ELEMENTS", 1 << 16)  # the signature's fixed scratch space, made small
    rng = random.Random(3)
    words = "der die das und ist nicht ein eine zu mit auf für von dem den sich des im".split() + [f"w{i}" for i in range(3000)]
    settings = IngestConfig.model_validate({"langid": {"min_score": 0.0, "reject_mismatch": False}, "quality": {"min_words": 5}})
    peaks = {}
    for n in (100, 500, 4000):  # the first run loads the chain's tables (language ID, suffix list): not counted
        path = tmp_path / f"{n}.jsonl"
        path.write_text("".join(json.dumps({"text": " ".join(rng.choices(words, k=80)) + "."}) + "\n" for _ in range(n)))
        src = source("jsonl", str(path))
        out = tmp_path / f"out{n}"
        out.mkdir()
        if n > 100:
            tracemalloc.start()
        try:
            stats, _ = process.process_unit(settings, src, "de", split_files(list_files(src, "de")[0], 10**9), out)
            peaks[n] = tracemalloc.get_traced_memory()[1] if n > 100 else 0
        finally:
            tracemalloc.stop()
        assert stats.docs_in == n and pq.ParquetFile(out / "kept.parquet").metadata.num_rows == stats.kept > 0.8 * n
    assert peaks[4000] < 1.5 * peaks[500], peaks
