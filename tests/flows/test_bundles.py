"""Which units a Prefect task runs together (flows/bundles.py): short units bundled by their measured time, long
ones alone, every unit handed out once and in order, and the step's last tasks small again."""

from __future__ import annotations

from flows.bundles import MAX_UNITS, MIN_S, BundlePlanner
from pipeline.stage import Payload, Unit


class Cost(Payload):
    cost: float


def _units(costs: list[float]) -> list[Unit]:
    return [Unit(f"u{i:03d}", Cost(cost=c), step="s") for i, c in enumerate(costs)]


def _cost(unit: Unit) -> float:
    assert isinstance(unit.payload, Cost)
    return unit.payload.cost


def _drain(planner: BundlePlanner, workers: int, seconds_per_cost: float) -> list[list[Unit]]:
    """Hand out every bundle, each finished (observed) before the next is planned."""
    bundles = []
    while planner:
        bundle = planner.next_bundle(workers)
        for u in bundle:
            planner.observe(u, _cost(u) * seconds_per_cost)
        bundles.append(bundle)
    return bundles


def test_units_go_alone_until_one_has_been_measured():
    planner = BundlePlanner(_units([1.0] * 10), _cost)
    first = [planner.next_bundle(2) for _ in range(4)]  # four in flight before any finished
    assert [len(b) for b in first] == [1, 1, 1, 1]
    assert planner.seconds_per_cost() is None


def test_short_units_are_bundled_within_the_target_time():
    units = _units([1.0] * 200)  # 0.1 s each: 20 fit in the 2 s target
    bundles = _drain(BundlePlanner(units, _cost, target_s=2.0), workers=2, seconds_per_cost=0.1)
    assert [u.id for b in bundles for u in b] == [u.id for u in units]  # each once, in the order given
    assert bundles[0] == units[:1]
    assert max(len(b) for b in bundles) == 20
    assert all(sum(_cost(u) for u in b) * 0.1 <= 2.0 + 1e-9 for b in bundles)
    assert len(bundles) < 40  # against 200 tasks, one per unit


def test_the_last_bundles_shrink_so_the_workers_finish_together():
    bundles = _drain(BundlePlanner(_units([1.0] * 200), _cost, target_s=2.0), workers=2, seconds_per_cost=0.1)
    sizes = [len(b) for b in bundles[1:]]
    assert sizes == sorted(sizes, reverse=True)
    assert sizes[-1] * 0.1 <= MIN_S  # the tail: no more than MIN_S of expected work left to one worker


def test_long_units_stay_alone():
    bundles = _drain(BundlePlanner(_units([90.0] * 24), _cost), workers=2, seconds_per_cost=0.1)  # 9 s each
    assert [len(b) for b in bundles] == [1] * 24


def test_a_large_share_of_what_is_left_is_never_bundled_for_one_worker():
    # 40 units of 0.1 s = 4 s in all, 8 workers: a bundle takes at most 1/16 of what is left, or MIN_S
    bundles = _drain(BundlePlanner(_units([1.0] * 40), _cost), workers=8, seconds_per_cost=0.1)
    assert max(len(b) for b in bundles) <= max(40 / 16, MIN_S / 0.1)


def test_units_finished_before_take_no_time_and_the_rest_is_split_by_share():
    # a resumed step: the finished units come back from their markers in no measurable time
    bundles = _drain(BundlePlanner(_units([1.0] * 100), _cost), workers=2, seconds_per_cost=0.0)
    assert [u.id for b in bundles for u in b] == [f"u{i:03d}" for i in range(100)]
    assert all(len(b) <= max(1, 100 // 4) for b in bundles) and len(bundles) > 4


def test_without_a_cost_every_unit_counts_one():
    bundles = _drain(BundlePlanner(_units([5.0] * (3 * MAX_UNITS))), workers=1, seconds_per_cost=0.001)
    assert max(len(b) for b in bundles) == MAX_UNITS  # the cap on units per task, not the time, holds here


def test_units_without_cost_are_not_bundled_before_a_rate_is_known():
    planner = BundlePlanner(_units([0.0] * 10), _cost)
    assert [len(planner.next_bundle(2)) for _ in range(3)] == [1, 1, 1]
