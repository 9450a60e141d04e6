"""Facts: a value together with the record it came from, or the note of what is missing.

Why: a figure in the compliance documents that no record holds is a defect (DESIGN.md section 3). So no
document module touches a manifest or a setting directly; it asks `Records` for a `Fact`, which carries the
manifest field or config key it was read from (its provenance) and how it was derived. A value that nothing
provides stays open (value None) and names what would provide it; the renderers print it as open and list it
in open_items.md instead of inventing a value.

The records are the stages' typed records (stages/<stage>/record.py), validated when loaded: a stage that has
not run, an optional field that is absent, or a value the secrets filter masked ("***") give an open fact; a
field the code asks for that the record model does not have is an error (Traced), so a rename is never silent.
"""

from __future__ import annotations

import types
import typing
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from pydantic import BaseModel

from pipeline.manifest import MANIFEST_NAME, Manifest
from pipeline.records import declared_in, load_record
from pipeline.rundir import RunDir
from pipeline.secrets import MASK
from stages.compliance import release
from stages.compliance.config import ComplianceConfig
from stages.compliance.release import ReleasedExport

if TYPE_CHECKING:
    from pipeline.stage import StageContext

DECLARED_PREFIX = "run config "  # a source that is a declaration: a config key, not a record
RECORD_STAGES: tuple[str, ...] = ("ingest", "tokenizer", "shards", "pretrain", "evaluate")


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

    @property
    def kind(self) -> str:
        """measured, declared, fixed, or "measured and declared" when derived from both (see source_kind)."""
        kinds = sorted({source_kind(s) for s in self.sources} - {FIXED})
        return " and ".join(kinds) if kinds else FIXED


MEASURED, DECLARED, FIXED, PROJECTED = "measured", "declared", "fixed", "projected"
PROJECTED_PREFIX = "projected "  # stages/compliance/projected.py: origin


def source_kind(source: str) -> str:
    """Evidence or declaration: `measured` cites a stage's record (what the run did, written by the stage that did
    it), `declared` a key of the run config (what a person states and the pipeline cannot check), `projected` the
    planner's estimate before training (`--projected`), `fixed` the pipeline's code or the text of the law."""
    if source.startswith(DECLARED_PREFIX):
        return DECLARED
    if source.startswith(PROJECTED_PREFIX):
        return PROJECTED
    if f"/{MANIFEST_NAME}: " in source or source.endswith(f"/{release.SHA256SUMS}"):
        return MEASURED
    return FIXED


def labelled(source: str) -> str:
    """A source as the documents print it: with its kind in front."""
    return f"{source_kind(source)}: {source}"


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


class Traced:
    """A field of a stage's typed record, with where it was read.

    `rec.pretrain.training.wall_time_s` walks the record the way the code reads it; every attribute is checked
    against the record model (stages/<stage>/record.py) even when the stage has not run, so a renamed field
    fails here, loudly, instead of becoming an open item. `.fact(fmt)` turns it into a Fact whose source names
    the manifest field; `.value` is the typed value for computing with (None when absent).
    """

    __slots__ = ("_stage", "_type", "_value", "_path", "_found", "_stage_present", "_declared", "_origin")

    def __init__(self, stage: str, tp: Any, value: Any, path: tuple[str, ...], found: bool, stage_present: bool,
                 declared: str | None = None, origin: str | None = None):
        self._stage, self._type, self._value, self._path = stage, tp, value, path
        self._found, self._stage_present = found, stage_present
        self._declared = declared  # the config key a declared field copies (pipeline/records.py: declared)
        self._origin = origin or f"{stage}/{MANIFEST_NAME}"  # the record's file, or a projection (projected.py)

    def __getattr__(self, name: str) -> Traced:
        if name.startswith("_"):
            raise AttributeError(name)
        model = _unwrap(self._type)
        if not (isinstance(model, type) and issubclass(model, BaseModel)):
            raise AttributeError(f"{self.where} is a {_type_name(self._type)}, not a table with field {name!r}")
        if name not in model.model_fields:
            raise AttributeError(f"{model.__name__} (stages/{self._stage}/record.py) has no field {name!r}")
        # getattr with a default: a projected record (model_construct) leaves unknown fields absent
        value = getattr(self._value, name, None) if self._found and self._value is not None else None
        key = declared_in(model.model_fields[name])
        declared = (f"{self._declared}.{name}" if self._declared else
                    key.format(key=self._path[-1] if self._path else "") if key else None)
        return Traced(self._stage, model.model_fields[name].annotation, value, self._path + (name,),
                      self._found and self._value is not None, self._stage_present, declared, self._origin)

    def __getitem__(self, key: str | int) -> Traced:
        tp = _unwrap(self._type)
        origin, args = typing.get_origin(tp), typing.get_args(tp)
        if origin not in (dict, list) or not args:
            raise TypeError(f"{self.where} is a {_type_name(self._type)}: it has no entries to index by {key!r}")
        value = self._value
        found = self._found and (key in value if isinstance(value, dict) else
                                 isinstance(value, list) and isinstance(key, int) and 0 <= key < len(value))
        return Traced(self._stage, args[-1], value[key] if found else None, self._path + (str(key),), found,
                      self._stage_present, self._declared, self._origin)

    def keys(self) -> list[str]:
        return list(self._value) if self._found and isinstance(self._value, dict) else []

    def items(self) -> list[tuple[str, Traced]]:
        return [(k, self[k]) for k in self.keys()]

    @property
    def value(self) -> Any:
        return self._value if self._found else None

    @property
    def where(self) -> str:
        return f"{self._origin}: " + ".".join(("statistics",) + self._path)

    def fact(self, fmt: Callable[[Any], str] = show) -> Fact:
        """The field as a fact; open (naming the field) when the stage did not run, or the field is absent or masked."""
        if not self._stage_present:
            return open_fact(f"the {self._stage} stage's record ({self._stage}/{MANIFEST_NAME}): run the {self._stage} stage")
        if self.value is None:
            return open_fact(f"{self.where} (absent in the record)")
        if self.value == MASK:
            return open_fact(f"{self.where} (masked by the secrets filter (a key name that looks secret) in the record)")
        value = _plain(self.value)
        return Fact(value, fmt(value), (self.cited,))

    @property
    def cited(self) -> str:
        """What a document cites for this field: the manifest field, or for a declaration the run config's key
        (the manifest only copies it; citing the copy would present a declaration as evidence)."""
        return f"{DECLARED_PREFIX}{self._declared}" if self._declared else self.where


