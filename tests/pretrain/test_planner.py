"""The memory/throughput planner on the EUROPA preset (configs/jupiter-1t.toml) and on small layouts.

Parameter counts of europa-1t come from the meta device (a few seconds) and are cached per process, so the
whole file takes ~10 s.
"""

from __future__ import annotations

import json

import pytest

from stages.cluster.machine import GIB
from stages.cluster.machine import JUPITER_BOOSTER as GH200
from stages.pretrain.planner.memory import estimate_memory
from stages.pretrain.planner.report import plan
from stages.pretrain.planner.shape import model_shape
from stages.pretrain.planner.projection import EUROPA_TOKENS_PER_S_PER_GPU, flops_per_token
from pipeline.cli import main
from pipeline.config import REPO_ROOT, load_config

PRESET = REPO_ROOT / "configs" / "jupiter-1t.toml"


@pytest.fixture(scope="module")
def preset():
    return load_config(PRESET).section("pretrain")


@pytest.fixture(scope="module")
def preset_plan(preset):
    return plan(preset, 262_144)


def _with(settings, **updates):
    """A copy of PretrainConfig with nested fields replaced: _with(s, parallelism={"unshard_async_op": False})."""
    out = {}
    for key, value in updates.items():
        current = getattr(settings, key)
        out[key] = current.model_copy(update=value) if isinstance(value, dict) else value
    return settings.model_copy(update=out)


def test_preset_fits_with_offload_and_unshard_async(preset, preset_plan):
    m = preset_plan.memory
    assert (m.ac_mode, m.unshard_async_op) == ("offload", True)
    assert m.fits and m.verdict == "fits", preset_plan.text()
    assert 30 < m.total_gib < 0.9 * GH200.hbm_gib
    # the layout as the planner sees it
    lay = preset_plan.layout
    assert (lay.gpus, lay.data_parallel_replicate, lay.gpus_per_replica, lay.expert_parallel) == (1536, 4, 384, 96)
    # almost all checkpointed activations go to the Grace, within the budget and the host memory
    assert 0 < m.offload_host_gib <= preset.activation_checkpoint.offload_budget_gb <= GH200.host_usable_gib
    assert preset_plan.offload_traffic.share_of_micro_step < 0.1  # C2C is not what the step waits for


def test_preset_state_per_gpu_is_sharded_over_a_replica(preset_plan):
    m = preset_plan.memory
    total = model_shape("europa-1t", 262_144).total
    assert m.local_params == pytest.approx(total / 384)
    state_bytes = sum(m.persistent.values()) * GIB / m.local_params
    assert 12.0 <= state_bytes < 12.2  # fp32 param + fp32 grad + Muon momentum (AdamW for the embeddings)


def test_switches_move_memory_the_way_europa_reported(preset, preset_plan):
    v = preset_plan.variants
    # without offload (the same SAC policy kept on the GPU) the preset does not fit; no AC is far worse
    assert v["selective"]["async"] > GH200.hbm_gib
    assert v["none"]["async"] > v["selective"]["async"]
    assert v["offload"]["async"] == pytest.approx(preset_plan.memory.total_gib)
    # unshard_async_op frees the all-gather stream's pool (a derived lower bound of EUROPA's ~14 GiB)
    freed = v["offload"]["no_async"] - v["offload"]["async"]
    assert 1.0 < freed < 14.0
    off = estimate_memory(_with(preset, parallelism={"unshard_async_op": False}), model_shape("europa-1t", 262_144))
    assert off.total_gib == pytest.approx(v["offload"]["no_async"])
    # AdamW holds two moments instead of one momentum buffer
    adamw = estimate_memory(_with(preset, optimizer={"name": "adamw"}), model_shape("europa-1t", 262_144))
    assert adamw.total_gib > preset_plan.memory.total_gib + 5


def test_offload_budget_beyond_host_memory_is_flagged(preset):
    s = _with(preset, activation_checkpoint={"offload_budget_gb": 200.0})
    pl = plan(s, 262_144)
    assert any("host memory" in w for w in pl.warnings)
    small = plan(_with(preset, activation_checkpoint={"offload_budget_gb": 10.0}), 262_144)
    assert small.memory.total_gib > plan(preset, 262_144).memory.total_gib  # what does not fit the budget stays


