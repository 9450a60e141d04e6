"""Export a trained SentencePiece model to Hugging Face files (`tokenizer.json`, `tokenizer_config.json`)
that `tokenizers` and torchtitan's `HuggingFaceTokenizer` load and that encode exactly like the `.model`.

Why: torchtitan reads Hugging Face tokenizer folders, not `.model` files; and a model trained with one
tokenizer and fed by a slightly different one silently loses quality. So the export is not the generic
Llama conversion but one checked, piece by piece, against what SentencePiece 0.2 does with the options
this project trains with.

Required trainer options (read from the model proto; anything else raises ValueError naming the option):
  model_type bpe or unigram; byte_fallback=true; normalization_rule_name=identity (and no custom rule
  tsv); add_dummy_prefix=true; remove_extra_whitespaces=false; escape_whitespaces=true (default);
  treat_whitespace_as_suffix=false (default); unk_id=0, bos_id=1, eos_id=2, pad_id=3; no UNUSED pieces.
split_digits, allow_whitespace_only_pieces, split_by_* and max_sentencepiece_length are training-only:
they shape the vocabulary, and encoding with a given vocabulary does not read them (checked: flipping
them in a trained model's proto changes no id), so the export accepts any value of them.

What SentencePiece does with these options (verified on 0.2.x), and the matching HF pipeline:
- One "▁" is prepended to the whole text (not per line, not per segment); every ASCII space becomes "▁";
  runs of spaces are kept ("a  b" -> ▁a ▁ ▁b, " x" -> ▁ ▁x); "\\n", "\\t" and characters outside the
  vocabulary become <0xNN> byte pieces; "" encodes to [].
  -> normalizer Sequence[Prepend("▁"), Replace(" ", "▁")]. Not the Metaspace pre-tokenizer: its
  prepend_scheme "first" skips the prefix when the text already starts with "▁", i.e. with a space, so
  " hello" would lose a piece.
- User-defined symbols (the <|reserved_N|> tokens) are never split, and the dummy prefix stays in front
  of them as its own piece: "<|reserved_0|>hi" -> ▁ <|reserved_0|> hi (no "▁" before "hi"). HF
  `added_tokens` cannot reproduce that: unnormalized added tokens are cut out before normalization, so
  Prepend then puts a "▁" before every segment ("b" in "a<|r|>b" becomes "▁b"); normalized ones are
  matched as normalize(content) = "▁<|r|>", which swallows the "▁" before them, and a text that is just
  the symbol loses its "▁". So they are ordinary vocabulary entries (not listed as added tokens):
  * BPE: SentencePiece cuts them out of the normalized text first (longest match, left to right) and
    freezes them. -> Split pre-tokenizer (isolated) on a regex of the symbols, longest first, and
    ignore_merges=true so the isolated symbol maps to its id (a pre-token equal to a vocabulary entry is
    taken whole).
  * Unigram: SentencePiece does not cut them out; they are lattice nodes scored
    0.1 * (utf8_length - 1) (0.2.x, read off nbest scores), so "ti" in "rättigheter" may lose to
    "▁rätt" + "i". -> no pre-tokenizer; they are in the Unigram vocabulary with that score.
- Control pieces (<unk>, <s>, </s>, <pad>, control_symbols) are HF `added_tokens` with special=true.
  SentencePiece never matches them in text ("<s>" is encoded as the characters < s >); Hugging Face does
  (that is how templates write "<s>"), in `tokenizers` and in torchtitan, which re-adds bos/eos/pad/unk
  from tokenizer_config.json. This is the one intended difference; `Tokenizer.encode_special_tokens = True`
  (torchtitan: `hf_tok.tokenizer.encode_special_tokens = True`; the flag is not stored in tokenizer.json)
  makes HF treat them as text too, and then the ids are identical.
- BPE: SentencePiece merges, at each step, the adjacent pair whose concatenation is a normal piece with
  the highest score (leftmost on ties). HF BPE applies merges by rank, so the merges are every split
  (left, right) of every normal piece into two normal pieces, ordered by the merged piece's score, then
  by ids (the idea of transformers' SentencePieceExtractor; transformers is not needed). byte_fallback,
  fuse_unk. Byte/control/user-defined pieces are never merge targets, as in SentencePiece.
- Unigram: tokenizers' Unigram (a port of SentencePiece's optimized Viterbi) with the normal pieces'
  scores and byte_fallback. SentencePiece keeps byte/control pieces out of its lattice; tokenizers
  cannot, so they get a score of -1e9 and lose to any spelling of the same text by normal pieces.
- Decoder: Replace("▁", " "), ByteFallback, Fuse, Strip(" ", 1, 0): SentencePiece drops the space of the
  dummy prefix only, at the start of the decoded text.
- BOS/EOS: SentencePiece's encode adds neither, so tokenizer.json has no post-processor and
  tokenizer_config.json says add_bos_token=false, add_eos_token=false: `encode(text)` in all three
  libraries gives the same ids. torchtitan's HuggingFaceTokenizer finds bos_id/eos_id through the
  bos_token/eos_token entries of tokenizer_config.json and adds them when asked
  (`encode(text, add_bos=True, add_eos=True)`, which its text datasets do).

Residual differences (found by `check_equivalence`; the export warns where a model makes them possible):
- BPE with user-defined symbols: a text segment right after a user-defined symbol that is exactly the
  name of a byte or control piece ("<|reserved_0|><0x41>" as the whole text) is taken whole. (A segment
  equal to a normal piece is safe: the export checks that SentencePiece reaches every piece by merging.)
- Unigram: (1) a literal "<0x41>" or "<s>" whose characters (e.g. "<") are not pieces becomes that id in
  HF (never once "<" ">" "/" "|" "_" are pieces, as in any web corpus; the export warns otherwise).
  (2) Exact ties between orderings of the same pieces (e.g. 4 spaces = ▁▁▁+▁ or ▁+▁▁▁): SentencePiece
  adds scores in float32, so rounding picks the winner; tokenizers adds in float64, gets an exact tie
  and keeps the first. This cannot be expressed in tokenizer.json; random strings with whitespace runs
  sometimes differ, natural-language paragraphs in none found. BPE (the default) has no such case.
"""

