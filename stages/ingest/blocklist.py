"""URL and domain block lists: documents from listed sites are removed at ingest with the reason `blocklist`.

Why: the public summary's section 3.2 asks what was done to remove illegal content (block lists, keywords,
classifiers). FineWeb removed URLs on the UT1 lists (Université Toulouse 1 Capitole, e.g. the "adult" category)
before anything else; this filter does the same with any list given by path, and records per list how many
entries it has and how many documents it removed, so 3.2 reports a measure that ran, not an intention.

A list (`[[ingest.blocklists]]`) is a file with one entry per line (`#` starts a comment), or a UT1 category
folder (its `domains` and `urls` files). An entry with a "/" is a URL, without one a domain. Matching:
- a domain entry blocks the host and every subdomain of it (`example.com` blocks `www.example.com`);
- a URL entry (scheme and a leading "www." ignored, case-insensitive host) blocks that page and the pages
  under it (`example.com/dir` blocks `example.com/dir/page.html`, not `example.com/directory`);
- a document without a URL is checked by the source's `domain` (the same domain the record counts it under).
The first list (in config order) that matches is the one credited with the removal.
"""

from __future__ import annotations

import functools
import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from pydantic import Field, ValidationInfo, field_validator

from pipeline.config import StrictModel, resolve_config_path

UT1_FILES = ("domains", "urls")


class BlocklistConfig(StrictModel):
    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$", description="Short unique name, e.g. ut1-adult; the record counts removals under it.")
    path: str = Field(description="A file (one domain or URL per line) or a UT1 category folder (domains, urls); relative to the config file.")
    description: str | None = Field(None, description="What the list is and which version (e.g. UT1 adult, snapshot 2025-06-01).")

    @field_validator("path")
    @classmethod
    def _resolve(cls, v: str, info: ValidationInfo) -> str:
        return resolve_config_path(v, info)


@dataclass(frozen=True)
class Blocklist:
    name: str
    path: str
    domains: frozenset[str]
    urls: frozenset[str]
    sha256: str  # over the list's files, so the record names the exact version that ran

    @property
    def entries(self) -> int:
        return len(self.domains) + len(self.urls)

    def matches(self, url: str | None, domain: str | None) -> bool:
        if url:
            host, _, path = _strip_url(url).partition("/")
            if any(d in self.domains for d in _suffixes(host)):
                return True
            if self.urls:
                parts = path.split("/") if path else []
                return any("/".join([host, *parts[:i]]) in self.urls for i in range(len(parts) + 1))
            return False
        return bool(domain) and any(d in self.domains for d in _suffixes(domain.lower()))


def list_files(path: str) -> list[Path]:
    """The files a list is read from: the file itself, or a UT1 folder's domains and urls files."""
    p = Path(path)
    if p.is_dir():
        files = [p / f for f in UT1_FILES if (p / f).is_file()]
        if not files:
            raise ValueError(f"block list folder {p} has neither a 'domains' nor a 'urls' file (the UT1 layout)")
        return files
    if not p.is_file():
        raise ValueError(f"block list {p} does not exist; fix [[ingest.blocklists]] path")
    return [p]


def load(cfg: BlocklistConfig) -> Blocklist:
    files = list_files(cfg.path)
    return _load(cfg.name, cfg.path, tuple((str(f), f.stat().st_size, f.stat().st_mtime_ns) for f in files))


@functools.lru_cache(maxsize=16)
def _load(name: str, path: str, stamps: tuple[tuple[str, int, int], ...]) -> Blocklist:
    """Parsed once per process and version of the files (units of one process share it)."""
    domains: set[str] = set()
    urls: set[str] = set()
    h = hashlib.sha256()
    for file, _, _ in stamps:
        data = Path(file).read_bytes()
        h.update(os.path.basename(file).encode() + b"\0" + data)
        for line in data.decode("utf-8", errors="replace").splitlines():
            entry = line.split("#", 1)[0].strip().lower()
            if not entry:
                continue
            if "/" in entry:
                urls.add(_strip_url(entry).rstrip("/"))
            else:
                domains.add(entry.removeprefix("www."))
    return Blocklist(name, path, frozenset(domains), frozenset(urls), h.hexdigest())


def first_match(lists: list[Blocklist], url: str | None, domain: str | None) -> str | None:
    """The name of the first list that blocks the document, or None."""
    for bl in lists:
        if bl.matches(url, domain):
            return bl.name
    return None


def _strip_url(url: str) -> str:
    """host/path without scheme, credentials, port, query, fragment or a leading www.; host lowercased."""
    rest = url.strip().split("://", 1)[-1]
    rest = rest.split("#", 1)[0].split("?", 1)[0]
    host, sep, path = rest.partition("/")
    host = host.rsplit("@", 1)[-1].split(":", 1)[0].lower().removeprefix("www.")
    return host + sep + path


def _suffixes(host: str) -> list[str]:
    """example.com for www.a.example.com and every level between (not the bare public suffix "com")."""
    labels = host.strip(".").split(".")
    return [".".join(labels[i:]) for i in range(len(labels) - 1)] or [host]
