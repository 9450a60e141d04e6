"""Which device a setting of "auto" | "cpu" | "cuda" means on this machine (one rule for training and evaluation)."""

from __future__ import annotations


def resolve_device(requested: str) -> str:
    import torch

    if requested == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if requested == "cuda" and not torch.cuda.is_available():
        raise ValueError('device = "cuda" but torch sees no GPU on this machine; use device = "auto" or "cpu"')
    return requested
