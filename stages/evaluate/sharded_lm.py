"""lm-eval's loglikelihood requests answered by the sharded model on the distributed job's ranks.

A model too large for one process (FSDP2 over the ranks, experts over expert parallelism: europa_model/sharded.py)
cannot be wrapped by lm-eval's HFLM, so the distributed job (distributed.py) gives lm-eval this LM instead. Every
rank runs the same lm-eval evaluation on the same tasks (lm-eval is told rank 0 of 1, so it neither splits the
documents nor gathers them): the requests it makes are identical on every rank. Each call of
`_loglikelihood_tokens` deals the requests round-robin to the ranks, every rank runs the same number of forward
passes (a rank out of requests runs a padding row: FSDP and the all-to-all are collective), and the answers are
all-gathered, so every rank's lm-eval sees every answer and computes the same metrics; rank 0 reports them.

The encoding is HFLM's, so the figures are the in-process run's within float rounding (tests/evaluate): the
run's Hugging Face tokenizer (what the export ships), BOS before the context (add_bos_token), TemplateLM's
context/continuation split, left truncation to the model's RoPE length (HFLM's max_length for the export), and
the log-softmax of the continuation's tokens, greedy when each is the argmax.
"""

from __future__ import annotations

import numpy as np
from lm_eval.api.model import TemplateLM

PAD_LABEL = -100


def load_tokenizer(folder):
    """The run's tokenizer as HFLM loads the export's (fast, add_bos_token=True: without it the tokenizer adds no
    BOS, and every context would be scored off the distribution it was trained on)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(folder), use_fast=True, add_bos_token=True)


class ShardedLM(TemplateLM):
    """Loglikelihood only: generation and rolling loglikelihood (perplexity tasks) are refused, as bits per byte
    is the evaluator's own measure. `tokenizer`: load_tokenizer's."""

    def __init__(self, model, tokenizer, *, device: str, batch_size: int, max_length: int, rank: int, world: int):
        super().__init__()
        self.model, self.tokenizer, self._device = model, tokenizer, device
        self.batch_size_, self.max_length, self.dist_rank, self.dist_world = batch_size, max_length, rank, world

    @property
    def eot_token_id(self) -> int:
        return self.tokenizer.eos_token_id

    @property
    def prefix_token_id(self) -> int:
        return self.tokenizer.bos_token_id if self.tokenizer.bos_token_id is not None else self.tokenizer.eos_token_id

    def tok_encode(self, string: str, add_special_tokens: bool | None = None, **kwargs) -> list[int]:
        """HFLM's with add_bos_token=True: BOS first unless the string already starts with it."""
        add = True if add_special_tokens is None else add_special_tokens
        if add_special_tokens is None and string.startswith(self.tokenizer.decode(self.prefix_token_id)):
            add = False
        return self.tokenizer.encode(string, add_special_tokens=add)

    def _rows(self, requests) -> list[tuple[list[int], int]]:
        """Per request: the input tokens (left-truncated as HFLM does) and how many of its last positions are scored."""
        rows = []
        for _, context, continuation in requests:
            whole = (context + continuation)[-(self.max_length + 1):]
            rows.append((whole, len(continuation)))
        return rows

    def _loglikelihood_tokens(self, requests, disable_tqdm: bool = False, **kwargs) -> list[tuple[float, bool]]:
        import math

        import torch.distributed as dist

        from stages.evaluate.scoring import token_losses

        rows = self._rows(requests)
        mine = list(range(self.dist_rank, len(rows), self.dist_world))
        per_rank = math.ceil(len(rows) / self.dist_world)
        answers: list[tuple[int, float, bool]] = []
        for b in range(math.ceil(per_rank / self.batch_size_)):
            chunk = mine[b * self.batch_size_:(b + 1) * self.batch_size_]
            width = max((len(rows[i][0]) - 1 for i in chunk), default=1)
            x = np.full((max(len(chunk), 1), width), self.prefix_token_id, np.int64)
            y = np.full_like(x, PAD_LABEL)
            for j, i in enumerate(chunk):
                whole, scored = rows[i]
                n = len(whole) - 1
                x[j, :n] = whole[:-1]
                y[j, n - scored:n] = whole[-scored:]
            positions = np.broadcast_to(np.arange(width, dtype=np.int64), x.shape).copy()
            nll, right = token_losses(self.model, x, y, positions, batch_size=len(x), device=self._device)
            for j, i in enumerate(chunk):
                scored = y[j] >= 0
                answers.append((i, -float(nll[j][scored].sum()), bool(right[j][scored].all())))
        gathered: list = [None] * self.dist_world
        dist.all_gather_object(gathered, answers)
        by_request = {i: (ll, greedy) for part in gathered for i, ll, greedy in part}
        return [by_request[i] for i in range(len(rows))]

    def loglikelihood_rolling(self, requests, disable_tqdm: bool = False) -> list[float]:
        raise NotImplementedError("perplexity tasks (loglikelihood_rolling) are not run by the distributed job: "
                                  "bits per byte is the evaluator's own measure; name a multiple-choice task")

    def generate_until(self, requests, disable_tqdm: bool = False) -> list[str]:
        raise NotImplementedError("generation tasks are not run by the distributed job yet; name a multiple-choice task")
