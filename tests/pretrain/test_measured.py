"""A calibration job's file (`[pretrain.machine] measured`, stages/pretrain/planner/measured.py) in the plan:
its figures become rates by the planner's own byte conventions, a rate equal to the assumed one leaves the plan
as it was, a slower one slows it, and a file that is missing, malformed or from another machine is one line,
exit 2. The job itself runs on the localhost Slurm (tests/slurm/test_calibrate.py); its rendering is here."""

from __future__ import annotations

import json

import pytest

from pipeline.cli import main
from pipeline.config import load_config
from stages.cluster.errors import LaunchError
from stages.cluster.machine import JUPITER_BOOSTER
from stages.pretrain.launch.checks import planner_hardware
from stages.pretrain.measure.job import enumerate_groups
from stages.pretrain.measure.launch import render_calibration
from stages.pretrain.planner.measured import FORMAT, machine_identity, read_measured
from stages.pretrain.planner.report import plan
from stages.pretrain.planner.throughput import EFFICIENCIES
from tests.pretrain.test_launch import PRESET


def write_measured(path, entries, machine=None):
    path.write_text(json.dumps({"format": FORMAT, "machine": machine or machine_identity(JUPITER_BOOSTER),
                                "measurements": entries}))
    return path


def a2a(ranks, per_node, nbytes, seconds):
    return {"op": "all_to_all", "ranks": ranks, "ranks_per_node": per_node, "bytes_per_rank": nbytes, "seconds": seconds}


def jupiter_with(tmp_path, measured: str | None):
    text = PRESET.read_text()
    if measured is not None:
        text = text.replace("[pretrain.machine]\n", f"[pretrain.machine]\nmeasured = {json.dumps(measured)}\n", 1)
        assert "measured =" in text
    path = tmp_path / "jupiter.toml"
    path.write_text(text)
    return path


def test_figures_become_rates_by_the_planners_byte_conventions(tmp_path):
    f = write_measured(tmp_path / "m.json", [
        a2a(8, 4, 8e9, [4.0, 1.0, 2.0]),               # half of each buffer leaves the node: 4 GB over 1-4 s
        a2a(4, 4, 4e9, [1.0]),                         # inside a node: 3 of 4 quarters stay on NVLink
        {"op": "all_gather", "ranks": 8, "ranks_per_node": 4, "bytes_per_rank": 8e9, "seconds": [1.0]},
        {"op": "reduce_scatter", "ranks": 8, "ranks_per_node": 4, "bytes_per_rank": 8e9, "seconds": [0.5]},
        {"op": "gemm", "dtype": "bfloat16", "n": 1000, "seconds": [0.002, 0.004]},
        {"op": "gemm", "dtype": "float8_e4m3fn", "n": 1000, "seconds": [0.001]},
    ])
    m = read_measured(str(f), JUPITER_BOOSTER, expert_parallel=8, shard_degree=8)
    assert m.a2a_ib_gb_per_s == (1.0, 2.0, 4.0)
    assert m.a2a_nvlink_gb_per_s == (3.0, 3.0, 3.0)
    # ring: 7/8 of 8 GB per rank, a quarter of it over the network (4 ranks share a node's crossing)
    assert m.collective_ib_gb_per_s == pytest.approx((1.75, 2.625, 3.5))
    assert m.collective_nvlink_gb_per_s is None
    assert m.gemm_bf16_flops == pytest.approx((0.5e12, 0.75e12, 1e12))  # float8 is recorded, not priced
    assert m.notes == ()
    m = read_measured(str(f), JUPITER_BOOSTER, expert_parallel=96, shard_degree=384)
    assert [n.split(" measured over")[0] for n in m.notes] == ["the all-to-all", "the FSDP rings"]


