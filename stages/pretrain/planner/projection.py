"""What a throughput per GPU means for a run: utilisation (MFU), step time, days, GPU-hours, training FLOPs.

The throughput is an input here: EUROPA's 1,300 tokens/s per GPU, `--tokens-per-s`, or the throughput model's
prediction (throughput.py); report.py shows the projection for each.

FLOPs per token (torchtitan's own formula, `get_moe_model_nparams_and_flops`, so the planner's utilisation
matches the trainer's MFU line): 6 x active matmul parameters (active parameters minus the embedding table,
lm_head included) + attention 6 x layers x heads x (qk_nope + qk_rope + v head dims) x seq_len (the PaLM
12 x L x H x Q x T with MLA's unequal q/k and v head dims; the causal mask's saving is not subtracted). The
anchor convention, 6 x 32.8e9 active parameters, is shown beside it.
Utilisation implied by a throughput (EUROPA: 1,300 tokens/s per GPU) = tokens/s x FLOPs per token / peak,
with GH200's dense bf16 peak of 989 TFLOP/s. Training compute = planned tokens (steps x global batch x
seq_len) x FLOPs per token, compared with the EU AI Act's 1e25 FLOP presumption of systemic risk.

"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from stages.ai_act import SYSTEMIC_RISK_FLOPS, presumed_systemic_risk
from stages.cluster.machine import JUPITER_BOOSTER, Hardware
from stages.pretrain.planner.shape import ModelShape

if TYPE_CHECKING:
    from stages.pretrain.config import PretrainConfig

EUROPA_TOKENS_PER_S_PER_GPU = 1300.0   # the PyTorch blog's EUROPA figure (anchors.md)


@dataclass
class Projection:
    tokens_per_s_per_gpu: float
    gpus: int
    flops_per_token: float                    # torchtitan's formula (matmul + attention)
    flops_per_token_matmul: float
    flops_per_token_attention: float
    flops_per_token_anchor: float             # 6 x active parameters (the blog's convention)
    peak_flops: float
    mfu: float
    mfu_anchor: float
    tokens_per_step: int
    step_time_s: float
    tokens_per_day: float
    planned_tokens: int
    days: float
    gpu_hours: float
    total_flops: float
    tokens_to_threshold: float
    threshold_flops: float = SYSTEMIC_RISK_FLOPS

    @property
    def above_threshold(self) -> bool:
        return presumed_systemic_risk(self.total_flops)


def flops_per_token(shape: ModelShape, seq_len: int) -> tuple[float, float, float]:
    """(total, matmul part, attention part): torchtitan's 6 x N_active_matmul + 6 x L x H x (qk + v) x T, the
    same estimate the pretrain manifest records (europa_model/flops.py; the parameter count here is cached)."""
    from europa_model.flops import attention_flops_per_token

    matmul = 6.0 * shape.active_matmul
    attention = float(attention_flops_per_token(shape.flavor, seq_len))
    return matmul + attention, matmul, attention


def project(settings: PretrainConfig, shape: ModelShape, tokens_per_s_per_gpu: float,
            hardware: Hardware = JUPITER_BOOSTER) -> Projection:
    p = settings.parallelism
    gpus = p.world_size
    fpt, mm, attn = flops_per_token(shape, settings.seq_len)
    peak = settings.peak_flops_per_device or hardware.peak_bf16_flops
    dp = p.data_parallel_replicate * p.shard_degree
    global_batch = settings.global_batch_size or settings.local_batch_size * dp
    tokens_per_step = global_batch * settings.seq_len
    planned = settings.steps * tokens_per_step
    rate = tokens_per_s_per_gpu * gpus
    tokens_per_day = rate * 86_400
    days = planned / tokens_per_day
    return Projection(
        tokens_per_s_per_gpu=tokens_per_s_per_gpu, gpus=gpus,
        flops_per_token=fpt, flops_per_token_matmul=mm, flops_per_token_attention=attn,
        flops_per_token_anchor=6.0 * shape.active, peak_flops=peak,
        mfu=tokens_per_s_per_gpu * fpt / peak, mfu_anchor=tokens_per_s_per_gpu * 6.0 * shape.active / peak,
        tokens_per_step=tokens_per_step, step_time_s=tokens_per_step / rate,
        tokens_per_day=tokens_per_day, planned_tokens=planned, days=days, gpu_hours=days * 24 * gpus,
        total_flops=planned * fpt, tokens_to_threshold=SYSTEMIC_RISK_FLOPS / fpt,
    )
