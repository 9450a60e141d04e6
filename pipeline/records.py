"""Typed records: the statistics a stage writes into its manifest, as one pydantic model per stage.

Why: the manifests are the contract between stages (the compliance documents are written from them). A plain
dict lets a renamed field silently become an "open item" in an EU AI Act document; a model makes the producer
fill every field and makes the consumer's load fail loudly, naming the field, when a manifest does not match
(written by another version of the stage). Each stage declares its model in `stages/<stage>/record.py`
(pipeline/registry.py names it); docs/records.md is generated from them (`python -m pipeline.records_reference`).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.fields import FieldInfo

from pipeline.manifest import MANIFEST_NAME, Manifest
from pipeline.rundir import RunDir
from pipeline.stage import StageError


class Record(BaseModel):
    """Base of every stage record: unknown fields are errors (a rename shows on both sides)."""

    model_config = ConfigDict(extra="forbid")


DECLARED = "declared_in"


def declared(config_key: str, description: str | None = None, **field_kwargs: Any) -> Any:
    """A record field that copies a declaration of the run config (a licence, a collection date): the stage records
    what it was told, not what it observed.

    Why marked: the compliance documents must tell evidence from declarations; a value the pipeline cannot verify
    is cited by its config key, never as a record. `config_key` may hold `{key}`, the key of the table of
    tables the field's record sits in (e.g. the source's name); nested fields add `.<field>`.
    """
    extra = {DECLARED: config_key}
    return Field(description=description, json_schema_extra=extra, **field_kwargs)


def declared_in(field: FieldInfo) -> str | None:
    """The config key a `declared` field copies, or None for a field the stage measured or derived."""
    extra = field.json_schema_extra
    return extra.get(DECLARED) if isinstance(extra, dict) else None


class RecordError(StageError):
    """A manifest whose statistics do not match the record model of this version of its stage."""

    exit_code = 2


def load_record(run_dir: RunDir, stage: str, manifest: Manifest, consumer: str) -> Record:
    """The typed statistics of `stage`'s published manifest, for `consumer`; RecordError names the field."""
    from pipeline.registry import record_model

    model = record_model(stage)
    try:
        return model.model_validate(manifest.statistics)
    except ValidationError as e:
        err = e.errors()[0]
        where = ".".join(str(p) for p in ("statistics", *err["loc"]))
        more = f" (and {e.error_count() - 1} more)" if e.error_count() > 1 else ""
        raise RecordError(
            f"stage {consumer}: {run_dir.stage_dir(stage) / MANIFEST_NAME}: {where}: {err['msg']}{more}; the record was "
            f"written by another version of the {stage} stage: rerun it (europa stage {stage} --force "
            f"--run-dir {run_dir.path})") from None
