"""ingest/report.md + report.png: the report a person reads, with real examples of what each filter removed,
and the last console lines of a stage that skipped input say what and why."""

from __future__ import annotations

import json
import textwrap

from pipeline.cli import main
from tests.conftest import udhr_source, write_config


def test_report_lists_every_language_filter_and_examples_of_removed_documents(tmp_path, udhr_dir, capsys):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    good = ("Am Montag regnete es in Hamburg den ganzen Tag, deshalb blieben die meisten Leute zu Hause und lasen "
            "Zeitung. Erst am Abend zeigte sich kurz die Sonne über dem Hafen, und einige Spaziergänger kamen heraus.")
    lines = [json.dumps({"text": good}), json.dumps({"text": good}),  # an exact duplicate
             json.dumps({"text": "zu kurz"}), "{not json"]
    (corpus / "de.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    body = udhr_source(udhr_dir) + textwrap.dedent(f"""
    [[ingest.sources]]
    name = "local"
    kind = "jsonl"
    path = "{corpus}/{{lang}}.jsonl"
    licence = "test"
    collected = "2026-01"
    languages = ["de"]
    """)
    cfg = write_config(tmp_path, body, languages='["de", "mt"]')
    assert main(["stage", "ingest", "--config", str(cfg), "--run-dir", str(tmp_path / "run")]) == 0
    err = capsys.readouterr().err.splitlines()
    assert any("skipped 1 input(s)" in line and "malformed_json" in line and "de.jsonl:4" in line for line in err[-3:])
    report = (tmp_path / "run" / "ingest" / "report.md").read_text()
    assert "| de | German |" in report and "| mt | Maltese |" in report
    assert "### exact_duplicate (1 removed)" in report and "### too_few_words" in report and "zu kurz" in report, \
        [line for line in report.splitlines() if line.startswith("###")]
    assert "| tdm_opt_out | 0 |" in report  # every filter, zeros included
    png = (tmp_path / "run" / "ingest" / "report.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000
