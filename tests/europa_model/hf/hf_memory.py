"""Peak resident memory of one export, measured in a fresh process so that nothing the caller allocated
before (or the allocator kept from it) blurs the figure: imports first, then the baseline (VmRSS), the
kernel's high-water mark reset (/proc/self/clear_refs, Linux >= 4.0), the export, and VmHWM.

glibc's malloc raises its mmap threshold up to 32 MB as large blocks are freed, so buffers below 32 MB then
come from the heap, where fragmentation adds 0-50 MB of run-to-run noise that has nothing to do with what
the export holds (measured: 80-128 MB for the same bf16 export of 48 MB tensors). The child therefore
fixes the threshold at 4 MB (MALLOC_MMAP_THRESHOLD_, which also turns the dynamic raise off): every
tensor buffer is then mapped and unmapped as europa-1t's multi-GB tensors always are.

    python -m tests.europa_model.hf.hf_memory '<json: checkpoint, out, dtype, flavor_name, flavor fields>'
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def _status(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"/proc/self/status has no {field}")


def export_peak(checkpoint: Path, out: Path, dtype: str, flavor_name: str, flavor, max_shard_bytes: int,
                reader: str = "direct") -> dict:
    """{baseline, peak, seconds, total_bytes, shards, tensors, dtype} of exporting `checkpoint` in a fresh
    process; `reader` "dcp" turns the direct reader off (DCP's own load for every tensor, the reference)."""
    job = {"checkpoint": str(checkpoint), "out": str(out), "dtype": dtype, "flavor_name": flavor_name,
           "flavor": dataclasses.asdict(flavor), "max_shard_bytes": max_shard_bytes, "reader": reader}
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"), "HF_HUB_OFFLINE": "1",
           "MALLOC_MMAP_THRESHOLD_": str(4 << 20)}
    proc = subprocess.run([sys.executable, "-m", "tests.europa_model.hf.hf_memory", json.dumps(job)], capture_output=True,
                          text=True, cwd=ROOT, env=env)
    if proc.returncode:
        raise RuntimeError(f"export in a fresh process failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _child(job: dict) -> None:
    import torch.distributed.checkpoint  # noqa: F401 - imports belong to the baseline, not to the export
    from transformers import DeepseekV3Config, DeepseekV3ForCausalLM, GenerationConfig  # noqa: F401

    from europa_model.flavors import Flavor
    from europa_model.hf import export_checkpoint
    from tests.europa_model.hf.hf_checkpoints import registered_flavor

    if job["reader"] == "dcp":
        from europa_model.hf.dcp_reader import DCPCheckpoint

        DCPCheckpoint._read_direct = lambda self, key, shape, dtype: None
    with registered_flavor(job["flavor_name"], Flavor(**job["flavor"])):
        baseline = _status("VmRSS")
        Path("/proc/self/clear_refs").write_text("5")
        t0 = time.perf_counter()
        res = export_checkpoint(job["checkpoint"], job["flavor_name"], None, job["out"], dtype=job["dtype"],
                                max_shard_bytes=job["max_shard_bytes"])
        seconds = time.perf_counter() - t0
        peak = _status("VmHWM")
    print(json.dumps({"baseline": baseline, "peak": peak, "seconds": seconds, "total_bytes": res.total_bytes,
                      "shards": len(res.shards), "tensors": res.tensors, "dtype": job["dtype"]}))


if __name__ == "__main__":
    _child(json.loads(sys.argv[1]))
