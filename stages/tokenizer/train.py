"""SentencePiece training with the options the rest of the pipeline relies on.

Fixed choices (not settings) and why:
- normalization "identity": ingest already normalized to NFC; any further rewriting would make the
  Hugging Face export (hf_export.py) and the text the model sees differ from the text we filtered;
- byte_fallback: no <unk> for unseen characters in any of the 24 languages (or in code, emoji, names);
- split_digits: numbers are learned digit by digit, the same in every language;
- remove_extra_whitespaces off, whitespace-only pieces allowed: indentation and layout survive round trips;
- ids 0..3 = <unk>, <s>, </s>, <pad>: what the model and torchtitan's tokenizer config expect.
"""

from __future__ import annotations

import re
from pathlib import Path

from stages.tokenizer.config import TokenizerConfig

UNK, BOS, EOS, PAD = "<unk>", "<s>", "</s>", "<pad>"


class VocabularyTooLarge(ValueError):
    def __init__(self, asked: int, maximum: int):
        super().__init__(f"vocab_size {asked} is more than the sample supports (at most {maximum})")
        self.asked, self.maximum = asked, maximum


def special_tokens(cfg: TokenizerConfig) -> list[str]:
    return [f"<|reserved_{i}|>" for i in range(cfg.reserved_tokens)] + list(cfg.user_defined_symbols)


def train_sentencepiece(inputs: list[Path], model_prefix: Path, cfg: TokenizerConfig, seed: int,
                        input_sentence_size: int | None = None) -> Path:
    """Train on the input files; SentencePiece loads at most `input_sentence_size` of their lines (a uniform
    random subset when there are more; default cfg.max_sentences): the bound that keeps its memory in budget."""
    import sentencepiece as spm

    spm.set_random_generator_seed(seed)
    try:
        spm.SentencePieceTrainer.train(
            input=[str(p) for p in inputs],
            model_prefix=str(model_prefix),
            model_type=cfg.model_type,
            vocab_size=cfg.vocab_size,
            character_coverage=cfg.character_coverage,
            input_sentence_size=input_sentence_size or cfg.max_sentences,
            shuffle_input_sentence=True,
            max_sentence_length=cfg.sample.max_line_chars * 4,  # bytes
            num_threads=cfg.num_threads,
            byte_fallback=True,
            normalization_rule_name="identity",
            add_dummy_prefix=True,
            remove_extra_whitespaces=False,
            split_digits=True,
            allow_whitespace_only_pieces=True,
            user_defined_symbols=special_tokens(cfg),
            unk_id=0, bos_id=1, eos_id=2, pad_id=3,
            unk_piece=UNK, bos_piece=BOS, eos_piece=EOS, pad_piece=PAD,
            hard_vocab_limit=True,
            minloglevel=2,
        )
    except RuntimeError as e:
        m = re.search(r"Vocabulary size (?:is )?too high \((\d+)\)\. Please set it to a value <= (\d+)", str(e))
        if m:
            raise VocabularyTooLarge(int(m[1]), int(m[2])) from None
        raise
    model = model_prefix.parent / f"{model_prefix.name}.model"
    _strip_local_paths(model)
    return model


def _strip_local_paths(model: Path) -> None:
    """SentencePiece stores its input paths and model prefix in the model: machine-specific, so identical
    training in another run folder would give other bytes (and leak local paths). Keep file names only."""
    from sentencepiece import sentencepiece_model_pb2 as pb

    proto = pb.ModelProto()
    proto.ParseFromString(model.read_bytes())
    names = [Path(p).parent.name + "/" + Path(p).name for p in proto.trainer_spec.input]
    del proto.trainer_spec.input[:]
    proto.trainer_spec.input.extend(names)
    proto.trainer_spec.model_prefix = model.stem
    model.write_bytes(proto.SerializeToString())
