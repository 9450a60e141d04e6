"""How much memory SentencePiece training needs, and how many sentences a memory budget allows.

SentencePiece holds every sentence it trains on, and per distinct word a chain of symbols and the pair
statistics over them: its peak grows linearly with the characters it loads (plus a part per vocabulary piece),
so a 262k vocabulary on a 20-billion-character sample needs hundreds of GB. The figures below are measured by
bench/tokenizer_bench.py (peak RSS of a training process against the sample size, at 32k and 262k pieces, on
text whose distinct words keep growing with its size, as web text's do; a linear fit through those points
over-estimates the larger samples, whose new words grow slower). docs/benchmarks.md gives the measured points.

`estimate_peak_bytes` is what the stage checks a configuration against before it reads any text;
`affordable_chars` turns the budget into SentencePiece's `input_sentence_size` bound.
"""

from __future__ import annotations

from dataclasses import dataclass

GB = 1e9


@dataclass(frozen=True)
class MemoryModel:
    base_bytes: float  # the process with the stage's imports and the trainer's fixed structures
    bytes_per_char: float  # per character of the sentences loaded
    bytes_per_piece: float  # per vocabulary piece

    def peak_bytes(self, vocab_size: int, chars: int) -> float:
        return self.base_bytes + self.bytes_per_char * chars + self.bytes_per_piece * vocab_size


# Fits to bench/tokenizer_bench.py's points (2 training threads; docs/benchmarks.md has them and the fits), rounded
# up so every measured point is covered.
MODELS: dict[str, MemoryModel] = {
    "bpe": MemoryModel(base_bytes=200e6, bytes_per_char=16.0, bytes_per_piece=600.0),
    "unigram": MemoryModel(base_bytes=200e6, bytes_per_char=24.0, bytes_per_piece=600.0),
    # stages/tokenizer/parity_bpe.py (pure Python, every distinct segment and pair of the whole sample): one
    # point, the bench's 6.5M-character, 32k sample, rounded up; it reads the whole sample, not a subset
    "parity-merges": MemoryModel(base_bytes=200e6, bytes_per_char=180.0, bytes_per_piece=600.0),
}


def estimate_peak_bytes(model_type: str, vocab_size: int, chars: int) -> float:
    return MODELS[model_type].peak_bytes(vocab_size, chars)


def affordable_chars(model_type: str, vocab_size: int, budget_bytes: float) -> int:
    """Characters of sentences whose training fits the budget (0 when not even the fixed part does)."""
    m = MODELS[model_type]
    return max(0, int((budget_bytes - m.base_bytes - m.bytes_per_piece * vocab_size) / m.bytes_per_char))


def input_sentence_size(model_type: str, vocab_size: int, budget_bytes: float, mean_line_chars: float,
                        max_sentences: int) -> int:
    """SentencePiece's `input_sentence_size`: the sentences of mean length that fit the budget, at most max_sentences."""
    fit = int(affordable_chars(model_type, vocab_size, budget_bytes) / max(mean_line_chars, 1.0))
    return max(1, min(max_sentences, fit))
