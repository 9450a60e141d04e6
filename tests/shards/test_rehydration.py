"""Rehydration end to end on a small config: ingest records each kept document's cluster size, the shards stage
writes each training document as often as the table says, and the record and the AI Act summary state it."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from pipeline.cli import main
from pipeline.rundir import RunDir
from stages.compliance.generate import generate
from stages.shards.config import FINEWEB2_REHYDRATION, MixtureConfig
from stages.shards.tokenize import copies_for
from tests.compliance.fake_records import demo_compliance_section, write_evaluate, write_pretrain
from tests.conftest import udhr_source, write_config
from tests.ingest.test_ingest_stage import udhr_docs

LANGS = ["de", "fi"]
TABLE = [[1, 1], [2, 2], [4, 3]]


def config(tmp_path: Path, udhr_dir: Path, rehydration: str) -> Path:
    """The UDHR plus, per language, 3 exact copies of one article and 5 of another: clusters of 4 and 6."""
    for lang in LANGS:
        docs = sorted((t for t in udhr_docs(udhr_dir, lang) if len(t.split()) >= 40), key=len)
        (tmp_path / "in").mkdir(exist_ok=True)
        (tmp_path / "in" / f"{lang}.jsonl").write_text(
            "".join(json.dumps({"text": t}, ensure_ascii=False) + "\n" for t in [docs[-1]] * 3 + [docs[-2]] * 5),
            encoding="utf-8")
    body = udhr_source(udhr_dir) + textwrap.dedent(f"""
        [[ingest.sources]]
        name = "copies"
        kind = "jsonl"
        path = "{tmp_path}/in/{{lang}}.jsonl"
        languages = {json.dumps(LANGS)}
        licence = "public-domain-text"
        collected = "2025-01"
        [tokenizer]
        vocab_size = 600
        reserved_tokens = 2
        [shards]
        val_fraction = 0.0
        [shards.mixture]
        rehydration = {rehydration}
        """)
    return write_config(tmp_path, body, languages=json.dumps(LANGS))


@pytest.fixture(scope="module")
def rehydrated_run(tmp_path_factory, udhr_dir) -> Path:
    tmp = tmp_path_factory.mktemp("rehydration")
    cfg = config(tmp, udhr_dir, json.dumps(TABLE))
    assert main(["run", "--config", str(cfg), "--run-dir", str(tmp / "run"), "--to", "shards"]) == 0
    return tmp / "run"


def test_the_table_is_applied_to_each_documents_cluster_size(rehydrated_run):
    shards = json.loads((rehydrated_run / "shards" / "manifest.json").read_text())["statistics"]
    r = shards["rehydration"]
    assert r["table"] == "table" and r["rows"] == TABLE
    for lang in LANGS:
        sizes = [row["cluster_size"] for p in sorted((rehydrated_run / "ingest" / "data" / lang).glob("*.parquet"))
                 for row in pq.read_table(p, columns=["cluster_size"]).to_pylist()]
        assert sorted(sizes)[-2:] == [4, 6]  # the article and its 3 copies; the other and its 5
        copies = copies_for(__import__("numpy").array(sizes), tuple(map(tuple, TABLE)))
        lr = r["per_language"][lang]
        assert shards["per_language"][lang]["train_docs"] == len(sizes) + lr["docs_added"] == int(copies.sum())
        assert lr["docs_added"] == 2 + 2 and lr["docs_by_copies"] == {"1": len(sizes) - 2, "3": 2}
        assert lr["tokens_added"] > 0
    assert r["docs_added"] == sum(v["docs_added"] for v in r["per_language"].values())


def test_the_ai_act_summary_states_the_rehydration(rehydrated_run, tmp_path):
    import shutil

    from stages.compliance.config import ComplianceConfig

    run = tmp_path / "run"
    shutil.copytree(rehydrated_run, run, ignore=shutil.ignore_patterns(".lock", ".work", ".state", ".staging"))
    write_pretrain(run)
    write_evaluate(run, LANGS)
    section = demo_compliance_section()
    section["model"].pop("release_export", None)
    bundle = generate(RunDir(run), ComplianceConfig.model_validate(section))
    values = bundle.provenance["documents"]["public_summary"]["values"]
    text = values["1.3.rehydration"]["text"]
    added = json.loads((run / "shards" / "manifest.json").read_text())["statistics"]["rehydration"]
    assert "the provider's table" in text and "1 -> 1, 2-3 -> 2, 4+ -> 3" in text
    assert f"{added['docs_added']:,} documents and {added['tokens_added']:,} tokens added" in text
    assert values["1.3.rehydration"]["kind"] == "measured"
    assert "1.2.c.rehydration" in bundle.provenance["documents"]["annex_xi_technical_documentation"]["values"]


def test_fineweb2_table_and_bad_tables(tmp_path, udhr_dir, capsys):
    assert MixtureConfig(rehydration="fineweb-2").rehydration_table() == FINEWEB2_REHYDRATION
    assert copies_for(__import__("numpy").array([1, 2, 3, 4, 5, 99, 100, 999, 1000, 10**6]), FINEWEB2_REHYDRATION).tolist() \
        == [1, 2, 3, 3, 5, 5, 8, 8, 1, 1]
    cfg = config(tmp_path, udhr_dir, "[[1, 1], [5, 3], [4, 2]]")
    assert main(["run", "--config", str(cfg), "--run-dir", str(tmp_path / "run"), "--to", "shards"]) == 2
    err = capsys.readouterr().err
    assert "rehydration" in err and "row 3: cluster size 4 after 5: the sizes must increase" in err
    assert not (tmp_path / "run" / "ingest").exists()


def test_ingest_output_without_cluster_sizes_names_the_file_and_the_fix(rehydrated_run, tmp_path):
    """Ingest output of an earlier code version has no cluster_size: rehydration refuses it, naming the file."""
    import pyarrow.parquet as pq

    from stages.shards.tokenize import MissingClusterSizes, tokenize_files

    src = sorted((rehydrated_run / "ingest" / "data" / "de").glob("*.parquet"))[0]
    old = tmp_path / "old.parquet"
    pq.write_table(pq.read_table(src).drop_columns(["cluster_size"]), old)
    with pytest.raises(MissingClusterSizes, match=r"old.parquet has no cluster_size column .* rerun the ingest stage, "
                                                  r"or unset \[shards.mixture\] rehydration"):
        tokenize_files(rehydrated_run / "tokenizer" / "tokenizer.model", [old], tmp_path / "out", seed=1,
                       val_threshold=0, shard_bytes=1 << 20, rehydration=tuple(map(tuple, TABLE)))
