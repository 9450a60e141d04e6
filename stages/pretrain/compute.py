"""The record's training compute, three ways: (a) the architecture-based estimate that is reported, (b) the
operations counted in one real step (step_count.py) as its check, and (c) the hardware bound (devices x seconds
x peak theoretical throughput) with the utilisation it implies. Each figure carries its method and what it
does not count, in words the compliance documents quote.
"""

from __future__ import annotations

from stages.pretrain.job import JobInfo
from stages.pretrain.record import ArchitectureEstimate, Compute, CountedOperations, HardwareBound
from stages.pretrain.step_count import CountedStep, SkippedCount

ARCHITECTURE_METHOD = ("6 x active matmul parameters x tokens + attention (6 x layers x seq_len x heads x (qk_dim + v_dim) "
                       "per token, causal attention at the full square); europa_model/flops.py")
ARCHITECTURE_UNCERTAINTY = (
    "Exact for what it counts, given the architecture: every matmul a token causes (2 FLOPs per multiply-add; backward "
    "twice the forward) and the attention scores and values. Not counted: element-wise work (norms, activations, "
    "softmax, routing, the optimizer), small against the matmuls for large models, and activation recomputation (the "
    "guidelines exclude it). Checked against the counted operations (b).")
COUNTED_METHOD = ("torch.utils.flop_counter.FlopCounterMode over the forward and backward of the job's first optimizer "
                  "step (every micro-batch, summed over all ranks, in the training process), with a torch._grouped_mm "
                  "formula for the MoE experts, times the steps")
COUNTED_UNCERTAINTY = (
    "Counts the matmul-like operations actually dispatched (mm, addmm, bmm, grouped mm, attention kernels) from their "
    "shapes; element-wise work and the optimizer are not counted; activation recomputation is counted apart and "
    "excluded. One step stands for all: every step has the same shapes, and MoE routing changes which experts run, "
    "not how many token-expert products there are.")
HARDWARE_METHOD = ("devices x wall seconds of the training processes (start-up, data loading and checkpointing "
                   "included) x the device's peak theoretical FLOP/s: the guidelines' hardware-based N x L x H with "
                   "the utilisation U set to 1")
HARDWARE_UNCERTAINTY = (
    "An upper bound, not an estimate: no run computes at its peak every second. The implied utilisation (a) / (c) is "
    "the average fraction of the peak the run achieved; above 100% is impossible and means (a) or the peak is wrong. "
    "Peak: the datasheet's dense bf16 figure for a GPU, or for a CPU cores x clock x FLOPs per cycle as read from the "
    "machine (an upper bound unless the CPU boosts above the clock it reports).")



def compute_statistics(per_token: dict[str, int], tokens: int, steps: int, device_seconds: float, info: JobInfo,
                       count: CountedStep | SkippedCount | None) -> Compute:
    """(a) reported, (b) its check, (c) the bound and the utilisation (a) / (c)."""
    flops_a = per_token["total"] * tokens
    out = Compute(architecture=ArchitectureEstimate(
        flops=flops_a, flops_per_token=per_token["total"], flops_per_token_matmul=per_token["matmul"],
        flops_per_token_attention=per_token["attention"], flops_attention=per_token["attention"] * tokens,
        tokens=tokens, method=ARCHITECTURE_METHOD, uncertainty=ARCHITECTURE_UNCERTAINTY))
    if count is None:
        out.not_counted = ("no flop_count.json in the job folder: the job's first step ran under an earlier version "
                           "of the pipeline (rerun the pretrain stage with --force to count it)")
    elif isinstance(count, SkippedCount):
        out.not_counted = count.skipped
    else:
        flops_b = count.flops_per_step * steps
        out.counted = CountedOperations(
            flops=flops_b, flops_per_step=count.flops_per_step, counted_step=count.step, steps=steps,
            tokens_per_step=count.tokens_per_step, by_operation=count.by_operation,
            recomputed_flops_per_step=count.recomputed_flops_per_step,
            ratio_to_architecture=flops_b / flops_a if flops_a else 0.0, method=COUNTED_METHOD,
            uncertainty=COUNTED_UNCERTAINTY)
    peak = info.peak_flops_per_device
    if info.peak_flops_inputs is None:
        out.no_hardware_bound = ("job_info.json records no theoretical peak (written by an earlier version of the "
                                 "pipeline); rerun the pretrain stage with --force")
    elif not peak:
        out.no_hardware_bound = info.peak_flops_source or "no peak FLOP/s known for the device"
    else:
        bound = device_seconds * float(peak)
        out.hardware = HardwareBound(
            flops=bound, device_seconds=round(device_seconds, 3), peak_flops_per_device=float(peak),
            peak_source=info.peak_flops_source, implied_utilisation=flops_a / bound if bound else float("inf"),
            method=HARDWARE_METHOD, uncertainty=HARDWARE_UNCERTAINTY)
    return out
