"""Leave-one-out over the published cases: how wrong the throughput model is on a run it was not fitted to.

Three efficiencies are fitted (throughput.Efficiencies: compute on Hopper, compute on Blackwell, the standard
dispatcher's passes over the routed tokens). Here they are fitted jointly, by least squares on log(predicted /
measured) over every case, and then again with each case left out; the left-out case's error is what the model
would have said of it unseen. Those residuals, not the range of the assumed knobs, say how far a prediction for a
new layout can be trusted: `residual_band` is their spread.

A case no other case constrains (the only run on its GPU generation, say) is refitted from the rest all the same:
its leave-one-out error then shows how far the other cases' figure is from it, which is the point.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Sequence

from stages.pretrain.planner.published import PUBLISHED_RUNS, PublishedRun
from stages.pretrain.planner.throughput import EFFICIENCIES, Band, Efficiencies, predict

FITTED = ("compute_hopper", "compute_blackwell", "a2a_passes_standard")
PRIOR = 1e-3  # weight of log(factor)^2 against the squared log errors


def scaled(eff: Efficiencies, factors: dict[str, float]) -> Efficiencies:
    """Each named efficiency's band scaled by its factor (the band keeps its shape around the expected value)."""
    return replace(eff, **{name: Band(*(getattr(getattr(eff, name), b) * f for b in ("pessimistic", "expected", "optimistic")))
                           for name, f in factors.items()})


def log_errors(cases: Sequence[PublishedRun], eff: Efficiencies) -> list[float]:
    return [math.log(predict(c.workload, c.hardware, eff).tokens_per_s.expected / c.measured_tokens_per_s) for c in cases]


def fit(cases: Sequence[PublishedRun], eff: Efficiencies = EFFICIENCIES, names: Sequence[str] = FITTED,
        sweeps: int = 6) -> dict[str, float]:
    """Factors on `names` that minimise the squared log errors over `cases`: coordinate descent, each coordinate
    by golden-section search on log(factor) in [-ln 4, ln 4] (a fitted efficiency more than 4x off its
    published fit would be a different model, not a calibration)."""
    logf = {n: 0.0 for n in names}

    def loss() -> float:  # a weak pull toward the published fit keeps a factor no case constrains at 1
        errs = log_errors(cases, scaled(eff, {n: math.exp(v) for n, v in logf.items()}))
        return sum(e * e for e in errs) + PRIOR * sum(v * v for v in logf.values())

    g = (math.sqrt(5) - 1) / 2
    for _ in range(sweeps):
        for n in names:
            lo, hi = -math.log(4), math.log(4)

            def at(x: float) -> float:
                logf[n] = x
                return loss()

            a, b = hi - g * (hi - lo), lo + g * (hi - lo)
            fa, fb = at(a), at(b)
            for _ in range(40):
                if fa <= fb:
                    hi, b, fb = b, a, fa
                    a = hi - g * (hi - lo)
                    fa = at(a)
                else:
                    lo, a, fa = a, b, fb
                    b = lo + g * (hi - lo)
                    fb = at(b)
            logf[n] = (lo + hi) / 2
    return {n: math.exp(v) for n, v in logf.items()}


@dataclass(frozen=True)
class CaseError:
    key: str
    measured: float
    fitted_error: float      # predicted / measured - 1 with every case in the fit
    left_out_error: float    # ... with this case left out of the fit
    left_out_factors: dict[str, float]


def leave_one_out(cases: Sequence[PublishedRun] = PUBLISHED_RUNS, eff: Efficiencies = EFFICIENCIES) -> list[CaseError]:
    every = scaled(eff, fit(cases, eff))
    out = []
    for i, c in enumerate(cases):
        factors = fit([x for j, x in enumerate(cases) if j != i], eff)
        unseen = predict(c.workload, c.hardware, scaled(eff, factors)).tokens_per_s.expected
        seen = predict(c.workload, c.hardware, every).tokens_per_s.expected
        out.append(CaseError(c.key, c.measured_tokens_per_s, seen / c.measured_tokens_per_s - 1,
                             unseen / c.measured_tokens_per_s - 1, factors))
    return out


def residual_band(errors: Sequence[CaseError]) -> tuple[float, float, float]:
    """(lowest, root-mean-square, highest) leave-one-out error."""
    e = [x.left_out_error for x in errors]
    return min(e), math.sqrt(sum(v * v for v in e) / len(e)), max(e)


@lru_cache(maxsize=1)
def published_errors() -> tuple[CaseError, ...]:
    """leave_one_out() of the published cases, computed once per process (a few seconds)."""
    return tuple(leave_one_out())


def published_band() -> tuple[int, int, float, float, float]:
    """(cases, of which with expert parallelism across nodes, lowest, RMS, highest leave-one-out error)."""
    lo, rms, hi = residual_band(published_errors())
    cross = sum(1 for c in PUBLISHED_RUNS if c.workload.expert_parallel > c.workload.gpus_per_node)
    return len(PUBLISHED_RUNS), cross, lo, rms, hi


# published_band(), rounded: every plan prints it (europa plan, europa launch's plan.txt), and refitting 11 folds
# costs seconds per process; tests/pretrain/test_throughput.py keeps it equal to the computed one
PUBLISHED_BAND = (11, 4, -0.205, 0.169, 0.281)


def calibration_line(expected: float) -> str:
    """One line for the plan: what the residuals make of an expected figure (true = predicted / (1 + error))."""
    n, cross, lo, rms, hi = PUBLISHED_BAND
    return (f"  calibration: leave-one-out errors over {n} published runs ({cross} with expert parallelism across nodes) "
            f"{lo:+.0%} to {hi:+.0%} (RMS {rms:.0%}): {expected / (1 + hi):,.0f}-{expected / (1 + lo):,.0f} tokens/s "
            "if this layout errs as they did (stages/pretrain/planner/calibration.py)")


def leave_one_out_table(errors: Sequence[CaseError] | None = None) -> str:
    """The markdown table docs/jupiter.md shows: `python -m stages.pretrain.planner.calibration`."""
    errors = published_errors() if errors is None else errors
    rows = ["| case | measured tokens/s per GPU | error, fitted on all | error, left out | refit factors (Hopper, "
            "Blackwell, standard passes) |", "|---|---|---|---|---|"]
    for x in errors:
        f = ", ".join(f"{x.left_out_factors[n]:.2f}" for n in FITTED)
        rows.append(f"| {x.key} | {x.measured:,.0f} | {x.fitted_error:+.0%} | {x.left_out_error:+.0%} | {f} |")
    lo, rms, hi = residual_band(errors)
    rows.append("")
    rows.append(f"Leave-one-out errors over {len(errors)} cases: {lo:+.0%} to {hi:+.0%}, root mean square {rms:.0%}.")
    return "\n".join(rows)


if __name__ == "__main__":
    print(leave_one_out_table())
