"""Published training-throughput measurements of MoE models, as workloads the throughput model can predict.

Each case is a run someone measured with a known layout: what ran, on which machine, and tokens/s per GPU. Three
fixed the model's fitted efficiencies (role "fitted"), the others check it (role "check"); `tolerance` is the
error this module states for the case, |predicted / measured - 1|, which tests/pretrain/test_throughput.py
holds it to. Sources and the errors are listed in docs/jupiter.md.

Every case is planned with routing_imbalance 1: the Qwen3, 671B-on-B200 and Megatron runs force balanced
routing; the others use a learned router and do not report its imbalance, which their fitted efficiencies then
absorb (the model's assumed band applies to the plan's own layouts).

Parameter counts come from the published dimensions through the same formulas for every case (`mla_moe_dims`,
`gqa_moe_dims`); the test checks the MLA formula against our own flavors' meta-device counts.
"""

from __future__ import annotations

from dataclasses import dataclass

from stages.cluster.machine import Hardware
from stages.pretrain.hardware import B200_NODE, H100_SXM_NODE, H800_NODE
from stages.pretrain.planner.workload import ModelDims, Workload


def mla_moe_dims(name: str, *, dim: int, n_layers: int, n_dense: int, n_heads: int, q_lora: int, kv_lora: int,
                 nope: int, rope: int, v: int, dense_hidden: int, moe_hidden: int, experts: int, shared: int,
                 top_k: int, vocab: int, mtp: int = 0) -> ModelDims:
    """DeepSeek-V3-style decoder (MLA attention, dense first layers, MoE with shared experts). `mtp`
    multi-token-prediction modules (DeepSeek-V3: 1): each one more MoE block and one more output pass."""
    q = (dim * q_lora + q_lora * n_heads * (nope + rope)) if q_lora else dim * n_heads * (nope + rope)
    attn = q + dim * (kv_lora + rope) + kv_lora * n_heads * (nope + v) + n_heads * v * dim
    attn_norms = (q_lora or 0) + kv_lora
    n_moe = n_layers - n_dense + mtp
    ffn_dense = 3 * dim * dense_hidden
    router, shared_p, expert = dim * experts, 3 * dim * moe_hidden * shared, 3 * dim * moe_hidden
    layers = n_layers + mtp
    matmul = layers * attn + n_dense * ffn_dense + n_moe * (router + shared_p + top_k * expert) + vocab * dim \
        + mtp * 2 * dim * dim
    dense = layers * (attn + attn_norms + 2 * dim) + n_dense * ffn_dense + n_moe * (router + shared_p) \
        + 2 * vocab * dim + dim + mtp * (2 * dim * dim + 3 * dim)
    return ModelDims(name=name, dim=dim, n_layers=layers, n_moe_layers=n_moe, n_heads=n_heads,
                     qk_head_dim=nope + rope, v_head_dim=v, num_experts=experts, top_k=top_k, matmul_params=matmul,
                     routed_active_params=n_moe * top_k * expert, dense_params=dense,
                     routed_params=n_moe * experts * expert, extra_output_passes=mtp, vocab_size=vocab)


def gqa_moe_dims(name: str, *, dim: int, n_layers: int, n_heads: int, n_kv_heads: int, head_dim: int,
                 moe_hidden: int, experts: int, top_k: int, vocab: int) -> ModelDims:
    """Qwen3-MoE-style decoder (grouped-query attention, every layer MoE, no shared expert)."""
    attn = dim * n_heads * head_dim + 2 * dim * n_kv_heads * head_dim + n_heads * head_dim * dim
    router, expert = dim * experts, 3 * dim * moe_hidden
    matmul = n_layers * (attn + router + top_k * expert) + vocab * dim
    dense = n_layers * (attn + router + 2 * dim + 2 * head_dim) + 2 * vocab * dim + dim
    return ModelDims(name=name, dim=dim, n_layers=n_layers, n_moe_layers=n_layers, n_heads=n_heads,
                     qk_head_dim=head_dim, v_head_dim=head_dim, num_experts=experts, top_k=top_k,
                     matmul_params=matmul, routed_active_params=n_layers * top_k * expert, dense_params=dense,
                     routed_params=n_layers * experts * expert, vocab_size=vocab)


