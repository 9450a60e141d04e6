"""Hugging Face dataset sources, read by their data files: a local folder laid out like HuggingFaceFW/fineweb-2
(`data/<config>/train/*.parquet` and the dataset card's `configs`), with real Parquet files of several row
groups; the listing goes through fsspec as it does for the Hub (HfFileSystem), which is unreachable here."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline.cli import main
from pipeline.stage import InputError
from stages.ingest.config import SourceConfig
from stages.ingest.inputs import card_patterns, hub_files, split_files
from stages.ingest.readers import RawDoc, read_piece
from tests.conftest import write_config
from tests.ingest.test_ingest_stage import read_lang, udhr_docs

CONFIGS = {"pl": "pol_Latn", "et": "ekk_Latn"}  # FineWeb-2 names Standard Estonian ekk_Latn, not est_Latn


def fineweb_like(root: Path, udhr_dir: Path, files: int = 3, row_group: int = 4) -> dict[str, list[str]]:
    """The repo's layout: per config, `files` Parquet files of several row groups, and the card's configs."""
    texts = {}
    for lang, config in CONFIGS.items():
        folder = root / "data" / config / "train"
        folder.mkdir(parents=True)
        docs = [t for t in udhr_docs(udhr_dir, lang) if len(t.split()) >= 20]
        texts[lang] = docs
        for f in range(files):
            part = docs[f::files]
            pq.write_table(pa.table({"text": part, "id": [f"<urn:{lang}:{f}:{i}>" for i in range(len(part))],
                                     "url": [f"https://site.{lang}/{f}/{i}" for i in range(len(part))]}),
                           folder / f"000_{f:05d}.parquet", row_group_size=row_group)
        (root / "data" / config / "test").mkdir()
        pq.write_table(pa.table({"text": ["held out"], "id": ["t"], "url": ["u"]}), root / "data" / config / "test" / "000_00000.parquet")
    cards = "".join(f"- config_name: {c}\n  data_files:\n  - split: train\n    path: data/{c}/train/*\n"
                    f"  - split: test\n    path: data/{c}/test/*\n" for c in CONFIGS.values())
    (root / "README.md").write_text(f"---\nlicense: odc-by\nconfigs:\n{cards}---\n# FineWeb-2 (a local copy)\n")
    return texts


def hf_source(local: Path, extra: str = "") -> str:
    return textwrap.dedent(f"""
        [[ingest.sources]]
        name = "fineweb-2"
        kind = "huggingface"
        repo = "HuggingFaceFW/fineweb-2"
        local_dir = "{local}"
        hf_config = "{{fineweb2}}"
        languages = ["pl", "et"]
        id_field = "id"
        token_env = "HF_TOKEN"
        licence = "ODC-By-1.0"
        collected = "2024-12"
        category = "public_dataset"
        """) + textwrap.dedent(extra)


def test_data_files_of_each_language_config_become_bounded_units(tmp_path, udhr_dir):
    texts = fineweb_like(tmp_path / "fw2", udhr_dir)
    quality = "[ingest.quality]\nmin_words = 10\n"
    whole = write_config(tmp_path, hf_source(tmp_path / "fw2") + quality, languages='["pl", "et"]')
    assert main(["stage", "ingest", "--config", str(whole), "--run-dir", str(tmp_path / "whole")]) == 0
    (tmp_path / "small").mkdir()
    small = write_config(tmp_path / "small", hf_source(tmp_path / "fw2") + "[ingest]\nmax_unit_bytes = 3000\n" + quality,
                         languages='["pl", "et"]')
    assert main(["stage", "ingest", "--config", str(small), "--run-dir", str(tmp_path / "split")]) == 0
    for lang, config in CONFIGS.items():
        rows = read_lang(tmp_path / "whole", lang) + read_lang(tmp_path / "whole", lang, "rejected")
        # every train document once, none of the test split; the key is the repo's path, not the local copy's
        assert sorted(r["text"] for r in rows) == sorted(texts[lang])
        assert {r["input"] for r in rows} == {f"hf://HuggingFaceFW/fineweb-2/data/{config}/train/000_{f:05d}.parquet" for f in range(3)}
        assert rows[0]["domain"] == f"site.{lang}" and rows[0]["source_doc_id"].startswith(f"<urn:{lang}:")
        # split by row groups into several units: the same documents, ids and rows
        assert read_lang(tmp_path / "split", lang) == read_lang(tmp_path / "whole", lang)
    from pipeline.status import build_context
    from pipeline.runconfig import resolve
    from stages.ingest.stage import IngestStage
    from stages.ingest.units import DOCUMENTS

    rd, config = resolve(str(small), str(tmp_path / "split"))
    units = IngestStage().plan(build_context(rd, config, "ingest"), DOCUMENTS, {})
    assert all(sum(DOCUMENTS.payload_of(u).lang == lang for u in units) >= 3 for lang in CONFIGS)  # row groups of one file apart
    m_whole = json.loads((tmp_path / "whole" / "ingest" / "manifest.json").read_text())
    m_split = json.loads((tmp_path / "split" / "ingest" / "manifest.json").read_text())
    assert m_split["statistics"]["per_language"] == m_whole["statistics"]["per_language"]


def test_row_group_pieces_read_each_row_once_with_its_row_number(tmp_path, udhr_dir):
    fineweb_like(tmp_path / "fw2", udhr_dir, files=1, row_group=3)
    src = SourceConfig.model_validate(json.loads(json.dumps({
        "name": "fw2", "kind": "huggingface", "repo": "HuggingFaceFW/fineweb-2", "local_dir": str(tmp_path / "fw2"),
        "hf_config": "{fineweb2}", "languages": ["et"], "id_field": "id", "licence": "x", "collected": "2024-12"})))
    files, what = hub_files(src, "et")
    assert [f.ref for f in files] == ["data/ekk_Latn/train/000_00000.parquet"] and "ekk_Latn" in what
    whole = [(d.index, d.source_doc_id) for d in read_piece(src, "et", split_files(files, 10**9)[0])]
    n_groups = pq.ParquetFile(tmp_path / "fw2" / files[0].ref).metadata.num_row_groups
    for max_bytes in (files[0].size // 2, files[0].size // n_groups, files[0].size // (3 * n_groups)):  # more pieces than groups too
        pieces = split_files(files, max_bytes)
        assert len(pieces) > 1
        got = [(d.index, d.source_doc_id) for p in pieces for d in read_piece(src, "et", p) if isinstance(d, RawDoc)]
        assert got == whole and [i for i, _ in got] == list(range(1, len(whole) + 1))


def test_dataset_card_data_files_forms(tmp_path):
    import fsspec

    fs = fsspec.filesystem("file")
    (tmp_path / "README.md").write_text(textwrap.dedent("""\
        ---
        configs:
        - config_name: default
          data_files: data/*/*.parquet
        - config_name: two
          data_files:
            train: [a/*.parquet, b/*.parquet]
            test: t/*.parquet
        ---
        """))
    assert card_patterns(fs, str(tmp_path), "default", "train")[0] == ["data/*/*.parquet"]
    assert card_patterns(fs, str(tmp_path), "two", "train")[0] == ["a/*.parquet", "b/*.parquet"]
    assert card_patterns(fs, str(tmp_path), "two", "test")[0] == ["t/*.parquet"]
    assert card_patterns(fs, str(tmp_path), "est_Latn", "train") == ([], "the dataset card has no config 'est_Latn'")
    (tmp_path / "README.md").unlink()
    assert card_patterns(fs, str(tmp_path), "deu_Latn", "train")[0][0] == "data/deu_Latn/train/*"


