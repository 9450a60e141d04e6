"""Parity-aware BPE (Foroutan et al. 2025): each merge is the most frequent pair of the language that is
currently the most expensive on a parallel dev text, so the vocabulary goes where the worst language needs it.

SentencePiece has no such option, so the merges are learned here and written into a copy of a SentencePiece
BPE model trained on the same sample (the template): its trainer spec, normalizer, control, user-defined and byte
pieces and its character set stay as SentencePiece chose them; only the merged pieces and their order are
replaced. SentencePiece then encodes with them as with its own merges (highest-scoring piece first), so the
tokenizer stage's report, the Hugging Face export and the dataloader see an ordinary SentencePiece model.

The pre-tokenization mirrors the trainer options stages/tokenizer/train.py sets, as read from the pieces
SentencePiece produces with them: "▁" starts every word and may join anything after it; digits stay single; a
piece never mixes letters of two scripts or letters with punctuation. Words are cut at those boundaries into
segments once, so every pair inside a segment is a legal merge (up to max_piece_chars).

With a target parity, a merge is chosen for the worst language only while that language is over the target, and
by classic BPE (the most frequent pair over all languages) otherwise: every merge the goal does not need keeps
the overall compression. Fed the parity-weights sample (stages/tokenizer/balance.py) it has less to correct.

This is pure Python: a 6.5M-character sample of 24 languages trains in minutes (bench/tokenizer_bench.py). It is
not sized for the full run's 20-billion-character sample.
"""

from __future__ import annotations

import heapq
import time
import unicodedata
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

WS = "▁"


def char_class(c: str) -> str:
    """'' for characters that join anything (the word marker, combining marks), 'D' for digits, else the
    script of a letter (the first word of its Unicode name) or 'P' for punctuation and symbols."""
    if c == WS:
        return ""
    cat = unicodedata.category(c)
    if cat[0] == "M":
        return ""
    if cat == "Nd":
        return "D"
    if cat[0] == "L":
        name = unicodedata.name(c, "")
        return name.split(" ", 1)[0] if name else "L"
    return "P"


def segments(line: str, known: set[str] | frozenset[str]) -> Iterable[str]:
    """The pieces of a line no merge may cross, each a string of known characters (unknown ones are byte
    fallback for SentencePiece and never merge)."""
    text = WS + line.replace(" ", WS)
    start = 0
    prev = None  # class of the last non-joining character in the current segment
    for i, c in enumerate(text):
        if c == WS and i > start and text[i - 1] != WS:  # a word begins; whitespace runs stay together
            yield text[start:i]
            start, prev = i, None
            continue
        cls = char_class(c) if c in known else None
        if cls is None or cls == "D" or (cls and prev and cls != prev):
            if i > start:
                yield text[start:i]
            if cls is None or cls == "D":
                if cls == "D":
                    yield c
                start, prev = i + 1, None
                continue
            start = i
        if cls:
            prev = cls
    if start < len(text):
        yield text[start:]


@dataclass
class _Corpus:
    """Distinct segments with their counts, as symbol-id lists, and where each pair occurs."""

    words: list[list[int]] = field(default_factory=list)
    lang: list[int] = field(default_factory=list)
    count: list[int] = field(default_factory=list)
    where: dict[tuple[int, int], set[int]] = field(default_factory=lambda: defaultdict(set))

    def add(self, counts: Counter, lang: int, ids: dict[str, int]) -> None:
        for seg, n in counts.items():
            w = [ids[c] for c in seg]
            s = len(self.words)
            self.words.append(w)
            self.lang.append(lang)
            self.count.append(n)
            for p in zip(w, w[1:]):
                self.where[p].add(s)


@dataclass(frozen=True)
class ParityBPE:
    model: Path
    merges: int
    chosen_for: dict[str, int]  # language -> merges chosen for it as the most expensive language
    seconds: float
    dev_tokens: dict[str, int]  # language -> tokens on the dev text with the learned merges (own count, before SentencePiece)


