"""Which units of a step the next Prefect task runs: bundles sized so that a step makes a number of task runs that
grows with the workers, not with the units.

Why: every task run costs `europa`, the worker and the server's database something whatever its unit does, and a
full-scale ingest has ~10^5 units per step; Prefect itself struggles past ~10^4 task runs in a flow. Bundling by
a unit's expected time alone would still make one task run per unit of minutes, which is what the full run's
units are.

How (guided self-scheduling): a bundle is the next units in the order given (largest first, as the executor hands
them out) while their cost stays within a share of what is left, 1 / (TAIL_SHARE x workers), and at least one
unit. The first bundles are large, each next one smaller, and the last ones single units, so the workers finish
together; a step of N units makes about TAIL_SHARE x workers x ln(N / (TAIL_SHARE x workers)) task runs. Units
expected to take less than SHORT_S together (from the seconds per cost of the step's finished units) also go
together beyond the share: a task run costs more than such a tail's imbalance, which matters in the small steps
where the share is a unit or two. Long bundles lose nothing: a bundle's units run in order and each finished one
is a unit folder of its own, which the mapper reports as it appears and a resubmitted bundle skips. Costs are
the stage's `unit_cost` (relative: bytes to read, documents kept), or one per unit when it gives none.
"""

from __future__ import annotations

from array import array
from typing import Sequence

TAIL_SHARE = 2  # a bundle takes at most 1 / (TAIL_SHARE x workers) of the step's remaining cost ...
SHORT_S = 2.0  # ... or units expected to take this long together, whichever allows more


class BundlePlanner:
    """Positions 0..n-1 of a step's hand-out order, given out as consecutive bundles of decreasing size; `observe`
    feeds back the seconds a unit took."""

    def __init__(self, costs: Sequence[float]):
        c = array("d", (max(float(x), 0.0) for x in costs))
        self._costs = c if any(c) else array("d", [1.0]) * len(c)  # nothing to tell units apart by: count them
        self._next = 0
        self._left_cost = sum(self._costs)
        self._seconds = 0.0  # measured on finished units ...
        self._costed = 0.0  # ... and their cost

    def __bool__(self) -> bool:
        return self._next < len(self._costs)

    def next_bundle(self, workers: int) -> range:
        """The positions of the next task's units (at least one); call only while units are left."""
        start, costs = self._next, self._costs
        share = self._left_cost / (TAIL_SHARE * max(workers, 1))
        rate = self.seconds_per_cost()
        if rate:  # None: nothing finished yet; 0: what finished was done before (a resumed step): the share decides
            share = max(share, SHORT_S / rate)
        share *= 1 + 1e-9  # costs are sums of floats: 4 x 0.25 must fit 1.0
        stop, cost = start + 1, costs[start]
        while stop < len(costs) and cost + costs[stop] <= share:
            cost += costs[stop]
            stop += 1
        self._next = stop
        self._left_cost = max(self._left_cost - cost, 0.0)
        return range(start, stop)

    def observe(self, positions: range, seconds: float) -> None:
        """The units at `positions` finished in `seconds` together: what the next bundles' expected times come from."""
        self._seconds += seconds
        self._costed += sum(self._costs[k] for k in positions)

    def seconds_per_cost(self) -> float | None:
        """Seconds per unit of cost on the step's finished units so far; None before any unit with a cost finished."""
        return self._seconds / self._costed if self._costed > 0 else None
