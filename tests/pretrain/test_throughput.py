"""The throughput model: published measurements within the errors stated for them, routing traffic against a
simulation, and the mechanics the JUPITER plan rests on (what is bound by what, what node-limited routing
changes)."""

from __future__ import annotations

import random

import pytest

from pipeline.config import REPO_ROOT, load_config
from stages.cluster.machine import JUPITER_BOOSTER
from stages.pretrain.planner.calibration import (PUBLISHED_BAND, fit, leave_one_out_table, published_band,
                                                  published_errors, residual_band, scaled)
from stages.pretrain.planner.published import PUBLISHED_RUNS, calibration_table, mla_moe_dims
from stages.pretrain.planner.routing import token_traffic
from stages.pretrain.planner.shape import flavor_dims, model_shape
from stages.pretrain.planner.throughput import BANDS, EFFICIENCIES, predict
from stages.pretrain.planner.workload import dims_from_shape, from_settings

PRESET = REPO_ROOT / "configs" / "jupiter-1t.toml"


@pytest.mark.parametrize("case", PUBLISHED_RUNS, ids=lambda c: c.key)
def test_published_runs_within_their_stated_error(case):
    pr = predict(case.workload, case.hardware)
    rate = pr.tokens_per_s
    error = rate.expected / case.measured_tokens_per_s - 1
    assert abs(error) <= case.tolerance, (case.key, round(error, 3))
    if case.role == "fitted":
        assert abs(error) <= 0.02, "a fitted case must reproduce the value it fixed"
    assert rate.pessimistic <= rate.expected <= rate.optimistic


def test_a_published_figure_changed_by_2x_fails_its_check(capsys):
    """The tolerances can fail: each case's figure halved or doubled falls outside its stated error, with the
    efficiencies as they are (a fitted case's efficiency would then be wrong by as much). Prints every case's
    error (leave-one-out is the test below)."""
    for case in PUBLISHED_RUNS:
        predicted = predict(case.workload, case.hardware).tokens_per_s.expected
        errors = {f: predicted / (case.measured_tokens_per_s * f) - 1 for f in (1.0, 0.5, 2.0)}
        print(f"{case.key:<28} {case.role:<6} error {errors[1.0]:+.1%} (stated ±{case.tolerance:.0%}); "
              f"figure x0.5: {errors[0.5]:+.0%}, x2: {errors[2.0]:+.0%}")
        assert abs(errors[1.0]) <= case.tolerance
        assert abs(errors[0.5]) > case.tolerance and abs(errors[2.0]) > case.tolerance, case.key
    assert len(capsys.readouterr().out.splitlines()) == len(PUBLISHED_RUNS)


def test_docs_show_the_current_calibration_table():
    docs = (REPO_ROOT / "docs" / "jupiter.md").read_text(encoding="utf-8")
    assert calibration_table() in docs, "docs/jupiter.md is stale: paste `python -m stages.pretrain.planner.published`"
    assert leave_one_out_table() in docs, "docs/jupiter.md is stale: paste `python -m stages.pretrain.planner.calibration`"


def _crosses_nodes(case) -> bool:
    return case.workload.expert_parallel > case.workload.gpus_per_node


def test_leave_one_out_errors_of_every_case(capsys):
    """Each case predicted by the efficiencies fitted on the others. Printed; at least three cases run expert
    parallelism across nodes, and no case is missed by more than the widest stated error."""
    errors = published_errors()
    for x in errors:
        print(f"{x.key:<30} left out {x.left_out_error:+.1%} (in the fit {x.fitted_error:+.1%})")
    assert len(capsys.readouterr().out.splitlines()) == len(PUBLISHED_RUNS)
    assert sum(_crosses_nodes(c) for c in PUBLISHED_RUNS) >= 3
    assert all(abs(x.left_out_error) <= 0.35 for x in errors), [(x.key, round(x.left_out_error, 3)) for x in errors]
    lo, rms, hi = residual_band(errors)
    assert lo < 0 < hi and rms > 0.05  # residuals, not zeros by construction
    computed = tuple(round(x, 3) if isinstance(x, float) else x for x in published_band())
    assert computed == PUBLISHED_BAND, "calibration.PUBLISHED_BAND is stale: set it to the computed band"