def test_flops_and_implied_utilisation(preset, preset_plan):
    t = preset_plan.throughput
    shape = model_shape("europa-1t", 262_144)
    # torchtitan's formula: 6 x active matmul params + 6 x layers x heads x (qk_nope + qk_rope + v) x seq_len
    assert t.flops_per_token == pytest.approx(6 * shape.active_matmul + 6 * 61 * 64 * (128 + 64 + 128) * 4096)
    assert flops_per_token(shape, 4096)[0] == t.flops_per_token
    from europa_model.flops import training_flops_per_token  # what the pretrain manifest records

    assert training_flops_per_token("europa-1t", 262_144, 4096)["total"] == t.flops_per_token
    assert 2.0e11 < t.flops_per_token < 2.3e11
    # 1,300 tokens/s per GPU: about a quarter of the 989 TFLOP/s bf16 peak (anchors.md), a bit more with attention
    assert t.tokens_per_s_per_gpu == EUROPA_TOKENS_PER_S_PER_GPU
    assert 0.24 < t.mfu_anchor < 0.28
    assert 0.25 < t.mfu < 0.35
    assert t.tokens_per_day == pytest.approx(1300 * 1536 * 86_400)
    assert t.planned_tokens == preset.steps * preset.global_batch_size * preset.seq_len
    assert t.days == pytest.approx(t.planned_tokens / t.tokens_per_day)
    # 15T tokens: ~3e24 FLOPs, below the EU AI Act's 1e25; the threshold is reached near 46T tokens
    assert 2.5e24 < t.total_flops < 1e25 and not t.above_threshold
    assert 40e12 < t.tokens_to_threshold < 55e12


def test_plan_text_and_json(preset_plan):
    text = preset_plan.text()
    for needle in ("ESTIMATES", "fits", "unshard_async_op", "FLOPs per token", "1,300 tokens/s", "EU AI Act", "days",
                   "against EUROPA's reported 1,300", "bottleneck: InfiniBand bandwidth (all-to-all"):
        assert needle in text, needle
    d = json.loads(preset_plan.to_json())
    assert d["estimate"] is True and d["memory"]["verdict"] == "fits"
    assert set(d["variants"]) == {"none", "selective", "full", "offload"}
    p = d["prediction"]["tokens_per_s_per_gpu"]
    assert p["pessimistic"] < p["expected"] < p["optimistic"] < 1300
    assert d["predicted"]["expected"]["days"] > d["throughput"]["days"]  # slower than EUROPA's figure: longer


def test_plan_shows_what_node_limited_routing_changes(preset, preset_plan):
    rows = {r.label: r for r in preset_plan.what_if}
    limited = rows["node-limited routing, 4 of 24 node groups"].prediction.tokens_per_s
    deepep = rows['... and comm_backend = "deepep"'].prediction.tokens_per_s
    configured = preset_plan.prediction.tokens_per_s
    assert limited.expected == pytest.approx(configured.expected) and deepep.expected > 1.3 * configured.expected
    text = preset_plan.text()
    assert "unchanged: the standard all-to-all sends one copy per (token, expert)" in text
    # configured with the limit and DeepEP, the plan says what turning the limit off costs
    on = plan(_with(preset, moe={"num_expert_groups": 24, "num_limited_groups": 4, "comm_backend": "deepep"}), 262_144)
    assert on.prediction.tokens_per_s.expected == pytest.approx(deepep.expected)
    assert on.prediction.traffic.max_nodes == 4
    off = {r.label: r for r in on.what_if}["routing not limited"].prediction.tokens_per_s
    assert off.expected < on.prediction.tokens_per_s.expected
    assert "routing node-limited to 4 of 24 groups" in on.text()
    bad = plan(_with(preset, moe={"num_expert_groups": 25, "num_limited_groups": 4}), 262_144)
    assert any("num_expert_groups 25 must divide the 384" in w for w in bad.warnings)


def test_one_node_cannot_hold_europa_1t(preset):
    s = _with(preset, parallelism={"nodes": 2, "data_parallel_replicate": 1, "data_parallel_shard": 8, "expert_parallel": 8})
    pl = plan(s, 262_144)
    assert not pl.memory.fits and pl.memory.verdict == "does not fit"
    assert pl.memory.total_gib > 1000


def test_tiny_plan_and_cli(capsys):
    pl = plan(load_config().section("pretrain"), 4_000)
    assert pl.memory.fits and pl.total_params < 2e6
    assert main(["plan", "--config", str(PRESET), "--json", "--tokens-per-s", "1000"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["throughput"]["tokens_per_s_per_gpu"] == 1000
    assert d["layout"]["gpus"] == 1536
