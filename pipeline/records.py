"""Typed records: the statistics a stage writes into its manifest, as one pydantic model per stage.

Why: the manifests are the contract between stages (the compliance documents are written from them). A plain
dict lets a renamed field silently become an "open item" in an EU AI Act document; a model makes the producer
fill every field and makes the consumer's load fail loudly, naming the field, when a manifest does not match
(written by another version of the stage). Each stage declares its model in `stages/<stage>/record.py`
(pipeline/registry.py names it); docs/records.md is generated from them (`python -m pipeline.records_reference`).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, ValidationError

from pipeline.manifest import MANIFEST_NAME, Manifest
from pipeline.rundir import RunDir
from pipeline.stage import StageError


class Record(BaseModel):
    """Base of every stage record: unknown fields are errors (a rename shows on both sides)."""

    model_config = ConfigDict(extra="forbid")


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
