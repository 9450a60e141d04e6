"""Parity-aware merges (stages/tokenizer/parity_bpe.py): SentencePiece's pre-tokenization, merges chosen for the
worst language, a model SentencePiece and the Hugging Face export encode alike, and the stage's record."""

from __future__ import annotations

import json
import random

import pytest

from pipeline.cli import main
from stages.tokenizer.parity_bpe import segments, train_parity_bpe
from tests.tokenizer.test_tokenizer_stage import balanced_copy, ingested  # noqa: F401 (module fixture)


def test_segments_follow_sentencepiece_boundaries():
    known = set("▁Helowrdö,42αβ.")
    assert list(segments("Hello, wörld 42 αβ.", known)) == ["▁Hello", ",", "▁wörld", "▁", "4", "2", "▁αβ", "."]
    assert list(segments("Helloαβ", known)) == ["▁Hello", "αβ"]  # two scripts never share a piece
    assert list(segments("Hel#lo", known)) == ["▁Hel", "lo"]  # an unknown character is byte fallback: a boundary
    assert list(segments("a  b", set("▁ab"))) == ["▁a", "▁▁b"]  # a whitespace run stays together


def _languages(tmp_path):
    """Two synthetic languages: "aa" with short words, "bb" whose words are long and rare (costly)."""
    rng = random.Random(0)
    common = ["the", "and", "of", "to", "in"]
    long_words = ["".join(rng.choice("klmnoprst") for _ in range(9)) for _ in range(60)]
    text = {
        "aa": [" ".join(rng.choice(common) for _ in range(12)) for _ in range(1500)],
        "bb": [" ".join(rng.choice(long_words) for _ in range(6)) for _ in range(1500)],
    }
    paths = {}
    for lang, lines in text.items():
        paths[lang] = tmp_path / f"{lang}.txt"
        paths[lang].write_text("\n".join(lines) + "\n", encoding="utf-8")
    return paths, {lang: lines[:200] for lang, lines in text.items()}


def _template(tmp_path, paths, vocab):
    import sentencepiece as spm

    spm.SentencePieceTrainer.train(input=[str(p) for p in paths.values()], model_prefix=str(tmp_path / "spm"),
                                   model_type="bpe", vocab_size=vocab, byte_fallback=True, split_digits=True,
                                   normalization_rule_name="identity", allow_whitespace_only_pieces=True,
                                   remove_extra_whitespaces=False, minloglevel=2)
    return tmp_path / "spm.model"


def _tokens(model, dev):
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=str(model))
    return {lang: sum(len(ids) for ids in sp.encode(lines)) for lang, lines in dev.items()}


def test_merges_go_to_the_worst_language_and_sentencepiece_encodes_with_them(tmp_path):
    import sentencepiece as spm

    paths, dev = _languages(tmp_path)
    template = _template(tmp_path, paths, 340)
    out = tmp_path / "parity" / "tokenizer.model"
    trained = train_parity_bpe(paths, dev, template, out, target_parity=1.0, reference="aa")
    before, after = _tokens(template, dev), _tokens(out, dev)
    assert after["bb"] / after["aa"] < before["bb"] / before["aa"]  # the costly language's parity fell
    assert trained.chosen_for.get("bb", 0) > trained.chosen_for.get("aa", 0)
    sp_old, sp_new = spm.SentencePieceProcessor(model_file=str(template)), spm.SentencePieceProcessor(model_file=str(out))
    assert sp_new.get_piece_size() == sp_old.get_piece_size()  # as many pieces: the merges replaced, nothing added
    for i in range(sp_old.get_piece_size()):  # control, byte and user pieces keep their ids
        if not sp_old.is_unknown(i) and (sp_old.is_control(i) or sp_old.is_byte(i)):
            assert sp_new.id_to_piece(i) == sp_old.id_to_piece(i)
    line = dev["bb"][0] + " 2026, ü"
    assert sp_new.decode(sp_new.encode(line)) == line  # lossless, unknown characters by byte fallback
    assert len(out.with_suffix(".vocab").read_text(encoding="utf-8").splitlines()) == sp_new.get_piece_size()


