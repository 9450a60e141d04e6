"""Facts: a value together with the record it came from, or the note of what is missing.

Why: a figure in the compliance documents that no record holds is a defect (DESIGN.md section 3). So no
document module touches a manifest or a setting directly; it asks `Records` for a `Fact`, which carries the
manifest field or config key it was read from (its provenance) and how it was derived. A value that nothing
provides stays open (value None) and names what would provide it; the renderers print it as open and list it
in open_items.md instead of inventing a value.

Manifests are read defensively: a stage that is missing, a key that is absent, or a value the secrets filter
masked ("***", e.g. under keys ending in `_token`) all give an open fact, never an exception.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from pipeline.manifest import MANIFEST_NAME, Manifest
from pipeline.rundir import RunDir
from pipeline.secrets import MASK
from stages.compliance.config import ComplianceConfig

RECORD_STAGES: tuple[str, ...] = ("ingest", "tokenizer", "shards", "pretrain", "evaluate")
Path_ = str | tuple[str, ...]


@dataclass(frozen=True)
class Fact:
    value: Any  # the machine value (JSON-able); None = open
    text: str  # how the documents show it
    sources: tuple[str, ...] = ()  # manifest fields / config keys it was read from
    method: str = ""  # how it was derived from the sources, when it is not a plain copy
    needs: tuple[str, ...] = ()  # when open: what would provide it

    @property
    def is_open(self) -> bool:
        return self.value is None


def constant(value: Any, text: str | None = None, *, source: str) -> Fact:
    """A fact fixed by the pipeline's code (e.g. the modality: the pipeline ingests text only)."""
    return Fact(value, text if text is not None else show(value), (source,))


def open_fact(*needs: str) -> Fact:
    return Fact(None, "open", (), "", tuple(needs))


