"""`europa launch calibrate`: render (and submit) the short job that measures this machine for the planner.

The job runs on the run's machine with its Slurm settings ([pretrain.machine], [pretrain.slurm]) and on enough
nodes to hold the layout's largest group (the expert-parallel group, the dense FSDP group, or the experts'
FSDP group strided across expert-parallel groups), never more than the layout's own nodes; `--nodes` chooses
fewer (a group that no longer fits is measured at the largest size that does, and the plan says so). The
messages are the layout's own: one MoE layer's all-to-all per rank (local batch x seq_len / TP tokens, top-k
copies of a dim-vector each), one transformer block's parameters for each FSDP group, capped to fit a
short job. It writes request.json (what job.py measures) and job.sbatch into <run>/pretrain-launch/calibrate/;
job.py writes measured.json beside them.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from pipeline.fsutil import atomic_write_text
from stages.cluster import sbatch as cluster_sbatch
from stages.cluster.errors import LaunchError
from stages.cluster.sbatch import JobScript
from stages.pretrain.planner.measured import FORMAT, machine_identity

if TYPE_CHECKING:
    from pipeline.config import PipelineConfig

TIME_LIMIT = "00:20:00"
WARMUP, REPEATS = 3, 10
MAX_BYTES = {True: 1 << 30, False: 64 << 20}  # per rank and buffer: on GPUs, on a CPU partition
GEMM_N = {True: 8192, False: 1024}
OUTPUT = "measured.json"


@dataclass
class CalibrationJob:
    script: JobScript
    request: dict

    @property
    def job_dir(self) -> Path:
        return self.script.job_dir

    @property
    def output(self) -> Path:
        return Path(self.request["out"])

    def summary(self) -> str:
        s, hw = self.script, self.script.hardware
        lines = [f"calibration job {s.job_name} on {hw.name}: {s.nodes} node(s) x {s.ranks_per_node} ranks, "
                 f"time {s.slurm.time_limit}; {WARMUP} warm-up runs and {REPEATS} timed repeats per measurement"]
        for g in self.request["groups"]:
            apart = f", {g['stride']} apart" if g["stride"] > 1 else ""
            lines.append(f"  {' + '.join(g['ops'])} over {g['size']} ranks ({g['name']}{apart}), "
                         f"{g['bytes_per_rank'] / 2**20:,.2f} MiB per rank")
        lines.append(f"  GEMM {self.request['gemm_n']}^3 in {self.request['dtype']} on every rank"
                     + (" (and float8 rowwise where the GPU has it)" if hw.has_gpus else ""))
        lines += [f"  note: {n}" for n in self.request["notes"]]
        lines.append(f"  writes {self.output}")
        return "\n".join(lines)

    def write(self) -> Path:
        self.job_dir.mkdir(parents=True, exist_ok=True)
        atomic_write_text(self.job_dir / "request.json", json.dumps(self.request, indent=2) + "\n")
        atomic_write_text(self.script.path, cluster_sbatch.render(self.script))
        self.script.path.chmod(0o755)
        return self.script.path


def _fit(size: int, world: int) -> int:
    """The largest group size <= `size` that divides the job's ranks."""
    return math.gcd(min(size, world), world)


def render_calibration(config: PipelineConfig, job_dir: Path, *, nodes: int | None = None,
                       time_limit: str = TIME_LIMIT) -> CalibrationJob:
    """The calibration job for `[pretrain]`'s layout on its machine; LaunchError (one line) when the layout is
    not valid for the machine."""
    from stages.pretrain.launch.checks import check_layout
    from stages.pretrain.planner.shape import model_shape
    from stages.pretrain.planner.workload import dims_from_shape

    if "pretrain" not in config.stages:
        raise LaunchError("[pretrain]: this config has no pretrain settings; the calibration measures its layout")
    settings = config.section("pretrain")
    errors = check_layout(settings)
    if errors:
        raise LaunchError(errors[0])
    p, hw = settings.parallelism, settings.machine.hardware()
    ep, shard, tp = p.expert_parallel, p.shard_degree, p.tensor_parallel
    efsdp = max(1, shard * tp // ep)
    largest = max(ep, shard, ep * efsdp if efsdp > 1 else 1)
    wanted = min(p.nodes, -(-largest // p.processes_per_node))
    if nodes is not None and nodes < 1:
        raise LaunchError(f"europa launch calibrate: --nodes {nodes}: at least 1")
    job_nodes = min(nodes, p.nodes) if nodes is not None else wanted
    world = job_nodes * p.processes_per_node
    tok = config.stages.get("tokenizer")
    dims = dims_from_shape(model_shape(settings.flavor, getattr(tok, "vocab_size", None)))
    dtype = "bfloat16" if settings.precision == "bfloat16" else "float32"
    elem = 2 if dtype == "bfloat16" else 4
    cap = MAX_BYTES[hw.has_gpus]
    tokens = settings.local_batch_size * settings.seq_len // tp
    groups, notes = [], []

    def add(name: str, ops: list[str], size: int, stride: int, nbytes: float) -> None:
        fitted = _fit(size, world // stride) if stride * 2 <= world else 1
        if fitted < size:
            notes.append(f"the {name} group ({size} ranks) is measured over {fitted}: the job has {world} ranks")
        if fitted < 2:
            return
        if nbytes > cap:
            notes.append(f"{name}: {nbytes / 2**20:,.0f} MiB per rank capped at {cap / 2**20:,.0f} MiB")
        groups.append({"name": name, "ops": ops, "size": fitted, "stride": stride, "bytes_per_rank": int(min(nbytes, cap))})

    if ep > 1:
        add("expert parallel", ["all_to_all"], ep, 1, dims.dim * elem * tokens * dims.top_k)
    if shard > 1:
        add("dense FSDP", ["all_gather", "reduce_scatter"], shard, 1, dims.dense_params / dims.n_layers * elem)
    if efsdp > 1 and dims.n_moe_layers:
        stride = _fit(ep, world)
        add("expert FSDP", ["all_gather", "reduce_scatter"], efsdp, stride,
            dims.routed_params / dims.n_moe_layers / ep * elem)
    if not groups:
        notes.append("the layout has no group of 2 or more ranks to measure: only the GEMM is measured")
    job_dir = Path(job_dir).resolve()
    request = {"format": FORMAT, "out": str(job_dir / OUTPUT), "machine": machine_identity(hw),
               "layout": {"expert_parallel": ep, "data_parallel_shard": shard, "efsdp": efsdp},
               "dtype": dtype, "groups": groups, "gemm_n": GEMM_N[hw.has_gpus], "warmup": WARMUP,
               "repeats": REPEATS, "notes": notes}
    name = cluster_sbatch.job_name(settings.slurm, config.run.name) + "-calibrate"
    script = JobScript(
        hardware=hw, slurm=settings.slurm.model_copy(update={"time_limit": time_limit}), job_name=name,
        nodes=job_nodes, ranks_per_node=p.processes_per_node, job_dir=job_dir,
        entry=["stages.pretrain.measure.job", str(job_dir / "request.json")],
        title=f"EUROPA calibration on {hw.name}, rendered by `europa launch calibrate`",
        header=[f"config   {Path(config.source).resolve() if config.source else '<in memory>'}",
                f"measures the collectives and the GEMM the planner assumes; writes {job_dir / OUTPUT}"])
    return CalibrationJob(script=script, request=request)