from __future__ import annotations

import json
import re
import warnings
from pathlib import Path
from typing import Any, Iterable

import numpy as np

SPACE = "▁"  # U+2581, SentencePiece's whitespace symbol
_HIDDEN_SCORE = -1e9  # Unigram score of byte/control pieces: never preferred to normal pieces

# SentencePiece ModelProto.SentencePiece.Type values
_NORMAL, _UNKNOWN, _CONTROL, _USER_DEFINED, _BYTE, _UNUSED = 1, 2, 3, 4, 6, 5
_SPECIAL_IDS = {"unk_id": 0, "bos_id": 1, "eos_id": 2, "pad_id": 3}
_SCALAR = r'("(?:[^"\\]|\\.)*"|-?[0-9][0-9.eE+-]*)'
_PAIR = re.compile(r"\[\n\s*" + _SCALAR + r",\n\s*" + _SCALAR + r"\n\s*\]")


def _load_proto(model_path: Path) -> Any:
    try:
        from sentencepiece import sentencepiece_model_pb2 as pb
    except ImportError:  # pragma: no cover - sentencepiece < 0.1.99 did not ship it
        import sentencepiece_model_pb2 as pb  # type: ignore[no-redef]
    m = pb.ModelProto()
    m.ParseFromString(Path(model_path).read_bytes())
    return m


def _validate(m: Any) -> None:
    """Refuse models whose encoding the HF pipeline below would not reproduce."""
    ts, ns = m.trainer_spec, m.normalizer_spec
    model_type = {1: "unigram", 2: "bpe", 3: "word", 4: "char"}.get(ts.model_type, str(ts.model_type))

    def need(ok: bool, option: str, want: str, got: Any) -> None:
        if not ok:
            raise ValueError(f"SentencePiece model not exportable: trainer option {option} must be {want} "
                             f"(this model has {got!r}); retrain with {option}={want}")

    need(model_type in ("bpe", "unigram"), "model_type", "bpe or unigram", model_type)
    need(ts.byte_fallback, "byte_fallback", "true", ts.byte_fallback)
    need(ns.name == "identity" and not ns.precompiled_charsmap, "normalization_rule_name", "identity", ns.name)
    need(ns.add_dummy_prefix, "add_dummy_prefix", "true", ns.add_dummy_prefix)
    need(not ns.remove_extra_whitespaces, "remove_extra_whitespaces", "false", ns.remove_extra_whitespaces)
    need(ns.escape_whitespaces, "escape_whitespaces", "true", ns.escape_whitespaces)
    need(not ts.treat_whitespace_as_suffix, "treat_whitespace_as_suffix", "false", ts.treat_whitespace_as_suffix)
    need(not m.denormalizer_spec.precompiled_charsmap, "denormalization_rule_tsv", "unset", m.denormalizer_spec.name)
    for option, want in _SPECIAL_IDS.items():
        need(getattr(ts, option) == want, option, str(want), getattr(ts, option))
    types = [p.type for p in m.pieces]
    need(types[0] == _UNKNOWN and all(t == _CONTROL for t in types[1:4]), "unk_id/bos_id/eos_id/pad_id",
         "0/1/2/3 (unknown + control pieces)", types[:4])
    need(_UNUSED not in types, "(no UNUSED pieces)", "absent", "UNUSED pieces")
    n_bytes = sum(t == _BYTE for t in types)
    need(n_bytes == 256, "byte_fallback", "true (256 byte pieces)", n_bytes)


