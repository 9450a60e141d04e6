"""Training compute, the systemic-risk check, training time and energy, as facts from the pretrain record.

Why here and not in the trainer: the trainer records what it computed, counted and measured; the legal reading
of those figures lives in one place. The Commission's guidelines on the obligations for GPAI models (C(2025)
7719 of 19.11.2025, replacing C(2025) 5045; Annex A) accept a hardware-based estimate (devices x time x peak
theoretical throughput x average utilisation) or an architecture-based one (operations per pass x passes), each
accurate within an overall error margin of 30%, with its assumptions, method and uncertainty documented. The
pretrain record holds three figures, each named here with its method and uncertainty:
- (a) architecture-based estimate: 6 x active parameters x tokens + attention. The figure reported and used for
  every check below.
- (b) counted operations: FlopCounterMode over one real training step x the steps. A check on (a): if the two
  differ by more than 30% (the project's rule, not the guidelines': the guidelines' 30% is the accuracy an
  estimate must have) the documents list it as a contradiction.
- (c) hardware-based bound: devices x seconds x peak theoretical throughput (utilisation 1). The utilisation
  it implies, (a) / (c), above 100% is impossible: a contradiction.
- Art. 51(2): a GPAI model is presumed to have high-impact capabilities (systemic risk) when the cumulative
  training compute is *greater than* 1e25 FLOP; Art. 52(1): the Commission is notified within two weeks once the
  threshold is met *or it becomes known that it will be met*, so the configured run's projection is checked too.
- Energy (Annex XI 1.2(e)) is estimated from the compute actually used: device-hours x the stated average power
  per device x the data centre's PUE (declarations in [compliance.energy]), or "N/A" with the reason the form
  accepts (the compute provider does not disclose what is needed).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from stages.ai_act import GPAI_INDICATIVE_FLOPS, MODIFICATION_SHARE, SYSTEMIC_RISK_FLOPS, presumed_systemic_risk
from stages.compliance.facts import Fact, Records, derive, open_fact
from stages.compliance.numbers import percent, sci, training_time_range, with_sig2

ESTIMATE_ACCURACY = 0.30  # the guidelines: an estimate must be accurate within an overall error margin of 30%
CHECK_TOLERANCE = 0.30  # the project's rule: (b) further than this from (a) is a contradiction

GUIDELINES_DOC = "Commission guidelines on the obligations for general-purpose AI models, C(2025) 7719 (19.11.2025)"
GUIDELINES = f"{GUIDELINES_DOC}, Annex A"


def flops_text(x: float) -> str:
    return f"{sci(x)} FLOP"


@dataclass(frozen=True)
class ComputeFacts:
    analytic: Fact  # (a), reported
    method_analytic: Fact
    uncertainty_analytic: Fact
    counted: Fact  # (b)
    method_counted: Fact
    uncertainty_counted: Fact
    ratio: Fact  # (b) / (a)
    agreement: Fact  # whether (b) is within CHECK_TOLERANCE of (a)
    bound: Fact  # (c)
    method_bound: Fact
    uncertainty_bound: Fact
    peak: Fact
    peak_source: Fact
    utilisation: Fact  # (a) / (c)
    training: Fact  # the figure the documents report and check: (a)
    projected: Fact


def compute_facts(rec: Records) -> ComputeFacts:
    c = rec.pretrain.compute
    a, b, h = c.architecture, c.counted, c.hardware
    analytic = a.flops.fact(flops_text)
    counted = b.flops.fact(flops_text) if b.value is not None or not rec.has("pretrain") else _absent(c.not_counted, "(b) counted operations")
    bound = h.flops.fact(flops_text) if h.value is not None or not rec.has("pretrain") else _absent(c.no_hardware_bound, "(c) hardware bound")
    ratio = b.ratio_to_architecture.fact(lambda v: f"{v:.3f} (counted / architecture-based)") if b.value is not None else counted
    agreement = derive(lambda r: abs(r - 1) <= CHECK_TOLERANCE, ratio,
                       method=f"|counted / architecture-based - 1| <= {CHECK_TOLERANCE:.0%} (the project's check; "
                              f"a larger gap is listed as a contradiction)",
                       fmt=lambda ok: "yes: within 30%" if ok else "NO: they differ by more than 30% (see the contradictions)")
    util = h.implied_utilisation.fact(percent) if h.value is not None else bound
    return ComputeFacts(
        analytic=analytic, method_analytic=a.method.fact(), uncertainty_analytic=a.uncertainty.fact(),
        counted=counted, method_counted=b.method.fact() if b.value is not None else counted,
        uncertainty_counted=b.uncertainty.fact() if b.value is not None else counted,
        ratio=ratio, agreement=agreement,
        bound=bound, method_bound=h.method.fact() if h.value is not None else bound,
        uncertainty_bound=h.uncertainty.fact() if h.value is not None else bound,
        peak=h.peak_flops_per_device.fact(lambda v: f"{sci(v)} FLOP/s per device") if h.value is not None else bound,
        peak_source=h.peak_source.fact() if h.value is not None else bound,
        utilisation=util,
        training=Fact(analytic.value, analytic.text, analytic.sources, "the architecture-based estimate (a)") if not analytic.is_open else analytic,
        projected=rec.pretrain.projection.planned_flops.fact(flops_text),
    )


def _absent(reason, what: str) -> Fact:
    """A figure the record says it could not make: open, with the record's reason."""
    why = reason.value or "no reason recorded"
    return open_fact(f"{what}: {why} ({reason.where})")


