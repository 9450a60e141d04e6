"""pytest fixtures for a real localhost Slurm (tests/slurm/cluster.py builds it).

    def test_x(slurm_cluster):                  # CPU node, no accounting (sacct fails, as on many sites)
        job = slurm_cluster.sbatch("#!/bin/bash\\ntrue\\n")
    def test_y(slurm_cluster_accounting): ...   # CPU node + MariaDB + slurmdbd: sacct works
    def test_z(slurm_cluster_gpus): ...         # Gres=gpu:4 (fake: /dev/tty1-4), partition "booster"
    def test_v(slurm_cluster_two_nodes): ...    # nodes n1, n2 (4 CPUs each; two slurmd on this host)
    def test_w(slurm_cluster_factory):          # a private cluster with its own slurm.conf keys
        c = slurm_cluster_factory(settings={"MinJobAge": "2"})

The four named clusters start once per session on first use (~0.2 s; ~2 s with accounting) and may run
at the same time (own folders, ports and munged). Each test that asks for one gets SLURM_CONF exported for
its duration (restored after), so code under test that calls sbatch/squeue itself talks to that cluster.
Factory clusters are stopped at the end of their test.

Skip or fail: without root or without the packages a test SKIPS with the reason; under CI (`CI` set to
anything but ""/0/false, or EUROPA_REQUIRE_SLURM=1, which .ci/run sets) it FAILS instead: there the
packages must have been installed (tests/slurm/install.sh). A cluster that is installed but does not start
always fails: that is a real problem, not a missing prerequisite.

Import: tests/slurm/conftest.py imports these fixtures; a test folder elsewhere that needs them imports them
in its own conftest the same way (or the root conftest lists this module in `pytest_plugins`, once).
"""

from __future__ import annotations

import os
from typing import Callable, Iterator

import pytest

from tests.slurm.cluster import CPU, FAKE_GPUS, TWO_NODES, SlurmCluster, missing

REQUIRE_ENV = "EUROPA_REQUIRE_SLURM"


def required() -> bool:
    """True where a missing Slurm is an error rather than a reason to skip (CI)."""
    ci = os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")
    return ci or os.environ.get(REQUIRE_ENV, "") == "1"


def require(profile=CPU, accounting: bool = False) -> None:
    """Skip (developer machine) or fail (CI) the calling test when this machine cannot run the cluster."""
    reason = missing(profile, accounting)
    if reason is None:
        return
    if required():
        pytest.fail(f"{reason} (CI or {REQUIRE_ENV}=1: the real-Slurm tests must run here, not skip)", pytrace=False)
    pytest.skip(reason)


def _session_cluster(profile, accounting: bool) -> Iterator[SlurmCluster]:
    require(profile, accounting)
    cluster = SlurmCluster(profile, accounting=accounting).start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def _slurm_cpu() -> Iterator[SlurmCluster]:
    yield from _session_cluster(CPU, False)


@pytest.fixture(scope="session")
def _slurm_cpu_accounting() -> Iterator[SlurmCluster]:
    yield from _session_cluster(CPU, True)


@pytest.fixture(scope="session")
def _slurm_gpus() -> Iterator[SlurmCluster]:
    yield from _session_cluster(FAKE_GPUS, False)


@pytest.fixture(scope="session")
def _slurm_two_nodes() -> Iterator[SlurmCluster]:
    yield from _session_cluster(TWO_NODES, False)


@pytest.fixture
def slurm_cluster(_slurm_cpu, monkeypatch) -> SlurmCluster:
    """The session's CPU cluster without accounting; SLURM_CONF exported for this test."""
    monkeypatch.setenv("SLURM_CONF", str(_slurm_cpu.conf))
    return _slurm_cpu


@pytest.fixture
def slurm_cluster_accounting(_slurm_cpu_accounting, monkeypatch) -> SlurmCluster:
    """The session's CPU cluster with slurmdbd accounting (sacct works); SLURM_CONF exported for this test."""
    monkeypatch.setenv("SLURM_CONF", str(_slurm_cpu_accounting.conf))
    return _slurm_cpu_accounting


@pytest.fixture
def slurm_cluster_gpus(_slurm_gpus, monkeypatch) -> SlurmCluster:
    """The session's fake-GPU cluster (Gres=gpu:4, partition booster); SLURM_CONF exported for this test."""
    monkeypatch.setenv("SLURM_CONF", str(_slurm_gpus.conf))
    return _slurm_gpus


@pytest.fixture
def slurm_cluster_two_nodes(_slurm_two_nodes, monkeypatch) -> SlurmCluster:
    """The session's two-node CPU cluster (n1, n2: one slurmd each on this host, same address, names that do
    not resolve); SLURM_CONF exported for this test."""
    monkeypatch.setenv("SLURM_CONF", str(_slurm_two_nodes.conf))
    return _slurm_two_nodes


@pytest.fixture
def slurm_cluster_factory() -> Iterator[Callable[..., SlurmCluster]]:
    """make(profile=CPU, accounting=False, settings=None) -> a started private cluster, stopped after the test.
    It does not export SLURM_CONF (use `with c.activate():`): a test may hold several."""
    made: list[SlurmCluster] = []

    def make(profile=CPU, *, accounting: bool = False, settings: dict[str, str] | None = None) -> SlurmCluster:
        require(profile, accounting)
        c = SlurmCluster(profile, accounting=accounting, settings=settings, name=f"{profile.name}-private")
        made.append(c)
        return c.start()

    yield make
    for c in made:
        c.stop()
