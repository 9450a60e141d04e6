"""The tokenizer sample reads what it keeps (a seeded subset of row groups), and its memory is budgeted."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline.cli import main
from stages.tokenizer.memory import GB, affordable_chars, estimate_peak_bytes, input_sentence_size
from stages.tokenizer.sample import LanguageShare, write_language_sample

DOC = "Jedes Dokument hat zwei Zeilen.\nUnd diese ist die zweite Zeile von Dokument {i}."


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> tuple[list[Path], int]:
    """20 ingest-like files x 5 row groups x 40 documents of one language; (files, characters)."""
    folder = tmp_path_factory.mktemp("ingest")
    files, chars = [], 0
    for f in range(20):
        texts = [DOC.format(i=f * 200 + i) for i in range(200)]
        chars += sum(map(len, texts))
        path = folder / f"part-{f:05d}.parquet"
        pq.write_table(pa.table({"id": [f"de-{f}-{i}" for i in range(200)], "text": texts}), path, row_group_size=40)
        files.append(path)
    return files, chars


def test_a_small_share_reads_a_few_seeded_row_groups(corpus, tmp_path):
    files, available = corpus
    share = LanguageShare("de", available, available // 50, 1 / 50)  # 2% of the language
    first = write_language_sample(files, share, 7, 4096, tmp_path / "a.txt")
    assert first.files == 20 and first.files_read <= 2 and first.row_groups_read <= 3  # of 100 row groups
    text_chars = first.chars + first.documents  # each document also had one newline, not written as a character
    assert share.target_chars <= text_chars < share.target_chars + len(DOC) + 10  # stops at the document that reaches it
    again = write_language_sample(files, share, 7, 4096, tmp_path / "b.txt")
    other = write_language_sample(files, share, 8, 4096, tmp_path / "c.txt")
    assert (tmp_path / "a.txt").read_bytes() == (tmp_path / "b.txt").read_bytes()  # deterministic
    assert (tmp_path / "a.txt").read_bytes() != (tmp_path / "c.txt").read_bytes()  # and the seed chooses where
    assert again == first and other.row_groups_read <= 3


def test_whole_passes_read_everything_then_the_fraction_reads_seeded_row_groups(corpus, tmp_path):
    files, available = corpus
    share = LanguageShare("de", available, int(2.25 * available), 2.25)
    written = write_language_sample(files, share, 7, 4096, tmp_path / "s.txt")
    assert written.files_read == 20
    assert written.row_groups_read == 2 * 100 + 25  # two passes, then a quarter of the row groups
    assert written.documents == pytest.approx(2.25 * 4000, abs=40)


def test_memory_model_turns_a_budget_into_sentences():
    budget = 2 * GB
    chars = affordable_chars("bpe", 32_000, budget)
    assert estimate_peak_bytes("bpe", 32_000, chars) == pytest.approx(budget, rel=1e-6)
    assert input_sentence_size("bpe", 32_000, budget, 100.0, 10**9) == chars // 100
    assert input_sentence_size("bpe", 32_000, budget, 100.0, 5_000) == 5_000  # max_sentences still bounds it
    assert affordable_chars("bpe", 262_144, 0.1 * GB) == 0  # not even the fixed part fits
    assert estimate_peak_bytes("bpe", 262_144, 20_000_000_000) > estimate_peak_bytes("bpe", 32_000, 20_000_000_000)


def test_a_sample_over_the_memory_budget_is_refused_naming_the_setting(tmp_path, udhr_dir, capsys):
    from tests.conftest import udhr_source, write_config

    body = "[tokenizer]\nvocab_size = 1000\nmemory_budget_gb = 0.201\n[tokenizer.sample]\nbudget_chars = 2_000_000\n"
    cfg = write_config(tmp_path, udhr_source(udhr_dir) + body, languages='["de", "fr"]')
    run = tmp_path / "run"
    assert main(["stage", "ingest", "--config", str(cfg), "--run-dir", str(run)]) == 0
    assert main(["stage", "tokenizer", "--run-dir", str(run)]) == 1
    err = capsys.readouterr().err
    assert "more than [tokenizer].memory_budget_gb = 0.201" in err and "lower [tokenizer.sample].budget_chars to at most" in err
    assert not (run / "tokenizer").exists() and not list((run / ".work").glob("tokenizer/*/samples/*"))  # refused before reading

    cfg.write_text(cfg.read_text().replace("memory_budget_gb = 0.201", "memory_budget_gb = 1"))
    assert main(["stage", "tokenizer", "--config", str(cfg), "--run-dir", str(run)]) == 0
    sample = json.loads((run / "tokenizer" / "manifest.json").read_text())["statistics"]["sample"]
    assert sample["memory_budget_gb"] == 1 and 0 < sample["estimated_peak_gb"] < 1
    assert sample["input_sentence_size"] >= sample["total_lines"]  # the whole sample fits: nothing left out