def test_a_config_the_repo_lacks_fails_at_plan_time_naming_it(tmp_path, udhr_dir):
    fineweb_like(tmp_path / "fw2", udhr_dir)
    body = hf_source(tmp_path / "fw2").replace('hf_config = "{fineweb2}"', 'hf_config = "{flores}"')  # est_Latn: not in FineWeb-2
    cfg = write_config(tmp_path, body, languages='["pl", "et"]')
    assert main(["stage", "ingest", "--config", str(cfg), "--run-dir", str(tmp_path / "run")]) == 2
    error = json.loads((tmp_path / "run" / ".state" / "ingest.json").read_text())["error"]
    assert "source fineweb-2 yields nothing for language et" in error and "no config 'est_Latn'" in error


def test_the_unreachable_hub_fails_planning_unless_the_source_is_optional(tmp_path, udhr_dir, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    import huggingface_hub.constants  # it reads the variable once, at import: set it where it keeps it

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    fineweb_like(tmp_path / "fw2", udhr_dir)
    hub = textwrap.dedent("""
        [[ingest.sources]]
        name = "hub"
        kind = "huggingface"
        repo = "HuggingFaceFW/fineweb-2"
        hf_config = "{fineweb2}"
        languages = ["pl", "et"]
        licence = "ODC-By-1.0"
        collected = "2024-12"
        """)
    body = hf_source(tmp_path / "fw2", "max_documents = 4\n[ingest.quality]\nmin_words = 10\n") + hub
    cfg = write_config(tmp_path, body, languages='["pl", "et"]')
    assert main(["stage", "ingest", "--config", str(cfg), "--run-dir", str(tmp_path / "run")]) == 2
    error = json.loads((tmp_path / "run" / ".state" / "ingest.json").read_text())["error"]
    assert "cannot list the data files of HuggingFaceFW/fineweb-2 config pol_Latn split train" in error
    cfg.write_text(cfg.read_text() + "optional = true\n")  # the last table: the hub source
    assert main(["stage", "ingest", "--config", str(cfg), "--run-dir", str(tmp_path / "run")]) == 0
    m = json.loads((tmp_path / "run" / "ingest" / "manifest.json").read_text())
    problems = [p for p in m["skipped"] if p["source"] == "hub"]
    assert {p["lang"] for p in problems} == {"pl", "et"} and {p["reason"] for p in problems} == {"dataset_unavailable"}
    for lang in ("pl", "et"):  # max_documents: the first 4 documents of the language, one unit
        assert len(read_lang(tmp_path / "run", lang)) + len(read_lang(tmp_path / "run", lang, "rejected")) == 4


def test_fineweb2_placeholder_refuses_english(tmp_path):
    from pipeline.config import ConfigError, load_config

    cfg = write_config(tmp_path, hf_source(tmp_path).replace('languages = ["pl", "et"]', 'languages = ["all"]'))
    with pytest.raises(ConfigError, match="no FineWeb-2 config for en"):
        load_config(cfg)


def test_unsupported_data_files_are_refused_by_name(tmp_path, udhr_dir):
    fineweb_like(tmp_path / "fw2", udhr_dir)
    (tmp_path / "fw2" / "data" / "pol_Latn" / "train" / "extra.csv").write_text("text\nx\n")
    src = SourceConfig(name="fw2", kind="huggingface", repo="HuggingFaceFW/fineweb-2", local_dir=str(tmp_path / "fw2"),
                       hf_config="{fineweb2}", languages=["pl"], licence="x", collected="2024-12")
    with pytest.raises(InputError, match="extra.csv .* is neither Parquet nor JSON lines"):
        hub_files(src, "pl")


def test_the_revision_a_local_download_records_reaches_the_ingest_record(tmp_path, udhr_dir):
    from huggingface_hub._local_folder import write_download_metadata

    local = tmp_path / "fw2"
    fineweb_like(local, udhr_dir, files=1)
    commit = "0123456789abcdef0123456789abcdef01234567"
    for path in sorted(local.rglob("*.parquet")):  # what `hf download --local-dir` leaves beside the files
        write_download_metadata(local, path.relative_to(local).as_posix(), commit, "etag")
    cfg = write_config(tmp_path, hf_source(local, f'version = "{commit}"\n') + "[ingest.quality]\nmin_words = 10\n",
                       languages='["pl", "et"]')
    assert main(["stage", "ingest", "--config", str(cfg), "--run-dir", str(tmp_path / "run")]) == 0
    record = json.loads((tmp_path / "run" / "ingest" / "manifest.json").read_text())["statistics"]["per_source"]["fineweb-2"]
    assert record["version_found"] == commit and record["version"] == commit
    from stages.ingest.readers import version_found

    assert version_found(SourceConfig(name="x", kind="huggingface", repo="a/b", revision="v2.0.1", licence="l",
                                      collected="2024-12", languages=["pl"])) == "v2.0.1"
