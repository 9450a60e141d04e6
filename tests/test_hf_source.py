"""The Hugging Face source path, for real through `datasets.load_dataset`: a local dataset repo (the Hub is
unreachable here) and an unreachable Hub repo that must become a recorded problem, not a crash."""

from __future__ import annotations

import json
import textwrap

import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.cli import main
from tests.conftest import write_config
from tests.test_ingest_stage import read_lang, udhr_docs


def test_local_dataset_repo_streams_per_language_configs(tmp_path, udhr_dir, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "hf-cache"))
    # the libraries read HF_HUB_OFFLINE once, at import: when an earlier test imported them, set it where they keep it
    import datasets.config
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    repo = tmp_path / "fineweb-like"
    for lang, flores in (("pl", "pol_Latn"), ("lt", "lit_Latn")):
        (repo / "data" / flores / "train").mkdir(parents=True)
        docs = [t for t in udhr_docs(udhr_dir, lang) if len(t.split()) >= 20][:5]
        pq.write_table(pa.table({"text": docs, "url": [f"https://site.{lang}/{i}" for i in range(5)], "id": [f"{lang}{i}" for i in range(5)]}),
                       repo / "data" / flores / "train" / "000_00000.parquet")
    (repo / "README.md").write_text(textwrap.dedent("""
        ---
        configs:
        - config_name: pol_Latn
          data_files:
          - split: train
            path: data/pol_Latn/train/*
        - config_name: lit_Latn
          data_files:
          - split: train
            path: data/lit_Latn/train/*
        ---
        """))
    body = textwrap.dedent(f"""
        [[ingest.sources]]
        name = "fw2"
        kind = "huggingface"
        repo = "{repo}"
        hf_config = "{{flores}}"
        id_field = "id"
        token_env = "HF_TOKEN"
        max_documents = 4
        licence = "ODC-By-1.0"
        collected = "2024-12"
        category = "public_dataset"
        [ingest.quality]
        min_words = 10

        [[ingest.sources]]
        name = "unreachable"
        kind = "huggingface"
        repo = "HuggingFaceFW/fineweb-2"
        hf_config = "{{flores}}"
        licence = "ODC-By-1.0"
        collected = "2024-12"
        """)
    cfg = write_config(tmp_path, body, languages='["pl", "lt"]')
    assert main(["stage", "ingest", "--config", str(cfg), "--run-dir", str(tmp_path / "run")]) == 0
    for lang in ("pl", "lt"):
        rows = read_lang(tmp_path / "run", lang)
        assert len(rows) == 4 and {r["source_doc_id"] for r in rows} == {f"{lang}{i}" for i in range(4)}
        assert rows[0]["domain"] == f"site.{lang}"
    m = json.loads((tmp_path / "run" / "ingest" / "manifest.json").read_text())
    problems = [p for p in m["skipped"] if p["source"] == "unreachable"]
    assert {p["lang"] for p in problems} == {"pl", "lt"}
    assert all(p["reason"] == "dataset_unavailable" and "HuggingFaceFW/fineweb-2" in p["message"] for p in problems)
