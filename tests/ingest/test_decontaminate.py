"""[[ingest.decontaminate]]: a document sharing a word 13-gram with a declared evaluation set's line is removed
with reason evaluation_overlap and counted; the others are kept; a set that is not there is exit 2."""

from __future__ import annotations

import json
import textwrap

from pipeline.languages import language
from tests.conftest import udhr_source, write_config
from tests.ingest.test_ingest_stage import read_lang, run_ingest, udhr_docs

LANGS = ["de", "fi"]


def test_documents_overlapping_an_evaluation_set_are_removed_and_counted(tmp_path, udhr_dir):
    de = sorted((t for t in udhr_docs(udhr_dir, "de") if len(t.split()) >= 40), key=len)[-1]
    evals = tmp_path / "evalset"
    evals.mkdir()
    # one German evaluation line copies 15 words of an article; Finnish has no file (not checked)
    (evals / f"{language('de').flores}.devtest").write_text(" ".join(de.split()[5:20]) + "\nEin ganz anderer Satz.\n",
                                                          encoding="utf-8")
    body = udhr_source(udhr_dir) + textwrap.dedent(f"""
        [[ingest.decontaminate]]
        name = "mini"
        path = "{evals}"
        """)
    (tmp_path / "base").mkdir()
    base = write_config(tmp_path / "base", udhr_source(udhr_dir), languages=json.dumps(LANGS))
    cfg = write_config(tmp_path, body, languages=json.dumps(LANGS))
    assert run_ingest(base, tmp_path / "base-run") == 0
    assert run_ingest(cfg, tmp_path / "run") == 0
    before, after = read_lang(tmp_path / "base-run", "de"), read_lang(tmp_path / "run", "de")
    removed = [r for r in read_lang(tmp_path / "run", "de", "rejected") if r["reason"] == "evaluation_overlap"]
    span = " ".join(de.split()[5:20])
    assert len(removed) == 1 and span in " ".join(removed[0]["text"].split())
    assert len(after) == len(before) - 1 and not [r for r in after if span in " ".join(r["text"].split())]
    assert len(read_lang(tmp_path / "run", "fi")) == len(read_lang(tmp_path / "base-run", "fi"))
    stats = json.loads((tmp_path / "run" / "ingest" / "manifest.json").read_text())["statistics"]
    assert stats["per_filter"]["evaluation_overlap"] == 1


def test_an_evaluation_set_that_is_not_there_is_one_line_and_exit_2(tmp_path, udhr_dir, capsys):
    body = udhr_source(udhr_dir) + textwrap.dedent(f"""
        [[ingest.decontaminate]]
        name = "mini"
        path = "{tmp_path / 'absent'}"
        """)
    cfg = write_config(tmp_path, body, languages=json.dumps(LANGS))
    assert run_ingest(cfg, tmp_path / "run") == 2
    assert "[[ingest.decontaminate]] 'mini': path" in capsys.readouterr().err
    (tmp_path / "absent").mkdir()
    assert run_ingest(cfg, tmp_path / "run") == 2
    assert "no file matches pattern '{flores}.devtest'" in capsys.readouterr().err


def test_an_evaluation_file_that_is_not_utf8_is_one_line_and_exit_2(tmp_path, udhr_dir, capsys):
    evals = tmp_path / "evalset"
    evals.mkdir()
    (evals / f"{language('de').flores}.devtest").write_bytes(b"Ein Satz \xff\xfe kaputt.\n")
    body = udhr_source(udhr_dir) + textwrap.dedent(f"""
        [[ingest.decontaminate]]
        name = "mini"
        path = "{evals}"
        """)
    cfg = write_config(tmp_path, body, languages=json.dumps(LANGS))
    assert run_ingest(cfg, tmp_path / "run") == 2
    err = capsys.readouterr().err
    assert "[[ingest.decontaminate]] 'mini':" in err and "is not UTF-8 text (byte 9); convert it to UTF-8" in err
