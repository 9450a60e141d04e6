"""Settings of the pretrain stage: `[pretrain]` and its sub-tables.

These are the user-facing knobs; `stages/pretrain/trainer_config.py` turns them into torchtitan's
`Trainer.Config`. Everything torchtitan offers but EUROPA does not need stays at torchtitan's default, so a
reader of the TOML file sees every decision that was made for the run.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Literal

from pydantic import Field, model_validator

from pipeline.config import StrictModel
from stages.pretrain.hardware import GPU_ENV, PRESETS, Hardware


class OptimizerConfig(StrictModel):
    name: Literal["adamw", "dist_muon"] = Field(
        "adamw", description="adamw, or dist_muon: torchtitan's DistMuon with FlexShard placements (EUROPA's choice).")
    lr: float = Field(3e-3, gt=0, description="Peak learning rate.")
    weight_decay: float = Field(0.1, ge=0)
    beta1: float = Field(0.9, ge=0, lt=1)
    beta2: float = Field(0.95, ge=0, lt=1)
    eps: float = Field(1e-8, gt=0)
    muon_momentum: float = Field(0.95, ge=0, lt=1, description="dist_muon: momentum of the Muon update.")
    muon_ns_steps: int = Field(5, ge=1, description="dist_muon: Newton-Schulz iterations.")


class ScheduleConfig(StrictModel):
    """torchtitan's warmup-stable-decay schedule."""

    warmup_steps: int = Field(10, ge=0)
    decay_ratio: float | None = Field(0.2, ge=0, le=1, description="Share of the steps spent decaying; None = decay over all steps after warmup.")
    decay_type: Literal["linear", "sqrt", "cosine"] = "cosine"
    min_lr_factor: float = Field(0.1, ge=0, le=1, description="Final learning rate as a fraction of the peak.")


class ParallelismConfig(StrictModel):
    nodes: int = Field(1, ge=1, description="Machines (Slurm nodes); 1 for local runs.")
    processes_per_node: int = Field(1, ge=1, description="torchrun processes per machine (GPUs per node; CPU ranks locally).")
    data_parallel_replicate: int = Field(1, ge=1, description="HSDP replicas (EUROPA: 4).")
    data_parallel_shard: int = Field(-1, description="FSDP degree; -1 = whatever the other degrees leave.")
    expert_parallel: int = Field(1, ge=1, description="Expert-parallel degree (borrowed from the FSDP x TP ranks).")
    tensor_parallel: int = Field(1, ge=1)
    unshard_async_op: bool = Field(
        False, description="FSDP2 all-gather copy-in on the compute stream (EUROPA: ~14 GiB HBM freed per GPU); explicit prefetching.")

    @property
    def world_size(self) -> int:
        return self.nodes * self.processes_per_node

    @model_validator(mode="after")
    def _degrees_multiply(self) -> ParallelismConfig:
        if self.data_parallel_shard == 0 or self.data_parallel_shard < -1:
            raise ValueError("data_parallel_shard must be -1 (infer) or a positive degree")
        fixed = self.data_parallel_replicate * self.tensor_parallel
        shard = self.data_parallel_shard if self.data_parallel_shard > 0 else self.world_size // fixed
        if shard < 1 or fixed * shard != self.world_size:
            raise ValueError(
                f"parallel degrees do not multiply to the {self.world_size} processes (nodes x processes_per_node): "
                f"data_parallel_replicate {self.data_parallel_replicate} x data_parallel_shard "
                f"{self.data_parallel_shard} x tensor_parallel {self.tensor_parallel}; fix one of them")
        if (shard * self.tensor_parallel) % self.expert_parallel:
            raise ValueError(
                f"expert_parallel {self.expert_parallel} must divide data_parallel_shard x tensor_parallel "
                f"= {shard * self.tensor_parallel} (experts are spread over those ranks)")
        return self

    @property
    def shard_degree(self) -> int:
        if self.data_parallel_shard > 0:
            return self.data_parallel_shard
        return self.world_size // (self.data_parallel_replicate * self.tensor_parallel)

    @property
    def data_parallel_degree(self) -> int:
        """Ranks that see different data: HSDP replicas x FSDP shards."""
        return self.data_parallel_replicate * self.shard_degree