# torchtitan 0.3.0's flavors (models/deepseek_v3/__init__.py, models/qwen3) and DeepSeek-V3's report
DSV3_16B = mla_moe_dims("DeepSeek-V3-16B (torchtitan)", dim=2048, n_layers=27, n_dense=1, n_heads=16, q_lora=0,
                        kv_lora=512, nope=128, rope=64, v=128, dense_hidden=10944, moe_hidden=1408, experts=64,
                        shared=2, top_k=6, vocab=102400)
QWEN3_30B_A3B = gqa_moe_dims("Qwen3-30B-A3B", dim=2048, n_layers=48, n_heads=32, n_kv_heads=4, head_dim=128,
                             moe_hidden=768, experts=128, top_k=8, vocab=151936)
DSV3_671B = mla_moe_dims("DeepSeek-V3 671B (+1 MTP module)", dim=7168, n_layers=61, n_dense=3, n_heads=128,
                         q_lora=1536, kv_lora=512, nope=128, rope=64, v=128, dense_hidden=18432, moe_hidden=2048,
                         experts=256, shared=1, top_k=8, vocab=129280, mtp=1)

# torchtitan's DeepSeek-V3 has no multi-token-prediction module (models/deepseek_v3 at 1a36996b)
DSV3_671B_TORCHTITAN = mla_moe_dims("DeepSeek-V3 671B (torchtitan, no MTP)", dim=7168, n_layers=61, n_dense=3,
                                    n_heads=128, q_lora=1536, kv_lora=512, nope=128, rope=64, v=128, dense_hidden=18432,
                                    moe_hidden=2048, experts=256, shared=1, top_k=8, vocab=129280)
_MLA_UP_PROJ = 61 * (1536 * 128 * 192 + 512 * 128 * 256)  # DeepSeek-V3's q and kv up-projections, all layers


@dataclass(frozen=True)
class PublishedRun:
    key: str
    what: str
    source: str
    measured_tokens_per_s: float
    measured_how: str
    role: str                  # fitted | check
    fixes: str                 # which efficiency it fixed (fitted) or what it checks
    tolerance: float           # the error stated for this case: |predicted / measured - 1| <= tolerance
    workload: Workload
    hardware: Hardware


_DSV3_16B_DEFAULT = Workload(routing_imbalance=1.0, model=DSV3_16B, seq_len=4096, local_batch_size=4, microsteps=1, gpus=8, gpus_per_node=8,
                             data_parallel_replicate=1, data_parallel_shard=8, expert_parallel=8, ac_mode="selective",
                             dispatcher="standard", optimizer="adamw")
_DSV3_16B_B200_TUNED = _DSV3_16B_DEFAULT.with_(ac_mode="none")
# torchtitan's MFU counts 6 x active matmul parameters + 6 x layers x heads x (qk + v) x seq_len per token: 1.7427e10
# for DeepSeek-V3-16B at 4,096 tokens (202.78 TFLOP/s at 11,636 tokens/s in #1789); on B200 its peak is 2.25e15
_DSV3_16B_FLOPS, _B200_PEAK = 202.78e12 / 11_636, 2.25e15


def _from_mfu(mfu: float) -> float:
    return mfu * _B200_PEAK / _DSV3_16B_FLOPS


# nebius/ml-cookbook pytorch-dsv3-mxfp8/train_671b.sh: TP 2, PP 2 (Interleaved1F1B, 2 stages per rank, 64
# micro-batches of one sequence), EP 32 over 4 nodes, FSDP 64 (efsdp 4), 64 x 8192 tokens per DP rank, full AC.
# --debug.moe_force_load_balance replaces the router by round-robin: a token's 8 experts are consecutive, all on
# one EP rank, which is the traffic of 32 expert groups with 1 chosen (routing.py); the standard dispatcher still
# sends 8 rows. Interleaved bubble ~ (p - 1) / (v m) = 1/128. TP's activation collectives (NVLink) not modelled.
_DSV3_671B_B200 = Workload(routing_imbalance=1.0, model=DSV3_671B_TORCHTITAN, seq_len=8192, local_batch_size=64, microsteps=1, gpus=256,
                           gpus_per_node=8, data_parallel_replicate=1, data_parallel_shard=64, tensor_parallel=2,
                           pipeline_parallel=2, expert_parallel=32, ac_mode="full", dispatcher="standard",
                           num_expert_groups=32, num_limited_groups=1, optimizer="adamw", pipeline_bubble=1 / 128,
                           notes=("forced round-robin routing as 32 groups, 1 chosen: one EP rank per token",
                                  "TP 2 activation collectives over NVLink not modelled"))