def test_without_a_costly_language_the_merges_are_classic_bpe(tmp_path):
    paths, dev = _languages(tmp_path)
    template = _template(tmp_path, paths, 340)
    trained = train_parity_bpe(paths, dev, template, tmp_path / "p.model", target_parity=100.0, reference="aa")
    assert trained.chosen_for == {}  # no language above the target: every merge the most frequent pair overall
    with pytest.raises(ValueError, match="dev text in every language; none for bb"):
        train_parity_bpe(paths, {"aa": dev["aa"]}, template, tmp_path / "q.model", reference="aa")


def test_the_stage_records_parity_merges_and_exports_them(ingested, tmp_path):  # noqa: F811
    other = balanced_copy(ingested, tmp_path, 'method = "parity-merges"\ntarget_parity = 1.01\n')
    assert main(["stage", "tokenizer", "--run-dir", str(other)]) == 0  # the stage checks the HF export encodes alike
    s = json.loads((other / "tokenizer" / "manifest.json").read_text())["statistics"]
    m = s["balance"]["merges"]
    assert s["balance"]["method"] == "parity-merges" and m["target_parity"] == 1.01
    assert sum(m["chosen_for"].values()) > 0 and m["merges"] > 0
    assert s["fairness"]["max_parity"] < m["sentencepiece_max_parity"]  # fairer than SentencePiece's own merges


def test_parity_merges_need_bpe(ingested, tmp_path, capsys):  # noqa: F811
    _, cfg, _ = ingested
    conf = tmp_path / "unigram.toml"
    conf.write_text(cfg.read_text().replace("vocab_size = 2000", 'vocab_size = 2000\nmodel_type = "unigram"')
                    + '[tokenizer.balance]\nmethod = "parity-merges"\n')
    capsys.readouterr()
    assert main(["stage", "tokenizer", "--config", str(conf), "--run-dir", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "learns BPE merges" in err[0] and "unigram.toml" in err[0], err


def test_parity_merges_beyond_the_memory_budget_are_refused_before_training(ingested, tmp_path, capsys):  # noqa: F811
    # SentencePiece alone fits 0.23 GB on this sample (~0.21 GB estimated); the merges (~0.26 GB) do not
    other = balanced_copy(ingested, tmp_path, 'method = "parity-merges"\n')
    conf = tmp_path / "balanced.toml"
    conf.write_text(conf.read_text().replace("[tokenizer]\n", "[tokenizer]\nmemory_budget_gb = 0.23\n", 1))
    assert "memory_budget_gb = 0.23" in conf.read_text()
    assert main(["stage", "ingest", "--config", str(conf), "--run-dir", str(other)]) == 0
    capsys.readouterr()
    assert main(["stage", "tokenizer", "--run-dir", str(other)]) != 0
    err = capsys.readouterr().err
    assert "parity-aware merges on the planned" in err and "memory_budget_gb = 0.23" in err, err
    assert 'method = "parity-weights"' in err and not (other / "tokenizer").exists()


def test_parity_merges_without_dev_text_for_a_language_name_it(ingested, tmp_path, capsys):  # noqa: F811
    from pipeline.languages import EU_LANGUAGE_CODES, LANGUAGES

    dev = tmp_path / "dev"
    dev.mkdir()
    lines = [f"Sentence number {i} of a parallel set, with words enough to count." for i in range(40)]
    for lang in EU_LANGUAGE_CODES:
        if lang != "mt":  # Maltese has no dev file
            (dev / f"{LANGUAGES[lang].flores}.dev").write_text("\n".join(lines) + "\n", encoding="utf-8")
    other = balanced_copy(ingested, tmp_path, 'method = "parity-merges"\n')
    conf = tmp_path / "balanced.toml"
    conf.write_text(conf.read_text().replace('parallel_source = "udhr"', f'parallel_path = "{dev}"'))
    assert main(["stage", "ingest", "--config", str(conf), "--run-dir", str(other)]) == 0
    capsys.readouterr()
    assert main(["stage", "tokenizer", "--run-dir", str(other)]) != 0
    err = capsys.readouterr().err
    assert "need dev text in every language; none for mt" in err and "[tokenizer.report]" in err, err