def _unwrap(tp: Any) -> Any:
    """X for `X | None`."""
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        rest = [a for a in typing.get_args(tp) if a is not type(None)]
        return rest[0] if len(rest) == 1 else tp
    return tp


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", str(tp))


def _plain(value: Any) -> Any:
    """JSON-able: what a Fact carries into provenance.json."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


@dataclass
class Records:
    """The run's typed records and the [compliance] settings, read only through facts."""

    run_dir: RunDir
    settings: ComplianceConfig
    manifests: dict[str, Manifest | None] = field(default_factory=dict)
    records: dict[str, BaseModel | None] = field(default_factory=dict)
    export: ReleasedExport | None = None  # the released Hugging Face export, when declared and written
    origins: dict[str, str] = field(default_factory=dict)  # stage -> what its record is, when not its manifest
    projected: bool = False  # written before training from the plan (projected.py)

    @classmethod
    def load(cls, run_dir: RunDir, settings: ComplianceConfig) -> Records:
        """From a run directory's published manifests (a stage that has not run is absent; one whose record does
        not match its model fails, naming the field)."""
        manifests = {stage: run_dir.manifest(stage) for stage in RECORD_STAGES}
        records = {stage: load_record(run_dir, stage, m, "compliance") if m is not None else None
                   for stage, m in manifests.items()}
        return cls(run_dir, settings, manifests, records,
                   release.load(run_dir, settings.model.release_export, records.get("pretrain")))

    @classmethod
    def from_context(cls, ctx: StageContext[ComplianceConfig]) -> Records:
        """From the stage's context: the upstream manifests and records the executor loaded and validated."""
        return cls(ctx.run_dir, ctx.settings, {s: ctx.upstream.get(s) for s in RECORD_STAGES},
                   {s: ctx.records.get(s) for s in RECORD_STAGES},
                   release.load(ctx.run_dir, ctx.settings.model.release_export, ctx.records.get("pretrain")))

    @classmethod
    def projected_from(cls, run_dir: RunDir, config: Any, settings: ComplianceConfig, config_path: str) -> Records:
        """Before training: the pretrain record as the planner projects it from `config`; no other record."""
        from pipeline.registry import projected_record
        from stages.compliance.projected import origin

        record, band = projected_record("pretrain", config)
        records: dict[str, BaseModel | None] = {s: None for s in RECORD_STAGES}
        records["pretrain"] = record
        return cls(run_dir, settings, {s: None for s in RECORD_STAGES}, records, None,
                   {"pretrain": origin(config_path, band)}, True)

    # --- records ------------------------------------------------------------------------------------
    def has(self, stage: str) -> bool:
        return self.records.get(stage) is not None

    def record(self, stage: str) -> Traced:
        from pipeline.registry import record_model

        value = self.records.get(stage)
        return Traced(stage, record_model(stage), value, (), value is not None, value is not None,
                      origin=self.origins.get(stage))

    @property
    def ingest(self) -> Traced:
        return self.record("ingest")

    @property
    def tokenizer(self) -> Traced:
        return self.record("tokenizer")

    @property
    def shards(self) -> Traced:
        return self.record("shards")

    @property
    def pretrain(self) -> Traced:
        return self.record("pretrain")

    @property
    def evaluate(self) -> Traced:
        return self.record("evaluate")

    def manifest_field(self, stage: str, key: str, fmt: Callable[[Any], str] = show) -> Fact:
        """A top-level manifest field (pipeline/manifest.py: e.g. package_version), or a setting the stage ran with
        (`config.<key>`: the stage's config section as its manifest recorded it)."""
        m = self.manifests.get(stage)
        where = f"{stage}/{MANIFEST_NAME}: {key}"
        if m is None:
            return open_fact(f"the {stage} stage's record ({stage}/{MANIFEST_NAME}): run the {stage} stage")
        head, *rest = key.split(".")
        value: Any = getattr(m, head)  # AttributeError for a field the manifest does not have
        for k in rest:
            value = value.get(k) if isinstance(value, dict) else None
        if value is None or value == MASK:
            return open_fact(f"{where} (absent in the record)")
        return Fact(value, fmt(value), (where,))

    def record_summary(self) -> dict[str, Any]:
        """Which record each document was generated from: enough to find and verify it."""
        from pipeline.fsutil import sha256_file

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
        return Fact(at[:10], at[:10], (f"{stage}/{MANIFEST_NAME}: finished_at",), "the newest finished_at of the records")

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


