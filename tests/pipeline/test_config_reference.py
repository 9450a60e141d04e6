"""docs/configuration.md is generated from the config models and must not drift from them."""

from __future__ import annotations

from pipeline.config_reference import GENERATOR, OUTPUT, render
from pipeline.registry import STAGE_NAMES


def test_committed_configuration_reference_is_current():
    expected = render()
    current = OUTPUT.read_text(encoding="utf-8") if OUTPUT.exists() else ""
    assert current == expected, (
        f"{OUTPUT.relative_to(OUTPUT.parents[1])} is out of date with the config models (a key, default, bound or "
        f"description changed). Regenerate it with `.venv/bin/{GENERATOR}` and commit the result with your change."
    )


def test_reference_covers_every_section_and_nested_table():
    text = render()
    for name in ("run", "orchestration", *STAGE_NAMES):
        assert f"### `[{name}]`" in text or f"The {name} stage is not implemented yet" in text, name
    assert "### `[[ingest.sources]]`" in text and "### `[ingest.quality.per_language.<key>]`" in text
    assert "| `dask_address` | string length >= 1, optional | unset |" in text
    assert "| `name` | string matching `^[A-Za-z0-9_.-]+$` | **required** |" in text  # [[ingest.sources]] name