def show(value: Any) -> str:
    """Default display: integers with thousands separators, yes/no, lists joined."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:,.6g}" if abs(value) < 1e15 else f"{value:.3g}"
    if isinstance(value, (list, tuple)):
        return "none" if not value else "; ".join(show(v) for v in value)
    if isinstance(value, dict):
        return "; ".join(f"{k}: {show(v)}" for k, v in value.items())
    return str(value)


def derive(fn: Callable[..., Any], *inputs: Fact, method: str, fmt: Callable[[Any], str] = show) -> Fact:
    """A value computed from other facts; open when any input is open (and then needs what they need)."""
    if any(f.is_open for f in inputs):
        return Fact(None, "open", (), method, tuple(dict.fromkeys(n for f in inputs for n in f.needs)))
    value = fn(*(f.value for f in inputs))
    if value is None:
        return Fact(None, "open", (), method, (f"a record from which to compute: {method}",))
    return Fact(value, fmt(value), tuple(dict.fromkeys(s for f in inputs for s in f.sources)), method)


def first_available(*facts: Fact) -> Fact:
    """The first fact that is not open (e.g. a field, else the same figure derived from others)."""
    for f in facts:
        if not f.is_open:
            return f
    return Fact(None, "open", (), "", tuple(dict.fromkeys(n for f in facts for n in f.needs)))


@dataclass
class Records:
    """The run's manifests and the [compliance] settings, read only through facts."""

    run_dir: RunDir
    settings: ComplianceConfig
    manifests: dict[str, Manifest | None] = field(default_factory=dict)

    @classmethod
    def load(cls, run_dir: RunDir, settings: ComplianceConfig) -> Records:
        manifests: dict[str, Manifest | None] = {}
        for stage in RECORD_STAGES:
            try:
                manifests[stage] = run_dir.manifest(stage)
            except ValueError:  # unreadable manifest: treated as absent, so its figures become open items
                manifests[stage] = None
        return cls(run_dir, settings, manifests)

    # --- manifests ----------------------------------------------------------------------------------
    def has(self, stage: str) -> bool:
        return self.manifests.get(stage) is not None

    def raw(self, stage: str, path: Path_) -> Any:
        """The value at a dotted path (or a tuple of keys, for keys with dots such as domains), else None."""
        m = self.manifests.get(stage)
        if m is None:
            return None
        keys = path.split(".") if isinstance(path, str) else list(path)
        obj: Any = getattr(m, keys[0], None)
        for k in keys[1:]:
            if isinstance(obj, dict):
                obj = obj.get(k)
            elif isinstance(obj, list) and k.isdigit() and int(k) < len(obj):
                obj = obj[int(k)]
            else:
                return None
        return None if obj == MASK else obj

    @staticmethod
    def where(stage: str, path: Path_) -> str:
        dotted = path if isinstance(path, str) else ".".join(path)
        return f"{stage}/{MANIFEST_NAME}: {dotted}"

    def fact(self, stage: str, path: Path_, fmt: Callable[[Any], str] = show, *, kind: type | tuple[type, ...] | None = None) -> Fact:
        """A manifest field as a fact; open (naming the field) when absent, masked or of the wrong type."""
        where = self.where(stage, path)
        m = self.manifests.get(stage)
        if m is None:
            return open_fact(f"the {stage} stage's record ({stage}/{MANIFEST_NAME}): run the {stage} stage")
        value = self.raw(stage, path)
        if value is None:
            masked = self._masked(stage, path)
            why = "masked by the secrets filter (a key name that looks secret)" if masked else "absent"
            return open_fact(f"{where} ({why} in the record)")
        if kind is not None and (not isinstance(value, kind) or isinstance(value, bool) and bool not in _as_tuple(kind)):
            return open_fact(f"{where} (has {value!r}, not a {_type_names(kind)})")
        return Fact(value, fmt(value), (where,))

    def number(self, stage: str, path: Path_, fmt: Callable[[Any], str] = show) -> Fact:
        return self.fact(stage, path, fmt, kind=(int, float))

    def _masked(self, stage: str, path: Path_) -> bool:
        keys = path.split(".") if isinstance(path, str) else list(path)
        parent = self.raw(stage, tuple(keys[:-1])) if len(keys) > 1 else None
        return isinstance(parent, dict) and parent.get(keys[-1]) == MASK

    def record_summary(self) -> dict[str, Any]:
        """Which record each document was generated from: enough to find and verify it."""
        from pipeline.manifest import sha256_file

        out = {}
        for stage, m in self.manifests.items():
            if m is None:
                out[stage] = None
                continue
            out[stage] = {
                "manifest": f"{stage}/{MANIFEST_NAME}",
                "manifest_sha256": sha256_file(self.run_dir.stage_dir(stage) / MANIFEST_NAME),
                "fingerprint": m.fingerprint, "output_digest": m.output_digest, "code_version": m.code_version,
                "git_commit": m.git_commit, "started_at": m.started_at, "finished_at": m.finished_at,
            }
        return out

    def newest_record_date(self) -> Fact:
        """The date of the newest record: the documents' 'last update' (no clock is read, so reruns match)."""
        dated = [(m.finished_at, s) for s, m in self.manifests.items() if m is not None and m.finished_at]
        if not dated:
            return open_fact("any stage manifest (run the pipeline first)")
        at, stage = max(dated)
        return Fact(at[:10], at[:10], (self.where(stage, "finished_at"),), "the newest finished_at of the records")

    # --- settings -----------------------------------------------------------------------------------
    def setting(self, key: str, fmt: Callable[[Any], str] = show, *, why: str = "") -> Fact:
        """A [compliance] setting as a fact, e.g. key "model.licence" -> [compliance.model] licence.

        When it is not set, the open item names the key and the setting's description; `why` says when a
        setting is only needed in some runs (e.g. the crawler's, when a source was crawled); pass the same
        `why` wherever the key is used, so the open item is listed once.
        """
        *tables, name = key.split(".")
        obj: Any = self.settings
        for t in tables:
            obj = getattr(obj, t)
        value = getattr(obj, name)
        where = config_key(key)
        if value is None:
            about = type(obj).model_fields[name].description or ""
            return open_fact(f"set {where} in the run config" + (f" ({why})" if why else "") + (f": {about}" if about else ""))
        return Fact(value, fmt(value), (f"run config {where}",))


def config_key(key: str) -> str:
    *tables, name = key.split(".")
    return f"[{'.'.join(['compliance', *tables])}] {name}"


def _as_tuple(kind: type | tuple[type, ...]) -> tuple[type, ...]:
    return kind if isinstance(kind, tuple) else (kind,)


def _type_names(kind: type | tuple[type, ...]) -> str:
    return " or ".join(k.__name__ for k in _as_tuple(kind))

