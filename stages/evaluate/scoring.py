"""Load a training checkpoint into the EUROPA model and score texts: NLL, token accuracy, in bounded batches.

Texts are packed into rows by the same code as the training rows (europa_model/data/packing.py: BOS + document,
positions restarting at each document and at the start of each row, attention masked per document), so a
document is scored under the conditions it is trained under. Memory is one batch of logits (batch_size x
seq_len x vocab) at a time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from europa_model.data.packing import pack_documents
from pipeline.errors import EuropaError


class CheckpointError(EuropaError):
    """A checkpoint that cannot be read; the message names it."""


@dataclass
class Score:
    """One (set, language): per document its NLL (nats, float64), tokens scored and UTF-8 bytes, and the tokens
    predicted right. Documents are the sampling unit of the standard errors (tokens of one text are not
    independent draws)."""

    doc_nll: np.ndarray
    doc_tokens: np.ndarray
    doc_bytes: np.ndarray
    correct: int

    @property
    def nll(self) -> float:
        return float(self.doc_nll.sum())

    @property
    def tokens(self) -> int:
        return int(self.doc_tokens.sum())

    def figures(self) -> dict[str, float]:
        n_bytes = int(self.doc_bytes.sum())
        return {
            "loss": self.nll / self.tokens,
            "bits_per_byte": self.nll / (n_bytes * math.log(2)),
            "bits_per_byte_stderr": ratio_stderr(self.doc_nll / math.log(2), self.doc_bytes),
            "token_accuracy": self.correct / self.tokens,
            "tokens": self.tokens,
            "bytes": n_bytes,
            "documents": len(self.doc_nll),
        }


def ratio_stderr(y: np.ndarray, x: np.ndarray) -> float | None:
    """Standard error of sum(y) / sum(x) over n documents (the ratio estimator's linearisation:
    sqrt(n / (n - 1) * sum((y_i - r x_i)^2)) / sum(x)); None with fewer than 2 documents."""
    y, x = np.asarray(y, np.float64), np.asarray(x, np.float64)
    n = len(y)
    if n < 2 or x.sum() <= 0:
        return None
    r = y.sum() / x.sum()
    return float(math.sqrt(n / (n - 1) * float(((y - r * x) ** 2).sum())) / x.sum())


def load_model(checkpoint: Path, flavor: str, vocab_size: int, device: str, routing: dict | None = None):
    """The model of `flavor`, whole in this process, with the weights of a torchtitan DCP checkpoint; `routing`:
    the node-limited routing it was trained with (europa_model.checkpoints.ModelInfo.routing)."""
    import torch

    from europa_model.train_compat import apply_for_training

    apply_for_training(device)
    from europa_model.flavors import build_model_args

    config = build_model_args(flavor, vocab_size, **(routing or {}))
    with torch.device("meta"):
        model = config.build()
    model.to_empty(device=device)
    with torch.no_grad():
        model.init_weights(buffer_device=None)
    load_weights(model, checkpoint, flavor, vocab_size, distributed=False)
    return model.eval()


def load_weights(model, checkpoint: Path, flavor: str, vocab_size: int, *, distributed: bool) -> None:
    """The model keys of a DCP checkpoint into `model` (whole, or sharded over the process group when
    `distributed`: every rank calls this, DCP reads each rank's part); CheckpointError names a damaged one."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.checkpoint.api import CheckpointException

    state = model.state_dict()
    try:
        stored = set(FileSystemReader(str(checkpoint)).read_metadata().state_dict_metadata)
    except Exception as e:  # noqa: BLE001 - any unreadable metadata is the same problem for the user
        raise CheckpointError(f"checkpoint {checkpoint}: unreadable metadata ({type(e).__name__}: {e}); "
                              "it is damaged or was not written by this pipeline") from None
    params = {name for name, _ in model.named_parameters()}
    absent = sorted(params - stored)
    if absent:
        raise CheckpointError(f"checkpoint {checkpoint}: lacks {len(absent)} model weights (e.g. {absent[0]}); it does not "
                              f"hold a {flavor} model with vocabulary {vocab_size}")
    wanted = {k: v for k, v in state.items() if k in stored}
    try:
        dcp.load(wanted, checkpoint_id=str(checkpoint), no_dist=not distributed)
    except (Exception, CheckpointException) as e:  # noqa: BLE001 - DCP's CheckpointException is a BaseException
        cause = str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__
        raise CheckpointError(f"checkpoint {checkpoint}: cannot be loaded ({cause[:200]}); "
                              "the files are damaged or incomplete") from None
    if not distributed:
        model.load_state_dict({**state, **wanted})


def token_losses(model, inputs: np.ndarray, labels: np.ndarray, positions: np.ndarray, *, batch_size: int,
                 device: str) -> tuple[np.ndarray, np.ndarray]:
    """Per scored position of packed rows: the NLL (nats, 0 where the label is padding) and whether the argmax
    was right; one forward pass per `batch_size` rows."""
    import torch

    nll = np.zeros(labels.shape, np.float64)
    right = np.zeros(labels.shape, bool)
    with torch.no_grad():
        for a in range(0, len(inputs), batch_size):
            x = torch.from_numpy(inputs[a : a + batch_size]).to(device)
            y = torch.from_numpy(labels[a : a + batch_size]).to(device)
            pos = torch.from_numpy(positions[a : a + batch_size]).to(device)
            logits = model(x, positions=pos, attention_masks=model.get_attention_masks(positions=pos)).float()
            valid = y >= 0
            picked = torch.log_softmax(logits, dim=-1).gather(-1, y.clamp(min=0).unsqueeze(-1)).squeeze(-1)
            nll[a : a + batch_size] = (-(picked * valid)).double().cpu().numpy()
            right[a : a + batch_size] = ((logits.argmax(-1) == y) & valid).cpu().numpy()
    return nll, right


def per_document(nll: np.ndarray, right: np.ndarray, labels: np.ndarray, docs: list[np.ndarray],
                 doc_bytes: list[int]) -> Score:
    """Packed rows' token losses back to their documents: the scored labels, in row-major order, are the
    documents' tokens in order (europa_model/data/packing.py), each document contributing len(doc) of them."""
    valid = labels.reshape(-1) >= 0
    flat = nll.reshape(-1)[valid]
    lengths = np.asarray([len(d) for d in docs], np.int64)
    if len(flat) != int(lengths.sum()):
        raise AssertionError(f"{len(flat)} scored labels for documents of {int(lengths.sum())} tokens")
    bounds = np.concatenate([[0], np.cumsum(lengths)])
    sums = np.add.reduceat(flat, bounds[:-1]) if len(flat) else np.zeros(0)
    return Score(doc_nll=sums, doc_tokens=lengths, doc_bytes=np.asarray(doc_bytes, np.int64),
                 correct=int(right.reshape(-1)[valid].sum()))


def score(model, docs: list[np.ndarray], doc_bytes: list[int], *, seq_len: int, batch_size: int, bos: int,
          device: str) -> Score:
    """The documents of one (set, language), scored the way they are trained (packed rows, per-document
    attention)."""
    inputs, labels, positions = pack_documents(docs, seq_len, bos)
    nll, right = token_losses(model, inputs, labels, positions, batch_size=batch_size, device=device)
    return per_document(nll, right, labels, docs, doc_bytes)
