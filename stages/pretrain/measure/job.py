"""What every rank of the calibration job runs (`python -m stages.pretrain.measure.job <request.json>`, under
torchrun): it times, at the layout's group sizes and message sizes, the collectives the planner prices and a
GEMM, on all ranks at once (as training runs them: every expert-parallel group's all-to-all shares the network
with the others'), and rank 0 writes the raw figures to the request's `out` (planner/measured.py turns them
into rates). The request is written by launch.py; nothing here reads the run's config, so a calibration job
needs no data and no checkpoint.

Groups follow torchtitan's device mesh: expert-parallel groups and the dense FSDP group are runs of consecutive
ranks, the routed experts' FSDP group strides by the expert-parallel degree. Each op is warmed up, then
repeated; a repeat's time is the slowest rank's. Collectives run in the layout's compute dtype: NCCL on GPUs,
gloo on a CPU partition. The float8 GEMM (rowwise scales, torch._scaled_mm) runs where the GPU has float8
(compute capability 8.9 or later) and is recorded only.
"""

from __future__ import annotations

import json
import os
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import torch
import torch.distributed as dist

from pipeline.fsutil import atomic_write_text

DTYPES = {"bfloat16": torch.bfloat16, "float32": torch.float32}


def enumerate_groups(world: int, size: int, stride: int) -> list[list[int]]:
    """Every group of `size` ranks, `stride` apart, covering the world once (world % (size x stride) == 0)."""
    block = size * stride
    return [[start + j + k * stride for k in range(size)] for start in range(0, world, block) for j in range(stride)]


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _timed(run, device: torch.device, warmup: int, repeats: int) -> list[float]:
    """Seconds of each repeat, the slowest rank's (every rank of the job runs `run` at the same time)."""
    for _ in range(warmup):
        run()
    _sync(device)
    times = []
    for _ in range(repeats):
        dist.barrier()
        t0 = time.perf_counter()
        run()
        _sync(device)
        times.append(time.perf_counter() - t0)
    slowest = torch.tensor(times, dtype=torch.float64, device=device)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
    return slowest.tolist()


def _collective(op: str, group, size: int, nbytes: int, dtype: torch.dtype, device: torch.device):
    """The op on a buffer of `nbytes` per rank (all-gather: its output; reduce-scatter: its input)."""
    elements = max(size, nbytes // torch.tensor([], dtype=dtype).element_size() // size * size)
    full = torch.ones(elements, dtype=dtype, device=device)
    part = torch.empty(elements // size, dtype=dtype, device=device)
    out = torch.empty_like(full)
    if op == "all_to_all":
        return (lambda: dist.all_to_all_single(out, full, group=group)), elements * full.element_size()
    if op == "all_gather":
        return (lambda: dist.all_gather_into_tensor(full, part, group=group)), elements * full.element_size()
    if op == "reduce_scatter":
        return (lambda: dist.reduce_scatter_tensor(part, full, group=group)), elements * full.element_size()
    raise ValueError(f"unknown collective {op!r}")


def _gemms(n: int, dtype_name: str, device: torch.device):
    """(dtype name, the GEMM to time) for the compute dtype, and float8 rowwise where the GPU has it."""
    a = torch.randn(n, n, device=device, dtype=DTYPES[dtype_name])
    b = torch.randn(n, n, device=device, dtype=DTYPES[dtype_name])
    out = [(dtype_name, lambda: a @ b)]
    if device.type == "cuda" and torch.cuda.get_device_capability(device) >= (8, 9):
        a8, b8 = a.to(torch.float8_e4m3fn), b.to(torch.float8_e4m3fn)
        sa = torch.ones(n, 1, device=device, dtype=torch.float32)
        sb = torch.ones(1, n, device=device, dtype=torch.float32)
        out.append(("float8_e4m3fn", lambda: torch._scaled_mm(a8, b8.t(), scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)))
    return out


def measure(request: dict) -> dict:
    """Run every measurement of the request on this rank; the figures (identical on every rank) as a dict."""
    rank, world = dist.get_rank(), dist.get_world_size()
    per_node = int(os.environ.get("LOCAL_WORLD_SIZE", world))
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) if torch.cuda.is_available() else torch.device("cpu")
    dtype = DTYPES[request["dtype"]]
    warmup, repeats = request["warmup"], request["repeats"]
    entries = []
    for g in request["groups"]:
        groups = enumerate_groups(world, g["size"], g["stride"])
        mine, _ = dist.new_subgroups_by_enumeration(groups)
        first = groups[0]
        on_node = sum(1 for r in first if r // per_node == first[0] // per_node)
        for op in g["ops"]:
            run, nbytes = _collective(op, mine, g["size"], g["bytes_per_rank"], dtype, device)
            seconds = _timed(run, device, warmup, repeats)
            entries.append({"op": op, "group": g["name"], "ranks": g["size"], "ranks_per_node": on_node,
                            "bytes_per_rank": nbytes, "dtype": request["dtype"], "seconds": seconds})
            if rank == 0:
                print(f"europa: {op} over {g['size']} ranks ({g['name']}), {nbytes / 2**20:,.1f} MiB per rank: "
                      f"median {sorted(seconds)[len(seconds) // 2] * 1e3:,.2f} ms", flush=True)
    n = request["gemm_n"]
    for name, run in _gemms(n, request["dtype"], device):
        seconds = _timed(run, device, warmup, repeats)
        entries.append({"op": "gemm", "dtype": name, "n": n, "seconds": seconds})
        if rank == 0:
            print(f"europa: gemm {name} {n}^3 on every rank: {2 * n**3 / min(seconds) / 1e12:,.3f} TFLOP/s at best",
                  flush=True)
    return {"format": request["format"], "written_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "slurm_job_id": os.environ.get("SLURM_JOB_ID"), "torch": torch.__version__,
            "backend": dist.get_backend(), "device": device.type, "machine": request["machine"],
            "job": {"nodes": world // per_node, "ranks_per_node": per_node}, "layout": request["layout"],
            "measurements": entries}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m stages.pretrain.measure.job <request.json>", file=sys.stderr)
        return 2
    request = json.loads(Path(argv[0]).read_text())
    if torch.cuda.is_available():
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    try:
        figures = measure(request)
        if dist.get_rank() == 0:
            out = Path(request["out"])
            atomic_write_text(out, json.dumps(figures, indent=2) + "\n")
            print(f"europa: wrote {out}; set [pretrain.machine] measured = \"{out}\" and `europa plan` uses it",
                  flush=True)
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
