"""Node-limited routing: torchtitan's router, built through our flavors and the trainer config, never picks an
expert outside the groups it allowed, and the groups are the nodes an expert-parallel group spans."""

from __future__ import annotations

import os

os.environ["OMP_NUM_THREADS"] = "1"

import pytest  # noqa: E402
import torch  # noqa: E402

from europa_model.flavors import FLAVORS, build_model_args, routing_of  # noqa: E402


def _router(flavor: str, **routing):
    config = build_model_args(flavor, 1000, **routing)
    layer = next(cfg for cfg in config.layers if cfg.moe is not None)
    torch.manual_seed(0)
    router = layer.moe.router.build()
    with torch.no_grad():
        for p in router.parameters():
            p.normal_(0, 0.5)  # sharp, varied scores: an unconstrained top-8 spreads over many groups
    return router


def _groups_used(router, groups: int, tokens: int = 512, bias: bool = True) -> torch.Tensor:
    f = router.num_experts
    x = torch.randn(1, tokens, router.gate.weight.shape[1])
    expert_bias = torch.randn(f) * 0.1 if bias else None
    with torch.no_grad():
        _, ids, _ = router(x, expert_bias)
    group_of = ids // (f // groups)  # experts are contiguous per group, as EP places them per rank
    return torch.tensor([len(set(row.tolist())) for row in group_of.reshape(-1, ids.shape[-1])]), ids


@pytest.mark.parametrize("limited", [1, 2, 4])
def test_small_routes_every_token_inside_its_allowed_groups(limited):
    """`small` has europa-1t's routing regime (384 experts, top-8): 24 groups of 16 experts, e.g. EP 96 on
    4-GPU nodes (24 nodes per EP group). With the limit, no token uses more than `limited` groups; without it,
    tokens spread over many more: the limit is what bounds them."""
    f = FLAVORS["small"]
    router = _router("small", num_expert_groups=24, num_limited_groups=limited)
    used, ids = _groups_used(router, 24)
    assert ids.shape[-1] == f.top_k and int(used.max()) <= limited
    assert len(set(ids.reshape(-1, f.top_k)[0].tolist())) == f.top_k  # still top-k distinct experts
    free, _ = _groups_used(_router("small"), 24)
    assert float(free.float().mean()) > limited + 1  # unconstrained routing really crosses more groups


def test_the_limit_holds_for_each_chosen_group_not_on_average():
    """Every single token, with the load-balancing bias pushing towards other experts."""
    router = _router("tiny", num_expert_groups=4, num_limited_groups=1)  # tiny: 8 experts top-2, 2 per group
    used, ids = _groups_used(router, 4, tokens=2048)
    assert used.eq(1).all()
    assert (ids // 2)[..., 0].eq((ids // 2)[..., 1]).all()


def test_trainer_config_builds_the_limited_router_and_refuses_bad_groups(tmp_path):
    from pipeline.config import load_config
    from stages.pretrain.trainer_config import UnsupportedSetting, build_trainer_config
    from tests.conftest import write_config

    def settings(groups: int, limited: int):
        cfg = write_config(tmp_path, f"""
            [pretrain]
            flavor = "small"
            [pretrain.moe]
            num_expert_groups = {groups}
            num_limited_groups = {limited}
            """)
        return load_config(cfg).section("pretrain")

    kwargs = dict(shards_dir=tmp_path, tokenizer_dir=tmp_path, job_dir=tmp_path / "job", vocab_size=1000, seed=1,
                  device_type="cpu")
    config = build_trainer_config(settings(24, 4), **kwargs)
    routers = [layer.moe.router for layer in config.model_spec.model.layers if layer.moe is not None]
    assert {(r.num_expert_groups, r.num_limited_groups) for r in routers} == {(24, 4)}
    with pytest.raises(UnsupportedSetting, match=r"\[pretrain.moe\] num_expert_groups 25 must divide the 384"):
        build_trainer_config(settings(25, 4), **kwargs)
    with pytest.raises(UnsupportedSetting, match=r"num_limited_groups 1 x 2 experts per group is fewer than the top-8"):
        build_trainer_config(settings(192, 1), **kwargs)


def test_routing_recorded_with_checkpoints_round_trips():
    assert routing_of({"flavor": "small", "num_expert_groups": 24, "num_limited_groups": 4}) == \
        {"num_expert_groups": 24, "num_limited_groups": 4}
    assert routing_of({"flavor": "small"}) == {"num_expert_groups": None, "num_limited_groups": None}  # before 17


def test_the_hugging_face_config_carries_the_recorded_routing():
    """What the export maps: a checkpoint's recorded groups become config.json's n_group / topk_group (HF's
    DeepseekV3 group-limited routing ranks groups by their two best scores too); without them, 1 / 1."""
    from europa_model.hf.config import hf_config

    info = {"flavor": "small", "vocab_size": 1000, "num_expert_groups": 24, "num_limited_groups": 4}
    limited = hf_config(build_model_args("small", 1000, **routing_of(info)), dtype="float32")
    assert (limited.n_group, limited.topk_group) == (24, 4)
    plain = hf_config(build_model_args("small", 1000, **routing_of({"flavor": "small"})), dtype="float32")
    assert (plain.n_group, plain.topk_group) == (1, 1)
