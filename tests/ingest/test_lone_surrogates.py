"""A JSONL line with a lone surrogate escape ("\\ud800") in its text, URL or id, which no UTF-8 writer accepts,
is repaired where it is read (the text loses it, as the normalizer would remove it; a URL or id gets U+FFFD), under
both on_error settings: the run finishes with every document, never a UnicodeEncodeError."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from pipeline.cli import main
from tests.conftest import write_config

TOPICS = ["the weather and the sea", "a market in the old town", "trains that leave at dawn", "a garden in spring",
          "the history of bridges", "music played in small halls"]


def sentence(i: int) -> str:
    """Six texts far apart, so the near-duplicate filter keeps them all."""
    return f"An ordinary English paragraph about {TOPICS[i]}, written plainly so that it passes every filter here."


@pytest.mark.parametrize("on_error", ["skip", "fail"])
def test_lone_surrogates_are_repaired_not_a_crash(tmp_path, on_error):
    lines = [json.dumps({"id": f"d{i}", "text": sentence(i), "url": f"https://example.com/{i}"})
             for i in range(6)]
    lines[1] = json.dumps({"id": "d1", "text": "Broken \ud800 " + sentence(1), "url": "https://example.com/1"})
    lines[2] = json.dumps({"id": "d2\udc00", "text": sentence(2), "url": "https://example.com/\ud800"})
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.jsonl").write_text("\n".join(lines) + "\n", encoding="ascii")  # json.dumps escapes them
    cfg = write_config(tmp_path, f"""
        [ingest]
        on_error = "{on_error}"
        [ingest.quality]
        min_words = 5
        [[ingest.sources]]
        name = "web"
        kind = "jsonl"
        path = "{tmp_path / 'in' / '*.jsonl'}"
        licence = "x"
        category = "public_dataset"
        collected = "2024-05"
        homepage = "https://example.com/"
        domain = "example.com"
        opt_out = {{ protocols = [], honoured_by = "not_applicable", notes = "n" }}
        """, languages='["en"]')
    run = tmp_path / "run"
    assert main(["stage", "ingest", "--config", str(cfg), "--run-dir", str(run)]) == 0
    rows = [r for p in sorted((run / "ingest" / "data" / "en").glob("*.parquet")) for r in pq.read_table(p).to_pylist()]
    assert len(rows) == 6
    by_url = {r["url"]: r for r in rows}
    assert "https://example.com/\ufffd" in by_url and by_url["https://example.com/1"]["text"].startswith("Broken  An ordinary")
