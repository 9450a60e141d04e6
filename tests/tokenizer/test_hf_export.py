"""The Hugging Face export encodes exactly like the SentencePiece model: `tokenizers` and torchtitan's
HuggingFaceTokenizer, every UDHR paragraph of the 24 EU languages plus whitespace, digits, emoji, CJK and
unseen characters, BPE and Unigram; and the exporter refuses models trained with other options."""

from __future__ import annotations

import html
import json
import os
import re
import warnings
from pathlib import Path

import pytest

os.environ.setdefault("OMP_NUM_THREADS", "1")

from stages.tokenizer.hf_export import check_equivalence, export_hf  # noqa: E402

STEMS = ("bul ces dan deu_1996 ell_monotonic eng spa est fin fra gle hrv hun ita lit lav mlt nld pol "
         "por_PT ron_2006 slk slv swe").split()
RESERVED = [f"<|reserved_{i}|>" for i in range(4)]  # user-defined symbols, as the tokenizer stage adds them
# User-defined symbols inside ordinary words: BPE always cuts them out, Unigram weighs them in the lattice
# (where they can lose to ordinary pieces), and the export must do the same.
IN_WORDS = ["tion", "ti"]
CONTROL = ["<|control_0|>"]

TRICKY = [
    "", " ", "   ", " leading", "trailing ", "  both  ", "multiple   spaces    here",
    "\n", "\n\n", "line one\nline two\n\nline four\n", "\ttab\tseparated\t", " \t \n ", "a\r\nb",
    "2024 1.5", "3,14159 12:30 1000000 007", "€100, 50 % and 3½",
    "emoji 😀👍🏽 🇪🇺 ❤️", "CJK 中文 日本語 한국어", "unseen ꙮ 𓀀 ᚠᛇᚻ", "\u00a0nbsp\u3000ideographic", "zero\u200bwidth",
    "combining e\u0301 vs \u00e9", "ALL CAPS ÄRGER ŒUVRE ΣΟΦΊΑ", "’apostrophe’s “quotes” «guillemets» „low“",
    "----- ===== ..... *****", "    def f(x):\n        return x  # two spaces", "a < b > c | d / e",
    "<|reserved_0|>", "<|reserved_0|>hello", "a<|reserved_1|>b", "x <|reserved_2|> y", " <|reserved_3|>",
    "<|reserved_0|><|reserved_1|>", "<|reserved_1|>\n", "<|reserved_10|> is not a symbol", "<|reserved_0|>  two",
    "<0x41> is text, not a byte", "<0x0A>",
]
WITH_CONTROL_LITERALS = ["<s>", "</s>", "<unk>", "<pad>", "<|control_0|>", "a <s> b </s> c", "<s>hi", "x</s>"]


def udhr_paragraphs(udhr_dir: Path) -> dict[str, list[str]]:
    out = {}
    for stem in STEMS:
        raw = (udhr_dir / f"{stem}.html").read_text(encoding="utf-8")
        blocks = re.findall(r"<(p|h[1-6]|li)\b[^>]*>(.*?)</\1>", raw, flags=re.S)
        out[stem] = [t for t in (" ".join(html.unescape(re.sub(r"<[^>]+>", "", b)).split()) for _, b in blocks) if t]
    return out


@pytest.fixture(scope="module")
def paragraphs(udhr_dir) -> dict[str, list[str]]:
    paras = udhr_paragraphs(udhr_dir)
    assert all(len(p) >= 30 for p in paras.values()), {k: len(v) for k, v in paras.items()}
    return paras


def train(tmp: Path, lines: list[str], model_type: str, vocab_size: int = 2000, **overrides) -> Path:
    import sentencepiece as spm

    corpus = tmp / "corpus.txt"
    corpus.write_text("\n".join(lines) + "\n", encoding="utf-8")
    options = dict(
        input=str(corpus), model_prefix=str(tmp / model_type), model_type=model_type, vocab_size=vocab_size,
        byte_fallback=True, normalization_rule_name="identity", add_dummy_prefix=True,
        remove_extra_whitespaces=False, split_digits=True, allow_whitespace_only_pieces=True,
        unk_id=0, bos_id=1, eos_id=2, pad_id=3, user_defined_symbols=RESERVED + IN_WORDS, control_symbols=CONTROL,
        character_coverage=0.9999, input_sentence_size=5000, shuffle_input_sentence=False, num_threads=1,
        minloglevel=2,
    )
    spm.SentencePieceTrainer.train(**{**options, **overrides})
    return tmp / f"{model_type}.model"


def corpus_lines(paragraphs: dict[str, list[str]]) -> list[str]:
    # UDHR plus a little code-like text: whitespace runs get pieces, and so do the characters of control
    # and byte piece names (< > / | _), as in any web corpus (else the Unigram export warns, see hf_export).
    extra = [f"{' ' * (4 * (i % 4))}if a_b < c{i % 7} or d > e: x = y | z / 2  # {i % 10}" for i in range(200)]
    return [p for paras in paragraphs.values() for p in paras] + extra


