"""Each kept document carries the size of its duplicate cluster: itself and the documents dropped as its exact or
near duplicates (the published rejected rows whose duplicate_of is its id), under both rules and in rounds."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from tests.ingest.test_components_in_the_stage import LANGS, config
from tests.ingest.test_ingest_stage import read_lang, run_ingest


def with_exact_copies(cfg: Path, copies: int = 3) -> None:
    """Add `copies` exact copies of the first chain's first document to each language's first file."""
    folder = cfg.parent / "in"
    for lang in LANGS:
        first = folder / lang / "0.jsonl"
        line = first.read_text(encoding="utf-8").splitlines()[0]
        (folder / lang / "9.jsonl").write_text((line + "\n") * copies, encoding="utf-8")


def sizes_match_the_rejected_rows(run_dir: Path) -> dict[str, list[int]]:
    out = {}
    for lang in LANGS:
        kept, rejected = read_lang(run_dir, lang), read_lang(run_dir, lang, "rejected")
        dropped_for = Counter(r["duplicate_of"] for r in rejected if r["reason"] in ("exact_duplicate", "near_duplicate"))
        assert all(r["cluster_size"] == 1 + dropped_for.get(r["id"], 0) for r in kept), lang
        out[lang] = sorted(r["cluster_size"] for r in kept)
    return out


@pytest.mark.parametrize("dedup", [{"rule": "components"}, {"rule": "greedy"}, {"cluster_unit_pairs": 0}],
                         ids=["components", "greedy", "rounds"])
def test_cluster_size_is_the_document_and_what_was_dropped_for_it(tmp_path, udhr_dir, dedup):
    cfg = config(tmp_path, udhr_dir, partition_docs=5, **dedup)
    with_exact_copies(cfg)
    assert run_ingest(cfg, tmp_path / "run") == 0
    sizes = sizes_match_the_rejected_rows(tmp_path / "run")
    for lang in LANGS:
        if dedup.get("rule") == "greedy":
            assert sum(sizes[lang]) == 28 + 3 and max(sizes[lang]) > 1  # every document counted once
        else:  # four chains of 7; the first chain's first document has its 3 exact copies too
            assert sizes[lang] == [7, 7, 7, 10], sizes


def test_without_dedup_every_document_is_its_own_cluster(tmp_path, udhr_dir):
    cfg = config(tmp_path, udhr_dir, near=False, exact=False)
    assert run_ingest(cfg, tmp_path / "run") == 0
    for lang in LANGS:
        rows = read_lang(tmp_path / "run", lang)
        assert len(rows) == 28 and {r["cluster_size"] for r in rows} == {1}
    assert json.loads((tmp_path / "run" / "ingest" / "manifest.json").read_text())["status"] == "complete"
