"""The real-Slurm fixtures for the tests in this folder (tests/slurm/plugin.py says what they are)."""

from tests.slurm.plugin import (  # noqa: F401  (pytest finds fixtures by name in this module)
    _slurm_cpu,
    _slurm_cpu_accounting,
    _slurm_gpus,
    _slurm_two_nodes,
    slurm_cluster,
    slurm_cluster_accounting,
    slurm_cluster_factory,
    slurm_cluster_gpus,
    slurm_cluster_two_nodes,
)