@pytest.fixture(scope="module", params=["bpe", "unigram"])
def exported(request, tmp_path_factory, paragraphs):
    """(sentencepiece processor, model path, HF folder) for a freshly trained model of each type."""
    import sentencepiece as spm

    tmp = tmp_path_factory.mktemp(request.param)
    model = train(tmp, corpus_lines(paragraphs), request.param)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no residual-difference warning for this model
        paths = export_hf(model, tmp / "hf")
    assert paths == [tmp / "hf" / "tokenizer.json", tmp / "hf" / "tokenizer_config.json"]
    return spm.SentencePieceProcessor(model_file=str(model)), model, tmp / "hf"


def all_texts(paragraphs) -> list[str]:
    return [p for paras in paragraphs.values() for p in paras] + TRICKY


def test_tokenizers_encodes_identically(exported, paragraphs):
    from tokenizers import Tokenizer

    sp, model, hf = exported
    tok = Tokenizer.from_file(str(hf / "tokenizer.json"))
    assert tok.get_vocab_size() == sp.get_piece_size()
    for lang, paras in paragraphs.items():
        got = [e.ids for e in tok.encode_batch(paras, add_special_tokens=False)]
        assert got == sp.encode(paras), lang
    for text in TRICKY:
        assert tok.encode(text).ids == sp.encode(text), repr(text)
    assert check_equivalence(model, hf / "tokenizer.json", all_texts(paragraphs) + WITH_CONTROL_LITERALS) == []
    # byte fallback, no <unk>: unseen characters are their UTF-8 bytes
    assert sp.encode("ꙮ", out_type=str) == ["▁", "<0xEA>", "<0x99>", "<0xAE>"] == tok.encode("ꙮ").tokens
    assert tok.encode("\n\n").tokens == ["▁", "<0x0A>", "<0x0A>"]
    # user-defined symbols are never split and keep SentencePiece's dummy prefix in front of them
    assert tok.encode("<|reserved_0|>hi").tokens[:2] == ["▁", "<|reserved_0|>"]
    assert [t for t in tok.encode("a<|reserved_1|>b").tokens if "reserved" in t] == ["<|reserved_1|>"]


def test_decode_round_trip(exported, paragraphs):
    from tokenizers import Tokenizer

    sp, _, hf = exported
    tok = Tokenizer.from_file(str(hf / "tokenizer.json"))
    for text in all_texts(paragraphs) + WITH_CONTROL_LITERALS:
        ids = sp.encode(text)
        assert tok.decode(ids) == sp.decode(ids) == text, repr(text)
    # control ids decode to nothing in both (skip_special_tokens)
    ids = [1, *sp.encode("Hello"), 2]
    assert tok.decode(ids) == sp.decode(ids) == "Hello"


def test_control_token_names_in_text(exported):
    """SentencePiece spells "<s>" out; Hugging Face's default matches it as the control token. The check
    compares SentencePiece's behaviour by default and reports the HF convention only when asked."""
    from tokenizers import Tokenizer

    sp, model, hf = exported
    tok = Tokenizer.from_file(str(hf / "tokenizer.json"))
    assert tok.encode("<s>hi").ids[0] == 1 != sp.encode("<s>hi")[0]
    tok.encode_special_tokens = True
    assert all(tok.encode(t).ids == sp.encode(t) for t in WITH_CONTROL_LITERALS)
    assert [t for _, t in check_equivalence(model, hf / "tokenizer.json", WITH_CONTROL_LITERALS + ["plain"],
                                            encode_special_tokens=False)] == WITH_CONTROL_LITERALS
    added = {i: t.content for i, t in tok.get_added_tokens_decoder().items() if t.special}
    assert added == {0: "<unk>", 1: "<s>", 2: "</s>", 3: "<pad>", 4: "<|control_0|>"}


def test_torchtitan_tokenizer(exported, paragraphs):
    # torchtitan.components.tokenizer needs only torch + tokenizers (no triton): importable on CPU.
    from torchtitan.components.tokenizer import HuggingFaceTokenizer

    sp, _, hf = exported
    tt = HuggingFaceTokenizer(tokenizer_path=str(hf))
    assert (tt.bos_id, tt.eos_id, tt.bos_token, tt.eos_token) == (1, 2, "<s>", "</s>")
    assert not tt.hf_adds_bos and not tt.hf_adds_eos and not tt.default_add_bos and not tt.default_add_eos
    assert tt.get_vocab_size() == sp.get_piece_size()  # re-adding the special tokens added nothing
    for text in all_texts(paragraphs):
        ids = sp.encode(text)
        assert tt.encode(text) == ids, repr(text)
        assert tt.encode(text, add_bos=True, add_eos=True) == [1, *ids, 2]  # what its text datasets call
        assert tt.decode(ids) == text
    tt.tokenizer.encode_special_tokens = True  # SentencePiece's literal "<s>", if wanted
    assert all(tt.encode(t) == sp.encode(t) for t in WITH_CONTROL_LITERALS)


