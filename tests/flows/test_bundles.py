"""Which units a Prefect task runs together (flows/bundles.py): consecutive bundles of decreasing size, so a step
makes task runs by the workers, not by the units; every unit handed out once and in order; the last tasks single
units; short units of a small step together once their time is known."""

from __future__ import annotations

import math

import pytest

from flows.bundles import SHORT_S, TAIL_SHARE, BundlePlanner


def _drain(planner: BundlePlanner, workers: int, costs: list[float] | None = None,
           seconds_per_cost: float | None = None) -> list[range]:
    """Hand out every bundle; with `seconds_per_cost`, each finished (observed) before the next is planned."""
    bundles = []
    while planner:
        bundle = planner.next_bundle(workers)
        if seconds_per_cost is not None:
            planner.observe(bundle, sum(costs[k] for k in bundle) * seconds_per_cost)
        bundles.append(bundle)
    return bundles


@pytest.mark.parametrize("workers", [1, 2, 8])
def test_every_unit_once_in_the_order_given(workers):
    costs = [float(1 + i % 5) for i in range(500)]
    bundles = _drain(BundlePlanner(costs), workers)
    assert [k for b in bundles for k in b] == list(range(500))


def test_a_bundle_takes_at_most_its_share_of_what_is_left():
    costs = [1.0] * 1000
    planner, left = BundlePlanner(costs), 1000.0
    while planner:
        bundle = planner.next_bundle(4)
        cost = sum(costs[k] for k in bundle)
        assert cost <= max(left / (TAIL_SHARE * 4), costs[bundle[0]]) + 1e-9
        left -= cost


@pytest.mark.parametrize("n, workers", [(100_000, 2), (10_000, 2), (66_000, 256)])
def test_task_runs_grow_with_the_workers_not_the_units(n, workers):
    bundles = _drain(BundlePlanner([1.0] * n), workers)
    k = TAIL_SHARE * workers
    assert len(bundles) <= k * (math.log(n / k) + 2), len(bundles)  # guided self-scheduling's bound, roughly
    assert len(bundles) < n / 10


def test_the_last_bundles_are_single_units_so_the_workers_finish_together():
    sizes = [len(b) for b in _drain(BundlePlanner([1.0] * 2000), workers=2)]
    assert sizes == sorted(sizes, reverse=True)
    assert sizes[-TAIL_SHARE * 2:] == [1] * (TAIL_SHARE * 2)


def test_a_unit_larger_than_the_share_goes_alone():
    bundles = _drain(BundlePlanner([1000.0] + [1.0] * 100), workers=2)
    assert bundles[0] == range(0, 1)


def test_zero_costs_count_as_one_each():
    bundles = _drain(BundlePlanner([0.0] * 400), workers=2)
    assert len(bundles[0]) == 400 // (TAIL_SHARE * 2)  # a quarter of the units, by count
    assert sum(len(b) for b in bundles) == 400


def test_short_units_of_a_small_step_go_together_once_their_time_is_known():
    costs = [1.0] * 12  # 0.1 s each: a share is 3 units, SHORT_S takes 20
    bundles = _drain(BundlePlanner(costs), 2, costs, seconds_per_cost=0.1)
    assert bundles == [range(0, 3), range(3, 12)]  # nothing measured for the first: the share
    assert 9 * 0.1 <= SHORT_S


def test_long_units_are_not_bundled_beyond_the_share():
    costs = [1.0] * 12  # 9 s each
    bundles = _drain(BundlePlanner(costs), 2, costs, seconds_per_cost=9.0)
    assert [len(b) for b in bundles] == [3, 2] + [1] * 7  # 12/4, 9/4, then less than 2 units a share


def test_units_done_before_take_no_time_and_the_share_still_decides():
    costs = [1.0] * 100
    bundles = _drain(BundlePlanner(costs), 2, costs, seconds_per_cost=0.0)
    assert [k for b in bundles for k in b] == list(range(100))
    assert max(len(b) for b in bundles) == 25 and len(bundles) > 4
