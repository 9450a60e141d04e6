"""The evaluator's figures recomputed with the Hugging Face export: the same documents packed into the same rows
(europa_model/data/packing.py), each segment of a row (positions restarting at 0) run through transformers'
DeepseekV3ForCausalLM as its own sequence, which is what the evaluator's per-document attention mask means."""

from __future__ import annotations

import numpy as np


def hf_nll(model, docs: list[np.ndarray], *, seq_len: int, bos: int) -> tuple[float, int]:
    """(total NLL in nats, tokens scored) of `docs` under the HF `model`, packed as the evaluator packs them."""
    import torch

    from europa_model.data.packing import pack_documents

    inputs, labels, positions = pack_documents(docs, seq_len, bos)
    total, tokens = 0.0, 0
    with torch.no_grad():
        for x, y, p in zip(inputs, labels, positions):
            starts = [i for i in range(len(p)) if p[i] == 0] + [len(p)]
            for a, b in zip(starts, starts[1:]):
                valid = y[a:b] >= 0
                if not valid.any():
                    continue
                logits = model(input_ids=torch.from_numpy(x[a:b])[None]).logits[0].float()
                logp = torch.log_softmax(logits, -1)
                target = torch.from_numpy(y[a:b]).clamp(min=0)
                picked = logp.gather(-1, target[:, None])[:, 0].double().numpy()
                total -= float(picked[valid].sum())
                tokens += int(valid.sum())
    return total, tokens
