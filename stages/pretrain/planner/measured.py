"""A calibration job's measurements (`[pretrain.machine] measured`) as rates the throughput model takes.

`europa launch calibrate` runs stages/pretrain/measure/job.py on the machine, which times torch's collectives
and a GEMM at the layout's group sizes and writes them raw (seconds per repeat, the slowest rank's). Here they
become per-GPU rates by the planner's own byte conventions, so that a measured rate over the profile's link
rate is exactly the efficiency the planner would otherwise assume (throughput.measured_efficiencies):
- an all-to-all over E ranks, L of them per node, sends (E - L) / E of each rank's buffer over the network and
  (L - 1) / E inside the node; a group that spans nodes is charged to the network, one inside a node to NVLink;
- a ring all-gather or reduce-scatter over n ranks moves (n - 1) / n of the full buffer per rank, of which a
  1 / L share crosses the network (throughput.ring_bytes), all-gathers and reduce-scatters pooled;
- a GEMM of n x n x n does 2 n^3 FLOPs.
Each rate is (slowest, median, fastest) over the repeats. A file that is missing, malformed or from another
machine is one line naming the key and the fix (LaunchError, exit 2).
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

from stages.cluster.errors import LaunchError
from stages.cluster.machine import Hardware, MeasuredRates, Rates
from stages.pretrain.planner.throughput import ring_bytes

FORMAT = "europa-measured/1"
KEY = "[pretrain.machine] measured"
RING_OPS = ("all_gather", "reduce_scatter")


def machine_identity(hw: Hardware) -> dict[str, Any]:
    """What must match between the machine a file was measured on and the run's: the node type, not its count."""
    return {"name": hw.name, "partition": hw.partition, "gpus_per_node": hw.gpus_per_node,
            "cores_per_node": hw.cores_per_node}


def _spread(values: list[float]) -> Rates:
    return min(values), statistics.median(values), max(values)


def _fail(path: str, problem: str) -> LaunchError:
    return LaunchError(f"{KEY} = {path!r}: {problem}")


def _load(path: str) -> dict:
    p = Path(path)
    if not p.is_file():
        raise _fail(path, "no such file; `europa launch calibrate --submit` measures this machine and writes one "
                          "(<run>/pretrain-launch/calibrate/measured.json), or remove the key")
    try:
        data = json.loads(p.read_text())
    except UnicodeDecodeError:
        raise _fail(path, "not a text file; point the key at the measured.json a calibration job wrote") from None
    except json.JSONDecodeError as e:
        raise _fail(path, f"not JSON (line {e.lineno}, column {e.colno}: {e.msg}); point the key at the "
                          "measured.json a calibration job wrote") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise _fail(path, f"not a calibration file (its \"format\" is not {FORMAT!r}); point the key at the "
                          "measured.json `europa launch calibrate` wrote")
    return data


def _positive(path: str, entry: dict, key: str, where: str, *, many: bool = False):
    """entry[key]: a positive number (many: a non-empty list of them), else the file is damaged."""
    value = entry.get(key)

    def ok(x) -> bool:
        return isinstance(x, (int, float)) and not isinstance(x, bool) and x > 0

    if not ((isinstance(value, list) and value and all(map(ok, value))) if many else ok(value)):
        raise _fail(path, f"{where}.{key} is {value!r}; the file is damaged: measure again with `europa launch calibrate`")
    return value


def read_measured(path: str, hardware: Hardware, *, expert_parallel: int, shard_degree: int) -> MeasuredRates:
    """The rates in a calibration file for `hardware` (the run's machine, as its profile declares it); notes say
    where a group size differs from the layout's (`expert_parallel`, `shard_degree`)."""
    data = _load(path)
    machine = data.get("machine")
    want = machine_identity(hardware)
    if not isinstance(machine, dict) or any(machine.get(k) != v for k, v in want.items()):
        got = machine if isinstance(machine, dict) else {}
        raise _fail(path, f"measured on {got.get('name')!r} (partition {got.get('partition')!r}, "
                          f"{got.get('gpus_per_node')} GPUs and {got.get('cores_per_node')} cores per node), but this "
                          f"run's machine is {hardware.name!r} (partition {hardware.partition!r}, {hardware.gpus_per_node} "
                          f"GPUs and {hardware.cores_per_node} cores per node); measure it with `europa launch "
                          "calibrate`, or remove the key")
    entries = data.get("measurements")
    if not isinstance(entries, list) or not entries:
        raise _fail(path, "has no measurements; the job that wrote it did not finish: measure again")
    a2a_ib, a2a_nvl, ring_ib, ring_nvl, gemm = [], [], [], [], []
    notes, sizes = [], {"all_to_all": set(), "ring": set()}
    for i, entry in enumerate(entries):
        where = f"measurements[{i}]"
        if not isinstance(entry, dict):
            raise _fail(path, f"{where} is not an object; the file is damaged: measure again")
        op = entry.get("op")
        seconds = _positive(path, entry, "seconds", where, many=True)
        if op == "gemm":
            n = _positive(path, entry, "n", where)
            if entry.get("dtype") == "float8_e4m3fn":
                continue  # recorded for the reader; the model prices float8 matmuls at its assumed efficiency
            gemm += [2.0 * n**3 / s for s in seconds]
            if entry.get("dtype") != "bfloat16":
                notes.append(f"the GEMM was measured in {entry.get('dtype')} (the rank's compute dtype), not bfloat16")
            continue
        if op not in ("all_to_all", *RING_OPS):
            raise _fail(path, f"{where}.op is {op!r}; expected gemm, all_to_all, all_gather or reduce_scatter")
        ranks = _positive(path, entry, "ranks", where)
        per_node = min(_positive(path, entry, "ranks_per_node", where), ranks)
        size = _positive(path, entry, "bytes_per_rank", where)
        if ranks < 2:
            continue  # a collective of one rank moves nothing
        if op == "all_to_all":
            sizes["all_to_all"].add(ranks)
            off, on = size * (ranks - per_node) / ranks, size * (per_node - 1) / ranks
            (a2a_ib if off else a2a_nvl).extend((off or on) / s / 1e9 for s in seconds)
        else:
            sizes["ring"].add(ranks)
            ib, nvl = ring_bytes(size * (ranks - 1) / ranks, ranks, per_node)
            (ring_ib if ib else ring_nvl).extend((ib or nvl) / s / 1e9 for s in seconds)
    for what, wanted, measured in (("the all-to-all", expert_parallel, sizes["all_to_all"]),
                                   ("the FSDP rings", shard_degree, sizes["ring"])):
        if measured and wanted not in measured:
            notes.append(f"{what} measured over {', '.join(map(str, sorted(measured)))} ranks, the layout's group is "
                         f"{wanted}: the rate is taken as it is")
    return MeasuredRates(
        source=str(path), gemm_bf16_flops=_spread(gemm) if gemm else None,
        a2a_ib_gb_per_s=_spread(a2a_ib) if a2a_ib else None, a2a_nvlink_gb_per_s=_spread(a2a_nvl) if a2a_nvl else None,
        collective_ib_gb_per_s=_spread(ring_ib) if ring_ib else None,
        collective_nvlink_gb_per_s=_spread(ring_nvl) if ring_nvl else None, notes=tuple(notes))
