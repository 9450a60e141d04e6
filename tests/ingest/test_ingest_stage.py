"""The ingest stage end to end on real files: UDHR in 24 languages, bad inputs, dedup, resume after a kill."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from pipeline.cli import main
from pipeline.status import statuses
from pipeline.languages import EU_LANGUAGE_CODES
from pipeline.rundir import RunDir
from pipeline.runconfig import resolve
from tests.conftest import udhr_source, write_config

PY = sys.executable


def udhr_docs(udhr_dir: Path, lang: str) -> list[str]:
    """The UDHR of one language as the stage's own reader sees it (preamble + 30 articles)."""
    from stages.ingest.config import SourceConfig
    from stages.ingest.inputs import list_inputs
    from stages.ingest.readers import RawDoc, read_input

    src = SourceConfig(name="u", kind="udhr", path=str(udhr_dir), licence="x", collected="2024-05")
    return [d.text for d in read_input(src, lang, list_inputs(src, lang)[0]) if isinstance(d, RawDoc)]


def jsonl_source(name: str, path: str, extra: str = "") -> str:
    return textwrap.dedent(f"""
    [[ingest.sources]]
    name = "{name}"
    kind = "jsonl"
    path = "{path}"
    licence = "CC-BY-4.0"
    collected = "2025-01"
    category = "crawled"
    """) + textwrap.dedent(extra)


def run_ingest(cfg_path: Path, run_dir: Path, *extra: str) -> int:
    return main(["stage", "ingest", "--config", str(cfg_path), "--run-dir", str(run_dir), *extra])


def read_lang(run_dir: Path, lang: str, kind: str = "data") -> list[dict]:
    rows = []
    for p in sorted((run_dir / "ingest" / kind / lang).glob("part-*.parquet")):
        rows.extend(pq.read_table(p).to_pylist())
    return rows


def manifest(run_dir: Path) -> dict:
    return json.loads((run_dir / "ingest" / "manifest.json").read_text())


@pytest.fixture(scope="module")
def udhr_run(tmp_path_factory, udhr_dir):
    tmp = tmp_path_factory.mktemp("udhr")
    cfg = write_config(tmp, udhr_source(udhr_dir))
    run_dir = tmp / "run"
    t0 = time.monotonic()
    assert run_ingest(cfg, run_dir) == 0
    return cfg, run_dir, time.monotonic() - t0


def test_udhr_ingest_writes_all_24_languages(udhr_run):
    cfg, run_dir, _ = udhr_run
    m = manifest(run_dir)
    assert m["stage"] == "ingest" and m["status"] == "complete"
    assert set(m["statistics"]["per_language"]) == set(EU_LANGUAGE_CODES)
    for lang in EU_LANGUAGE_CODES:
        rows = read_lang(run_dir, lang)
        assert len(rows) >= 20, f"{lang}: only {len(rows)} documents kept"
        assert all(r["lang"] == lang and r["source"] == "udhr" and r["domain"] == "unicode.org" for r in rows)
        assert m["statistics"]["per_language"][lang]["kept"] == len(rows)
    # every output file is listed with checksum and rows; the ids are unique
    listed = {o["path"]: o for o in m["outputs"]}
    assert "data/de/part-00000.parquet" in listed and listed["data/de/part-00000.parquet"]["rows"] > 0
    ids = [r["id"] for lang in EU_LANGUAGE_CODES for r in read_lang(run_dir, lang)]
    assert len(ids) == len(set(ids))
    # every removed document has a reason, and counts add up
    tot = m["statistics"]["totals"]
    removed = sum(m["statistics"]["per_filter"].values())
    assert tot["docs_in"] == tot["kept"] + removed
    rejected = sum(len(read_lang(run_dir, l, "rejected")) for l in EU_LANGUAGE_CODES)
    assert rejected == removed
    assert m["statistics"]["per_source"]["udhr"]["licence"] == "public-domain-text"


def test_rerun_skips_and_status_is_fresh(udhr_run, capsys):
    cfg, run_dir, first = udhr_run
    before = (run_dir / "ingest" / "manifest.json").stat().st_mtime_ns
    t0 = time.monotonic()
    assert run_ingest(cfg, run_dir) == 0
    assert time.monotonic() - t0 < 5
    assert (run_dir / "ingest" / "manifest.json").stat().st_mtime_ns == before
    assert "fresh, nothing to do" in capsys.readouterr().out
    assert main(["status", "--run-dir", str(run_dir)]) == 0
    out = capsys.readouterr().out
    assert "ingest      fresh" in out and "tokenizer   missing" in out and "pretrain    missing" in out


