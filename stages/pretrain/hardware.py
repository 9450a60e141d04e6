"""The machine the pretrain stage plans for and launches on: JUPITER's Booster, described once.

JUPITER Booster nodes (Jülich Supercomputing Centre): 4 NVIDIA GH200 superchips per node, each one Hopper GPU
with 96 GB HBM3 and one 72-core Grace CPU with ~120 GB LPDDR5X, joined by 900 GB/s NVLink-C2C; 4 InfiniBand
NDR200 HCAs per node; Slurm (with ParaStation's psslurm instead of slurmd); the booster partition's wall-clock
limit is 24 hours. The planner (memory, utilisation), the launcher's checks and the `[pretrain.slurm]`
defaults all read these figures from here.
"""

from __future__ import annotations

from dataclasses import dataclass

GIB = 1024**3


@dataclass(frozen=True)
class Hardware:
    name: str = "NVIDIA GH200 (JUPITER Booster)"
    hbm_gib: float = 96.0                     # NVIDIA's "96 GB" are binary (an "80 GB" H100 reports 79.6 GiB)
    peak_bf16_flops: float = 989e12           # dense bf16 tensor-core peak of one GH200
    host_gib_per_gpu: float = 120e9 / GIB     # 120 GB LPDDR5X per Grace, one Grace per GPU
    host_reserve_gib: float = 16.0            # OS, psslurm, the rank's Python and data loader
    c2c_gb_per_s: float = 450.0               # NVLink-C2C 900 GB/s, per direction
    runtime_reserve_gib: float = 4.0          # CUDA context, cuBLAS workspaces, NCCL buffers
    gpus_per_node: int = 4
    cores_per_gpu: int = 72
    partition: str = "booster"
    max_time_hours: int = 24                  # the booster partition's wall-clock limit

    @property
    def host_usable_gib(self) -> float:
        return self.host_gib_per_gpu - self.host_reserve_gib

    @property
    def cores_per_node(self) -> int:
        return self.gpus_per_node * self.cores_per_gpu


JUPITER_BOOSTER = Hardware()