class ActivationCheckpointConfig(StrictModel):
    mode: Literal["none", "selective", "full", "offload"] = Field(
        "none", description="offload: checkpointed activations go to host memory (Grace CPU); needs torch.compile and CUDA.")
    offload_budget_gb: float = Field(60.0, gt=0, description="offload: host memory per GPU for activations.")
    offload_prefetch_layers: int = Field(1, ge=0, description="offload: layers prefetched back ahead of backward.")


class MoEConfig(StrictModel):
    """How tokens reach their experts: node-limited routing and the all-to-all implementation.

    torchtitan's router can first pick `num_limited_groups` of `num_expert_groups` equal groups of experts
    (by the sum of each group's two best scores; DeepSeek-V3's node-limited routing) and then the top-k experts
    inside them. Expert parallelism places experts on consecutive EP ranks, so with groups = the nodes one EP
    group spans (expert_parallel / GPUs per node) each token's experts live on at most `num_limited_groups`
    nodes. The groups are part of the model (they change what it computes): they are recorded with the
    checkpoints (job_info.json) and a Hugging Face export maps them to `n_group` / `topk_group`.
    """

    num_expert_groups: int | None = Field(
        None, ge=1, description="Groups the routed experts are split into for node-limited routing (torchtitan's "
        "num_expert_groups; HF n_group); None: routing is not limited. Match it to expert_parallel / GPUs per node.")
    num_limited_groups: int | None = Field(
        None, ge=1, description="Groups a token's experts may come from (torchtitan's num_limited_groups; HF "
        "topk_group): each token's experts then sit on at most this many nodes.")
    comm_backend: Literal["standard", "deepep"] = Field(
        "standard", description="Expert-parallel all-to-all: standard (NCCL all_to_all_single, one copy per token "
        "and expert) or deepep (DeepEP kernels, one copy per destination node; needs the deep_ep package on CUDA). "
        "Node-limited routing cuts InfiniBand traffic only with deepep.")

    @model_validator(mode="after")
    def _both_or_neither(self) -> MoEConfig:
        if (self.num_expert_groups is None) != (self.num_limited_groups is None):
            raise ValueError("num_expert_groups and num_limited_groups go together: set both (node-limited routing) "
                             "or neither")
        if self.num_expert_groups is not None and self.num_limited_groups > self.num_expert_groups:
            raise ValueError(f"num_limited_groups {self.num_limited_groups} exceeds num_expert_groups "
                             f"{self.num_expert_groups}")
        return self

    @property
    def node_limited(self) -> bool:
        return self.num_expert_groups is not None


