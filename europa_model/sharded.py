"""The EUROPA model for inference over many processes, sharded the way training shards it: torchtitan's
DeepSeek-V3 parallelization (europa_model/parallelize.py) with FSDP2 over every rank and the routed experts
spread over `expert_parallel` of them, so a checkpoint far larger than one device (europa-1t: ~1.9 TB in
bf16) is evaluated on as many devices as hold it.

The process group must exist (torchrun / srun set the environment; `init_process_group` is the caller's).
Every rank must then call the model's forward the same number of times, since FSDP all-gathers each
block's parameters in forward and expert parallelism exchanges tokens; the scoring code pads with dummy
batches to keep ranks in step.
"""

from __future__ import annotations

from europa_model import cpu_compat

cpu_compat.apply()

from types import SimpleNamespace  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

__all__ = ["build_sharded_model"]


def build_sharded_model(flavor: str, vocab_size: int, device: str, *, expert_parallel: int = 1,
                        precision: str = "float32", dump_folder: str = "", routing: dict | None = None):
    """The flavor's model, parallelized over the current process group (FSDP2 over all ranks, EP
    `expert_parallel`), its parameters stored and computed in `precision`, materialized on `device` with
    initialised buffers (RoPE caches) and unset weights: load a checkpoint into it (torch.distributed.checkpoint
    reshards to this layout and casts)."""
    from torchtitan.config import CompileConfig, ParallelismConfig, TrainingConfig
    from torchtitan.distributed import ParallelDims

    from europa_model.flavors import model_registry
    from europa_model.train_compat import apply_for_training

    if not dist.is_initialized():
        raise RuntimeError("build_sharded_model needs a process group (run under torchrun or srun)")
    apply_for_training(device.split(":")[0])
    world = dist.get_world_size()
    if world % expert_parallel:
        raise ValueError(f"expert_parallel {expert_parallel} must divide the {world} ranks")
    spec = model_registry(flavor, vocab_size, **(routing or {}))  # routing: the checkpoint's (ModelInfo.routing)
    multi_rank_cpu = device.startswith("cpu") and world > 1
    parallelism = ParallelismConfig(data_parallel_shard_degree=world, expert_parallel_degree=expert_parallel,
                                    **({"spmd_backend": "partial_dtensor"} if multi_rank_cpu else {}))
    parallel_dims = ParallelDims.from_config(parallelism, world)
    # torchtitan's Trainer sets this process-wide before building the model; the MoE token dispatcher reads it
    from torchtitan.distributed import utils as dist_utils

    dist_utils.set_spmd_backend(parallelism.spmd_backend)
    # what the Trainer does too: the MoE token dispatchers learn the expert-parallel layout from it (an
    # inference caller passes only `parallelism`; RoPE then keeps the flavor's max_seq_len, as in one process)
    spec.model.update_from_config(config=SimpleNamespace(parallelism=parallelism))
    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[precision]
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)  # parameters stored in `precision`: bf16 halves what each rank holds
    try:
        with torch.device("meta"):
            model = spec.model.build()
    finally:
        torch.set_default_dtype(previous)
    model = spec.parallelize_fn(model, parallel_dims=parallel_dims,
                                training=TrainingConfig(mixed_precision_param=precision, seq_len=8),
                                parallelism=parallelism, compile_config=CompileConfig(),
                                ac_config=None,  # no activation checkpointing: inference keeps no activations
                                dump_folder=dump_folder)
    model.to_empty(device=device)
    with torch.no_grad():
        model.init_weights(buffer_device=None)
    return model.eval()

