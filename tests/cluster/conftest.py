"""The real-Slurm fixtures (tests/slurm/plugin.py) for the cluster package's tests against a real Slurm."""

from tests.slurm.plugin import slurm_cluster_factory  # noqa: F401  (pytest finds fixtures by name in this module)