_QWEN3_B200 = Workload(routing_imbalance=1.0, model=QWEN3_30B_A3B, seq_len=4096, local_batch_size=8, microsteps=1, gpus=8, gpus_per_node=8,
                       data_parallel_replicate=1, data_parallel_shard=8, expert_parallel=8, ac_mode="full",
                       dispatcher="standard", optimizer="adamw")

PUBLISHED_RUNS: tuple[PublishedRun, ...] = (
    PublishedRun(
        key="dsv3-16b-8xh100",
        what="DeepSeek-V3-16B, torchtitan, 8 x H100 (one node), FSDP 8 + EP 8, 4 x 4096 tokens per GPU, selective AC, "
             "standard all-to-all, AdamW, loss compiled",
        source="pytorch/torchtitan issue #1789 (2025-10-02) with the config of commit 82a9530 (#1792): "
               "deepseek_v3_16b.toml, local_batch_size 4",
        measured_tokens_per_s=11_545, measured_how="mean of the logged steps 10-40 (11,254-11,758; 19.8-20.7% MFU)",
        role="fitted", fixes="compute efficiency on Hopper", tolerance=0.05,
        workload=_DSV3_16B_DEFAULT, hardware=H100_SXM_NODE),
    PublishedRun(
        key="dsv3-16b-8xb200-ep1",
        what="DeepSeek-V3-16B, torchtitan, 8 x B200, FSDP 8 without expert parallelism, 4 x 4096 tokens per GPU, no AC, "
             "model + loss compiled",
        source="pytorch/torchtitan pull request #1993 (2025-11-05, notes on 8 x B200): \"removed EP=8 and set it to 1 "
               "to get consistent 18 % MFU\"",
        measured_tokens_per_s=_from_mfu(0.18), measured_how="18% MFU (torchtitan's count) x 2.25 PFLOP/s / 1.743e10",
        role="fitted", fixes="compute efficiency on Blackwell (no all-to-all in this run)", tolerance=0.05,
        workload=_DSV3_16B_B200_TUNED.with_(expert_parallel=1), hardware=B200_NODE),
    PublishedRun(
        key="dsv3-16b-8xb200-ep8",
        what="the same with EP 8",
        source="same pull request: \"17 - 18 % MFU\" before EP was removed",
        measured_tokens_per_s=_from_mfu(0.175), measured_how="17.5% MFU (the middle of 17-18%)",
        role="check", fixes="the cost of the standard all-to-all at EP 8 in one node", tolerance=0.10,
        workload=_DSV3_16B_B200_TUNED, hardware=B200_NODE),
    PublishedRun(
        key="dsv3-16b-8xb200-default",
        what="torchtitan's default DeepSeek-V3-16B config (the H100 case above) on 8 x B200",
        source="same pull request: \"Baseline, out of the box configuration returns about 13.5 % MFU\"",
        measured_tokens_per_s=_from_mfu(0.135), measured_how="13.5% MFU",
        role="check", fixes="H100 -> B200 with the same config (selective AC, loss compiled only)", tolerance=0.20,
        workload=_DSV3_16B_DEFAULT, hardware=B200_NODE),
    PublishedRun(
        key="qwen3-30b-8xb200-standard",
        what="Qwen3-30B-A3B, torchtitan, 8 x B200 (one node), FSDP 8 + EP 8, 8 x 4096 tokens per GPU, full AC, "
             "standard all-to-all, model + loss compiled, forced balanced routing",
        source="torchtitan/distributed/deepep/README.md (pytorch/torchtitan history, commit 366776a, 2025-11-24) and "
               "its qwen3_10b_a1b_with_deepep.toml",
        measured_tokens_per_s=9_930, measured_how="the README's figure for TorchTitan's default expert parallelism",
        role="fitted", fixes="the standard dispatcher's handling cost", tolerance=0.05,
        workload=_QWEN3_B200, hardware=B200_NODE),
    PublishedRun(
        key="qwen3-30b-8xb200-deepep",
        what="the same run with DeepEP's kernels",
        source="same README", measured_tokens_per_s=14_796, measured_how="the README's 1-node strong-scaling row",
        role="check", fixes="DeepEP in one node (its handling cost is assumed, not fitted); under-predicted: Qwen3's "
              "compute runs faster than DeepSeek-V3-16B's, which one efficiency per GPU generation cannot say",
        tolerance=0.30,
        workload=_QWEN3_B200.with_(dispatcher="deepep"), hardware=B200_NODE),
    PublishedRun(
        key="qwen3-30b-128xb200-deepep",
        what="the same with DeepEP on 16 nodes (128 B200): EP 8 inside each node, FSDP 128 across the nodes (the "
             "experts' efsdp 16 rings run over InfiniBand, one rank per node)",
        source="same README", measured_tokens_per_s=13_856, measured_how="the README's 16-node strong-scaling row",
        role="check", fixes="FSDP over InfiniBand and how much prefetching hides it (the same under-prediction as "
              "the 1-node DeepEP case)", tolerance=0.30,
        workload=_QWEN3_B200.with_(dispatcher="deepep", gpus=128, data_parallel_shard=128), hardware=B200_NODE),
    PublishedRun(
        key="dsv3-671b-256xb200-standard",
        what="DeepSeek-V3 671B, torchtitan, 256 B200 (32 nodes), TP 2, PP 2, EP 32 across 4 nodes, FSDP 64, 64 x 8192 "
             "tokens per DP rank, full AC, model + loss compiled, bf16, standard all-to-all, forced balanced routing",
        source="PyTorch / Nebius blog \"up to 41% faster pre-training: MXFP8 and DeepEP for DeepSeek-V3 on B200 with "
               "torchtitan\" (651 tokens/s BF16 baseline) and its recipe nebius/ml-cookbook pytorch-dsv3-mxfp8 "
               "(train_671b.sh @ fcff5ef7, README, dsv3_tps.png)",
        measured_tokens_per_s=651, measured_how="the blog's BF16 standard-EP figure (torchtitan's tps, per GPU)",
        role="check", fixes="the standard all-to-all over InfiniBand (6 of 8 copies leave the node)", tolerance=0.35,
        workload=_DSV3_671B_B200, hardware=B200_NODE),
    PublishedRun(
        key="dsv3-671b-256xb200-deepep",
        what="the same run with DeepEP (one copy per destination rank: under the forced routing, one per token)",
        source="same blog and recipe (EP_BACKEND=deepep): 859 tokens/s, +32%",
        measured_tokens_per_s=859, measured_how="the blog's BF16 DeepEP figure",
        role="check", fixes="DeepEP across nodes; the MXFP8 run (918) is left out: the model has no routed-experts-"
              "only float8", tolerance=0.35,
        workload=_DSV3_671B_B200.with_(dispatcher="deepep"), hardware=B200_NODE),
    PublishedRun(
        key="dsv3-671b-1024xh100-megatron",
        what="DeepSeek-V3 671B (1 MTP layer), Megatron-Bridge, 1,024 H100 (128 nodes), TP 2 with sequence parallel, "
             "PP 8 (VP 4), EP 64 across 8 nodes, node-limited routing (4 of 8 groups), DeepEP (flex), EP all-to-all "
             "overlapped in 1F1B, distributed optimizer, recompute of MLA up-projections and dense MLPs, FP8, "
             "128 micro-batches of 1 x 4096, forced balanced routing",
        source="NVIDIA-NeMo/Megatron-Bridge docs/performance-summary.md at ea29906 (25.09 container, DGX-H100 row "
               "\"DeepSeekV3 (dropless) | 1024 | 8192 | 1 | 4096 | 0 | 2 | 8 | 1 | 4 | 64 | 128 | 1297\"), recipe "
               "scripts/performance/configs/deepseek/deepseek_v3_llm_pretrain.yaml and run_script.py",
        measured_tokens_per_s=1297, measured_how="the table's tokens/s/GPU (the FP8 recipe behind it is not stated: "
               "per-tensor current scaling assumed; blockwise gives 330 against 338 TFLOP/s)",
        role="check", fixes="cross-node DeepEP with node-limited routing and overlap on Hopper, FP8", tolerance=0.35,
        workload=Workload(
            routing_imbalance=1.0, model=DSV3_671B, seq_len=4096, local_batch_size=1, microsteps=128, gpus=1024, gpus_per_node=8,
            data_parallel_replicate=1, data_parallel_shard=64, tensor_parallel=2, pipeline_parallel=8,
            expert_parallel=64, ac_mode="minimal", recompute_params=_MLA_UP_PROJ + 3 * 3 * 7168 * 18432,
            matmul_precision="fp8", dispatcher="deepep", num_expert_groups=8, num_limited_groups=4, overlap="full",
            comm_sm_share=20 / 132, gradient_sync="step", optimizer="adamw", pipeline_bubble=7 / (4 * 128),
            notes=("DeepEP's SM share assumed as DeepSeek-V3's 20 of 132", "interleaved bubble (p - 1) / (v m)",
                   "TP 2 activation collectives over NVLink not modelled")),
        hardware=H100_SXM_NODE),
    PublishedRun(
        key="dsv3-671b-2048xh800",
        what="DeepSeek-V3 pretraining, 2,048 H800: PP 16 (DualPipe, all communication overlapped, 20 of 132 SMs for "
             "it), EP 64 over 8 nodes, ZeRO-1 DP, node-limited routing (4 of 8 node groups), FP8 GEMMs, FP8 "
             "dispatch / BF16 combine, recomputing only norms and MLA up-projections, 1 MTP module",
        source="DeepSeek-V3 Technical Report (arXiv 2412.19437), sec. 3 and table 1: 180K H800 GPU-hours per "
               "trillion tokens",
        measured_tokens_per_s=1e12 / (180e3 * 3600), measured_how="1e12 tokens / 180,000 GPU-hours (a whole-run "
               "average: restarts and evaluation included)",
        role="check", fixes="cross-node dispatch with node-limited routing, FP8, full overlap", tolerance=0.35,
        workload=Workload(
            routing_imbalance=1.0, model=DSV3_671B, seq_len=4096, local_batch_size=1, microsteps=120, gpus=2048, gpus_per_node=8,
            data_parallel_replicate=1, data_parallel_shard=128, pipeline_parallel=16, expert_parallel=64,
            ac_mode="minimal", recompute_params=_MLA_UP_PROJ, matmul_precision="fp8",
            dispatcher="deepep", a2a_bytes=1.5, num_expert_groups=8, num_limited_groups=4, overlap="full",
            comm_sm_share=20 / 132, gradient_sync="step", optimizer="adamw", pipeline_bubble=0.05,
            notes=("pipeline bubble 5% assumed for DualPipe at 120 micro-batches per step",
                   "a2a_bytes 1.5: FP8 dispatch and FP8 gradient before the down-projections, BF16 combine both "
                   "ways (report sec. 3.3)")),
        hardware=H800_NODE),
)


def calibration_table() -> str:
    """The cases as the markdown table docs/jupiter.md shows (a test keeps the two equal):
    `python -m stages.pretrain.planner.published`."""
    from stages.pretrain.planner.throughput import predict

    rows = ["| case | role | measured tokens/s per GPU | predicted (pessimistic-optimistic) | error | stated | "
            "bottleneck (predicted) |", "|---|---|---|---|---|---|---|"]
    for c in PUBLISHED_RUNS:
        pr = predict(c.workload, c.hardware)
        r = pr.tokens_per_s
        err = r.expected / c.measured_tokens_per_s - 1
        rows.append(f"| {c.key} | {c.role} | {c.measured_tokens_per_s:,.0f} | {r.expected:,.0f} ({r.pessimistic:,.0f}-"
                    f"{r.optimistic:,.0f}) | {err:+.0%} | ±{c.tolerance:.0%} | {pr.expected.bottleneck} |")
    return "\n".join(rows)


if __name__ == "__main__":
    print(calibration_table())
