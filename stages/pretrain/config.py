"""Settings of the pretrain stage: `[pretrain]` and its sub-tables.

These are the user-facing knobs; `stages/pretrain/trainer_config.py` turns them into torchtitan's
`Trainer.Config`. Everything torchtitan offers but EUROPA does not need stays at torchtitan's default, so a
reader of the TOML file sees every decision that was made for the run. `[pretrain.machine]` and
`[pretrain.slurm]` are the run's machine, whose models the cluster package holds (stages/cluster/config.py).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from pipeline.config import MAX_SEED, StrictModel
from stages.cluster.config import MachineConfig, SlurmConfig


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


class PretrainConfig(StrictModel):
    flavor: Literal["tiny", "small", "europa-1t"] = Field("tiny", description="Model flavor (europa_model/flavors.py).")
    seq_len: int = Field(256, ge=8, description="Tokens per training sequence (context length).")
    local_batch_size: int = Field(8, ge=1, description="Sequences per data-parallel rank per micro-step.")
    global_batch_size: int | None = Field(None, ge=1, description="Sequences per optimizer step; default local x data-parallel ranks (more = gradient accumulation).")
    steps: int = Field(100, ge=1)
    max_norm: float = Field(1.0, gt=0, description="Gradient clipping norm.")
    precision: Literal["float32", "bfloat16"] = Field(
        "float32", description="Parameter precision under mixed precision (bfloat16 on GPUs; float32 on CPU).")
    float8: Literal["rowwise", "rowwise_with_gw_hp"] | None = Field(
        None, description="Float8 matmuls through torchao (torchtitan's Float8LinearConverter and "
        "Float8GroupedExpertsConverter; lm_head and the router gates stay bf16): rowwise scaling runs on Hopper (SM89+), "
        "e.g. JUPITER's GH200; MXFP8 needs Blackwell and is not offered. Refused on CPU. The planner counts the "
        "matmuls at the fp8 peak.")
    device: Literal["auto", "cpu", "cuda"] = Field("auto", description="auto: cuda when torch sees a GPU, else cpu.")
    launcher: Literal["local", "torchrun", "slurm"] = Field(
        "local", description="local: one process; torchrun: processes_per_node ranks here (gloo on CPU); slurm: a Slurm job on "
        "[pretrain.machine] (JUPITER by default).")
    compile: bool = Field(False, description="torch.compile the model blocks and the loss.")
    seed: int | None = Field(None, ge=0, le=MAX_SEED, description="Model initialization seed (0 to 2^32-1); default: [run] seed.")
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

