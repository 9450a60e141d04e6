"""What torchtitan 0.3.0's training loop needs on a CPU-only torch 2.13, applied only where it is missing.

`europa_model.cpu_compat` handles import time; this module handles training time and is called by the
training entry point (`stages/pretrain/entry.py`) before the Trainer is built. Each adaptation checks for the
problem first, so on a GH200 node (CUDA, NCCL, a torch that has `dist.set_timeout`) `apply_for_training`
does nothing and returns an empty tuple. Each says why it exists and when it can go; the symptoms are in
shared/notes/torchtitan-cpu.md.

1. `cpu_device_module` (device cpu): torchtitan drives the device through CUDA-style calls on
   `tools.utils.device_module` (get_device_name, get_device_properties().total_memory, memory_stats,
   reset_peak_memory_stats, set_device, current_device() as an int). `torch.cpu` lacks most of them and its
   current_device() returns the string "cpu". We give torchtitan a small proxy over `torch.cpu` whose memory
   figures are the process's resident memory (peak = ru_maxrss), so metrics.jsonl reports real numbers.
   Remove when torchtitan's metrics and barriers handle the CPU device.
2. `dist_set_timeout` (torch without `torch.distributed.set_timeout`): torchtitan shortens process-group
   timeouts after step 1 through that newer API; torch 2.13 has the private `_set_pg_timeout` with the same
   meaning. Remove when the pinned torch has `set_timeout`.
3. `dense_flex_attention` (device cpu): torchtitan's language models accept only flex / flex_flash / varlen
   attention, and FlexAttention refuses backward on CPU (varlen is CUDA-only). We replace only the compiled
   flex call with exact dense attention built from the BlockMask's own mask_mod (same masks: causal, per
   document), and build BlockMasks eagerly instead of compiling `create_block_mask` (a cold compile costs
   25-40 s on 2 cores for masks that take milliseconds eagerly). Remove when FlexAttention has a CPU backward.
4. `dist_muon_cpu` (device cpu): torchtitan's DistMuon refuses non-CUDA parameters ("DistMuon requires one
   CUDA device per process") and creates its transfer stream with `Stream(device=..., priority=0)`, which
   `torch.cpu.Stream` does not accept. CPU work is synchronous, so CPU storage is accepted and the stream
   handle drops the device argument; the optimizer's arithmetic is untouched (1 vs 2 ranks agree). Remove
   when DistMuon supports CPU meshes.
5. `gloo_sum_reduction` is not here: it must touch the FSDP modules, so `europa_model.parallelize` does it.
"""

from __future__ import annotations

import os
import resource
import sys
from types import SimpleNamespace

import torch

__all__ = ["apply_for_training", "applied"]

_applied: list[str] = []


def applied() -> tuple[str, ...]:
    return tuple(_applied)


def apply_for_training(device_type: str) -> tuple[str, ...]:
    """Put in place what training on `device_type` needs here; idempotent."""
    from europa_model import cpu_compat

    cpu_compat.apply()  # import-time adaptations first: torchtitan is imported below
    from torchtitan.tools import utils

    if device_type == "cpu" and not isinstance(utils.device_module, _CPUDeviceModule):
        _install_cpu_device_module(utils)
        _applied.append("cpu_device_module")
    if not hasattr(torch.distributed, "set_timeout"):
        from torch.distributed.distributed_c10d import _set_pg_timeout

        torch.distributed.set_timeout = _set_pg_timeout
        _applied.append("dist_set_timeout")
    if device_type == "cpu" and "dense_flex_attention" not in _applied:
        _install_dense_flex_attention()
        _applied.append("dense_flex_attention")
    if device_type == "cpu" and "dist_muon_cpu" not in _applied:
        _allow_dist_muon_on_cpu()
        _applied.append("dist_muon_cpu")
    return applied()


# --- 1. a CUDA-style device module for the CPU ---------------------------------------------------------------

def _rss_bytes() -> int:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return 0


def _total_memory() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


class _CPUDeviceModule:
    """`torch.cpu` plus the CUDA-style calls torchtitan makes; memory figures are the process's RSS."""

    def __init__(self):
        self._peak_floor = 0

    def __getattr__(self, name):
        return getattr(torch.cpu, name)

    def current_device(self) -> int:
        return 0

    def set_device(self, device) -> None:
        pass

    def device_count(self) -> int:
        return 1

    def get_device_name(self, device=None) -> str:
        try:
            with open("/proc/cpuinfo") as f:
                for line in f:
                    if line.startswith("model name"):
                        return line.split(":", 1)[1].strip()
        except OSError:
            pass
        return "cpu"

    def get_device_properties(self, device=None):
        return SimpleNamespace(total_memory=_total_memory(), name=self.get_device_name())

    def memory_stats(self, device=None) -> dict:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB
        now = _rss_bytes()
        return {"active_bytes.all.peak": max(peak, now), "reserved_bytes.all.peak": max(peak, now),
                "num_alloc_retries": 0, "num_ooms": 0}

    def reset_peak_memory_stats(self, device=None) -> None:
        pass  # ru_maxrss cannot be reset: the figures are the process's peak so far

    def empty_cache(self) -> None:
        pass

    def synchronize(self, device=None) -> None:
        pass