@pytest.mark.parametrize("factor", [0.5, 2.0])
def test_a_cross_node_figure_changed_by_2x_fails_leave_one_out(factor):
    """A published figure halved or doubled is predicted, by the efficiencies the other cases give, outside the
    widest stated error: the calibration can tell a wrong figure (the others' fit does not contain it)."""
    for i, case in enumerate(PUBLISHED_RUNS):
        if not _crosses_nodes(case):
            continue
        others = [c for j, c in enumerate(PUBLISHED_RUNS) if j != i]
        factors = fit(others, sweeps=2)
        predicted = predict(case.workload, case.hardware, scaled(EFFICIENCIES, factors)).tokens_per_s.expected
        assert abs(predicted / (case.measured_tokens_per_s * factor) - 1) > 0.35, case.key


@pytest.mark.parametrize("flavor", ["small", "europa-1t"])
def test_published_cases_count_parameters_like_our_meta_device_counts(flavor):
    """The formula that sizes DeepSeek-V3 for the published cases reproduces our flavors' exact counts."""
    f, shape = flavor_dims(flavor), model_shape(flavor, 262_144)
    formula = mla_moe_dims(flavor, dim=f.dim, n_layers=f.n_layers, n_dense=f.n_dense_layers, n_heads=f.n_heads,
                           q_lora=f.q_lora_rank, kv_lora=f.kv_lora_rank, nope=f.qk_nope_head_dim,
                           rope=f.qk_rope_head_dim, v=f.v_head_dim, dense_hidden=f.dense_hidden_dim,
                           moe_hidden=f.moe_hidden_dim, experts=f.num_experts, shared=f.num_shared_experts,
                           top_k=f.top_k, vocab=262_144)
    ours = dims_from_shape(shape)
    assert (formula.routed_params, formula.routed_active_params) == (ours.routed_params, ours.routed_active_params)
    assert formula.dense_params == ours.dense_params
    # count_parameters' active_matmul also counts the norms' weights (a few thousand); the formula does not
    norms = f.n_layers * (2 * f.dim + f.q_lora_rank + f.kv_lora_rank) + f.dim
    assert ours.matmul_params - formula.matmul_params == norms


