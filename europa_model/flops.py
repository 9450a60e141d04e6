"""Training FLOPs per token of a flavor: the architecture-based estimate the manifest and the planner report.

Counted as the operations a token actually causes (the Commission's GPAI guidelines accept any method within
+-30%; for MoE, counting the operations performed means active parameters, not total):
- matmuls: 6 x active_matmul parameters (2 forward + 4 backward per weight), where active_matmul is the
  active parameter count minus the input embedding (a lookup, no multiply) and includes the output
  projection, the shared expert and the top-k routed experts (`count_parameters`);
- attention scores and values: per layer, 2 x seq_len x n_heads x (qk_head_dim + v_head_dim) forward,
  x3 with backward, i.e. 6 x n_layers x seq_len x n_heads x (qk_head_dim + v_head_dim). With equal q/v head
  dims this is PaLM's 12 x L x H x Q x T. Causal masking halves the useful work; like PaLM and torchtitan we
  count the full square, which is what dense kernels execute.
Activation recomputation is not counted (the guidelines exclude it), so utilisation from these FLOPs is
model FLOPs utilisation (MFU), not hardware utilisation.
"""

from __future__ import annotations

from europa_model.flavors import FLAVORS, count_parameters


def attention_flops_per_token(flavor: str, seq_len: int) -> int:
    f = FLAVORS[flavor]
    qk = f.qk_nope_head_dim + f.qk_rope_head_dim
    return 6 * f.n_layers * seq_len * f.n_heads * (qk + f.v_head_dim)


def training_flops_per_token(flavor: str, vocab_size: int | None, seq_len: int) -> dict[str, int]:
    """{"matmul", "attention", "total"} training FLOPs per token (forward + backward)."""
    counts = count_parameters(flavor, vocab_size)
    matmul = 6 * counts["active_matmul"]
    attention = attention_flops_per_token(flavor, seq_len)
    return {"matmul": matmul, "attention": attention, "total": matmul + attention}