def _regex_escape(s: str) -> str:
    """Oniguruma-safe literal: every ASCII non-alphanumeric as \\x{HH} (re.escape's "\\<" is a word boundary there)."""
    return "".join(c if c.isalnum() or c == "_" else "\\x{%X}" % ord(c) for c in s)


def _bpe_merges(m: Any) -> list[list[str]]:
    """Every split of a normal piece into two normal pieces, by the merged piece's score (desc), then ids."""
    normal = {p.piece: i for i, p in enumerate(m.pieces) if p.type == _NORMAL}
    merges = []
    for piece, i in normal.items():
        for k in range(1, len(piece)):
            left, right = piece[:k], piece[k:]
            if left in normal and right in normal:
                merges.append((-m.pieces[i].score, i, normal[left], normal[right], left, right))
    merges.sort()
    return [[left, right] for *_, left, right in merges]


def _tokenizer_json(m: Any) -> dict[str, Any]:
    pieces = list(m.pieces)
    model_type = "bpe" if m.trainer_spec.model_type == 2 else "unigram"
    user_defined = sorted((p.piece for p in pieces if p.type == _USER_DEFINED), key=lambda s: (-len(s), s))
    added = [{"id": i, "content": p.piece, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True}
             for i, p in enumerate(pieces) if p.type in (_UNKNOWN, _CONTROL)]
    if model_type == "bpe":
        model: dict[str, Any] = {
            "type": "BPE", "dropout": None, "unk_token": pieces[0].piece, "continuing_subword_prefix": None,
            "end_of_word_suffix": None, "fuse_unk": True, "byte_fallback": True,
            # only needed (and only safe) to map an isolated user-defined symbol to its id
            "ignore_merges": bool(user_defined),
            "vocab": {p.piece: i for i, p in enumerate(pieces)},
            "merges": _bpe_merges(m),
        }
    else:
        # user-defined symbols: SentencePiece's GetUserDefinedScore, float32(0.1 * (utf8_length - 1))
        def score(p: Any) -> float:
            if p.type == _NORMAL:
                return float(p.score)
            if p.type == _USER_DEFINED:
                return float(np.float32(0.1 * (len(p.piece.encode("utf-8")) - 1)))
            return _HIDDEN_SCORE
        model = {"type": "Unigram", "unk_id": 0, "vocab": [[p.piece, score(p)] for p in pieces], "byte_fallback": True}
    pre_tokenizer = None
    if user_defined and model_type == "bpe":
        pre_tokenizer = {"type": "Split", "pattern": {"Regex": "|".join(map(_regex_escape, user_defined))},
                         "behavior": "Isolated", "invert": False}
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": {"type": "Sequence", "normalizers": [
            {"type": "Prepend", "prepend": SPACE},
            {"type": "Replace", "pattern": {"String": " "}, "content": SPACE},
        ]},
        "pre_tokenizer": pre_tokenizer,
        "post_processor": None,
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": SPACE}, "content": " "},
            {"type": "ByteFallback"},
            {"type": "Fuse"},
            {"type": "Strip", "content": " ", "start": 1, "stop": 0},
        ]},
        "model": model,
    }


def _tokenizer_config(m: Any) -> dict[str, Any]:
    pieces = m.pieces
    return {
        "add_bos_token": False,  # SentencePiece's encode adds neither; torchtitan adds them when asked
        "add_eos_token": False,
        "added_tokens_decoder": {
            str(i): {"content": p.piece, "lstrip": False, "normalized": False, "rstrip": False,
                     "single_word": False, "special": True}
            for i, p in enumerate(pieces) if p.type in (_UNKNOWN, _CONTROL)
        },
        "bos_token": pieces[1].piece,
        "clean_up_tokenization_spaces": False,
        "eos_token": pieces[2].piece,
        "pad_token": pieces[3].piece,
        "tokenizer_class": "PreTrainedTokenizerFast",
        "unk_token": pieces[0].piece,
    }


