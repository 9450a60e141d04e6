"""torchtitan's DeepSeek-V3 parallelization, plus what EUROPA adds after it: a thin wrapper, not a fork.

After `parallelize_deepseekv3` has applied TP / EP / activation checkpointing / compile / FSDP2:
- `unshard_async_op` (EUROPA's third optimization): every FSDP module runs its all-gather copy-in on the
  compute stream (`FSDPModule._set_unshard_async_op(True)`, pytorch#135523), which avoids the inter-stream
  memory fragmentation that cost EUROPA ~14 GiB of HBM per GPU. It relies on explicit prefetching:
  torchtitan sets explicit forward/backward prefetch when EP > 1; otherwise we set it here, each block
  prefetching its neighbour. torchtitan 0.3.0 has no switch for this, hence the wrapper.
- gloo sum reduction (CPU, multi-rank): torchtitan sets FSDP's gradient divide factor to 1.0, which makes
  FSDP reduce with `ReduceOp.PREMUL_SUM`; gloo does not implement it. `set_force_sum_reduction_for_comms`
  reduces with SUM and divides locally, which is the same arithmetic. Applied only on a gloo process group.
"""

from __future__ import annotations

import torch.distributed as dist
import torch.nn as nn
from torch.distributed.fsdp import FSDPModule
from torchtitan.models.deepseek_v3.parallelize import parallelize_deepseekv3
from torchtitan.tools.logging import logger


def fsdp_modules(model: nn.Module) -> list[FSDPModule]:
    return [m for m in model.modules() if isinstance(m, FSDPModule)]


def parallelize_europa(model: nn.Module, *, unshard_async_op: bool = False, **kwargs) -> nn.Module:
    model = parallelize_deepseekv3(model, **kwargs)
    modules = fsdp_modules(model)
    if not modules:
        if unshard_async_op:
            logger.warning("unshard_async_op requested but the model is not FSDP-sharded (one data-parallel "
                           "shard); nothing to do")
        return model
    if dist.is_initialized() and dist.get_backend() == "gloo":
        for m in modules:
            m.set_force_sum_reduction_for_comms(True)
    if unshard_async_op:
        for m in modules:
            m._set_unshard_async_op(True)
        parallelism = kwargs.get("parallelism")
        if parallelism is None or parallelism.expert_parallel_degree <= 1:
            _explicit_prefetch(model)
        logger.info(f"unshard_async_op on {len(modules)} FSDP modules, explicit prefetching")
    return model


def _explicit_prefetch(model: nn.Module) -> None:
    """Each transformer block prefetches the next one in forward and the previous one in backward."""
    blocks = [b for b in getattr(model, "layers", {}).values() if isinstance(b, FSDPModule)]
    for i, block in enumerate(blocks):
        if i + 1 < len(blocks):
            block.set_modules_to_forward_prefetch([blocks[i + 1]])
        if i > 0:
            block.set_modules_to_backward_prefetch([blocks[i - 1]])
