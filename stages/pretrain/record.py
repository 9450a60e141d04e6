"""The pretrain stage's record (manifest `statistics`): the model, how it was trained, the compute it took and
the final checkpoint. Evaluation and the compliance documents (model size, training time, compute, the
systemic-risk check) are written from it."""

from __future__ import annotations

from pydantic import Field

from pipeline.records import Record, declared


class ModelFacts(Record):
    flavor: str
    architecture: str = Field(description="One sentence describing the architecture.")
    vocab_size: int
    total_params: int
    active_params: int = Field(description="Parameters used per token (shared + top-k routed experts).")
    active_matmul_params: int = Field(description="Active parameters minus the embedding table (lm_head included).")
    dim: int
    n_layers: int
    n_dense_layers: int
    num_experts: int
    top_k: int
    num_shared_experts: int
    context_length: int


class Training(Record):
    steps: int = Field(description="Optimizer steps of the final checkpoint.")
    tokens_seen: int = Field(description="steps x global batch x seq_len.")
    seq_len: int
    global_batch_size: int
    optimizer: str
    lr: float
    precision: str
    wall_time_s: float = Field(description="Wall time of the training processes, summed over restarts.")
    device_type: str
    device_name: str
    device_count: int
    nodes: int
    device_hours: float
    launcher: str
    segments: int = Field(description="Process lifetimes (restarts + 1).")
    final_loss: float
    first_loss: float
    tokens_per_s_per_device: float = Field(description="Mean over logged steps after the first.")
    peak_memory_gib: float
    torch_version: str | None
    torchtitan_version: str | None


class ArchitectureEstimate(Record):
    """(a) The figure reported: operations per token from the architecture x tokens seen (europa_model/flops.py)."""

    flops: int | float = Field(description="flops_per_token x tokens.")
    flops_per_token: int = Field(description="6 x active matmul parameters + attention, forward and backward.")
    flops_per_token_matmul: int
    flops_per_token_attention: int
    flops_attention: int | float
    tokens: int = Field(description="Tokens seen in training (steps x global batch x seq_len).")
    method: str
    uncertainty: str


class CountedOperations(Record):
    """(b) The check: the operations one real training step executed, counted, times the steps."""

    flops: int | float = Field(description="flops_per_step x steps.")
    flops_per_step: int = Field(description="Forward and backward of every micro-batch of one optimizer step, all ranks.")
    counted_step: int = Field(description="The step that was counted (the job's first).")
    steps: int
    tokens_per_step: int
    by_operation: dict[str, int] = Field(description="FLOPs of the counted step per aten operation.")
    recomputed_flops_per_step: int = Field(description="Activation recomputation in the counted step (excluded).")
    ratio_to_architecture: float = Field(description="flops / (a): 1.0 means the formula and the count agree.")
    method: str
    uncertainty: str


class HardwareBound(Record):
    """(c) The upper bound: devices x seconds x the device's peak theoretical throughput (no utilisation factor)."""

    flops: float = Field(description="device_seconds x peak_flops_per_device.")
    device_seconds: float = Field(description="Wall seconds of the training processes x their devices, summed over restarts.")
    peak_flops_per_device: float = Field(description="Peak theoretical FLOP/s of one device (stages/pretrain/peak_flops.py).")
    peak_source: str = Field(description="The table entry, or the CPU formula with the figures read from the machine.")
    implied_utilisation: float = Field(description="(a) / (c): the average fraction of peak (above 1 is impossible).")
    method: str
    uncertainty: str


class Compute(Record):
    """Training compute three ways. FLOP counts are integers when exact, floats when estimated (or beyond 2^63)."""

    architecture: ArchitectureEstimate = Field(description="(a) architecture-based estimate: the figure reported.")
    counted: CountedOperations | None = Field(None, description="(b) counted operations; absent when not counted (see not_counted).")
    not_counted: str | None = Field(None, description="Why (b) is absent.")
    hardware: HardwareBound | None = Field(None, description="(c) hardware-based bound; absent without a known peak (see no_hardware_bound).")
    no_hardware_bound: str | None = Field(None, description="Why (c) is absent.")


class CheckpointFile(Record):
    path: str = Field(description="Relative to the pretrain stage folder.")
    sha256: str
    bytes: int


class KeptCheckpoint(Record):
    """One checkpoint the stage folder holds (torchtitan keeps the newest [pretrain.checkpoint] keep_latest)."""

    step: int
    path: str = Field(description="checkpoints/step-N, relative to the stage folder.")
    sha256: str = Field(description="Digest over (path, sha256) of the checkpoint's files.")
    files: int = Field(description="Files of the checkpoint (DCP shards and .metadata; the ranks' checksums files aside).")
    bytes: int
    hashed_on_ranks: int = Field(description="Files whose sha256 the ranks computed while saving (checksums-rank<R>.json).")
    hashed_at_publish: int = Field(description="Files no rank recorded, read and hashed when the stage published.")


class SetAsideCheckpoint(Record):
    step: int
    path: str = Field(description="damaged-checkpoints/step-N, relative to the stage folder (kept, not deleted).")
    reason: str = Field(description="Why it could not be loaded (a missing file, one shorter than saved).")
    time: str = Field(description="When it was set aside (UTC).")


class FinalCheckpoint(Record):
    final_step: int
    path: str = Field(description="checkpoints/step-N, relative to the stage folder.")
    sha256: str = Field(description="Digest over (path, sha256) of the checkpoint's files.")
    files: list[CheckpointFile] = Field(description="The final checkpoint's files (the ranks' checksums files aside).")
    kept: list[KeptCheckpoint] = Field(description="Every checkpoint in the stage folder, the final one included, by step; "
                                       "the manifest's outputs carry their files' digests, read from the ranks' records.")
    set_aside: list[SetAsideCheckpoint] = Field(default_factory=list, description=(
        "Damaged checkpoints moved out of checkpoints/ before training resumed (stages/pretrain/damaged.py)."))


class Projection(Record):
    planned_tokens: int = declared("[pretrain] steps x global_batch_size x seq_len",
                                   "[pretrain] steps x global batch x seq_len: the plan.")
    planned_flops: int | float


class PretrainRecord(Record):
    model: ModelFacts = Field(description="The model that was trained.")
    training: Training = Field(description="How it was trained: steps, tokens, time, devices.")
    compute: Compute = Field(description="Training compute: estimated, counted, bounded.")
    checkpoint: FinalCheckpoint = Field(description="The final checkpoint (the model released) and every kept one.")
    projection: Projection = Field(description="What the configured run plans in full ([pretrain] steps).")
