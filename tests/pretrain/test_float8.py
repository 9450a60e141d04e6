"""`[pretrain] float8`: accepted, planned at the fp8 peak, refused on CPU, and converted as far as torchtitan
allows without float8 tensor cores (the linears through torchao's emulation; the grouped experts' config
rewrite, whose converter refuses to be built off SM89+, through its convert step alone). Not run: float8
matmuls need a Hopper GPU."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("OMP_NUM_THREADS", "1")


def settings(tmp_path, extra: str = ""):
    from pipeline.config import load_config
    from tests.conftest import write_config

    return load_config(write_config(tmp_path, f"""
        [pretrain]
        flavor = "tiny"
        {extra}
        """)).section("pretrain")


def test_float8_is_refused_on_cpu_with_the_key_named(tmp_path):
    from stages.pretrain.trainer_config import UnsupportedSetting, build_trainer_config

    kwargs = dict(shards_dir=tmp_path, tokenizer_dir=tmp_path, job_dir=tmp_path / "job", vocab_size=1000, seed=1,
                  device_type="cpu")
    with pytest.raises(UnsupportedSetting, match=r'\[pretrain\] float8 = "rowwise" runs float8 matmuls on Hopper'):
        build_trainer_config(settings(tmp_path, 'float8 = "rowwise"'), **kwargs)
    assert build_trainer_config(settings(tmp_path), **kwargs).model_spec is not None  # unset: as before


def test_a_recipe_torchtitan_does_not_offer_here_is_a_config_error(tmp_path):
    from pipeline.config import ConfigError

    with pytest.raises(ConfigError, match="float8"):
        settings(tmp_path, 'float8 = "mxfp8"')


def test_the_converters_rewrite_the_model_config():
    from europa_model import cpu_compat

    cpu_compat.apply()  # before torchtitan.models imports here (no triton on CPU); passed only after another test
    from torchtitan.components.quantization import Float8GroupedExpertsConverter, Float8Linear
    from torchtitan.models.common.moe import GroupedExperts

    from europa_model.flavors import build_model_args
    from stages.pretrain.trainer_config import FLOAT8_KEPT_IN_BF16, float8_converters

    linear, experts = float8_converters("rowwise", False, emulate=True)
    config = linear.build().convert(build_model_args("tiny", 1000))
    converted = [fqn for fqn, *_ in config.traverse(Float8Linear.Config)]
    assert converted and not [f for f in converted if any(k in f for k in FLOAT8_KEPT_IN_BF16)]
    # The grouped-experts converter refuses to be built without SM89+; its config rewrite is what runs before.
    grouped = Float8GroupedExpertsConverter.__new__(Float8GroupedExpertsConverter)
    grouped.config = experts
    config = grouped.convert(config)
    names = {type(c).__qualname__ for _, c, *_ in config.traverse(GroupedExperts.Config)}
    assert names and all(n.split(".")[-2].startswith("Float8") for n in names), names


def test_the_planner_counts_float8_matmuls_at_the_fp8_peak():
    from pipeline.config import REPO_ROOT, load_config
    from stages.pretrain.launch.checks import planner_hardware
    from stages.pretrain.planner.report import plan

    base = load_config(REPO_ROOT / "configs" / "jupiter-1t.toml").section("pretrain")
    fp8 = base.model_copy(update={"float8": "rowwise"})
    hardware, _ = planner_hardware(base)
    bf16_plan, fp8_plan = plan(base, 262_144, hardware=hardware), plan(fp8, 262_144, hardware=hardware)
    bf16, fp8_ = bf16_plan.prediction.expected, fp8_plan.prediction.expected
    assert fp8_plan.prediction.workload.matmul_precision == "fp8"
    assert fp8_.compute_s < 0.8 * bf16.compute_s  # the matmuls at twice the peak; attention stays bf16
    # jupiter-1t's layout is InfiniBand-bound: the faster matmuls do not make its step shorter
    assert fp8_plan.predicted["expected"].tokens_per_s_per_gpu >= bf16_plan.predicted["expected"].tokens_per_s_per_gpu


def test_float8_without_torchao_says_how_to_install_it(monkeypatch):
    import importlib.util

    from stages.pretrain.trainer_config import UnsupportedSetting, float8_converters

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "torchao" else real(name, *a))
    with pytest.raises(UnsupportedSetting, match=r'float8 = "rowwise" needs torchao.*pip install -e "\.\[float8\]"'):
        float8_converters("rowwise", False)
