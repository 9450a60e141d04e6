"""What torchtitan 0.3.0 needs to import, and build a model on the meta device, on a CPU-only torch 2.13.

Call `apply()` before the first `import torchtitan...` (europa_model.flavors does it for you). It is
idempotent and detects each problem before touching anything, so on a GPU node with triton and CUDA it
does nothing. Each adaptation below says why it exists and when it can be deleted.

Applied here (import / meta-build time):

1. `minimal_async_ep_kernels_stand_in` -- only when `triton` is not installed.
   `torchtitan/distributed/minimal_async_ep/kernels.py` does `import triton` at top level and is reached
   by every language model (models.common.moe -> token_dispatcher -> minimal_async_ep -> api -> kernels),
   so without triton nothing in torchtitan.models (nor torchtitan.trainer) imports. We register a
   stand-in for THAT torchtitan module only: each public kernel is a function that raises if called.
   The kernels serve `moe_comm_backend="minimal_async_ep"` (CUDA symmetric memory), never used on CPU.
   We deliberately do NOT fake a `triton` package: torch inductor probes for triton and would then try
   to generate triton kernels. Remove when torchtitan imports triton lazily there (or triton is present).

2. `device_type_cpu` -- only when torch sees no accelerator at all
   (`torch._utils._get_available_device_type() is None`).
   `torchtitan/tools/utils.py` computes `device_type = _get_available_device_type() or "cuda"` ONCE at
   import time, and torchtitan modules copy it with `from torchtitan.tools.utils import device_type`, so
   it cannot be fixed after the fact by changing an environment variable; on CPU it later fails with
   `torch._C has no attribute '_cuda_setDevice'` (Trainer device setup). Building the model on the meta
   device does not need it, but because it is an import-time decision it has to happen here, before
   torchtitan is imported. We import `torchtitan.tools.utils`, make its `device_type` "cpu" and its
   `device_module` `torch.cpu`, make its `get_device_info()` agree, and rebind the names in any torchtitan
   module that had already copied them. Nothing in torch is patched. Remove when torchtitan falls back to
   "cpu" (or reads the device from the config).

Known on CPU and NOT done here (training-time; see shared/notes/torchtitan-cpu.md for what worked):
- `tools.utils.device_module` is plain `torch.cpu`: it lacks `get_device_name`, `memory_stats`, ... and its
  `current_device()` returns the string "cpu" -> metrics and barriers need a small proxy.
- `torch.distributed.set_timeout` missing in torch 2.13 (torchtitan calls it after step 1).
- FSDP2 over gloo: `ReduceOp.PREMUL_SUM` unsupported -> `set_force_sum_reduction_for_comms(True)`.
- FlexAttention backward is unsupported on CPU -> eager flex_attention with the device check off, or a
  dense masked attention from the BlockMask's mask_mod. (Forward works on CPU; `varlen` does not: it
  calls `aten::_flash_attention_forward`, CUDA only.)
- Multi-rank CPU runs: `--parallelism.spmd_backend partial_dtensor`; DTensor RNG is off on CPU meshes
  (start from a seed checkpoint); pipeline parallel fails on torch 2.13's schedule API (not solved).
- DistMuon's CUDA-only checks and `Stream(device=...)`.
- Speed, not correctness: on 2 cores set OMP_NUM_THREADS=1; the first torch.compile of
  `create_block_mask` + `flex_attention` is slow cold (inductor's cache makes reruns fast).
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types

__all__ = ["apply", "applied"]

_KERNELS = "torchtitan.distributed.minimal_async_ep.kernels"
_TOOLS_UTILS = "torchtitan.tools.utils"

_applied: list[str] = []


def applied() -> tuple[str, ...]:
    """Names of the adaptations `apply()` has put in place in this process (empty on a GPU node)."""
    return tuple(_applied)


def apply() -> tuple[str, ...]:
    """Put in place the adaptations this machine needs; safe to call any number of times."""
    if _needs_kernels_stand_in():
        _install_kernels_stand_in()
        _applied.append("minimal_async_ep_kernels_stand_in")
    if _needs_cpu_device_type():
        _pin_device_type_to_cpu()
        _applied.append("device_type_cpu")
    return applied()


# --- 1. the triton-only MinimalAsyncEP kernels --------------------------------------------------------------

def _needs_kernels_stand_in() -> bool:
    return importlib.util.find_spec("triton") is None and _KERNELS not in sys.modules


def _install_kernels_stand_in() -> None:
    module = types.ModuleType(_KERNELS, "Stand-in registered by europa_model.cpu_compat: triton is not installed.")
    module.__europa_stand_in__ = True

    def __getattr__(name: str):  # PEP 562: serves `from ...kernels import <any public kernel>`
        if name.startswith("_"):
            raise AttributeError(name)

        def kernel(*args, **kwargs):
            raise RuntimeError(
                f"{_KERNELS}.{name} needs triton and CUDA (moe_comm_backend='minimal_async_ep'); this process "
                "runs without triton and uses europa_model.cpu_compat's stand-in. Use moe_comm_backend='standard'.")

        kernel.__name__ = kernel.__qualname__ = name
        return kernel

    module.__getattr__ = __getattr__
    sys.modules[_KERNELS] = module


# --- 2. torchtitan's import-time device choice ---------------------------------------------------------------

def _needs_cpu_device_type() -> bool:
    from torch._utils import _get_available_device_type

    if _get_available_device_type() is not None:  # CUDA, XPU, ... : torchtitan's choice is right
        return False
    utils = sys.modules.get(_TOOLS_UTILS)
    return utils is None or utils.device_type != "cpu"


def _pin_device_type_to_cpu() -> None:
    import torch

    utils = importlib.import_module(_TOOLS_UTILS)  # imports only logging/observability besides torch
    stale_type, stale_module = utils.device_type, utils.device_module
    original = utils._get_available_device_type  # the name tools.utils looks up in get_device_info()
    utils._get_available_device_type = lambda: original() or "cpu"
    utils.device_type, utils.device_module = utils.get_device_info()
    assert utils.device_type == "cpu" and utils.device_module is torch.cpu
    # Modules imported before apply() copied the stale values; rebind them (none when apply() runs first).
    for name, module in list(sys.modules.items()):
        if name.startswith("torchtitan.") and module is not utils:
            if getattr(module, "device_type", None) == stale_type and isinstance(stale_type, str):
                module.device_type = "cpu"
            if getattr(module, "device_module", None) is stale_module:
                module.device_module = torch.cpu
