"""`manifest.json`: what a stage did, written by the stage and read by status, lineage and compliance.

The manifest is the record: every figure in the compliance documents must come from one. It is therefore
plain JSON with a fixed top-level shape; stage-specific detail goes under `statistics`. It carries a digest of
its own content (`content_digest`), so a manifest edited by hand, or cut short, is a damaged stage that the
next run rebuilds, never a record the documents cite.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pipeline.errors import EuropaError
from pipeline.fsutil import sha256_files
from pipeline.secrets import redact

MANIFEST_NAME = "manifest.json"
MANIFEST_SCHEMA_VERSION = 2  # 2: content_digest, required


class ManifestDamaged(EuropaError, ValueError):
    """A published manifest.json that cannot be read, or whose content is not what was published: its stage is
    damaged (`europa status` says so; `europa run` rebuilds it)."""

    def __init__(self, path: Path, why: str):
        self.path, self.why = path, why
        super().__init__(f"{path}: {why}; `europa run` rebuilds the stage")


@dataclass
class OutputFile:
    path: str  # relative to the stage folder
    sha256: str
    bytes: int
    rows: int | None = None
    tokens: int | None = None


@dataclass
class Manifest:
    stage: str
    status: str  # "complete" (a published stage is always complete; failures live in .state/)
    fingerprint: str
    output_digest: str  # hash over the outputs' checksums: what downstream fingerprints consume
    config: dict[str, Any]
    upstream: dict[str, dict[str, str]]  # stage -> {"fingerprint", "output_digest"}
    code_version: str
    package_version: str
    git_commit: str | None
    started_at: str
    finished_at: str
    duration_s: float
    outputs: list[OutputFile]
    statistics: dict[str, Any] = field(default_factory=dict)
    skipped: list[dict[str, Any]] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)  # a few key counts for `europa status`
    retries: dict[str, int] = field(default_factory=dict)  # step/unit -> transient failures tried again
    schema_version: int = MANIFEST_SCHEMA_VERSION
    content_digest: str = ""  # sha256 of everything above (sorted keys); set by to_json

    def to_json(self) -> str:
        data = redact(asdict(self))
        data["content_digest"] = content_digest(data)
        return json.dumps(data, indent=2, ensure_ascii=False, sort_keys=False) + "\n"

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Manifest:
        data = dict(data)
        data["outputs"] = [OutputFile(**o) for o in data.get("outputs", [])]
        return cls(**data)


def content_digest(data: dict[str, Any]) -> str:
    return digest({k: v for k, v in data.items() if k != "content_digest"})


def read_manifest(stage_dir: Path) -> Manifest | None:
    """The stage's published manifest, None when there is none; ManifestDamaged when it is cut short, not a
    manifest, or not the content that was published (a manifest of schema 1, from before the digest, is read
    as it is)."""
    path = stage_dir / MANIFEST_NAME
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as e:
        raise ManifestDamaged(path, f"unreadable manifest ({e})") from None
    try:
        data = json.loads(text)
        manifest = Manifest.from_dict(data)
    except (ValueError, TypeError, AttributeError) as e:
        raise ManifestDamaged(path, f"unreadable manifest ({type(e).__name__}: {e})") from None
    if manifest.schema_version >= 2 and data.get("content_digest") != content_digest(data):
        raise ManifestDamaged(path, "edited after it was published (its content_digest does not match its content)")
    return manifest


def describe_outputs(stage_dir: Path, rows: dict[str, int] | None = None, tokens: dict[str, int] | None = None,
                     known: dict[str, str] | None = None) -> list[OutputFile]:
    """Checksum every file under the stage folder (except the manifest itself), in a stable order.

    `known` (path relative to the folder -> sha256) are checksums the stage computed while writing: the
    pretrain stage checksums its final checkpoint for its statistics, terabytes at scale, not to be read twice.
    """
    rows, tokens, known = rows or {}, tokens or {}, known or {}
    rels = {p: p.relative_to(stage_dir).as_posix() for p in sorted(stage_dir.rglob("*"))
            if p.is_file() and p.name != MANIFEST_NAME}
    todo = [p for p, rel in rels.items() if rel not in known]
    computed = dict(zip(todo, sha256_files(todo)))
    return [OutputFile(rel, known.get(rel) or computed[p], p.stat().st_size, rows.get(rel), tokens.get(rel))
            for p, rel in rels.items()]


def digest(obj: Any) -> str:
    """A stable sha256 of a JSON-able object (sorted keys), used for fingerprints and output digests."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True, ensure_ascii=False, default=str).encode()).hexdigest()


def output_digest(outputs: list[OutputFile]) -> str:
    return digest([(o.path, o.sha256) for o in outputs])