def test_changed_setting_makes_ingest_stale(udhr_run, tmp_path, udhr_dir):
    cfg, run_dir, _ = udhr_run
    changed = write_config(tmp_path, udhr_source(udhr_dir).replace("min_words = 10", "min_words = 12"))
    rd, config = resolve(str(changed), str(run_dir))
    (st,) = [s for s in statuses(rd, config) if s.name == "ingest"]
    assert (st.state, st.reason) == ("stale", "settings changed")


def test_bad_inputs_are_recorded_with_file_and_line(tmp_path, udhr_dir):
    de = udhr_docs(udhr_dir, "de")
    src = tmp_path / "src"
    src.mkdir()
    good = [json.dumps({"text": t, "url": f"https://www.example.de/{i}"}) for i, t in enumerate(de[:6])]
    lines = good[:3] + ['{"text": "broken json'] + good[3:]
    (src / "a.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (src / "b.jsonl").write_bytes(good[0].replace("https://www.example.de/0", "https://www.example.de/b").encode()[:-2] + b'\xff"}\n')
    (src / "c.jsonl").write_text("", encoding="utf-8")
    (src / "d.jsonl").write_text(json.dumps({"body": de[7]}) + "\n", encoding="utf-8")
    # a truncated Parquet file
    import pyarrow as pa

    pq.write_table(pa.table({"text": de[8:12]}), src / "e.parquet")
    data = (src / "e.parquet").read_bytes()
    (src / "e.parquet").write_bytes(data[: len(data) // 2])
    body = (jsonl_source("web", f"{src}/*.jsonl")
            + textwrap.dedent(f"""
            [[ingest.sources]]
            name = "pq"
            kind = "parquet"
            path = "{src}/*.parquet"
            licence = "CC-BY-4.0"
            collected = "2025-01"
            [[ingest.sources]]
            name = "nothing"
            kind = "text"
            path = "{src}/missing-*.txt"
            licence = "x"
            collected = "2025-01"
            optional = true
            [ingest.quality]
            min_words = 10
            """))
    cfg = write_config(tmp_path, body, languages='["de"]')
    run_dir = tmp_path / "run"
    assert run_ingest(cfg, run_dir) == 0
    m = manifest(run_dir)
    problems = {(Path(p["input"]).name, p["line"], p["reason"]) for p in m["skipped"]}
    assert ("a.jsonl", 4, "malformed_json") in problems
    assert ("b.jsonl", 1, "invalid_utf8") in problems
    assert ("c.jsonl", None, "empty_file") in problems
    assert ("d.jsonl", 1, "missing_text") in problems
    assert ("e.parquet", None, "unreadable_parquet") in problems
    assert any(p["reason"] == "no_inputs" and p["source"] == "nothing" for p in m["skipped"])
    assert all(str(src) in p["message"] or "nothing" in p["message"] for p in m["skipped"])
    assert len(read_lang(run_dir, "de")) == 6  # the good lines all survive

    # with on_error = "fail" the stage stops and publishes nothing
    (tmp_path / "strict").mkdir()
    strict = write_config(tmp_path / "strict", body.replace("[ingest.quality]", "[ingest]\non_error = \"fail\"\n[ingest.quality]"),
                          languages='["de"]')
    run2 = tmp_path / "run2"
    assert run_ingest(strict, run2) == 2  # bad input: exit 2, as documented
    assert not (run2 / "ingest").exists()
    state = json.loads((run2 / ".state" / "ingest.json").read_text())
    assert state["status"] == "failed" and "on_error = \"fail\"" in state["error"] and str(src) in state["error"]


def test_a_source_without_input_for_a_language_fails_at_plan_time(tmp_path, udhr_dir):
    """Not after the whole ingest (and a tokenizer stage that then refuses): before any unit runs, exit 2, with
    the source and the pattern it expanded."""
    (tmp_path / "data" / "de").mkdir(parents=True)
    (tmp_path / "data" / "de" / "1.jsonl").write_text(json.dumps({"text": udhr_docs(udhr_dir, "de")[3]}) + "\n")
    cfg = write_config(tmp_path, jsonl_source("web", f"{tmp_path}/data/{{lang}}/*.jsonl"), languages='["de", "et"]')
    run_dir = tmp_path / "run"
    assert run_ingest(cfg, run_dir) == 2
    state = json.loads((run_dir / ".state" / "ingest.json").read_text())
    assert state["status"] == "failed"
    assert "source web yields nothing for language et" in state["error"] and f"{tmp_path}/data/et/*.jsonl" in state["error"]
    assert not list((run_dir / ".work" / "ingest").glob("*/documents/*"))  # no unit ran
    cfg.write_text(cfg.read_text().replace('category = "crawled"', 'category = "crawled"\noptional = true'))
    assert run_ingest(cfg, run_dir) == 0
    (problem,) = manifest(run_dir)["skipped"]
    assert (problem["source"], problem["lang"], problem["reason"]) == ("web", "et", "no_inputs")


def test_ids_are_unique_across_languages_with_the_same_file_layout(tmp_path, udhr_dir):
    """data/{lang}/1.jsonl in two languages: same source, same relative file, same line numbers, other ids."""
    for lang in ("de", "fr"):
        (tmp_path / "data" / lang).mkdir(parents=True)
        docs = [t for t in udhr_docs(udhr_dir, lang) if len(t.split()) >= 10][:5]
        (tmp_path / "data" / lang / "1.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in docs))
    cfg = write_config(tmp_path, jsonl_source("web", f"{tmp_path}/data/{{lang}}/*.jsonl", "[ingest.quality]\nmin_words = 10\n"),
                       languages='["de", "fr"]')
    assert run_ingest(cfg, tmp_path / "run") == 0
    de, fr = read_lang(tmp_path / "run", "de"), read_lang(tmp_path / "run", "fr")
    assert [(r["input"], r["input_index"]) for r in de] == [(r["input"], r["input_index"]) for r in fr] == [("1.jsonl", i) for i in range(1, 6)]
    assert len({r["id"] for r in de + fr}) == 10


def test_planted_near_duplicates_across_files_are_removed(tmp_path, udhr_dir):
    fr = udhr_docs(udhr_dir, "fr")
    long_docs = [t for t in fr if len(t.split()) >= 60][:4]
    assert len(long_docs) == 4
    src = tmp_path / "src"
    src.mkdir()
    (src / "1.jsonl").write_text("\n".join(json.dumps({"text": t}) for t in long_docs) + "\n", encoding="utf-8")
    near = long_docs[0].split()
    near[5] = "modifié"  # one word changed: Jaccard of 5-gram sets stays high
    copies = [" ".join(near), long_docs[1], long_docs[2] + " Fin."]
    (src / "2.jsonl").write_text("\n".join(json.dumps({"text": t}) for t in copies) + "\n", encoding="utf-8")
    cfg = write_config(tmp_path, jsonl_source("web", f"{src}/*.jsonl", '[ingest]\nfiles_per_unit = 1\n[ingest.quality]\nmin_words = 10\n'),
                       languages='["fr"]')
    run_dir = tmp_path / "run"
    assert run_ingest(cfg, run_dir) == 0
    kept = read_lang(run_dir, "fr")
    assert [r["input"] for r in kept] == ["1.jsonl"] * 4
    rejected = {r["input_index"]: r for r in read_lang(run_dir, "fr", "rejected")}
    assert rejected[2]["reason"] == "exact_duplicate"
    assert {rejected[1]["reason"], rejected[3]["reason"]} == {"near_duplicate"}
    ids = {r["input_index"]: r["id"] for r in kept}
    assert rejected[1]["duplicate_of"] == ids[1] and rejected[2]["duplicate_of"] == ids[2]


def test_units_go_to_the_engine_largest_first_and_results_keep_their_ids(tmp_path, udhr_dir, monkeypatch):
    """Engines start units in the order given: the largest first, so a step does not end with one worker alone on
    a large unit. The order changes nothing in the output."""
    from pipeline import executor

    src = tmp_path / "src"
    src.mkdir()
    docs = [t for t in udhr_docs(udhr_dir, "fr") if len(t.split()) >= 10]
    for name, (a, b) in (("1.jsonl", (0, 2)), ("2.jsonl", (2, 11)), ("3.jsonl", (11, 16))):  # 2, 9 and 5 documents
        (src / name).write_text("".join(json.dumps({"text": t}) + "\n" for t in docs[a:b]), encoding="utf-8")
    cfg = write_config(tmp_path, jsonl_source("web", f"{src}/*.jsonl", "[ingest]\nfiles_per_unit = 1\n[ingest.quality]\nmin_words = 10\n"),
                       languages='["fr"]')
    handed: dict[str, list[str]] = {}
    local = executor.map_units_locally

    def recording(ctx, units):
        handed[units[0].step] = [u.id for u in units]
        return local(ctx, units)

    monkeypatch.setattr(executor, "map_units_locally", recording)
    assert run_ingest(cfg, tmp_path / "run") == 0
    by_size = sorted(range(3), key=lambda i: -(src / f"{i + 1}.jsonl").stat().st_size)
    assert handed["documents"] == [f"fr-web-{i:05d}" for i in by_size]  # by bytes
    assert handed["filter"] == ["fr-web-00001", "fr-web-00002", "fr-web-00000"]  # by documents kept
    monkeypatch.setattr(executor, "map_units_locally", local)
    assert run_ingest(cfg, tmp_path / "plain", "--force") == 0  # alphabetical order is not a stage's business
    assert manifest(tmp_path / "run")["output_digest"] == manifest(tmp_path / "plain")["output_digest"]
    assert [r["input"] for r in read_lang(tmp_path / "run", "fr")] == ["1.jsonl"] * 2 + ["2.jsonl"] * 9 + ["3.jsonl"] * 5


def test_pii_opt_out_and_secrets(tmp_path, udhr_dir):
    it = [t for t in udhr_docs(udhr_dir, "it") if len(t.split()) >= 30][:3]
    docs = [
        {"text": it[0] + "\nScrivete a mario.rossi@example.it o chiamate +39 06 1234 5678.", "url": "https://www.example.it/a"},
        {"text": it[1], "url": "https://blocked.example.com/x"},
        {"text": it[2] + "\nIBAN IT60 X054 2811 1010 0000 0123 456, server 192.168.10.1.", "url": "https://news.example.co.uk/b"},
    ]
    src = tmp_path / "src"
    src.mkdir()
    (src / "it.jsonl").write_text("\n".join(json.dumps(d) for d in docs) + "\n", encoding="utf-8")
    extra = ('homepage = "https://user:hunter2@data.example.org/dump?token=abc123"\n'
             'opt_out = { protocols = ["robots.txt", "TDMRep"], honoured_by = "provider", domains = ["example.com"] }\n'
             "[ingest.quality]\nmin_words = 10\n")
    cfg = write_config(tmp_path, jsonl_source("web", f"{src}/*.jsonl", extra), languages='["it"]')
    run_dir = tmp_path / "run"
    assert run_ingest(cfg, run_dir) == 0
    kept = {r["url"]: r for r in read_lang(run_dir, "it")}
    assert set(kept) == {"https://www.example.it/a", "https://news.example.co.uk/b"}
    a, b = kept["https://www.example.it/a"], kept["https://news.example.co.uk/b"]
    assert "mario.rossi@example.it" not in a["text"] and "<EMAIL>" in a["text"] and "<PHONE>" in a["text"]
    assert "<IBAN>" in b["text"] and "<IP_ADDRESS>" in b["text"] and b["domain"] == "example.co.uk"
    m = manifest(run_dir)
    assert m["statistics"]["pii_redactions"] == {"email": 1, "iban": 1, "ip": 1, "phone": 1}
    assert m["statistics"]["per_filter"]["tdm_opt_out"] == 1
    assert read_lang(run_dir, "it", "rejected")[0]["reason"] == "tdm_opt_out"
    for text in [(run_dir / "ingest" / "manifest.json").read_text(), (run_dir / "run.toml").read_text()]:
        assert "hunter2" not in text and "abc123" not in text and "***" in text


def test_language_mismatch_and_non_eu_text_are_rejected(tmp_path, udhr_dir):
    en = [t for t in udhr_docs(udhr_dir, "en") if len(t.split()) >= 30][:2]
    de = [t for t in udhr_docs(udhr_dir, "de") if len(t.split()) >= 30][:2]
    src = tmp_path / "src"
    src.mkdir()
    (src / "de.jsonl").write_text("\n".join(json.dumps({"text": t}) for t in de + en) + "\n", encoding="utf-8")
    cfg = write_config(tmp_path, jsonl_source("web", f"{src}/{{lang}}.jsonl", "[ingest.quality]\nmin_words = 10\n"), languages='["de"]')
    run_dir = tmp_path / "run"
    assert run_ingest(cfg, run_dir) == 0
    assert len(read_lang(run_dir, "de")) == 2
    rej = read_lang(run_dir, "de", "rejected")
    assert [r["reason"] for r in rej] == ["lang_mismatch", "lang_mismatch"] and rej[0]["lang_detected"] == "en"


KILLER = textwrap.dedent("""
    import os, sys
    import stages.ingest.stage as st
    step, n = sys.argv[1], int(sys.argv[2])
    count = [0]
    if step == "finalize":
        real_link = st._link_part
        def dying_link(*a, **k):
            if count[0] == n:
                os._exit(9)  # like SIGKILL: no cleanup, no finally
            count[0] += 1
            return real_link(*a, **k)
        st._link_part = dying_link
    else:
        real = st.IngestStage.run_unit
        def dying(self, ctx, unit, out_dir):
            result = real(self, ctx, unit, out_dir)  # the unit's files are written, its folder not yet in place
            if unit.step == step:
                if count[0] == n:
                    os._exit(9)
                count[0] += 1
            return result
        st.IngestStage.run_unit = dying
    from pipeline.cli import main
    sys.exit(main(sys.argv[3:]))
""")
KILL_LANGS = ["de", "fr", "mt", "ga", "el"]


@pytest.mark.parametrize("step, n", [("documents", 2), ("signatures", 3), ("buckets", 1), ("clusters", 4), ("filter", 2),
                                     ("finalize", 5)])
def test_kill_and_rerun_gives_identical_output(tmp_path, udhr_dir, step, n):
    """kill -9 in the middle of each step (a unit's files written, its folder not yet renamed into place), or
    while finalize links the parts: nothing is published, the rerun redoes only what was not finished and
    publishes the uninterrupted run's files, byte for byte."""
    from stages.ingest.stage import IngestStage

    cfg = write_config(tmp_path, udhr_source(udhr_dir), languages=json.dumps(KILL_LANGS))
    ref_dir, run_dir = tmp_path / "ref", tmp_path / "run"
    assert run_ingest(cfg, ref_dir) == 0
    args = ["stage", "ingest", "--config", str(cfg), "--run-dir", str(run_dir)]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    killed = subprocess.run([PY, "-c", KILLER, step, str(n), *args], env=env, capture_output=True, text=True)
    assert killed.returncode == 9, killed.stderr
    assert not (run_dir / "ingest").exists()  # nothing half-published
    work = run_dir / ".work" / "ingest"
    finished = [p for p in work.glob("*/*/*") if (p / "result.json").exists()]
    steps = [s.name for s in IngestStage.steps
             if s.name not in ("merge", "components", "components-merge", "gather")]  # none of these run here
    per_step = len(KILL_LANGS)  # one unit per language in every step (one UDHR file, one partition)
    assert len(finished) == per_step * (steps.index(step) if step in steps else len(steps)) + (n if step in steps else 0)
    if step in steps:  # the killed unit left its unfinished folder under a hidden temporary name only
        assert [p.name for p in (next(work.iterdir()) / step).iterdir() if p.name.startswith(".")]
    assert main(["status", "--run-dir", str(run_dir)]) == 0
    assert run_ingest(cfg, run_dir) == 0
    ref, got = manifest(ref_dir), manifest(run_dir)
    assert got["output_digest"] == ref["output_digest"]
    assert [(o["path"], o["sha256"], o["rows"]) for o in got["outputs"]] == [(o["path"], o["sha256"], o["rows"]) for o in ref["outputs"]]
    assert got["statistics"] == ref["statistics"]
    assert not (run_dir / ".work" / "ingest").exists()


def test_lock_refuses_a_second_writer(tmp_path, udhr_dir):
    from pipeline.rundir import RunDirLocked

    rd = RunDir(tmp_path / "run")
    with rd.lock("test"):
        assert rd.is_locked()
        with pytest.raises(RunDirLocked, match="in use by pid"):
            with rd.lock("second"):
                pass
        cfg = write_config(tmp_path, udhr_source(udhr_dir), languages='["de"]')
        assert run_ingest(cfg, rd.path) == 3
    assert not rd.is_locked()
