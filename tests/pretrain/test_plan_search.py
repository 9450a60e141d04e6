"""`europa plan --search` (stages/pretrain/planner/search.py) on the EUROPA preset.

europa-1t's parameter counts come from the meta device once per process (~10 s); the search itself prices a few
thousand layouts in seconds.
"""

from __future__ import annotations

import json
import tomllib

import pytest

from pipeline.cli import main
from pipeline.config import REPO_ROOT, load_config
from stages.pretrain.launch.checks import planner_hardware
from stages.pretrain.planner.report import _with_peak
from stages.pretrain.planner.search import fragment, layout_key, price, search
from stages.pretrain.planner.shape import model_shape

PRESET = REPO_ROOT / "configs" / "jupiter-1t.toml"


def _merge(base: dict, over: dict) -> dict:
    out = dict(base)
    for k, v in over.items():
        out[k] = _merge(base.get(k, {}), v) if isinstance(v, dict) else v
    return out


@pytest.fixture(scope="module")
def preset():
    settings = load_config(PRESET).section("pretrain")
    hardware, _ = planner_hardware(settings)
    return settings, _with_peak(hardware, settings)


def test_the_search_ranks_feasible_layouts_and_its_fragment_is_the_layout_it_priced(preset):
    settings, hardware = preset
    result = search(settings, None, hardware)
    assert result.considered > 1000 and len(result.ranked) >= 3
    expected = [c.tokens_per_s.expected for c in result.ranked]
    assert expected == sorted(expected, reverse=True)
    assert all(c.verdict == "fits" and c.memory_gib < c.hbm_gib for c in result.ranked)
    assert result.tight + result.too_large + len(result.ranked) == result.considered
    assert len({layout_key(c.settings) for c in result.ranked}) == len(result.ranked)  # no layout twice
    best = result.best
    assert best.tokens_per_s.expected > result.configured.tokens_per_s.expected  # the typed-in layout is not it
    assert result.rank_of_configured() is not None and result.rank_of_configured() > 1
    # the preset uses the planner's choice or says why not in one line
    assert result.rank_of_configured() == 1 or "# Not the planner's choice: `europa plan --search`" in PRESET.read_text()
    # the fragment pasted over the config is a valid config that prices the same
    config = _merge(tomllib.loads(PRESET.read_text()), tomllib.loads(fragment(best)))
    again = load_config(data=config).section("pretrain")
    assert layout_key(again) == layout_key(best.settings)
    repriced = price(again, model_shape(again.flavor, None), hardware)
    assert repriced.tokens_per_s == best.tokens_per_s and repriced.memory_gib == pytest.approx(best.memory_gib)


def test_the_cli_lists_writes_and_refuses_in_one_line(tmp_path, capsys):
    frag = tmp_path / "layout.toml"
    args = ["plan", "--config", str(PRESET), "--run-dir", str(tmp_path / "run")]
    assert main([*args, "--search", "--top", "3", "--fragment", str(frag)]) == 0
    out = capsys.readouterr().out
    assert out.count(" layout") >= 1 and "the config's layout:" in out and "[pretrain.parallelism]" in frag.read_text()
    said = " ".join(out.split())
    assert "1,300 tokens/s per GPU:" in said and "Each resource alone would allow: compute" in said
    assert "is forbidden by" in said or "is within the layout's resource ceilings" in said
    assert main([*args, "--search", "--tokens-per-s", "100"]) == 0
    assert "100 tokens/s per GPU:" in capsys.readouterr().out
    assert main([*args, "--search", "--json", "--top", "4"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert len(d["layouts"]) == 4 and all({"tokens_per_s_per_gpu", "memory_gib", "bottleneck"} <= set(x)
                                          for x in d["layouts"])
    assert main([*args, "--fragment", str(frag)]) == 2
    assert "--fragment needs --search" in capsys.readouterr().err
    assert main([*args, "--search", "--top", "0"]) == 2
    assert "--top 0" in capsys.readouterr().err


def test_too_few_gpus_for_any_layout_is_one_line(tmp_path, capsys):
    text = PRESET.read_text().replace("nodes = 384", "nodes = 2").replace("data_parallel_replicate = 4",
                                                                           "data_parallel_replicate = 1")
    text = text.replace("data_parallel_shard = 384", "data_parallel_shard = 8").replace("expert_parallel = 96",
                                                                                         "expert_parallel = 8")
    text = text.replace("global_batch_size = 3072", "global_batch_size = 64")
    path = tmp_path / "small.toml"
    path.write_text(text)
    assert main(["plan", "--config", str(path), "--run-dir", str(tmp_path / "run"), "--search"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "fits 8 GPUs" in err[0] and "raise [pretrain.parallelism] nodes" in err[0]