def _simulate(k, ep, gpn, experts, groups=None, limited=None, tokens=20_000, seed=0):
    """Tokens routed like torchtitan's router on uniform scores: M groups, then k distinct experts in them."""
    rng = random.Random(seed)
    per_rank, nodes = experts // ep, ep // gpn
    own_node = 0
    ib = distinct_remote_nodes = 0.0
    for _ in range(tokens):
        pool = list(range(experts))
        if groups:
            chosen = rng.sample(range(groups), limited)
            size = experts // groups
            pool = [e for g in chosen for e in range(g * size, (g + 1) * size)]
        picked = rng.sample(pool, k)
        node_of = [(e // per_rank) // gpn for e in picked]
        ib += sum(n != own_node for n in node_of)
        distinct_remote_nodes += len({n for n in node_of if n != own_node})
    return ib / tokens, distinct_remote_nodes / tokens, nodes


@pytest.mark.parametrize("groups,limited", [(None, None), (24, 4), (48, 4), (12, 2)])
def test_routing_traffic_matches_a_simulation(groups, limited):
    k, ep, gpn, experts = 8, 96, 4, 384  # europa-1t at EP 96 on 4-GPU nodes: 24 nodes per EP group
    per_copy, per_node, nodes = _simulate(k, ep, gpn, experts, groups, limited)
    std = token_traffic(top_k=k, expert_parallel=ep, gpus_per_node=gpn, dispatcher="standard",
                        num_expert_groups=groups, num_limited_groups=limited)
    dedup = token_traffic(top_k=k, expert_parallel=ep, gpus_per_node=gpn, dispatcher="deepep",
                          num_expert_groups=groups, num_limited_groups=limited)
    assert std.ib_copies == pytest.approx(per_copy, rel=0.03)     # the same with or without the limit
    assert std.ib_copies == pytest.approx(k * (nodes - 1) / nodes)
    assert dedup.ib_copies == pytest.approx(per_node, rel=0.05)   # experts are drawn without replacement there
    if limited:
        assert dedup.max_nodes == min(limited * max(1, nodes // groups), nodes)
        assert dedup.ib_copies < 0.6 * std.ib_copies


def test_unaligned_groups_bound_no_nodes():
    t = token_traffic(top_k=8, expert_parallel=96, gpus_per_node=4, dispatcher="deepep", num_expert_groups=16,
                      num_limited_groups=4)  # 16 groups over 24 nodes: groups straddle nodes
    assert not t.aligned and t.max_nodes == 8


@pytest.fixture(scope="module")
def preset_workload():
    from stages.pretrain.planner.memory import estimate_memory

    settings = load_config(PRESET).section("pretrain")
    shape = model_shape("europa-1t", 262_144)
    return from_settings(settings, shape, estimate_memory(settings, shape))


def test_the_preset_is_bound_by_infiniband_and_compute_alone_caps_it(preset_workload):
    w = preset_workload
    assert (w.microsteps, w.expert_parallel, w.dispatcher, w.num_expert_groups) == (2, 96, "standard", None)
    pr = predict(w)
    e = pr.expected
    assert e.bottleneck.startswith("InfiniBand") and e.ib_busy_s > e.critical_s
    assert e.a2a_ib_s > e.fsdp_ib_s > e.hsdp_ib_s > 0
    # ~0.96 of 8 copies cross nodes: 24 nodes per EP group
    assert pr.traffic.ib_copies == pytest.approx(8 * 23 / 24) and pr.traffic.nodes_spanned == 24
    # with every byte hidden, compute alone would stay below EUROPA's 1,300 at the efficiency fitted on
    # DeepSeek-V3-16B, and pass it only at the optimistic one (europa-1t's far larger matmuls)
    compute_only = {b: e.tokens_per_microstep / pr.bands[b].compute_s for b in BANDS}
    assert compute_only["expected"] < 1300 < compute_only["optimistic"]
    assert all(pr.bands[b].tokens_per_s_per_gpu < 1300 for b in BANDS)


def test_the_power_cap_and_routing_imbalance_slow_what_they_should(preset_workload):
    """JUPITER's 680 W cap derates compute only; the busiest EP rank stretches the all-to-all by its load and the
    compute by the routed experts' share of the matmuls."""
    from dataclasses import replace

    w = preset_workload.with_(routing_imbalance=1.0)
    capped, uncapped = predict(w).expected, predict(w, replace(JUPITER_BOOSTER, power_cap_w=None)).expected
    assert JUPITER_BOOSTER.power_cap_w == 680
    assert capped.compute_s == pytest.approx(uncapped.compute_s / EFFICIENCIES.power_capped_compute.expected)
    assert capped.a2a_s == pytest.approx(uncapped.a2a_s) and capped.fsdp_ib_s == pytest.approx(uncapped.fsdp_ib_s)
    skewed = predict(w.with_(routing_imbalance=1.2)).expected
    assert skewed.a2a_s == pytest.approx(1.2 * capped.a2a_s)
    routed = w.model.routed_active_params / w.model.matmul_params
    assert capped.compute_s < skewed.compute_s < capped.compute_s * (1 + 0.2 * routed) * 1.0001
    assert predict(preset_workload).expected.a2a_s == pytest.approx(EFFICIENCIES.routing_imbalance.expected * capped.a2a_s)
    assert predict(w.with_(expert_parallel=1, routing_imbalance=1.2)).expected.compute_s == pytest.approx(
        predict(w.with_(expert_parallel=1)).expected.compute_s)  # no expert parallelism: no busiest rank


def test_node_limited_routing_pays_only_with_a_deduplicating_dispatcher(preset_workload):
    w = preset_workload
    base = predict(w).expected
    limited = predict(w.with_(num_expert_groups=24, num_limited_groups=4)).expected
    assert limited.a2a_ib_s == pytest.approx(base.a2a_ib_s) and limited.step_s == pytest.approx(base.step_s)
    deepep = predict(w.with_(dispatcher="deepep")).expected
    both = predict(w.with_(dispatcher="deepep", num_expert_groups=24, num_limited_groups=4)).expected
    assert both.a2a_ib_s < 0.6 * deepep.a2a_ib_s < 0.6 * base.a2a_ib_s
    assert both.tokens_per_s_per_gpu > deepep.tokens_per_s_per_gpu > base.tokens_per_s_per_gpu


def test_bandwidth_moves_an_ib_bound_layout_and_not_a_compute_bound_one(preset_workload):
    from dataclasses import replace

    fat = replace(JUPITER_BOOSTER, ib_gb_per_s_per_gpu=100.0)
    assert predict(preset_workload, fat).expected.tokens_per_s_per_gpu > 1.5 * predict(preset_workload).expected.tokens_per_s_per_gpu
    one_node = next(c for c in PUBLISHED_RUNS if c.key == "dsv3-16b-8xb200-ep1")
    more_ib = replace(one_node.hardware, ib_gb_per_s_per_gpu=400.0)
    assert predict(one_node.workload, more_ib).expected.tokens_per_s_per_gpu == \
        pytest.approx(predict(one_node.workload, one_node.hardware).expected.tokens_per_s_per_gpu)
