"""Parity-weights balancing: retrain on re-weighted samples until the worst language's parity meets a target.

The loop is apart from the stage so the benchmark (bench/tokenizer_bench.py) runs exactly what the stage runs:
the caller says how a round's sample is written and trained (`train(round, targets)`) and on which parallel
text parity is measured (in the metrics it returns); this module decides the targets, when to stop and which
round to keep. Each round gives a language whose parity is above the target (parity / target)^strength times
its characters and the reference language (parity 1 by definition) (target / worst parity)^strength times its
own; every other language keeps its share, and the budget is filled again within the max_passes caps
(sample.rebalance). Taking text only from the reference language lowers every parity at once, while the
languages that already meet the target keep the text their own fertility depends on: the earlier rule, which
scaled every language by (parity / mean parity)^strength, took text from Finnish, Estonian and the other
cheap-but-long-worded languages too, and paid for the same worst parity with a higher mean fertility
(bench/tokenizer_bench.py compares).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from stages.tokenizer.config import BalanceConfig
from stages.tokenizer.record import BalanceRound, LanguageMetrics
from stages.tokenizer.report import fairness
from stages.tokenizer.sample import rebalance


@dataclass(frozen=True)
class Trained:
    """One round's tokenizer: its model file, its metrics on the balancing text, and what the caller keeps."""

    model: Path
    metrics: dict[str, LanguageMetrics]
    extra: Any = None


@dataclass(frozen=True)
class Balanced:
    rounds: list[BalanceRound]  # every round with parity, round 0 first
    chosen: int  # the round with the lowest worst parity
    stopped: str  # why the rounds ended
    trained: dict[int, Trained]

    @property
    def kept(self) -> Trained:
        return self.trained[self.chosen]


def parity_multipliers(parity: dict[str, float], reference: str, target: float, strength: float) -> dict[str, float]:
    """Per-language factors on the characters of the next round (see the module docstring)."""
    worst = max(parity.values())
    factors = {lang: max(1.0, p / target) ** strength for lang, p in parity.items()}
    factors[reference] = min(1.0, target / worst) ** strength
    return factors


def parity_weight_rounds(targets: dict[str, int], available: dict[str, int], budget: int, max_passes: float,
                         cfg: BalanceConfig, reference: str, train: Callable[[int, dict[str, int]], Trained],
                         iterate: bool = True, note: Callable[[str], None] = lambda _: None) -> Balanced:
    """Round 0 trains on `targets`; with `iterate`, each later round on targets re-weighted by the previous
    round's parity, until the worst parity is at most cfg.target_parity, improves by less than
    cfg.min_improvement, or cfg.max_rounds retrainings are done."""
    rounds: list[BalanceRound] = []
    trained: dict[int, Trained] = {}
    stopped = "method none"
    for rnd in range((cfg.max_rounds + 1) if iterate else 1):
        if rnd:
            factors = parity_multipliers(rounds[-1].parity, reference, cfg.target_parity, cfg.strength)
            targets = rebalance(targets, {lang: factors.get(lang, 1.0) for lang in targets}, available, budget, max_passes)
        t = trained[rnd] = train(rnd, targets)
        f = fairness(t.metrics)
        if f.max_parity is None:
            break  # no parallel text: nothing to balance on (the stage refuses parity-weights without it)
        rounds.append(BalanceRound(round=rnd, target_chars=dict(sorted(targets.items())),
                                   parity={lang: m.parity for lang, m in t.metrics.items() if m.parity is not None},
                                   max_parity=f.max_parity, mean_fertility=f.mean_fertility, parity_gini=f.parity_gini))
        if not iterate:
            break
        note(f"balance round {rnd}: worst parity {f.worst_language} {f.max_parity:.3f}, mean fertility "
             f"{f.mean_fertility:.3f}, Gini {f.parity_gini:.3f}")
        best_before = min((r.max_parity for r in rounds[:-1]), default=None)
        if f.max_parity <= cfg.target_parity:
            stopped = f"target met (worst parity {f.max_parity:.3f} <= {cfg.target_parity})"
            break
        if best_before is not None and best_before - f.max_parity < cfg.min_improvement:
            stopped = f"no improvement of at least {cfg.min_improvement} in round {rnd}"
            break
        stopped = f"max_rounds ({cfg.max_rounds}) reached"
    chosen = min(rounds, key=lambda r: (r.max_parity, r.round)).round if rounds else 0
    return Balanced(rounds, chosen, stopped, trained)
