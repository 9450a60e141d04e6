"""The pretrain stage's record (manifest `statistics`): the model, how it was trained, the compute it took and
the final checkpoint. Evaluation and the compliance documents (model size, training time, compute, the
systemic-risk check) are written from it."""

from __future__ import annotations

from pydantic import Field

from pipeline.records import Record


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


class Compute(Record):
    """Training compute. FLOP counts are integers when counted exactly, floats when estimated (or beyond 2^63)."""

    flops_per_token: int
    flops_per_token_matmul: int
    flops_per_token_attention: int
    flops_attention: int | float
    flops_analytic: int | float = Field(description="flops_per_token x tokens_seen (6 x active matmul parameters + attention).")
    flops_hardware: float | None = Field(None, description="Hardware-based estimate; absent when it cannot be made.")
    peak_flops_per_device: float
    peak_flops_source: str | None
    mfu: float
    agreement: float | None = Field(None, description="flops_hardware / flops_analytic (absent with flops_hardware).")
    method_analytic: str
    method_hardware: str


class CheckpointFile(Record):
    path: str = Field(description="Relative to the pretrain stage folder.")
    sha256: str
    bytes: int


class FinalCheckpoint(Record):
    final_step: int
    path: str = Field(description="checkpoints/step-N, relative to the stage folder.")
    sha256: str = Field(description="Digest over (path, sha256) of the checkpoint's files.")
    files: list[CheckpointFile]


class Projection(Record):
    planned_tokens: int = Field(description="[pretrain] steps x global batch x seq_len.")
    planned_flops: int | float


class PretrainRecord(Record):
    model: ModelFacts = Field(description="The model that was trained.")
    training: Training = Field(description="How it was trained: steps, tokens, time, devices.")
    compute: Compute = Field(description="Training compute, estimated two ways.")
    checkpoint: FinalCheckpoint = Field(description="The final checkpoint (the model released).")
    projection: Projection = Field(description="What the configured run plans in full ([pretrain] steps).")
