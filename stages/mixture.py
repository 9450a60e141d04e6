"""How much of each language: the allocation shared by the tokenizer sample and the training mixture.

UniMax (Chung et al. 2023): an equal share of the budget per language, capped at `max_passes` over the
language's data; what a small language cannot use goes, again in equal shares, to the larger ones.
Temperature: shares proportional to (size share)^(1/temperature), capped the same way. The cap is what keeps
Maltese and Irish (three orders of magnitude smaller than German in FineWeb-2) from being repeated 20 times.
"""

from __future__ import annotations

from typing import Literal


def allocate(available: dict[str, int], budget: int, policy: Literal["unimax", "temperature"],
             max_passes: float, temperature: float = 1.0) -> dict[str, int]:
    caps = {lang: int(max_passes * size) for lang, size in available.items()}
    if policy == "unimax":
        target, remaining = {}, budget
        order = sorted(available, key=lambda lang: (available[lang], lang))
        for i, lang in enumerate(order):
            target[lang] = int(min(remaining / (len(order) - i), caps[lang]))
            remaining -= target[lang]
        return {lang: target[lang] for lang in sorted(available)}
    total = sum(available.values()) or 1
    weights = {lang: (size / total) ** (1.0 / temperature) for lang, size in available.items()}
    norm = sum(weights.values()) or 1.0
    return {lang: int(min(budget * weights[lang] / norm, caps[lang])) for lang in sorted(available)}
