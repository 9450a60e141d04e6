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
    nll: float = 0.0  # nats, summed over scored tokens
    tokens: int = 0
    correct: int = 0

    def add(self, other: Score) -> None:
        self.nll += other.nll
        self.tokens += other.tokens
        self.correct += other.correct

    def figures(self, n_bytes: int) -> dict[str, float]:
        return {
            "loss": self.nll / self.tokens,
            "bits_per_byte": self.nll / (n_bytes * math.log(2)),
            "token_accuracy": self.correct / self.tokens,
            "tokens": self.tokens,
            "bytes": n_bytes,
        }


def load_model(checkpoint: Path, flavor: str, vocab_size: int, device: str):
    """The model of `flavor` with the weights of a torchtitan DCP checkpoint (model keys only)."""
    import torch
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import FileSystemReader

    from europa_model.train_compat import apply_for_training

    apply_for_training(device)
    from europa_model.flavors import build_model_args

    config = build_model_args(flavor, vocab_size)
    with torch.device("meta"):
        model = config.build()
    model.to_empty(device=device)
    with torch.no_grad():
        model.init_weights(buffer_device=None)
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
    from torch.distributed.checkpoint.api import CheckpointException

    try:
        dcp.load(wanted, checkpoint_id=str(checkpoint), no_dist=True)
    except (Exception, CheckpointException) as e:  # noqa: BLE001 - DCP's CheckpointException is a BaseException
        cause = str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__
        raise CheckpointError(f"checkpoint {checkpoint}: cannot be loaded ({cause[:200]}); "
                              "the files are damaged or incomplete") from None
    model.load_state_dict({**state, **wanted})
    model.eval()
    return model


def score(model, docs: list[np.ndarray], *, seq_len: int, batch_size: int, bos: int, device: str) -> Score:
    import torch

    inputs, labels, positions = pack_documents(docs, seq_len, bos)
    total = Score()
    with torch.no_grad():
        for a in range(0, len(inputs), batch_size):
            x = torch.from_numpy(inputs[a : a + batch_size]).to(device)
            y = torch.from_numpy(labels[a : a + batch_size]).to(device)
            pos = torch.from_numpy(positions[a : a + batch_size]).to(device)
            logits = model(x, positions=pos, attention_masks=model.get_attention_masks(positions=pos)).float()
            logp = torch.log_softmax(logits, dim=-1)
            valid = y >= 0
            picked = logp.gather(-1, y.clamp(min=0).unsqueeze(-1)).squeeze(-1)
            total.add(Score(nll=float(-(picked * valid).sum()), tokens=int(valid.sum()),
                            correct=int(((logits.argmax(-1) == y) & valid).sum())))
    return total
