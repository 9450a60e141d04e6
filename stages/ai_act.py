"""The EU AI Act's figures that more than one stage applies (the planner before training, compliance after).

Art. 51(2) of Regulation (EU) 2024/1689: a general-purpose AI model is presumed to have high-impact
capabilities (systemic risk) when the cumulative compute used for its training is *greater than* 10^25 FLOP.
"""

from __future__ import annotations

SYSTEMIC_RISK_FLOPS = 1e25
# The Commission's GPAI guidelines (C(2025) 7719): the indicative criterion for a general-purpose AI model is
# training compute greater than 10^23 FLOP *and* the model generates language (text or audio), text-to-image or
# text-to-video; a downstream modification makes a new model only when it uses more than one third of the
# original model's training compute.
GPAI_INDICATIVE_FLOPS = 1e23
MODIFICATION_SHARE = 1 / 3


def presumed_systemic_risk(training_flops: float) -> bool:
    return training_flops > SYSTEMIC_RISK_FLOPS  # "greater than", not "at least"
