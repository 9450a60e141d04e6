"""Packing documents into fixed-length rows: the one definition training and evaluation share.

A row holds `seq_len` (input, label, position) triples. Each document is read as BOS + its tokens (which end
with EOS): inputs and labels shift *within* the document, positions restart at 0 at each document and at the
start of each row, so attention can be masked per document (torchtitan's text datasets do the same). A
document longer than the room left continues in the next row, without the earlier context.

Training (`PackedSequences`) packs an endless stream and saves its place; evaluation (`pack_documents`)
packs a fixed list and pads the last row. Both call `fill_segment`, so a document is scored under exactly the
conditions it is trained under; tests/shards compares their rows.
"""

from __future__ import annotations

import copy
from typing import Any, Iterator, Protocol

import numpy as np

PAD_LABEL = -1  # labels of padding (never scored)


def fill_segment(inputs: np.ndarray, labels: np.ndarray, positions: np.ndarray, filled: int, doc: np.ndarray,
                 head: int, bos: int) -> int:
    """Write the next segment of `doc` into a row that holds `filled` triples, starting at pair `head` of the
    document (pair j is (BOS + doc)[j] -> doc[j]); returns how many pairs it wrote."""
    take = min(len(inputs) - filled, len(doc) - head)
    if take <= 0:
        return 0
    if head == 0:
        inputs[filled] = bos
        inputs[filled + 1 : filled + take] = doc[: take - 1]
    else:
        inputs[filled : filled + take] = doc[head - 1 : head - 1 + take]
    labels[filled : filled + take] = doc[head : head + take]
    # Positions restart at 0 in every segment: a segment starts a document or is the row's first, continuing one,
    # which torchtitan's document mask needs to start at 0 too. Attention never crosses rows, so nothing is lost.
    positions[filled : filled + take] = _counting(take)
    return take


_COUNTING = np.arange(1 << 16, dtype=np.int64)


def _counting(n: int) -> np.ndarray:
    """0, 1, ..., n - 1 without an allocation per segment (rows are packed at tens of millions of tokens/s)."""
    global _COUNTING
    if n > len(_COUNTING):
        _COUNTING = np.arange(max(n, 2 * len(_COUNTING)), dtype=np.int64)
    return _COUNTING[:n]


def pack_documents(docs: list[np.ndarray], seq_len: int, bos: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every document in order, packed into rows (inputs, labels, positions) of `seq_len`; the last row is padded
    with BOS inputs, PAD_LABEL labels and positions counting on from 0."""
    rows_i, rows_l, rows_p = [], [], []
    row = _empty_row(seq_len, bos)
    filled = 0
    for doc in docs:
        head = 0
        while head < len(doc):
            took = fill_segment(*row, filled, doc, head, bos)
            head, filled = head + took, filled + took
            if filled == seq_len:
                for out, part in zip((rows_i, rows_l, rows_p), row):
                    out.append(part)
                row, filled = _empty_row(seq_len, bos), 0
    if filled:
        row[2][filled:] = np.arange(seq_len - filled)
        for out, part in zip((rows_i, rows_l, rows_p), row):
            out.append(part)
    shape = (len(rows_i), seq_len)
    return tuple(np.asarray(r, np.int64).reshape(shape) for r in (rows_i, rows_l, rows_p))  # type: ignore[return-value]


def _empty_row(seq_len: int, bos: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return (np.full(seq_len, bos, np.int64), np.full(seq_len, PAD_LABEL, np.int64), np.zeros(seq_len, np.int64))


class DocumentStream(Protocol):
    """What PackedSequences reads from (europa_model/data/streams.py MixtureStream)."""

    draws: int

    def next_doc(self) -> tuple[str, list[int], np.ndarray]: ...
    def state(self) -> dict[str, Any]: ...
    def restore(self, state: dict[str, Any]) -> None: ...


class PackedSequences:
    """Rows of `seq_len` (input, label, position) tokens from a document stream, with an exact resume.

    Its state is the stream's state before the oldest document still buffered plus how many of that
    document's pairs were already emitted: restoring replays nothing but that one document.
    """

    def __init__(self, stream: DocumentStream, seq_len: int, bos_id: int):
        self.stream, self.seq_len, self.bos = stream, seq_len, bos_id
        # Buffered documents, oldest first: (draws before, language, its stream state before, tokens). Enough
        # to roll the stream back to just before the oldest one, without snapshotting all languages per draw.
        self._buffered: list[tuple[int, str, list[int], np.ndarray]] = []
        self._head = 0  # input/label pairs of the oldest buffered document already emitted
        self.rows = 0

    def _fetch(self) -> None:
        draws = self.stream.draws
        lang, before, doc = self.stream.next_doc()
        self._buffered.append((draws, lang, before, doc))

    def next_row(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        n = self.seq_len
        inputs, labels, positions = np.empty(n, np.int64), np.empty(n, np.int64), np.empty(n, np.int64)
        filled = 0
        while filled < n:
            if not self._buffered:
                self._fetch()
            doc = self._buffered[0][3]
            took = fill_segment(inputs, labels, positions, filled, doc, self._head, self.bos)
            self._head += took
            filled += took
            if self._head == len(doc):
                self._buffered.pop(0)
                self._head = 0
        self.rows += 1
        return inputs, labels, positions

    def __iter__(self) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        while True:
            yield self.next_row()

    def state_dict(self) -> dict[str, Any]:
        state = self.stream.state()
        for draws, lang, before, _ in reversed(self._buffered):  # roll back to before the oldest buffered doc
            state["draws"], state["streams"][lang] = draws, list(before)
        return {"stream": state, "head": self._head, "rows": self.rows}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.stream.restore(copy.deepcopy(state["stream"]))
        self._buffered, self._head, self.rows = [], 0, state["rows"]
        if state["head"]:
            self._fetch()
            self._head = state["head"]
