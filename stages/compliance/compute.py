"""Training compute, the systemic-risk check, training time and energy, as facts from the pretrain record.

Why here and not in the trainer: the trainer records what it measured (FLOPs by two methods, device-hours,
wall time); the legal reading of those figures lives in one place:
- Art. 51(2): a GPAI model is presumed to have high-impact capabilities (systemic risk) when the cumulative
  training compute is *greater than* 1e25 FLOP. The check uses the larger of the two estimates (the guidelines
  accept any method within +-30%; the larger one never under-reports), and says how far from the threshold it
  is (factor and difference) and whether the threshold lies within the +-30% accuracy band.
- Art. 52(1): the Commission is notified within two weeks once the threshold is met *or it becomes known that
  it will be met*: so the projected FLOPs of the configured run are checked too, before the run finishes.
- Energy (Annex XI 1.2(e)) is estimated from the compute actually used: device-hours x the stated average
  power per device x the data centre's PUE; the power figures are declarations in [compliance.energy].
"""

from __future__ import annotations

from dataclasses import dataclass

from stages.ai_act import SYSTEMIC_RISK_FLOPS, presumed_systemic_risk
from stages.compliance.facts import Fact, Records, derive, first_available
from stages.compliance.numbers import sci, training_time_range, with_sig2

ACCURACY_BAND = 0.30  # the guidelines' tolerance for a compute estimate

P = "pretrain"


def flops_text(x: float) -> str:
    return f"{sci(x)} FLOP"


@dataclass(frozen=True)
class ComputeFacts:
    analytic: Fact
    hardware: Fact
    agreement: Fact
    method_analytic: Fact
    method_hardware: Fact
    training: Fact  # the estimate the check uses
    projected: Fact
    peak_source: Fact
    mfu: Fact


def compute_facts(rec: Records) -> ComputeFacts:
    analytic = rec.pretrain.compute.flops_analytic.fact(flops_text)
    hardware = rec.pretrain.compute.flops_hardware.fact(flops_text)
    agreement = first_available(
        rec.pretrain.compute.agreement.fact(lambda v: f"{v:.2f} (hardware / analytic)"),
        derive(lambda h, a: h / a if a else None, hardware, analytic, method="flops_hardware / flops_analytic",
               fmt=lambda v: f"{v:.2f} (hardware / analytic)"),
    )
    if analytic.is_open and hardware.is_open:
        training = derive(lambda a, h: None, analytic, hardware, method="the larger of the two estimates")
    else:
        available = [f for f in (analytic, hardware) if not f.is_open]
        pick = max(available, key=lambda f: f.value)
        method = ("the larger of the analytic and the hardware estimate" if len(available) == 2
                  else "the only estimate recorded (the other is open)")
        training = Fact(pick.value, flops_text(pick.value), pick.sources, method)
    projected = rec.pretrain.projection.planned_flops.fact(flops_text)
    return ComputeFacts(
        analytic=analytic, hardware=hardware, agreement=agreement,
        method_analytic=rec.pretrain.compute.method_analytic.fact(),
        method_hardware=rec.pretrain.compute.method_hardware.fact(),
        training=training, projected=projected,
        peak_source=rec.pretrain.compute.peak_flops_source.fact(),
        mfu=rec.pretrain.compute.mfu.fact(lambda v: f"{v * 100:.1f}%"),
    )


def presumed_systemic(flops: float) -> bool:
    """Art. 51(2): cumulative training compute greater than 1e25 FLOP."""
    return presumed_systemic_risk(flops)


def threshold_check(flops: Fact, what: str) -> Fact:
    """The verdict for one FLOP figure: crosses or not, the margin, and whether it is within the +-30% band."""

    def verdict(x: float) -> dict:
        crosses = presumed_systemic(x)
        near = x * (1 + ACCURACY_BAND) > SYSTEMIC_RISK_FLOPS and not crosses
        return {"flops": x, "threshold": SYSTEMIC_RISK_FLOPS, "presumed_systemic_risk": crosses,
                "factor_to_threshold": SYSTEMIC_RISK_FLOPS / x if x else None,
                "difference": SYSTEMIC_RISK_FLOPS - x, "within_accuracy_band": near}

    def text(v: dict) -> str:
        if v["presumed_systemic_risk"]:
            return (f"{what} {sci(v['flops'])} FLOP is ABOVE the 10^25 FLOP presumption of systemic risk (Art. 51(2)) "
                    f"by {sci(-v['difference'])} FLOP: notify the Commission within two weeks (Art. 52(1)) and "
                    f"prepare Annex XI section 2")
        factor = v["factor_to_threshold"]
        margin = f"a factor of {sci(factor)} below" if factor is not None else "below"
        s = f"{what} {sci(v['flops'])} FLOP is below the 10^25 FLOP presumption (Art. 51(2)): {margin}, {sci(v['difference'])} FLOP short"
        if v["within_accuracy_band"]:
            s += "; within the +-30% accuracy band of the threshold: treat as foreseeably crossing and prepare a notification"
        return s

    return derive(verdict, flops, method=f"{what} compared with 1e25 FLOP (Art. 51(2): greater than 1e25)", fmt=text)


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
    """Energy in MWh = device-hours x watts per device x PUE / 1e6 (two significant figures)."""
    device_hours = rec.pretrain.training.device_hours.fact()
    watts = rec.setting("energy.watts_per_device")
    pue = rec.setting("energy.pue")
    return derive(lambda h, w, p: h * w * p / 1e6, device_hours, watts, pue,
                  method="estimated: device_hours x watts_per_device x PUE / 1e6 (MWh)",
                  fmt=lambda mwh: f"{sci(mwh)} MWh (estimated)")


def forward_flops_per_token(rec: Records) -> Fact:
    """Inference cost of one token: a forward pass is 1/3 of the 6N training rule (2N of 6N)."""
    per_token = first_available(
        rec.pretrain.compute.flops_per_token.fact(),
        derive(lambda f, t: f / t if t else None, rec.pretrain.compute.flops_analytic.fact(),
               rec.pretrain.training.tokens_seen.fact(), method="flops_analytic / tokens_seen"),
    )
    return derive(lambda f: f / 3, per_token, method="training FLOPs per token / 3 (forward pass only)",
                  fmt=lambda v: f"{sci(v)} FLOP per token")


def inference_fact(rec: Records) -> Fact:
    tokens = rec.setting("inference.tokens")
    return derive(lambda f, n: f * n, forward_flops_per_token(rec), tokens,
                  method="forward FLOPs per token x tokens of the benchmarked task",
                  fmt=lambda v: f"{sci(v)} FLOP")

