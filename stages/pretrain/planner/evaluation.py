"""Memory per GPU of the distributed evaluation job ([evaluate.job]), before it is submitted.

Why: a checkpoint of europa-1t is ~1.9 TB in bf16, so the evaluation job must spread it over enough GPUs, and a
job that runs out of memory is found only after it waited in the queue. The job shards as training does
(stages/evaluate/distributed.py): FSDP2 over all ranks, the routed experts over expert_parallel of them, no
gradients or optimizer state. Per GPU, at its peak (the forward of the largest block):
    sharded parameters      total x bytes / ranks
    one block unsharded     attention + shared experts + router, and the routed experts / expert_parallel
    logits                  batch x seq_len x vocabulary x 4 bytes, twice (float32 logits and their log-softmax)
    runtime reserve         the machine's (CUDA context, NCCL)
An ESTIMATE, as the rest of the planner.
"""

from __future__ import annotations

from dataclasses import dataclass

from stages.cluster.machine import GIB, Hardware
from stages.pretrain.planner.shape import ModelShape


@dataclass(frozen=True)
class EvaluationMemory:
    ranks: int
    expert_parallel: int
    parameters_gib: float
    block_gib: float
    logits_gib: float
    reserve_gib: float
    hbm_gib: float

    @property
    def total_gib(self) -> float:
        return self.parameters_gib + self.block_gib + self.logits_gib + self.reserve_gib

    @property
    def fits(self) -> bool:
        return self.total_gib <= self.hbm_gib

    def line(self) -> str:
        return (f"evaluation job: {self.ranks} ranks, experts over {self.expert_parallel}: {self.total_gib:.1f} GiB "
                f"per GPU of {self.hbm_gib:.0f} (parameters {self.parameters_gib:.1f}, one block "
                f"{self.block_gib:.1f}, logits {self.logits_gib:.1f}, reserve {self.reserve_gib:.1f}): "
                f"{'fits' if self.fits else 'does not fit'}")


def evaluation_memory(shape: ModelShape, *, ranks: int, expert_parallel: int, precision: str, batch_size: int,
                      seq_len: int, hardware: Hardware) -> EvaluationMemory:
    width = 2 if precision == "bfloat16" else 4
    block = shape.attention_per_layer + shape.shared_per_layer + shape.router_per_layer
    block += shape.routed_per_layer / expert_parallel
    block = max(block, shape.attention_per_layer + shape.dense_ffn_per_layer)
    return EvaluationMemory(
        ranks=ranks, expert_parallel=expert_parallel, parameters_gib=shape.total * width / ranks / GIB,
        block_gib=block * width / GIB, logits_gib=2 * batch_size * seq_len * shape.vocab_size * 4 / GIB,
        reserve_gib=hardware.runtime_reserve_gib, hbm_gib=hardware.hbm_gib)


def job_ranks(job, processes_per_node: int) -> int:
    """Ranks of an [evaluate.job]: slurm nodes x the run's processes per node, torchrun's own, or 1."""
    if job.launcher == "slurm":
        return job.nodes * processes_per_node
    return job.processes_per_node if job.launcher == "torchrun" else 1