def test_a_rate_equal_to_the_assumption_leaves_the_plan_and_a_slower_one_slows_it(tmp_path):
    settings = load_config(jupiter_with(tmp_path, None)).section("pretrain")
    hw, _ = planner_hardware(settings)
    before = plan(settings, hardware=hw).predicted["expected"].tokens_per_s_per_gpu
    assumed = JUPITER_BOOSTER.ib_gb_per_s_per_gpu * EFFICIENCIES.a2a_ib_standard.expected  # GB/s per GPU
    # EP 96 over 24 nodes of 4: 92/96 of each buffer leaves the node
    same = write_measured(tmp_path / "same.json", [a2a(96, 4, 96e9, [92 / assumed])])
    slow = write_measured(tmp_path / "slow.json", [a2a(96, 4, 96e9, [2 * 92 / assumed])])
    rates = {}
    for name, f in (("same", same), ("slow", slow)):
        s = load_config(jupiter_with(tmp_path, str(f))).section("pretrain")
        hw, _ = planner_hardware(s)
        pl = plan(s, hardware=hw)
        rates[name] = pl.predicted["expected"].tokens_per_s_per_gpu
        assert f"measured ({f}): all-to-all over the network" in pl.text()
    assert rates["same"] == pytest.approx(before, rel=1e-9)
    assert rates["slow"] < 0.8 * before  # the plan is all-to-all-bound over InfiniBand


@pytest.mark.parametrize("content, says", [
    (None, "no such file; `europa launch calibrate --submit`"),
    ('{"format": "europa-measured/1",', "not JSON (line 1, column 32"),
    ('{"measurements": []}', "not a calibration file"),
    ("other machine", "measured on 'localhost' (partition 'cpu', 0 GPUs and 2 cores per node), but this run's "
                      "machine is 'NVIDIA GH200 (JUPITER Booster)'"),
    ("damaged", "measurements[0].seconds is []; the file is damaged"),
])
def test_a_bad_measured_file_is_one_line_and_exit_2(tmp_path, capsys, content, says):
    f = tmp_path / "m.json"
    if content == "other machine":
        write_measured(f, [a2a(8, 4, 1e9, [1.0])], machine={"name": "localhost", "partition": "cpu",
                                                              "gpus_per_node": 0, "cores_per_node": 2})
    elif content == "damaged":
        write_measured(f, [a2a(8, 4, 1e9, [])])
    elif content is not None:
        f.write_text(content)
    assert main(["plan", "--config", str(jupiter_with(tmp_path, str(f))), "--run-dir", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"europa: error: [pretrain.machine] measured = '{f}': ") and says in err
    assert len(err.splitlines()) == 1


def test_the_calibration_job_measures_the_layouts_groups_within_its_nodes(tmp_path):
    config = load_config(PRESET)
    job = render_calibration(config, tmp_path / "calibrate")
    p = config.section("pretrain").parallelism
    groups = {g["name"]: g for g in job.request["groups"]}
    assert job.script.nodes == p.shard_degree // 4  # the dense FSDP group is the largest
    assert (groups["expert parallel"]["size"], groups["dense FSDP"]["size"]) == (p.expert_parallel, p.shard_degree)
    assert groups["expert FSDP"]["stride"] == p.expert_parallel
    assert job.request["notes"] == [] or all("capped" in n for n in job.request["notes"])
    small = render_calibration(config, tmp_path / "small", nodes=2)
    sizes = {g["name"]: g["size"] for g in small.request["groups"]}
    assert small.script.nodes == 2 and sizes["expert parallel"] == 8 and sizes["dense FSDP"] == 8
    assert "expert FSDP" not in sizes  # strided by 8 over 8 ranks: one member each
    assert any("expert parallel group (96 ranks) is measured over 8" in n for n in small.request["notes"])
    for g in small.request["groups"]:  # every rank in exactly one group of each kind
        ranks = sorted(r for grp in enumerate_groups(8, g["size"], g["stride"]) for r in grp)
        assert ranks == list(range(8))
    with pytest.raises(LaunchError, match="--nodes 0: at least 1"):
        render_calibration(config, tmp_path / "none", nodes=0)


def test_enumerated_groups_stride_like_torchtitans_mesh():
    assert enumerate_groups(8, 2, 1) == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert enumerate_groups(8, 2, 4) == [[0, 4], [1, 5], [2, 6], [3, 7]]
    assert enumerate_groups(16, 2, 4) == [[0, 4], [1, 5], [2, 6], [3, 7], [8, 12], [9, 13], [10, 14], [11, 15]]


def test_nodes_is_refused_for_the_training_job(tmp_path, capsys):
    """--nodes sizes the calibration job only; the training job's nodes are the layout's."""
    assert main(["launch", "jupiter", "--config", str(PRESET), "--run-dir", str(tmp_path / "run"), "--dry-run",
                 "--nodes", "2"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == ("europa: error: europa launch jupiter: --nodes is for `europa launch calibrate`; the training "
                   "job's nodes are [pretrain.parallelism] nodes")