def _install_cpu_device_module(utils) -> None:
    proxy = _CPUDeviceModule()
    stale = utils.device_module
    utils.device_module = proxy
    for name, module in list(sys.modules.items()):  # modules that copied the name at import
        if name.startswith("torchtitan.") and getattr(module, "device_module", None) is stale:
            module.device_module = proxy


# --- 3. dense attention in place of compiled FlexAttention on CPU ---------------------------------------------

def dense_attention_from_block_mask(q, k, v, *, score_mod, block_mask, scale, enable_gqa, return_aux, kernel_options):
    """Exact attention over (B, N, L, H) tensors with the mask the BlockMask's mask_mod defines."""
    from torch.nn.attention.flex_attention import AuxOutput

    if score_mod is not None:
        raise NotImplementedError("dense CPU attention supports mask_mod only (no score_mod)")
    B, N, L, H = q.shape
    S = k.shape[2]
    if enable_gqa and k.shape[1] != N:
        k = k.repeat_interleave(N // k.shape[1], dim=1)
        v = v.repeat_interleave(N // v.shape[1], dim=1)
    dev = q.device
    b = torch.arange(B, device=dev).view(B, 1, 1, 1)
    h = torch.zeros(1, 1, 1, 1, dtype=torch.long, device=dev)
    qi = torch.arange(L, device=dev).view(1, 1, L, 1)
    ki = torch.arange(S, device=dev).view(1, 1, 1, S)
    mask = block_mask.mask_mod(b, h, qi, ki).expand(B, 1, L, S)
    scale = (1.0 / H**0.5) if scale is None else scale
    scores = torch.matmul(q.float(), k.float().transpose(-1, -2)) * scale
    scores = scores.masked_fill(~mask, float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)
    out = torch.matmul(torch.exp(scores - lse.unsqueeze(-1)), v.float()).to(q.dtype)
    return out, AuxOutput(lse=lse if return_aux is not None and return_aux.lse else None)


def _install_dense_flex_attention() -> None:
    from torch.nn.attention.flex_attention import create_block_mask
    from torchtitan.models.common import attention

    attention.FlexAttention.compiled_flex_attn = staticmethod(dense_attention_from_block_mask)
    attention._compiled_create_block_mask = create_block_mask


# --- 4. DistMuon on CPU meshes -------------------------------------------------------------------------------

class _CPUStreamHandle:
    """`torch.cpu`'s stream API with the CUDA-style `Stream(device=..., priority=...)` signature."""

    Event = torch.cpu.Event

    @staticmethod
    def Stream(device=None, priority: int = 0):  # noqa: N802 (mirrors torch.cuda.Stream)
        return torch.cpu.Stream()

    @staticmethod
    def stream(s):
        return torch.cpu.stream(s)

    @staticmethod
    def current_stream(device=None):
        return torch.cpu.current_stream()


def _allow_dist_muon_on_cpu() -> None:
    from torchtitan.distributed.flex_shard import _optimizer_reshard_runtime as runtime
    from torchtitan.distributed.flex_shard import dist_muon

    original_validate = dist_muon.DistMuon._validate_parameter_storage

    def validate_parameter_storage(self):
        try:
            return original_validate(self)
        except ValueError as e:
            if "CUDA" not in str(e):
                raise
            devices = {p.to_local().device for g in self.param_groups for p in g["params"]}
            if len(devices) == 1 and next(iter(devices)).type == "cpu":
                return devices.pop()
            raise

    dist_muon.DistMuon._validate_parameter_storage = validate_parameter_storage
    original_create = runtime._CommunicationContext.create.__func__

    def create(cls, device):
        if torch.device(device).type != "cpu":
            return original_create(cls, device)
        handle = _CPUStreamHandle
        transfer = handle.Stream(device=device, priority=0)
        slots = tuple(runtime._PipelineSlot(buffers=runtime._BufferSlot(), compute_input_ready=handle.Event(),
                                            compute_done=handle.Event(), done=handle.Event())
                      for _ in range(runtime._NUM_PIPELINE_SLOTS))
        return cls(device_handle=handle, transfer_stream=transfer, slots=slots)

    runtime._CommunicationContext.create = classmethod(create)
