"""One packing core for training and evaluation: the rows evaluation scores are the rows training sees."""

from __future__ import annotations

import numpy as np

from europa_model.data.packing import PAD_LABEL, PackedSequences, pack_documents


class ListStream:
    """A document stream over a fixed list (what MixtureStream yields, without shards): one language."""

    def __init__(self, docs: list[np.ndarray]):
        self.docs, self.draws = docs, 0

    def next_doc(self):
        doc = self.docs[self.draws % len(self.docs)]
        before = [self.draws]
        self.draws += 1
        return "xx", before, doc

    def state(self):
        return {"draws": self.draws, "streams": {"xx": [self.draws]}}

    def restore(self, state):
        self.draws = state["draws"]


def docs_of(lengths: list[int], eos: int = 2) -> list[np.ndarray]:
    rng = np.random.default_rng(7)
    return [np.append(rng.integers(4, 1000, n - 1), eos).astype(np.int64) for n in lengths]


def test_evaluation_rows_equal_training_rows_for_the_same_documents():
    seq_len, bos = 16, 1
    docs = docs_of([3, 16, 17, 40, 5, 1, 9, 33])  # shorter than, equal to and longer than a row
    inputs, labels, positions = pack_documents(docs, seq_len, bos)
    training = PackedSequences(ListStream(docs), seq_len, bos)
    full_rows = sum(len(d) for d in docs) // seq_len
    for r in range(full_rows):
        ti, tl, tp = training.next_row()
        assert (inputs[r] == ti).all() and (labels[r] == tl).all() and (positions[r] == tp).all(), r
    # the last, partial row: the same pairs as training's next row, then padding that is never scored
    ti, tl, tp = training.next_row()
    n = sum(len(d) for d in docs) - full_rows * seq_len
    assert (inputs[-1][:n] == ti[:n]).all() and (labels[-1][:n] == tl[:n]).all() and (positions[-1][:n] == tp[:n]).all()
    assert (labels[-1][n:] == PAD_LABEL).all() and (inputs[-1][n:] == bos).all()
    assert len(inputs) == full_rows + 1


def test_every_pair_of_every_document_is_scored_once():
    seq_len, bos = 8, 1
    docs = docs_of([4, 8, 9, 20, 2])
    _, labels, positions = pack_documents(docs, seq_len, bos)
    scored = labels[labels != PAD_LABEL]
    assert scored.tolist() == np.concatenate(docs).tolist()  # each document's tokens, in order, once
    assert (positions[:, 0] == 0).all()  # every row starts a segment
