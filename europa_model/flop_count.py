"""Counting the floating-point operations a training step executes: the check on the architecture-based estimate.

Why a count next to the formula (europa_model/flops.py): the formula is what the compliance documents report,
and an error in it (a missed projection, experts counted as dense) would go unnoticed if every other figure were
derived from it. `torch.utils.flop_counter.FlopCounterMode` sees every matmul-like aten op the step dispatches and
counts 2 FLOPs per multiply-add from the operands' shapes, independently of our formula. Two additions:

- `aten._grouped_mm` (the MoE experts' matmuls in torchtitan) has no formula in torch 2.13; without one every
  routed expert would be missed. Its FLOPs follow from the shapes as for mm: 2 x rows x inner x columns, summed
  over the groups (the four operand layouts of the op are handled below).
- Activation recomputation (torch.utils.checkpoint re-running a forward during backward) is counted apart and
  excluded from the total, as the Commission's guidelines exclude it; it is recognised by the autograd
  saved-tensor hooks that checkpoint installs while it recomputes.
Element-wise operations (norms, activations, softmax, the optimizer) are not counted, as in the formula.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import torch
from torch.utils.flop_counter import FlopCounterMode

aten = torch.ops.aten


def grouped_mm_flop(a_shape, b_shape, *args, out_shape=None, **kwargs) -> int:
    """2 x multiply-adds of torch._grouped_mm for its layouts (torch/_meta_registrations.py): a (M, K) with
    b (G, K, N) or (K, N) split along K; a (G, M, K) with b (K, N) split along N, or b (G, K, N) batched."""
    if len(a_shape) == 2:
        return 2 * a_shape[0] * a_shape[1] * b_shape[-1]
    if len(b_shape) == 2:
        return 2 * a_shape[1] * a_shape[2] * b_shape[1]
    return 2 * a_shape[0] * a_shape[1] * a_shape[2] * b_shape[-1]


def _recomputing() -> bool:
    """True while torch.utils.checkpoint recomputes a forward (its recomputation hooks are the innermost)."""
    hooks = torch._C._autograd._top_saved_tensors_default_hooks(True)
    return bool(hooks) and "_recomputation_hook" in getattr(hooks[0], "__qualname__", "")


class TrainingFlopCounter(FlopCounterMode):
    """FlopCounterMode with grouped matmuls and with activation recomputation kept apart."""

    def __init__(self) -> None:
        super().__init__(display=False, custom_mapping={aten._grouped_mm: grouped_mm_flop})
        self.recomputed: dict[str, int] = defaultdict(int)

    def _count_flops(self, func_packet, out, args, kwargs):
        if func_packet in self.flop_registry and _recomputing():
            self.recomputed[str(func_packet).rsplit(".", 1)[-1]] += self.flop_registry[func_packet](*args, **kwargs, out_val=out)
            return out
        return super()._count_flops(func_packet, out, args, kwargs)

    def by_operation(self) -> dict[str, int]:
        """Counted FLOPs per aten op (recomputation excluded), e.g. {"mm": ..., "_grouped_mm": ...}."""
        return {str(op).rsplit(".", 1)[-1]: int(n) for op, n in sorted(self.flop_counts["Global"].items(), key=str)}


def merge(into: dict[str, int], counts: dict[str, Any]) -> None:
    for k, v in counts.items():
        into[k] = into.get(k, 0) + int(v)
