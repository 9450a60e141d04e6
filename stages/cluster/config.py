"""The settings of the run's machine and of its Slurm: `[pretrain.machine]` and `[pretrain.slurm]`.

They are declared under `[pretrain]`, which checks its layout against the machine, and decide where and how a
job runs, never what it computes: the pretrain stage keeps them out of its fingerprint. The distributed
evaluation's job runs on the same machine with the same Slurm settings.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from pipeline.config import StrictModel, resolve_config_path
from stages.cluster.machine import GPU_ENV, PRESETS, Hardware

TIME_LIMIT = r"^(\d+-)?\d{1,2}:\d{2}:\d{2}$"
# [pretrain.slurm] keys that describe the machine, not the submission: they live in [pretrain.machine] now
MOVED_TO_MACHINE = {"partition": "partition", "gpus_per_node": "gpus_per_node", "cpus_per_task": "cpus_per_node",
                    "numa_binding": "numa_binding", "ib_hostname_suffix": "hostname_suffix"}


class SlurmConfig(StrictModel):
    """How `europa launch` submits to Slurm; none of it changes what is trained (it stays out of the stage's
    fingerprint: raising time_limit after a TIMEOUT resumes the same checkpoints)."""

    account: str | None = Field(None, description="Slurm account (project) to charge; required for --submit on JUPITER.")
    time_limit: str = Field("24:00:00", pattern=TIME_LIMIT)
    qos: str | None = None
    reservation: str | None = None
    setup: list[str] = Field(default_factory=list, description="Shell lines run before training (module load, venv activate).")
    env: dict[str, str] = Field(default_factory=dict, description="Extra environment variables for every rank.")
    job_name: str | None = Field(None, pattern=r"^[A-Za-z0-9_.-]+$", description="Slurm job name; default europa-<run name>.")
    master_port: int | None = Field(
        None, ge=1024, le=65535, description="TCP port of torchrun's c10d rendezvous on the first node; default "
        "20000 + job id % 10000, so two jobs sharing a node do not collide.")
    poll_interval_s: float = Field(60.0, gt=0, description="Seconds between the stage's questions to Slurm (squeue) while it follows the job.")

    @model_validator(mode="before")
    @classmethod
    def _machine_keys_moved(cls, data):
        if isinstance(data, dict):
            for old, new in MOVED_TO_MACHINE.items():
                if old in data:
                    raise ValueError(
                        f"{old} describes the machine and moved to [pretrain.machine] (as {new}); remove it here: the "
                        "jupiter-booster preset sets it, a machine of your own declares it there (docs/jupiter.md)")
        return data


class MachineConfig(StrictModel):
    """The node type the job runs on (stages/cluster/machine.py): the jupiter-booster preset, or a profile of
    your own (preset = "custom": another GPU cluster, or a CPU partition with gpus_per_node = 0). Like
    [pretrain.slurm] it decides where the job runs, not what it trains, so it stays out of the fingerprint."""

    preset: Literal["jupiter-booster", "custom"] = Field(
        "jupiter-booster", description="jupiter-booster: JUPITER's 4 x GH200 nodes (its figures are fixed; partition, "
        "interfaces, hostname suffix, NUMA binding and max_time may still be set); custom: the keys below declare the node.")
    name: str | None = Field(None, description="How the layout names the node type; default the preset's, or \"<partition> nodes\".")
    partition: str | None = Field(None, description="Slurm partition (jupiter-booster: booster); required for custom.")
    gpus_per_node: int | None = Field(None, ge=0, description="custom: GPUs per node; 0 = a CPU partition (ranks train on the cores with gloo).")
    cpus_per_node: int | None = Field(
        None, ge=1, description="custom: cores per node, all given to the one task per node that starts torchrun; "
        "each rank gets cpus_per_node / processes_per_node of them (OMP_NUM_THREADS).")
    memory_gib: float | None = Field(None, gt=0, description="custom: memory per node in GiB (a CPU partition's ranks share it; the planner's estimate is checked against it).")
    gpu_memory_gib: float | None = Field(None, gt=0, description="custom GPU nodes: memory of one GPU in GiB (the planner's limit).")
    gpu_peak_flops: float | None = Field(None, gt=0, description="custom GPU nodes: dense bf16 peak FLOP/s of one GPU, for the planner's utilisation.")
    network_interfaces: list[str] | None = Field(
        None, description="Interfaces for NCCL and gloo (NCCL_SOCKET_IFNAME, GLOO_SOCKET_IFNAME); jupiter-booster: "
        "[\"ib0\"]; custom default [] = not exported (the system's choice).")
    hostname_suffix: str | None = Field(
        None, pattern=r"^[A-Za-z0-9-]*$", description="The first node's hostname + this names its fast interface for "
        "the rendezvous, used when it resolves (JSC: \"i\"); custom default \"\".")
    numa_binding: Literal["node", "none"] | None = Field(
        None, description="node: torchrun --numa-binding=node pins each rank next to its GPU (needs numactl); "
        "jupiter-booster: node; custom default none.")
    max_time: str | None = Field(None, pattern=TIME_LIMIT, description="The partition's wall-clock limit (a longer time_limit is warned about); jupiter-booster: 24:00:00.")
    account_required: bool | None = Field(None, description="Whether --submit needs [pretrain.slurm] account; jupiter-booster: true, custom default false.")
    measured: str | None = Field(
        None, description="A calibration job's measured.json (`europa launch calibrate`): the planner takes its GEMM "
        "rate and link rates in place of its assumed efficiencies. Relative to the config file.")

    @field_validator("measured")
    @classmethod
    def _relative_to_config(cls, v: str | None, info: ValidationInfo) -> str | None:
        return resolve_config_path(v, info)

    @model_validator(mode="after")
    def _declared(self) -> MachineConfig:
        fixed = ("gpus_per_node", "cpus_per_node", "memory_gib", "gpu_memory_gib", "gpu_peak_flops")
        if self.preset != "custom":
            given = [k for k in fixed if getattr(self, k) is not None]
            if given:
                raise ValueError(
                    f"{given[0]} = {getattr(self, given[0])!r}: the {self.preset} preset fixes the node's hardware; "
                    "to describe another machine set preset = \"custom\" and declare partition, gpus_per_node, "
                    "cpus_per_node and memory_gib")
            return self
        needed = ["partition", "gpus_per_node", "cpus_per_node", "memory_gib"]
        if self.gpus_per_node:
            needed.append("gpu_memory_gib")
        missing = [k for k in needed if getattr(self, k) is None]
        if missing:
            raise ValueError(f"preset = \"custom\" needs {', '.join(missing)} (the node the job runs on)")
        if self.gpus_per_node and self.cpus_per_node % self.gpus_per_node:
            raise ValueError(f"cpus_per_node {self.cpus_per_node} must be a multiple of gpus_per_node "
                             f"{self.gpus_per_node}: each rank gets an equal share")
        return self

    def hardware(self) -> Hardware:
        """The machine profile these settings describe."""
        site = {"partition": self.partition, "network_interfaces": tuple(self.network_interfaces)
                if self.network_interfaces is not None else None, "hostname_suffix": self.hostname_suffix,
                "numa_binding": self.numa_binding, "account_required": self.account_required,
                "max_time_hours": time_limit_hours(self.max_time) if self.max_time else None,
                "name": self.name}
        site = {k: v for k, v in site.items() if v is not None}
        if self.preset != "custom":
            return replace(PRESETS[self.preset], **site)
        gpus = self.gpus_per_node
        return Hardware(
            name=self.name or f"{self.partition} nodes", partition=self.partition, gpus_per_node=gpus,
            cores_per_node=self.cpus_per_node, memory_gib_per_node=self.memory_gib,
            hbm_gib=self.gpu_memory_gib or 0.0, peak_bf16_flops=self.gpu_peak_flops or 0.0,
            host_gib_per_gpu=self.memory_gib / gpus if gpus else 0.0, host_reserve_gib=4.0 if gpus else 0.0,
            runtime_reserve_gib=4.0 if gpus else 0.0,
            max_time_hours=time_limit_hours(self.max_time) if self.max_time else None,
            network_interfaces=tuple(self.network_interfaces or ()), hostname_suffix=self.hostname_suffix or "",
            numa_binding=self.numa_binding or "none", account_required=bool(self.account_required),
            env=GPU_ENV if gpus else (), preset=None,
        )


def time_limit_hours(time_limit: str) -> float:
    """Slurm's [D-]HH:MM:SS in hours."""
    days, _, hms = time_limit.rpartition("-")
    h, m, s = (int(x) for x in hms.split(":"))
    return (int(days) if days else 0) * 24 + h + m / 60 + s / 3600