def train_parity_bpe(samples: dict[str, Path], dev: dict[str, list[str]], template: Path, out: Path,
                     target_parity: float | None = None, reference: str = "en", max_piece_chars: int = 16,
                     note: Callable[[str], None] = lambda _: None) -> ParityBPE:
    """Learn as many merges as `template` (a SentencePiece BPE model) has, on `samples` (one text file per
    language), and write the model to `out`. While the most expensive language on `dev` (the same texts in every
    language) costs more than `target_parity` times `reference`, the merge is that language's most frequent
    pair; otherwise, and always once it has none left, the most frequent pair overall (classic BPE). Without a
    target every merge is chosen for the worst language, as in the paper."""
    from sentencepiece import sentencepiece_model_pb2 as pb

    t0 = time.perf_counter()
    proto = pb.ModelProto()
    proto.ParseFromString(template.read_bytes())
    if proto.trainer_spec.model_type != pb.TrainerSpec.BPE:
        raise ValueError(f"{template}: parity-aware merges need a BPE template, not {pb.TrainerSpec.ModelType.Name(proto.trainer_spec.model_type)}")
    normal = pb.ModelProto.SentencePiece.NORMAL
    first_normal = next(i for i, p in enumerate(proto.pieces) if p.type == normal)
    chars = [p.piece for p in proto.pieces if p.type == normal and len(p.piece) == 1]
    n_merges = sum(1 for p in proto.pieces if p.type == normal) - len(chars)
    known = frozenset(chars)
    languages = sorted(samples)
    if reference not in languages:
        raise ValueError(f"parity-aware merges measure parity against {reference!r}, which has no sample")
    missing = [lang for lang in languages if not dev.get(lang)]
    if missing:
        raise ValueError(f"parity-aware merges need dev text in every language; none for {', '.join(missing)}")

    symbols = list(chars)
    ids = {c: i for i, c in enumerate(symbols)}
    train, held = _Corpus(), _Corpus()
    for li, lang in enumerate(languages):
        counts: Counter = Counter()
        with open(samples[lang], encoding="utf-8") as f:
            for line in f:
                counts.update(segments(line.rstrip("\n"), known))
        train.add(counts, li, ids)
        held.add(Counter(s for line in dev[lang] for s in segments(line, known)), li, ids)
    # byte-fallback characters cost their UTF-8 bytes on the dev text whatever is merged
    fallback = [sum(len(c.encode("utf-8")) for line in dev[lang] for c in WS + line.replace(" ", WS) if c not in known)
                for lang in languages]
    dev_tokens = [fallback[li] for li in range(len(languages))]
    for s, w in enumerate(held.words):
        dev_tokens[held.lang[s]] += len(w) * held.count[s]
    note(f"parity-aware BPE: {len(train.words):,} distinct segments, {len(chars):,} characters, {n_merges:,} merges to learn")

    per_lang: list[Counter] = [Counter() for _ in languages]
    total: Counter = Counter()
    for s, w in enumerate(train.words):
        for p in zip(w, w[1:]):
            per_lang[train.lang[s]][p] += train.count[s]
            total[p] += train.count[s]
    length = [1] * len(symbols)

    def key(p: tuple[int, int]) -> tuple[str, str]:
        return symbols[p[0]], symbols[p[1]]

    heaps: list[list] = [[(-n, key(p), p) for p, n in c.items()] for c in per_lang]
    global_heap = [(-n, key(p), p) for p, n in total.items()]
    for h in (*heaps, global_heap):
        heapq.heapify(h)

    def pop_best(heap: list, counts: Counter) -> tuple[int, int] | None:
        while heap:
            n, _, p = heap[0]
            if counts.get(p, 0) != -n or n == 0 or length[p[0]] + length[p[1]] > max_piece_chars:
                heapq.heappop(heap)  # stale, or a piece too long to keep
                continue
            return p
        return None

    reference = languages.index(reference)
    chosen_for: Counter = Counter()
    merges: list[str] = []
    for step in range(n_merges):
        worst = max(range(len(languages)), key=lambda li: (dev_tokens[li], -li))
        if target_parity is not None and dev_tokens[worst] <= target_parity * dev_tokens[reference]:
            p = pop_best(global_heap, total)
        else:
            p = pop_best(heaps[worst], per_lang[worst])
            if p is None:  # the worst language has nothing left to merge: the most frequent pair overall
                p = pop_best(global_heap, total)
            else:
                chosen_for[languages[worst]] += 1
        if p is None:
            break
        new = len(symbols)
        symbols.append(symbols[p[0]] + symbols[p[1]])
        length.append(length[p[0]] + length[p[1]])
        merges.append(symbols[new])
        touched: set[tuple[int, tuple[int, int]]] = set()
        for s in train.where.pop(p, ()):
            old = _apply(train, s, p, new)
            if old is None:
                continue
            li, n = train.lang[s], train.count[s]
            for q in zip(old, old[1:]):
                per_lang[li][q] -= n
                total[q] -= n
                touched.add((li, q))
            w = train.words[s]
            for q in zip(w, w[1:]):
                per_lang[li][q] += n
                total[q] += n
                touched.add((li, q))
        for li, q in touched:
            heapq.heappush(heaps[li], (-per_lang[li][q], key(q), q))
        for q in {q for _, q in touched}:
            heapq.heappush(global_heap, (-total[q], key(q), q))
        for s in held.where.pop(p, ()):
            old = _apply(held, s, p, new)
            if old is not None:
                dev_tokens[held.lang[s]] -= (len(old) - len(held.words[s])) * held.count[s]
        if (step + 1) % 4000 == 0 or step + 1 == n_merges:
            worst = max(range(len(languages)), key=lambda li: dev_tokens[li])
            note(f"parity-aware BPE: {step + 1:,}/{n_merges:,} merges; most expensive on dev: {languages[worst]} "
                 f"parity {dev_tokens[worst] / dev_tokens[reference]:.3f}")

    _write(proto, first_normal, merges, chars, out)
    return ParityBPE(model=out, merges=len(merges), chosen_for=dict(sorted(chosen_for.items())),
                     seconds=round(time.perf_counter() - t0, 1),
                     dev_tokens={lang: dev_tokens[li] for li, lang in enumerate(languages)})


