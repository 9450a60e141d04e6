"""Real DCP checkpoints of EUROPA flavors with random weights, for the Hugging Face export tests and benchmark.

The weights are drawn at unit scale (std 1/sqrt(fan-in) for every matrix, norm weights around 1, a non-zero
expert bias) rather than with the training initialisation: at init the routed experts add ~1e-3 to the
residual stream, so a swapped expert or projection would hide under a 1e-4 logit tolerance; at unit scale
every tensor moves the logits by O(1).
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import torch


@contextlib.contextmanager
def registered_flavor(name: str, flavor):
    """`flavor` (a europa_model.flavors.Flavor) available under `name` to build_model_args, for one test/bench."""
    from europa_model.flavors import FLAVORS

    if name in FLAVORS:
        raise ValueError(f"flavor {name!r} already exists")
    FLAVORS[name] = flavor
    try:
        yield name
    finally:
        del FLAVORS[name]


def build_unit_scale_model(flavor: str, vocab_size: int, seed: int = 0):
    from europa_model.train_compat import apply_for_training

    apply_for_training("cpu")  # dense attention on CPU, as the evaluate stage runs the model
    from europa_model.flavors import build_model_args

    with torch.device("meta"):
        model = build_model_args(flavor, vocab_size).build()
    model.to_empty(device="cpu")
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        model.init_weights(buffer_device=None)  # RoPE caches and counters
        for _, p in model.named_parameters():
            if p.dim() == 1:
                p.copy_(1 + 0.1 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(torch.randn(p.shape, generator=g) * p.shape[-1] ** -0.5)
        for name, b in model.named_buffers():
            if name.endswith("expert_bias_E"):
                b.copy_(0.05 * torch.randn(b.shape, generator=g))
    model.eval()
    return model


def save_checkpoint(model, path: Path, *, training_state: bool = True, extra: dict | None = None) -> Path:
    """`model` saved as torchtitan saves it: model tensors flat; with `training_state`, optimizer moments
    and train/dataloader/lr-scheduler entries under their own prefixes, as in a pretrain checkpoint."""
    import torch.distributed.checkpoint as dcp

    state: dict = dict(model.state_dict())
    if training_state:
        state["optimizer"] = {"state": {k: {"exp_avg": torch.zeros_like(p), "step": torch.tensor(2.0)}
                                        for k, p in model.named_parameters()}}
        state["train_state"] = {"step": 2, "ntokens_seen": 512}
        state["lr_scheduler"] = {"last_epoch": 2}
        state["dataloader"] = {"world_size": 1}
    state.update(extra or {})
    dcp.save(state, checkpoint_id=str(path), no_dist=True)
    return path


def _save_rank(rank: int, world: int, state_file: str, path: str, init_file: str) -> None:
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor

    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        mesh = init_device_mesh("cpu", (world,))
        full = torch.load(state_file, weights_only=True)
        dcp.save({k: distribute_tensor(v, mesh, [Shard(0)]) for k, v in full.items()}, checkpoint_id=path)
    finally:
        dist.destroy_process_group()


def save_sharded_checkpoint(model, path: Path, world_size: int = 2) -> Path:
    """`model` saved as an FSDP run saves it: `world_size` gloo processes, each writing its dim-0 shard of
    every tensor (its own .distcp file), so every tensor is stored in `world_size` chunks."""
    import tempfile

    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory(prefix="sharded-save-") as tmp:
        state_file = str(Path(tmp) / "state.pt")
        torch.save({k: v.detach().clone() for k, v in model.state_dict().items()}, state_file)
        mp.start_processes(_save_rank, args=(world_size, state_file, str(path), str(Path(tmp) / "init")),
                           nprocs=world_size, start_method="spawn")
    return path
