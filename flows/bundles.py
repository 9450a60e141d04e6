"""Short units travel together: which units of a step the next Prefect task runs, from how long the step's
units took so far.

Why: a Prefect task run costs a fixed share of a second of CPU besides its unit, whatever the unit (the task
engine hydrates its context and builds settings and API clients on the worker, `europa` serializes the context
for each submit, the server records the run; profiled in docs/benchmarks.md), which a step of many sub-second
units pays on the same cores as the units. Units of minutes (the documents step at scale) are not worth bundling,
and bundling them would spoil the balance at the end of the step: a worker alone on a large bundle.

How: the first units of a step go alone (nothing is known yet; they are the largest, as the executor orders
them). Then each bundle takes units, in order, while their expected time (the stage's `unit_cost` times the
seconds per cost measured on the step's finished units) stays within `target_s`, and their cost within a share
of what is left, 1 / (2 x workers), so the step's last tasks are small again and the workers finish together
(a share is never cut below MIN_S of expected time: that much imbalance at the end costs less than more tasks).
Which unit runs where never changes a result: each is a unit folder of its own, done or not.
"""

from __future__ import annotations

from collections import deque
from typing import Callable

from pipeline.stage import Unit

TARGET_S = 2.0  # a bundle's expected time: long enough that a task run's fixed cost is a small share of it
MAX_UNITS = 64  # units per bundle at most: progress and a lost worker's rerun stay fine-grained
TAIL_SHARE = 2  # a bundle takes at most 1 / (TAIL_SHARE x workers) of the step's remaining cost ...
MIN_S = 0.5  # ... unless that is less than this expected time: a worker waiting that long at the end costs less


class BundlePlanner:
    """The units of one step, handed out as bundles; `observe` feeds back the seconds each unit took."""

    def __init__(self, units: list[Unit], cost: Callable[[Unit], float] | None = None, target_s: float = TARGET_S):
        self._cost = (lambda u: max(float(cost(u)), 0.0)) if cost else (lambda u: 1.0)
        self._left = deque(units)
        self._left_cost = sum(self._cost(u) for u in units)
        self._target_s = target_s
        self._seconds = 0.0  # measured on finished units ...
        self._costed = 0.0  # ... and their cost

    def __bool__(self) -> bool:
        return bool(self._left)

    def seconds_per_cost(self) -> float | None:
        """Seconds per unit of cost on the step's finished units so far; None before any unit with a cost finished."""
        return self._seconds / self._costed if self._costed > 0 else None

    def next_bundle(self, workers: int) -> list[Unit]:
        """The next task's units (at least one); call only while units are left."""
        bundle = [self._left.popleft()]
        cost = self._cost(bundle[0])
        rate = self.seconds_per_cost()
        if rate is not None:  # else nothing is known yet: alone
            share = self._left_cost / (TAIL_SHARE * max(workers, 1))
            # rate 0: the finished units took no measurable time (done before: a resumed step), so the share decides
            budget = min(self._target_s / rate, max(share, MIN_S / rate)) if rate > 0 else share
            budget *= 1 + 1e-9  # measured seconds are sums of floats: 20 x 0.1 s must fit 2 s
            while self._left and len(bundle) < MAX_UNITS and cost + self._cost(self._left[0]) <= budget:
                cost += self._cost(self._left[0])
                bundle.append(self._left.popleft())
        self._left_cost = max(self._left_cost - cost, 0.0)
        return bundle

    def observe(self, unit: Unit, seconds: float) -> None:
        self._seconds += seconds
        self._costed += self._cost(unit)