def _apply(corpus: _Corpus, s: int, p: tuple[int, int], new: int) -> list[int] | None:
    """Merge pair p into `new` in segment s and index its new pairs; returns the segment before, or None
    when it no longer has the pair (the index keeps segments a pair has left)."""
    w = corpus.words[s]
    a, b = p
    out: list[int] = []
    i = 0
    while i < len(w):
        if i + 1 < len(w) and w[i] == a and w[i + 1] == b:
            out.append(new)
            i += 2
        else:
            out.append(w[i])
            i += 1
    if len(out) == len(w):
        return None
    for q in zip(out, out[1:]):
        corpus.where[q].add(s)
    corpus.words[s] = out
    return w


def _write(proto, first_normal: int, merges: list[str], chars: list[str], out: Path) -> None:
    """The template with its normal pieces replaced: merges first, scored by rank as SentencePiece's BPE
    trainer scores them, then the characters."""
    from sentencepiece import sentencepiece_model_pb2 as pb

    normal = pb.ModelProto.SentencePiece.NORMAL
    head = list(proto.pieces[:first_normal])
    tail = [p for p in proto.pieces[first_normal:] if p.type != normal]
    del proto.pieces[:]
    for p in head:
        proto.pieces.append(p)
    for rank, piece in enumerate([*merges, *chars]):
        proto.pieces.append(pb.ModelProto.SentencePiece(piece=piece, score=-float(rank), type=normal))
    for p in tail:
        proto.pieces.append(p)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(proto.SerializeToString())
    with open(out.with_suffix(".vocab"), "w", encoding="utf-8") as f:  # as spm_train writes it beside the model
        for p in proto.pieces:
            f.write(f"{p.piece}\t{p.score:g}\n")
