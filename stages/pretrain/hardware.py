"""The machines of the published measurements the planner's throughput model is checked against
(stages/pretrain/planner/published.py) and of the GPU check (bench/gpu_check.py): only their compute and
interconnect figures matter there. The machine a run's jobs run on, JUPITER's Booster by default, is the
machine profile of stages/cluster/machine.py.
"""

from __future__ import annotations

from stages.cluster.machine import JUPITER_BOOSTER, Hardware

# Machines of the published measurements (planner/published.py). DGX-class nodes of 8 GPUs on NVSwitch, one
# 400 Gb/s (50 GB/s) InfiniBand HCA per GPU.
H100_SXM_NODE = Hardware(name="NVIDIA H100 SXM 80GB (8 per node, NVSwitch)", hbm_gib=79.6, peak_bf16_flops=989e12,
                         peak_fp8_flops=1979e12, hbm_gb_per_s=3350.0, nvlink_gb_per_s=450.0,
                         ib_gb_per_s_per_gpu=50.0, gpus_per_node=8)
# H800: H100 compute with NVLink cut to 400 GB/s both ways (200 each way); DeepSeek-V3's report (sec. 3.2)
# quotes ~160 GB/s achievable NVLink and 50 GB/s InfiniBand per GPU.
H800_NODE = Hardware(name="NVIDIA H800 SXM (8 per node, NVSwitch)", hbm_gib=79.6, peak_bf16_flops=989e12,
                     peak_fp8_flops=1979e12, hbm_gb_per_s=3350.0, nvlink_gb_per_s=200.0, ib_gb_per_s_per_gpu=50.0,
                     gpus_per_node=8)
B200_NODE = Hardware(name="NVIDIA B200 (8 per node, NVSwitch)", arch="blackwell", hbm_gib=178.4, peak_bf16_flops=2250e12,
                     peak_fp8_flops=4500e12, hbm_gb_per_s=8000.0, nvlink_gb_per_s=900.0, ib_gb_per_s_per_gpu=50.0,
                     gpus_per_node=8)
# H200 SXM (the GPU check's other machine, bench/gpu_check.py): H100 compute, 141 GB HBM3e at 4.8 TB/s; its host
# link is PCIe 5 x16 (~55 GB/s each way in practice), which is what activation offload crosses instead of C2C.
H200_SXM = Hardware(name="NVIDIA H200 SXM 141GB", hbm_gib=140.0, peak_bf16_flops=989e12, peak_fp8_flops=1979e12,
                    hbm_gb_per_s=4800.0, c2c_gb_per_s=55.0, host_gib_per_gpu=256.0, nvlink_gb_per_s=450.0,
                    ib_gb_per_s_per_gpu=50.0, gpus_per_node=8)


def hardware_for(device_name: str) -> Hardware | None:
    """The described machine a CUDA device name belongs to (None: not described here)."""
    name = device_name.upper()
    for key, hw in (("GH200", JUPITER_BOOSTER), ("H200", H200_SXM), ("H100", H100_SXM_NODE), ("H800", H800_NODE),
                    ("B200", B200_NODE)):
        if key in name:
            return hw
    return None
