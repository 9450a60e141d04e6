"""docs/records.md (the manifest contract) is generated from the stages' record models and must not drift."""

from __future__ import annotations

from pipeline.records_reference import GENERATOR, OUTPUT, render
from pipeline.registry import STAGE_NAMES


def test_committed_records_reference_is_current():
    current = OUTPUT.read_text(encoding="utf-8") if OUTPUT.exists() else ""
    assert current == render(), (
        f"{OUTPUT.relative_to(OUTPUT.parents[1])} is out of date with the record models (a field or description "
        f"changed). Regenerate it with `.venv/bin/{GENERATOR}` and commit the result with your change.")


def test_reference_covers_every_stage_and_nested_table():
    text = render()
    for name in STAGE_NAMES:
        assert f"## {name}\n" in text
    assert "### `statistics.per_source.<key>`" in text and "### `statistics.checkpoint.files[]`" in text
    assert "| `not_counted` | string, optional (may be absent) |" in text