def presumed_systemic(flops: float) -> bool:
    """Art. 51(2): cumulative training compute greater than 1e25 FLOP."""
    return presumed_systemic_risk(flops)


@dataclass(frozen=True)
class ThresholdVerdict:
    """One FLOP figure against the Art. 51(2) presumption. A fact's value is plain JSON (provenance.json), so the
    check's fact holds this as a dict (asdict) and its text is written from it again."""

    flops: float
    threshold: float
    presumed_systemic_risk: bool
    factor_to_threshold: float | None
    difference: float
    within_accuracy_margin: bool  # below, but an estimate 30% low would cross it

    @classmethod
    def of(cls, x: float) -> ThresholdVerdict:
        crosses = presumed_systemic(x)
        near = x * (1 + ESTIMATE_ACCURACY) > SYSTEMIC_RISK_FLOPS and not crosses
        return cls(flops=x, threshold=SYSTEMIC_RISK_FLOPS, presumed_systemic_risk=crosses,
                   factor_to_threshold=SYSTEMIC_RISK_FLOPS / x if x else None,
                   difference=SYSTEMIC_RISK_FLOPS - x, within_accuracy_margin=near)

    def text(self, what: str) -> str:
        if self.presumed_systemic_risk:
            return (f"{what} {sci(self.flops)} FLOP is ABOVE the 10^25 FLOP presumption of systemic risk (Art. 51(2)) "
                    f"by {sci(-self.difference)} FLOP: notify the Commission within two weeks (Art. 52(1)) and "
                    f"prepare Annex XI section 2")
        factor = self.factor_to_threshold
        margin = f"a factor of {sci(factor)} below" if factor is not None else "below"
        s = (f"{what} {sci(self.flops)} FLOP is below the 10^25 FLOP presumption (Art. 51(2)): {margin}, "
             f"{sci(self.difference)} FLOP short")
        if self.within_accuracy_margin:
            s += ("; an estimate 30% low (the accuracy the guidelines require) would cross it: the threshold may "
                  "foreseeably be met (Art. 52(1)); these documents therefore open Annex XI section 2 and ask whether the "
                  "Commission was notified (the provider's assessment, not the pipeline's)")
        return s


def gpai_status_text(flops: float, modality: str) -> str:
    """Compute and modality against the guidelines' indicative criterion, and against the 10^25 presumption."""
    generates_language = modality == "text"  # the pipeline trains text-to-text language models only
    above = flops > GPAI_INDICATIVE_FLOPS
    head = (f"Training compute {sci(flops)} FLOP against the indicative criterion of the {GUIDELINES_DOC} "
            f"(greater than 10^23 FLOP and the model generates language): ")
    if above and generates_language:
        verdict = "met: a general-purpose AI model, with the obligations of Art. 53"
    else:
        verdict = (f"not met ({'a factor of ' + sci(GPAI_INDICATIVE_FLOPS / flops) + ' below 10^23 FLOP' if flops else 'no compute'}"
                   f"{'' if generates_language else '; the model does not generate language'}): presumably not a "
                   "general-purpose AI model; these documents are prepared as if it were one")
    risk = ("above 10^25 FLOP: presumed to have systemic risk (Art. 51(2))" if presumed_systemic(flops)
            else "not above 10^25 FLOP: no presumption of systemic risk (Art. 51(2))")
    return head + verdict + "; " + risk


def gpai_status(training: Fact, modality: Fact) -> Fact:
    return derive(gpai_status_text, training, modality,
                  method="training compute (a) compared with 1e23 FLOP with the modality condition, and with 1e25 FLOP",
                  fmt=str)


def modification_text(dependencies: list[str], flops: float, base_flops: float | None = None) -> str:
    """The one-third rule, for a run that modifies a base model; a model trained from scratch says so."""
    if not dependencies:
        return "Not a modification: trained from scratch ([compliance.model] dependencies = [])"
    assert base_flops is not None
    share = flops / base_flops
    new = share > MODIFICATION_SHARE
    return (f"Modifies {', '.join(dependencies)}: this training used {sci(flops)} FLOP, {share:.1%} of the base "
            f"model's declared {sci(base_flops)} FLOP ({'more' if new else 'not more'} than one third): "
            + ("a new model, of which this provider is the provider" if new else
               "not a new model under the guidelines' indicative criterion"))