def test_export_is_deterministic_and_config_is_what_torchtitan_reads(exported, tmp_path):
    _, model, hf = exported
    again = export_hf(model, tmp_path)
    assert [p.read_bytes() for p in again] == [(hf / p.name).read_bytes() for p in again]
    cfg = json.loads((hf / "tokenizer_config.json").read_text(encoding="utf-8"))
    want = {"bos_token": "<s>", "eos_token": "</s>", "pad_token": "<pad>", "unk_token": "<unk>",
            "add_bos_token": False, "add_eos_token": False}
    assert {k: cfg[k] for k in want} == want
    tj = json.loads((hf / "tokenizer.json").read_text(encoding="utf-8"))
    assert tj["post_processor"] is None  # neither side adds BOS/EOS in encode()
    assert list(cfg) == sorted(cfg)


def test_refuses_nmt_nfkc(tmp_path, paragraphs):
    model = train(tmp_path, [p for p in paragraphs["eng"] + paragraphs["fra"]], "bpe", vocab_size=600,
                  normalization_rule_name="nmt_nfkc")
    with pytest.raises(ValueError, match="normalization_rule_name must be identity.*'nmt_nfkc'"):
        export_hf(model, tmp_path / "hf")
    assert not (tmp_path / "hf").exists()


@pytest.mark.parametrize("section, field, value, option", [
    ("normalizer_spec", "add_dummy_prefix", False, "add_dummy_prefix"),
    ("normalizer_spec", "remove_extra_whitespaces", True, "remove_extra_whitespaces"),
    ("trainer_spec", "byte_fallback", False, "byte_fallback"),
    ("trainer_spec", "model_type", 3, "model_type"),  # word
    ("trainer_spec", "bos_id", -1, "bos_id"),
])
def test_refuses_other_options(exported, tmp_path, section, field, value, option):
    from sentencepiece import sentencepiece_model_pb2 as pb

    _, model, _ = exported
    proto = pb.ModelProto()
    proto.ParseFromString(model.read_bytes())
    setattr(getattr(proto, section), field, value)
    bad = tmp_path / "bad.model"
    bad.write_bytes(proto.SerializeToString())
    with pytest.raises(ValueError, match=rf"trainer option {option} must be"):
        export_hf(bad, tmp_path / "hf")


def test_unigram_user_defined_symbol_score(tmp_path):
    """SentencePiece's Unigram scores a user-defined symbol 0.1 * (utf8_length - 1) in the lattice. A
    hand-made model where that bonus decides: "▁atin" = ▁a + ti + n (-1 + 0.1 - 1 = -1.9) beats
    ▁at + in (-1.95), which a bonus of 0 would not."""
    import sentencepiece as spm
    from sentencepiece import sentencepiece_model_pb2 as pb
    from tokenizers import Tokenizer

    m = pb.ModelProto()
    m.trainer_spec.model_type = pb.TrainerSpec.UNIGRAM
    m.trainer_spec.byte_fallback = True
    m.trainer_spec.pad_id = 3
    m.normalizer_spec.name = "identity"
    m.normalizer_spec.add_dummy_prefix = True
    m.normalizer_spec.remove_extra_whitespaces = False
    m.normalizer_spec.escape_whitespaces = True
    Piece = pb.ModelProto.SentencePiece
    pieces = [("<unk>", 0.0, Piece.UNKNOWN), ("<s>", 0.0, Piece.CONTROL), ("</s>", 0.0, Piece.CONTROL),
              ("<pad>", 0.0, Piece.CONTROL), ("ti", 0.0, Piece.USER_DEFINED)]
    pieces += [(f"<0x{b:02X}>", 0.0, Piece.BYTE) for b in range(256)]
    pieces += [(p, -1.0, Piece.NORMAL) for p in ["▁", "a", "t", "i", "n", "▁a"]]
    pieces += [("▁at", -0.95, Piece.NORMAL), ("in", -1.0, Piece.NORMAL)]
    for text, score, kind in pieces:
        m.pieces.add(piece=text, score=score, type=kind)
    model = tmp_path / "hand.model"
    model.write_bytes(m.SerializeToString())
    sp = spm.SentencePieceProcessor(model_file=str(model))
    assert sp.encode("atin", out_type=str) == ["▁a", "ti", "n"]
    with pytest.warns(UserWarning, match=r"characters \['/', '0'.* are not vocabulary pieces"):  # no "<" piece
        tok = Tokenizer.from_file(str(export_hf(model, tmp_path / "hf")[0]))
    for text in ["atin", "at in", "tin", "ati", "a tin"]:
        assert tok.encode(text).ids == sp.encode(text), text
