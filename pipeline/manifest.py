"""`manifest.json`: what a stage did, written by the stage and read by status, lineage and compliance.

The manifest is the record: every figure in the compliance documents must come from one. It is therefore
plain JSON with a fixed top-level shape; stage-specific detail goes under `statistics`.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pipeline.fsutil import sha256_files
from pipeline.secrets import redact

MANIFEST_NAME = "manifest.json"
MANIFEST_SCHEMA_VERSION = 1


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

    def to_json(self) -> str:
        return json.dumps(redact(asdict(self)), indent=2, ensure_ascii=False, sort_keys=False) + "\n"

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Manifest:
        data = dict(data)
        data["outputs"] = [OutputFile(**o) for o in data.get("outputs", [])]
        return cls(**data)


def read_manifest(stage_dir: Path) -> Manifest | None:
    path = stage_dir / MANIFEST_NAME
    if not path.exists():
        return None
    try:
        return Manifest.from_dict(json.loads(path.read_text(encoding="utf-8")))
    except (json.JSONDecodeError, TypeError) as e:
        raise ValueError(f"{path}: unreadable manifest ({e}); rerun the stage with --force") from None


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
