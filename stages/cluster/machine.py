"""The machine a run's jobs run on: a node type described once (a machine profile), JUPITER's Booster as the
preset.

JUPITER Booster nodes (Jülich Supercomputing Centre): 4 NVIDIA GH200 superchips per node, each one Hopper GPU
with 96 GB HBM3 (4 TB/s) and one 72-core Grace CPU with ~120 GB LPDDR5X, joined by 900 GB/s NVLink-C2C (450
each way); the 4 Hoppers of a node are joined all-to-all by NVLink 4 (18 links x 25 GB/s = 450 GB/s each way
per GPU, 150 to each peer); 4 InfiniBand NDR200 HCAs per node, one beside each GPU (200 Gb/s = 25 GB/s each
way per GPU); the fabric is Dragonfly+ with 240 nodes per group (full bandwidth inside a group, global links
between groups); Slurm (with ParaStation's psslurm instead of slurmd); the booster partition's wall-clock
limit is 24 hours; IPoIB interface ib0, and a node's hostname + "i" names it. Another cluster, or a CPU
partition, is a profile declared in the config (`[pretrain.machine]`, stages/cluster/config.py), resolved to
the same dataclass. The pretrain planner (memory, throughput, utilisation), the launcher's checks and the
rendered job scripts all read these figures from here.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

GIB = 1024**3
CPU_RESERVE_GIB = 2.0  # per rank on a CPU node: Python, torch, gloo buffers, the data loader

# Environment for every rank of a GPU job on JUPITER (name, value, why); a profile of another GPU cluster gets
# GPU_ENV only, a CPU partition neither. [pretrain.slurm] env is exported after these and overrides them.
GPU_ENV: tuple[tuple[str, str, str], ...] = (
    ("CUDA_DEVICE_MAX_CONNECTIONS", "1", "one hardware queue: keeps FSDP/EP communication kernels in issue order"),
    ("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1", "a failed or timed-out collective aborts the rank: the job ends instead of hanging"),
)
JUPITER_ENV: tuple[tuple[str, str, str], ...] = (
    *GPU_ENV,
    ("NCCL_IB_TIMEOUT", "22", "InfiniBand retransmission timeout 4.096us x 2^22 (~17 s): rides out link flaps at 384 nodes"),
    ("NCCL_NET_GDR_LEVEL", "SYS", "GPUDirect RDMA although the HCAs hang off the Grace (GH200: NCCL leaves it off by default)"),
    ("NCCL_NET_GDR_C2C", "1", "same, for NCCL >= 2.24: GDR through NVLink-C2C"),
)


Rates = tuple[float, float, float]  # (slowest, median, fastest) of a measurement's repeats


@dataclass(frozen=True)
class MeasuredRates:
    """What a calibration job measured on this machine (`europa launch calibrate`, stages/pretrain/measure/),
    per GPU (a rank on a CPU partition), in the units the profile's figures use. The planner takes each one
    that is present in place of its assumed efficiency for that link or for compute; None: not measured."""

    source: str                                   # the measured file, for the plan's text
    gemm_bf16_flops: Rates | None = None          # FLOP/s of one rank's GEMM while every rank of the job runs one
    a2a_ib_gb_per_s: Rates | None = None          # all-to-all bytes leaving the node per GPU per second
    a2a_nvlink_gb_per_s: Rates | None = None      # all-to-all bytes inside the node per GPU per second
    collective_ib_gb_per_s: Rates | None = None   # ring all-gather / reduce-scatter network bytes per GPU per second
    collective_nvlink_gb_per_s: Rates | None = None
    notes: tuple[str, ...] = ()                   # what was measured at another size than the plan uses


@dataclass(frozen=True)
class Hardware:
    name: str = "NVIDIA GH200 (JUPITER Booster)"
    arch: str = "hopper"                      # GPU generation: the throughput model's compute efficiency is per arch
    hbm_gib: float = 96.0                     # NVIDIA's "96 GB" are binary (an "80 GB" H100 reports 79.6 GiB)
    peak_bf16_flops: float = 989e12           # dense bf16 tensor-core peak of one GH200
    peak_fp8_flops: float = 1979e12           # dense fp8 tensor-core peak
    hbm_gb_per_s: float = 4000.0              # HBM3
    host_gib_per_gpu: float = 120e9 / GIB     # 120 GB LPDDR5X per Grace, one Grace per GPU
    host_reserve_gib: float = 16.0            # OS, psslurm, the rank's Python and data loader
    c2c_gb_per_s: float = 450.0               # NVLink-C2C 900 GB/s, per direction
    nvlink_gb_per_s: float = 450.0            # GPU-to-GPU inside a node, per GPU per direction (all peers together)
    ib_gb_per_s_per_gpu: float = 25.0         # InfiniBand per GPU per direction (JUPITER: 1 NDR200 HCA per GPU)
    nodes_per_network_group: int = 240        # Dragonfly+ group: full bandwidth inside, global links between
    runtime_reserve_gib: float = 4.0          # CUDA context, cuBLAS workspaces, NCCL buffers
    power_cap_w: float | None = None          # a module power limit below the GPU's own (the planner derates compute)
    gpus_per_node: int = 4                    # 0: a CPU partition (ranks train on the cores, gloo)
    # what the launcher needs (the machines of published measurements below keep JUPITER's: they are only planned)
    cores_per_node: int = 288                 # 4 Graces x 72
    memory_gib_per_node: float = 4 * 120e9 / GIB
    partition: str = "booster"
    max_time_hours: float | None = 24         # the partition's wall-clock limit (None: not known)
    network_interfaces: tuple[str, ...] = ("ib0",)  # NCCL/gloo bootstrap interfaces; () = the system's choice
    hostname_suffix: str = "i"                # JSC: hostname + "i" is the node's InfiniBand name
    numa_binding: str = "node"                # "node": each rank on the cores and memory next to its GPU
    account_required: bool = True             # JUPITER charges every job to a project
    env: tuple[tuple[str, str, str], ...] = JUPITER_ENV
    preset: str | None = "jupiter-booster"    # the preset's name; None for a profile declared in the config
    measured: MeasuredRates | None = None     # [pretrain.machine] measured: rates a calibration job measured

    @property
    def host_usable_gib(self) -> float:
        return self.host_gib_per_gpu - self.host_reserve_gib

    @property
    def has_gpus(self) -> bool:
        return self.gpus_per_node > 0

    def device_memory_gib(self, ranks_per_node: int) -> float:
        """What one rank may fill: a GPU's HBM, or on a CPU node its share of the node's memory."""
        return self.hbm_gib if self.has_gpus else self.memory_gib_per_node / max(ranks_per_node, 1)

    def for_planner(self, ranks_per_node: int) -> Hardware:
        """The view the planner's memory check takes: on a CPU node a rank's "device memory" is its share of the
        node's RAM (the planner then compares its estimate with that, as it compares with HBM on a GPU)."""
        if self.has_gpus:
            return self
        return replace(self, hbm_gib=self.device_memory_gib(ranks_per_node), runtime_reserve_gib=CPU_RESERVE_GIB,
                       host_gib_per_gpu=0.0, host_reserve_gib=0.0)


# JSC's configuration of the Booster: each GH200 superchip (Grace CPU, Hopper GPU, memory) is limited to 680 W
# together, where an H100 SXM has 700 W for the GPU alone.
JUPITER_BOOSTER = Hardware(power_cap_w=680.0)
PRESETS: dict[str, Hardware] = {"jupiter-booster": JUPITER_BOOSTER}
