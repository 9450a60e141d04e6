"""The peak theoretical throughput of one training device: H in the hardware-based bound N x L x H.

Why a table and not a measurement: a peak measured during the run moves with the machine's load and, multiplied
by a utilisation computed from the architecture-based FLOPs, it cancels out and cannot catch an error in them. The peak here is a property of the device, so devices x seconds x
peak is a reproducible *upper bound* on the operations a run could have executed, and the architecture-based
estimate divided by it (the implied utilisation) can never honestly exceed 100%.

- GPUs: NVIDIA's datasheets state bf16 Tensor Core throughput "with sparsity"; the dense figure is half (what
  torchtitan's table uses too). bf16 dense is the highest rate training here can use (no FP8, no sparsity), so
  it bounds float32 and mixed-precision work alike. GH200's figure is the one the planner uses
  (stages/cluster/machine.py).
- CPUs: cores x clock x FLOPs per cycle per core, read from this machine and recorded with the inputs:
  cores = CPUs this process may run on (os.sched_getaffinity) / threads per core (lscpu "Thread(s) per core",
  else /proc/cpuinfo "siblings" / "cpu cores"); clock = lscpu "CPU max MHz", else cpufreq's cpuinfo_max_freq,
  else the highest "cpu MHz" of /proc/cpuinfo (a virtual machine reports its nominal clock there: a host that
  boosts beyond it makes the bound low by the boost ratio); FLOPs per cycle = 2 (a fused multiply-add) x vector
  lanes x FMA units, with 2 FMA units assumed per core (the most any x86 core has, so never an underestimate),
  lanes from the widest instruction set the CPU flags: AVX-512 16 float32 lanes, doubled by AVX512_BF16 dot
  products (the MoE experts run their matmuls in bfloat16); AVX2+FMA 8 lanes; AMX-BF16 1,024 FLOPs per cycle.
  Ranks sharing one machine share its cores: each rank's peak is the machine's / LOCAL_WORLD_SIZE.
"""

from __future__ import annotations

import math
import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from stages.cluster.machine import JUPITER_BOOSTER

# (substring of the device name, table entry, dense bf16 FLOP/s). Most specific first: "GH200" contains "H200".
GPU_PEAK_BF16_DENSE: tuple[tuple[str, str, float], ...] = (
    ("GH200", "NVIDIA GH200 (Hopper GPU): 1,979 TFLOP/s bf16 with sparsity, 989 dense", JUPITER_BOOSTER.peak_bf16_flops),
    ("H200 NVL", "NVIDIA H200 NVL: 1,671 TFLOP/s bf16 with sparsity, 835 dense", 835e12),
    ("H200", "NVIDIA H200 SXM: 1,979 TFLOP/s bf16 with sparsity, 989 dense", 989e12),
    ("H100 NVL", "NVIDIA H100 NVL: 1,671 TFLOP/s bf16 with sparsity, 835 dense", 835e12),
    ("H100 PCIe", "NVIDIA H100 PCIe: 1,513 TFLOP/s bf16 with sparsity, 756 dense", 756e12),
    ("H100", "NVIDIA H100 SXM: 1,979 TFLOP/s bf16 with sparsity, 989 dense", 989e12),
)
FMA_UNITS_ASSUMED = 2


@dataclass(frozen=True)
class Peak:
    flops: float | None  # per device; None when no entry applies
    source: str  # the table entry or the formula with its inputs, in words
    inputs: dict = field(default_factory=dict)


def device_peak(device_type: str, device_name: str, *, declared: float | None = None, local_ranks: int = 1) -> Peak:
    """The peak of one device of this job: declared in [pretrain], else the GPU table, else the CPU formula."""
    if declared:
        return Peak(float(declared), f"declared: [pretrain] peak_flops_per_device = {declared:.4g} FLOP/s", {"declared": declared})
    if device_type == "cpu":
        return cpu_peak(_read("/proc/cpuinfo"), _lscpu(), len(os.sched_getaffinity(0)), local_ranks,
                        _read("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq"))
    return gpu_peak(device_name)


def gpu_peak(device_name: str) -> Peak:
    for key, entry, flops in GPU_PEAK_BF16_DENSE:
        if key in device_name:
            return Peak(flops, f"table: {entry} (device {device_name!r}; stages/pretrain/peak_flops.py)", {"device": device_name})
    known = ", ".join(k for k, _, _ in GPU_PEAK_BF16_DENSE)
    return Peak(None, f"no table entry for device {device_name!r} (known: {known}); set [pretrain] peak_flops_per_device "
                      "to the device's dense bf16 peak from its datasheet", {"device": device_name})


