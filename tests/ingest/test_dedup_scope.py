"""[ingest.dedup] scope: documents are compared across the sources of a language (the default), within one source,
or within one crawl dump (a source's declared `dump`). The same page in two sources is one document under the
default scope and two under the source scope; under the dump scope it depends on whether the sources hold the
same dump. The record says which scope ran and which groups were deduplicated apart."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import write_config
from tests.ingest.test_bad_inputs_at_plan_time import TOPICS, one_error_line
from tests.ingest.test_ingest_stage import jsonl_source, manifest, read_lang, run_ingest

SHARED = "A page that two crawls both fetched, about {}, long enough that every quality filter here passes it."


def source(name: str, folder: Path, dump: str | None) -> str:
    return jsonl_source(name, f"{folder}/*.jsonl", f'dump = "{dump}"\n' if dump else "")


def write_sources(tmp_path: Path, dumps: tuple[str | None, str | None], scope: str) -> Path:
    """Two sources of four documents each, two of which are in both (the same texts and URLs)."""
    for name, other in (("a", 0), ("b", 1)):
        folder = tmp_path / name
        folder.mkdir(exist_ok=True)
        lines = [{"text": SHARED.format(TOPICS[i]), "url": f"https://example.com/shared/{i}"} for i in range(2)]
        lines += [{"text": f"Only source {name} has this paragraph about {TOPICS[2 + 2 * other + i]}, told at length "
                           "and in plain words.", "url": f"https://example.com/{name}/{i}"} for i in range(2)]
        (folder / "docs.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")
    body = (source("a", tmp_path / "a", dumps[0]) + source("b", tmp_path / "b", dumps[1])
            + f'\n[ingest.dedup]\nscope = "{scope}"\n[ingest.quality]\nmin_words = 5\n')
    return write_config(tmp_path, body, languages='["en"]')


@pytest.mark.parametrize("scope, dumps, kept, groups", [
    ("language", (None, None), 6, ["en"]),
    ("source", (None, None), 8, ["en-a", "en-b"]),
    ("dump", ("CC-MAIN-2024-10", "CC-MAIN-2024-10"), 6, ["en-dump-CC-MAIN-2024-10"]),
    ("dump", ("CC-MAIN-2024-10", "CC-MAIN-2024-18"), 8, ["en-dump-CC-MAIN-2024-10", "en-dump-CC-MAIN-2024-18"]),
])
def test_the_scope_decides_which_documents_are_compared(tmp_path, scope, dumps, kept, groups):
    cfg = write_sources(tmp_path, dumps, scope)
    run_dir = tmp_path / "run"
    assert run_ingest(cfg, run_dir) == 0
    rows = read_lang(run_dir, "en")
    assert len(rows) == kept
    m = manifest(run_dir)
    st = m["statistics"]
    assert (st["dedup_scope"], st["dedup_groups"]) == (scope, {"en": groups})
    assert m["config"]["dedup"]["scope"] == scope
    assert st["per_filter"]["exact_duplicate"] == 8 - kept
    if kept == 6:  # the first occurrence, in unit order (source a before b), is the one kept
        assert sorted(r["source"] for r in rows if "/shared/" in r["url"]) == ["a", "a"]


def test_the_dump_scope_needs_every_sources_dump(tmp_path, capsys):
    cfg = write_sources(tmp_path, ("CC-MAIN-2024-10", None), "dump")
    assert run_ingest(cfg, tmp_path / "run") == 2
    line = one_error_line(capsys)
    assert 'scope = "dump" needs each source\'s dump' in line and "source 'b' has none" in line
    assert 'add dump = "<crawl id>"' in line
