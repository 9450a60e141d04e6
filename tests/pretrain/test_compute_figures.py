"""The pieces of the three compute figures: the peak table and the CPU formula (c), the operation counter (b)."""

from __future__ import annotations

import pytest

from stages.pretrain.peak_flops import cpu_peak, device_peak, flops_per_cycle, gpu_peak

LSCPU = """Architecture:            x86_64
CPU(s):                  8
Model name:              Example Xeon
Thread(s) per core:      2
CPU max MHz:             3500.0000
Flags:                   fpu sse2 avx2 fma avx512f
"""
CPUINFO_VM = """processor\t: 0
model name\t: AMD EPYC
cpu MHz\t\t: 2596.120
siblings\t: 2
cpu cores\t: 2
flags\t\t: fpu sse2 avx2 fma avx512f avx512_bf16
processor\t: 1
model name\t: AMD EPYC
cpu MHz\t\t: 2596.120
flags\t\t: fpu sse2 avx2 fma avx512f avx512_bf16
"""


@pytest.mark.parametrize("name, flops", [
    ("NVIDIA GH200 480GB", 989e12), ("NVIDIA H100 80GB HBM3", 989e12), ("NVIDIA H100 PCIe", 756e12),
    ("NVIDIA H100 NVL", 835e12), ("NVIDIA H200", 989e12), ("NVIDIA H200 NVL", 835e12),
])
def test_gpu_table_dense_bf16(name, flops):
    peak = gpu_peak(name)
    assert peak.flops == flops and "dense" in peak.source and name in peak.source


def test_gh200_is_the_planners_figure_and_unknown_devices_have_no_peak():
    from stages.cluster.machine import JUPITER_BOOSTER

    assert gpu_peak("NVIDIA GH200 480GB").flops == JUPITER_BOOSTER.peak_bf16_flops
    unknown = gpu_peak("NVIDIA A40")
    assert unknown.flops is None and "set [pretrain] peak_flops_per_device" in unknown.source
    declared = device_peak("cuda", "NVIDIA A40", declared=1.5e14)
    assert declared.flops == 1.5e14 and declared.source.startswith("declared: [pretrain] peak_flops_per_device")


def test_cpu_formula_from_lscpu_with_the_inputs_named():
    # 8 logical CPUs, 2 threads per core -> 4 cores; 3.5 GHz max; AVX-512 (no bf16): 2 x 16 lanes x 2 FMA units
    peak = cpu_peak("", LSCPU, affinity_cpus=8, local_ranks=1)
    assert peak.inputs["cores"] == 4 and peak.inputs["flops_per_cycle"] == 64
    assert peak.flops == pytest.approx(4 * 3500e6 * 64)
    assert 'lscpu "CPU max MHz"' in peak.source and 'lscpu "Thread(s) per core"' in peak.source
    # two ranks on the machine share its cores
    assert cpu_peak("", LSCPU, affinity_cpus=8, local_ranks=2).flops == pytest.approx(peak.flops / 2)


def test_cpu_formula_in_a_vm_without_a_max_clock():
    peak = cpu_peak(CPUINFO_VM, "", affinity_cpus=2)
    assert peak.inputs["cores"] == 2 and peak.inputs["mhz"] == pytest.approx(2596.12)
    assert peak.inputs["flops_per_cycle"] == 128  # AVX512_BF16 dot products double the float32 rate
    assert "nominal clock; boost may exceed it" in peak.source
    assert cpu_peak(CPUINFO_VM, "", affinity_cpus=2, cpufreq_max_khz="3700000").inputs["mhz"] == 3700


def test_flops_per_cycle_by_instruction_set():
    assert flops_per_cycle({"avx2", "fma"})[0] == 32
    assert flops_per_cycle({"avx512f"})[0] == 64
    assert flops_per_cycle({"avx512f", "amx_bf16"})[0] == 1024
    assert flops_per_cycle({"asimd"})[0] == 32 and flops_per_cycle({"asimd", "bf16"})[0] == 128
    assert flops_per_cycle(set())[0] == 8


def test_counter_sees_grouped_matmuls_and_keeps_recomputation_apart():
    import torch
    from torch.utils.checkpoint import checkpoint

    from europa_model.flop_count import TrainingFlopCounter

    a = torch.randn(10, 16, requires_grad=True)
    b = torch.randn(3, 16, 8, requires_grad=True)
    offs = torch.tensor([3, 7, 10], dtype=torch.int32)
    with TrainingFlopCounter() as fc:
        torch._grouped_mm(a.bfloat16(), b.bfloat16(), offs=offs).float().sum().backward()
    # forward 2 x 10 x 16 x 8; backward: grad a (same) + grad b (same): 3 x the forward
    assert fc.by_operation() == {"_grouped_mm": 3 * 2 * 10 * 16 * 8}

    net = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU(), torch.nn.Linear(32, 16))
    x = torch.randn(4, 64, requires_grad=True)
    with TrainingFlopCounter() as plain:
        net(x).sum().backward()
    with TrainingFlopCounter() as ckpt:
        checkpoint(net, x, use_reentrant=False).sum().backward()
    forward = 2 * 4 * (64 * 32 + 32 * 16)
    assert plain.get_total_flops() == ckpt.get_total_flops() == 3 * forward  # x requires grad: its gradient counts too
    # backward needs the ReLU output: the first layer is run again, counted apart
    assert dict(ckpt.recomputed) == {"addmm": 2 * 4 * 64 * 32} and not plain.recomputed


def test_a_compiled_model_is_not_counted_and_says_why(tmp_path):
    from types import SimpleNamespace

    from stages.pretrain import step_count
    from stages.pretrain.compute import compute_statistics
    from stages.pretrain.job import JobInfo

    trainer = SimpleNamespace(train_step=None, forward_backward_step=None)
    assert step_count.install(trainer, tmp_path, tokens_per_step=256, activation_checkpoint="offload", compiled=False) is False
    assert trainer.train_step is None  # the step is left alone
    count = step_count.read(tmp_path)
    per_token = {"total": 10, "matmul": 8, "attention": 2}
    info = JobInfo(vocab_size=1000, device_type="cpu", device_name="cpu", world_size=1, peak_flops_per_device=1e9,
                   peak_flops_source="x", peak_flops_inputs={})
    c = compute_statistics(per_token, 100, 10, 5.0, info, count)
    assert "counted" not in c.model_dump(exclude_unset=True)  # absent from the record, as the manifest holds it
    assert c.counted is None and "compiled" in c.not_counted and c.hardware.implied_utilisation == 1000 / 5e9