def cpu_peak(cpuinfo: str, lscpu: str, affinity_cpus: int, local_ranks: int = 1, cpufreq_max_khz: str = "") -> Peak:
    """cores x clock x FLOPs per cycle from the text of /proc/cpuinfo and `lscpu` (see the module docstring)."""
    info = _fields(cpuinfo)
    ls = dict(_split(line) for line in lscpu.splitlines() if ":" in line)
    threads_per_core = _int(ls.get("Thread(s) per core"))
    how_threads = 'lscpu "Thread(s) per core"'
    if not threads_per_core:
        siblings, cores = _int(_first(info, "siblings")), _int(_first(info, "cpu cores"))
        threads_per_core = max(1, siblings // cores) if siblings and cores else 1
        how_threads = '/proc/cpuinfo "siblings" / "cpu cores"' if siblings and cores else "assumed 1 (not reported)"
    cores = max(1, math.ceil(affinity_cpus / threads_per_core))
    mhz, how_clock = _float(ls.get("CPU max MHz")), 'lscpu "CPU max MHz"'
    if not mhz and _float(cpufreq_max_khz):
        mhz, how_clock = _float(cpufreq_max_khz) / 1000, "cpufreq cpuinfo_max_freq"
    if not mhz:
        mhz = max((_float(v) for v in info.get("cpu MHz", [])), default=0.0)
        how_clock = '/proc/cpuinfo "cpu MHz" (the nominal clock; boost may exceed it)'
    flags = set((_first(info, "flags") or _first(info, "Features") or ls.get("Flags", "")).split())
    per_cycle, isa = flops_per_cycle(flags)
    model = _first(info, "model name") or ls.get("Model name", "unknown CPU")
    if not mhz:
        return Peak(None, f"{model}: no clock frequency in lscpu, cpufreq or /proc/cpuinfo; set [pretrain] peak_flops_per_device",
                    {"model": model})
    machine = cores * mhz * 1e6 * per_cycle
    ranks = max(1, local_ranks)
    source = (f"{model}: {cores} core(s) x {mhz:,.0f} MHz x {per_cycle} FLOP/cycle ({isa}) = {machine:.4g} FLOP/s"
              + (f" / {ranks} ranks on the machine" if ranks > 1 else "")
              + f"; cores = {affinity_cpus} CPU(s) in the process's affinity / {threads_per_core} thread(s) per core "
                f"({how_threads}); clock: {how_clock}")
    return Peak(machine / ranks, source, {"model": model, "cores": cores, "mhz": mhz, "flops_per_cycle": per_cycle,
                                          "isa": isa, "affinity_cpus": affinity_cpus, "threads_per_core": threads_per_core,
                                          "local_ranks": ranks})


def flops_per_cycle(flags: set[str]) -> tuple[int, str]:
    """Peak FLOPs per cycle of one core, and the instruction set it comes from (x86 flags or Arm features)."""
    if "amx_bf16" in flags:
        return 1024, "AMX-BF16 tile matmul"
    if "avx512f" in flags:
        lanes = 16 * (2 if "avx512_bf16" in flags else 1)
        return 2 * lanes * FMA_UNITS_ASSUMED, f"AVX-512{' + AVX512_BF16' if 'avx512_bf16' in flags else ''}, {FMA_UNITS_ASSUMED} FMA units assumed"
    if "avx2" in flags and "fma" in flags:
        return 2 * 8 * FMA_UNITS_ASSUMED, f"AVX2 + FMA, {FMA_UNITS_ASSUMED} FMA units assumed"
    if "asimd" in flags:  # Arm: 4 x 128-bit FMA pipes (Neoverse V2, Grace); BFMMLA 4x the float32 rate
        per = 2 * 4 * 4
        return (per * 4, "Arm NEON/SVE 4 x 128-bit pipes + BF16 matrix multiply") if "bf16" in flags else (per, "Arm NEON 4 x 128-bit pipes")
    return 2 * 4, "SSE (4 float32 lanes, one multiply and one add per cycle)"


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def _lscpu() -> str:
    try:
        return subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10, env={**os.environ, "LC_ALL": "C"}).stdout
    except (OSError, subprocess.SubprocessError):
        return ""


def _split(line: str) -> tuple[str, str]:
    k, _, v = line.partition(":")
    return k.strip(), v.strip()


def _fields(text: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for line in text.splitlines():
        if ":" in line:
            k, v = _split(line)
            out.setdefault(k, []).append(v)
    return out


def _first(fields: dict[str, list[str]], key: str) -> str:
    return (fields.get(key) or [""])[0]


def _int(v: str | None) -> int:
    try:
        return int(str(v).strip())
    except (TypeError, ValueError):
        return 0


def _float(v: str | None) -> float:
    try:
        return float(str(v).strip())
    except (TypeError, ValueError):
        return 0.0