BASE_MODEL_WHY = "[compliance.model] dependencies names a base model"


def modification_status(dependencies: Fact, base_flops: Fact, training: Fact) -> Fact:
    """Open (asking for the base model's compute) when the run modifies a model whose compute is not declared."""
    inputs = (dependencies, training) if dependencies.value == [] else (dependencies, training, base_flops)
    return derive(modification_text, *inputs, fmt=str,
                  method="training compute (a) against one third of the base model's declared training compute")


def notification_reason(rec: Records) -> str | None:
    """Why a notification under Art. 52(1) may be due (compute or projection above 1e25 FLOP, or within the 30%
    accuracy margin below it), or None. The margin is the guidelines' accuracy requirement read as "foreseeably
    met": the documents say so, and leave the decision to the provider."""
    c = compute_facts(rec)
    for what, fact in (("training compute", c.training), ("the configured run's projected compute", c.projected)):
        if fact.is_open:
            continue
        verdict = ThresholdVerdict.of(fact.value)
        if verdict.presumed_systemic_risk:
            return f"{what} is greater than 1e25 FLOP"
        if verdict.within_accuracy_margin:
            return (f"{what} is within the 30% accuracy margin below 1e25 FLOP (an estimate 30% low would cross it), so the "
                    "threshold may foreseeably be met")
    return None


def threshold_check(flops: Fact, what: str) -> Fact:
    """The verdict for one FLOP figure: crosses or not, the margin, and whether a 30% error could cross it."""
    return derive(lambda x: asdict(ThresholdVerdict.of(x)), flops,
                  method=f"{what} compared with 1e25 FLOP (Art. 51(2): greater than 1e25)",
                  fmt=lambda v: ThresholdVerdict(**v).text(what))


def training_time_facts(rec: Records) -> dict[str, Fact]:
    wall = rec.pretrain.training.wall_time_s.fact(lambda s: f"{s:,.0f} s ({s / 86400:.3g} days)")
    device_hours = rec.pretrain.training.device_hours.fact(lambda h: f"{h:,.4g} device-hours")
    return {
        "wall_time": wall,
        "wall_days": derive(lambda s: round(s / 86400, 4), wall, method="wall_time_s / 86,400", fmt=lambda d: f"{d:.3g} days"),
        "range": derive(training_time_range, wall, method="wall time in months of 365.25/12 days, binned as in the form",
                        fmt=str),
        "device_hours": device_hours,
        "hardware_days": derive(lambda h: round(h / 24, 4), device_hours, method="device_hours / 24",
                                fmt=lambda d: f"{d:.3g} device-days"),
        "device_type": rec.pretrain.training.device_type.fact(),
        "device_name": rec.pretrain.training.device_name.fact(),
        "device_count": rec.pretrain.training.device_count.fact(),
        "nodes": rec.pretrain.training.nodes.fact(),
        "launcher": rec.pretrain.training.launcher.fact(),
        "steps": rec.pretrain.training.steps.fact(),
        "tokens_seen": rec.pretrain.training.tokens_seen.fact(with_sig2),
    }


def energy_fact(rec: Records) -> Fact:
    """Energy in MWh = device-hours x watts per device x PUE / 1e6; "N/A" with a declared reason instead."""
    reason = rec.settings.energy.not_available
    if reason is not None:
        return Fact("N/A", f"N/A: {reason}", ("run config [compliance.energy] not_available",), "declared not available")
    device_hours = rec.pretrain.training.device_hours.fact()
    watts = rec.setting("energy.watts_per_device", why="or declare not_available")
    pue = rec.setting("energy.pue", why="or declare not_available")
    return derive(lambda h, w, p: h * w * p / 1e6, device_hours, watts, pue,
                  method="estimated: device_hours x watts_per_device x PUE / 1e6 (MWh)",
                  fmt=lambda mwh: f"{sci(mwh)} MWh (estimated)")


def forward_flops_per_token(rec: Records) -> Fact:
    """Inference cost of one token: a forward pass is 1/3 of the training FLOPs per token (2N of 6N)."""
    return derive(lambda f: f / 3, rec.pretrain.compute.architecture.flops_per_token.fact(),
                  method="training FLOPs per token (architecture-based) / 3: the forward pass only",
                  fmt=lambda v: f"{sci(v)} FLOP per token")


def inference_fact(rec: Records) -> Fact:
    tokens = rec.setting("inference.tokens")
    return derive(lambda f, n: f * n, forward_flops_per_token(rec), tokens,
                  method="forward FLOPs per token x tokens of the benchmarked task",
                  fmt=lambda v: f"{sci(v)} FLOP")