def _warn_residual_differences(m: Any) -> None:
    """Warn about the (rare) inputs on which this model's export cannot match SentencePiece."""
    import sentencepiece as spm

    pieces = list(m.pieces)
    user_defined = [p.piece for p in pieces if p.type == _USER_DEFINED]
    singles = {p.piece for p in pieces if p.type == _NORMAL and len(p.piece) == 1}
    if m.trainer_spec.model_type == 2 and user_defined:
        # ignore_merges takes a segment that equals a piece whole; SentencePiece must reach it by merging too.
        # SentencePiece's BPE of a segment = its encoding of that text without the dummy prefix.
        m2 = type(m)()
        m2.CopyFrom(m)
        m2.normalizer_spec.add_dummy_prefix = False
        sp = spm.SentencePieceProcessor(model_proto=m2.SerializeToString())
        normal = [(i, p.piece) for i, p in enumerate(pieces) if p.type == _NORMAL and len(p.piece) > 1
                  and not any(u in p.piece for u in user_defined)]  # those are never one segment
        got = sp.encode([p.replace(SPACE, " ") for _, p in normal])
        bad = [p for (i, p), ids in zip(normal, got) if ids != [i]]
        if bad:
            warnings.warn(f"{len(bad)} BPE piece(s) are not what SentencePiece produces for their own text, e.g. "
                          f"{bad[:5]}; a text segment equal to one of them (after a user-defined symbol, or a "
                          f"whole text) encodes differently in the Hugging Face export", stacklevel=3)
    elif m.trainer_spec.model_type == 1:
        hidden = [p.piece for p in pieces if p.type in (_BYTE, _CONTROL, _UNKNOWN)]
        exposed = sorted({c for s in hidden for c in s if c not in singles})
        if exposed:
            warnings.warn(f"characters {exposed} are not vocabulary pieces, so a literal byte or control piece "
                          f"name in text (e.g. {hidden[-1]!r}) encodes as that piece in the Hugging Face Unigram "
                          f"export; SentencePiece spells it out", stacklevel=3)


def export_hf(model_path: Path, out_dir: Path) -> list[Path]:
    """Write `tokenizer.json` and `tokenizer_config.json` for the SentencePiece model to `out_dir`.

    Returns the two paths. Same model -> same bytes (fixed key order, vocabulary in id order, merges in
    rank order). Raises ValueError naming the trainer option if the model was not trained with the
    options the export relies on (see the module docstring).
    """
    m = _load_proto(Path(model_path))
    _validate(m)
    _warn_residual_differences(m)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    tok_path, cfg_path = out_dir / "tokenizer.json", out_dir / "tokenizer_config.json"
    text = json.dumps(_tokenizer_json(m), ensure_ascii=False, indent=2)
    text = _PAIR.sub(r"[\1, \2]", text)  # merges and Unigram [piece, score] on one line each
    tok_path.write_text(text + "\n", encoding="utf-8")
    cfg_path.write_text(json.dumps(_tokenizer_config(m), ensure_ascii=False, indent=2, sort_keys=True) + "\n",
                        encoding="utf-8")
    return [tok_path, cfg_path]


def check_equivalence(model_path: Path, tokenizer_json: Path, texts: Iterable[str], *,
                      encode_special_tokens: bool = True) -> list[tuple[int, str]]:
    """(index, text) of every text whose ids differ between the `.model` and `tokenizer.json`; [] = equivalent.

    Why: the export is only useful if it is exact, and the cheapest proof is to encode real text both ways
    (the tokenizer stage runs it on its evaluation text). Neither side adds BOS/EOS.

    encode_special_tokens=True (default) compares SentencePiece's behaviour for control-token names typed
    in text ("<s>", "</s>", "<pad>", "<unk>": spelled out as characters); Hugging Face's default (False)
    turns them into the control ids, a known convention rather than an export bug, so a corpus mentioning
    "</s>" does not fail the check unless asked with False.
    """
    import sentencepiece as spm
    from tokenizers import Tokenizer

    sp = spm.SentencePieceProcessor(model_file=str(model_path))
    tok = Tokenizer.from_file(str(tokenizer_json))
    tok.encode_special_tokens = encode_special_tokens
    texts = list(texts)
    expected = sp.encode(texts) if texts else []
    got = tok.encode_batch(texts, add_special_tokens=False) if texts else []
    return [(i, t) for i, (t, e, g) in enumerate(zip(texts, expected, got)) if e != g.ids]