class CheckpointConfig(StrictModel):
    interval: int = Field(50, ge=1, description="Steps between checkpoints (one is always written at the end).")
    keep_latest: int = Field(0, ge=0, description="Keep only the newest k checkpoints (0 = keep all; evaluation reads them).")


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
    """The node type the job runs on (stages/pretrain/hardware.py): the jupiter-booster preset, or a profile of
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


class PretrainConfig(StrictModel):
    flavor: Literal["tiny", "small", "europa-1t"] = Field("tiny", description="Model flavor (europa_model/flavors.py).")
    seq_len: int = Field(256, ge=8, description="Tokens per training sequence (context length).")
    local_batch_size: int = Field(8, ge=1, description="Sequences per data-parallel rank per micro-step.")
    global_batch_size: int | None = Field(None, ge=1, description="Sequences per optimizer step; default local x data-parallel ranks (more = gradient accumulation).")
    steps: int = Field(100, ge=1)
    max_norm: float = Field(1.0, gt=0, description="Gradient clipping norm.")
    precision: Literal["float32", "bfloat16"] = Field(
        "float32", description="Parameter precision under mixed precision (bfloat16 on GPUs; float32 on CPU).")
    device: Literal["auto", "cpu", "cuda"] = Field("auto", description="auto: cuda when torch sees a GPU, else cpu.")
    launcher: Literal["local", "torchrun", "slurm"] = Field(
        "local", description="local: one process; torchrun: processes_per_node ranks here (gloo on CPU); slurm: a Slurm job on "
        "[pretrain.machine] (JUPITER by default).")
    compile: bool = Field(False, description="torch.compile the model blocks and the loss.")
    seed: int | None = Field(None, description="Model initialization seed; default: [run] seed.")
    peak_flops_per_device: float | None = Field(
        None, gt=0, description="Peak theoretical FLOP/s of one device (the hardware bound and utilisation); default: the table "
        "of dense bf16 peaks (GH200, H100, H200), or on a CPU cores x clock x FLOPs per cycle read from the machine.")
    log_every: int = Field(1, ge=1, description="Steps between metric lines.")
    max_loss_factor: float | None = Field(
        2.0, gt=1, description="Stop as diverged when the loss exceeds this x ln(vocabulary size), i.e. this many times "
        "the loss of a uniform guess; None: stop only on NaN/inf.")
    data_order: Literal["global", "per_rank"] = Field(
        "global", description="global: the same global batches at any GPU count (resume elsewhere, 1 vs N ranks agree); "
        "per_rank: each rank streams its own documents (no redundant packing; order depends on the rank count).")
    max_open_shards: int = Field(
        64, ge=1, description="Shards each rank (and dataloader worker) keeps open, least recently read closed first; "
        "each costs 2 file descriptors and 1 mapping (ulimit -n is often 1024).")
    optimizer: OptimizerConfig = Field(default_factory=OptimizerConfig)
    schedule: ScheduleConfig = Field(default_factory=ScheduleConfig)
    parallelism: ParallelismConfig = Field(default_factory=ParallelismConfig)
    activation_checkpoint: ActivationCheckpointConfig = Field(default_factory=ActivationCheckpointConfig)
    moe: MoEConfig = Field(default_factory=MoEConfig)
    checkpoint: CheckpointConfig = Field(default_factory=CheckpointConfig)
    slurm: SlurmConfig = Field(default_factory=SlurmConfig)
    machine: MachineConfig = Field(default_factory=MachineConfig)

    @property
    def micro_batch_size(self) -> int:
        """Sequences of one micro-step over all data-parallel ranks."""
        return self.local_batch_size * self.parallelism.data_parallel_degree

    @property
    def global_batch(self) -> int:
        """Sequences per optimizer step (global_batch_size, or one micro-step: no gradient accumulation)."""
        return self.global_batch_size or self.micro_batch_size

    @property
    def tokens_per_step(self) -> int:
        return self.global_batch * self.seq_len

    @property
    def planned_tokens(self) -> int:
        return self.steps * self.tokens_per_step

    def routing_problem(self) -> str | None:
        """torchtitan's own conditions on node-limited routing, which it checks only in the first forward: equal
        groups of at least 2 experts, and enough experts in the allowed groups for top-k. Needs the flavor's
        numbers (imports torch), so it is not part of validation; the planner and the trainer call it."""
        moe = self.moe
        if not moe.node_limited:
            return None
        from stages.pretrain.planner.shape import flavor_dims

        f = flavor_dims(self.flavor)
        groups, limited = moe.num_expert_groups, moe.num_limited_groups
        if f.num_experts % groups:
            return (f"[pretrain.moe] num_expert_groups {groups} must divide the {f.num_experts} routed experts of "
                    f"{self.flavor}")
        per_group = f.num_experts // groups
        if per_group < 2:
            return (f"[pretrain.moe] num_expert_groups {groups} leaves {per_group} expert per group; torchtitan needs "
                    "at least 2 (groups are ranked by their two best scores)")
        if limited * per_group < f.top_k:
            return (f"[pretrain.moe] num_limited_groups {limited} x {per_group} experts per group is fewer than the "
                    f"top-{f.top_k} experts each token needs; raise num_limited_groups")
        return None

    @model_validator(mode="after")
    def _consistent(self) -> PretrainConfig:
        p = self.parallelism
        if self.launcher == "local" and p.world_size != 1:
            raise ValueError(
                f"launcher 'local' runs one process but parallelism asks for {p.world_size}; "
                "use launcher = \"torchrun\" (or \"slurm\")")
        if self.global_batch_size is not None and self.global_batch_size % self.micro_batch_size:
            raise ValueError(
                f"global_batch_size {self.global_batch_size} must be a multiple of local_batch_size x "
                f"data-parallel ranks = {self.micro_batch_size}")
        if self.optimizer.name == "dist_muon" and p.tensor_parallel > 1:
            raise ValueError("optimizer dist_muon does not support tensor_parallel > 1 (torchtitan's recipe refuses TP)")
        if self.schedule.warmup_steps > self.steps:
            raise ValueError(f"schedule.warmup_steps {self.schedule.warmup_steps} exceeds steps {self.steps}")
        return self

