"""The compute check: training FLOPs and the configured run's projected FLOPs against the 1e25 presumption.

Why a document of its own: the notification to the Commission (Art. 52(1), within two weeks) is due as soon as
it is known that the threshold will be met, i.e. possibly before training ends; this page is what a person
reads to decide that, with both estimates, their agreement and the projection.
"""

from __future__ import annotations

from stages.compliance.compute import ACCURACY_BAND, compute_facts, threshold_check, training_time_facts
from stages.compliance.document import Document
from stages.compliance.facts import Records, constant, derive
from stages.compliance.numbers import order_of_magnitude, sig2, with_sig2

DOC_ID = "compute_check"

REQUIRED = ("1.flops_analytic", "1.flops_hardware", "1.agreement", "1.training_flops", "1.verdict",
            "2.planned_tokens", "2.projected_flops", "2.verdict")


def build(rec: Records) -> Document:
    doc = Document(DOC_ID, "Training compute and the systemic-risk presumption",
                   "Art. 51(2) and 52(1) EU AI Act; Commission guidelines on GPAI models, C(2025) 5045, Annex (compute estimation).")
    c = compute_facts(rec)
    done = doc.section("1", "Training compute so far (cumulative, this run)")
    done.item("threshold", "Threshold", constant(1e25, "greater than 10^25 FLOP", source="Art. 51(2) EU AI Act"))
    done.item("flops_analytic", "Architecture-based estimate", c.analytic)
    done.item("method_analytic", "Method", c.method_analytic)
    done.item("flops_hardware", "Hardware-based estimate", c.hardware)
    done.item("method_hardware", "Method", c.method_hardware)
    done.item("agreement", "Agreement (hardware / analytic)", c.agreement)
    done.item("within_tolerance", "Estimates agree within +-30%",
              derive(lambda a: abs(a - 1) <= ACCURACY_BAND, c.agreement, method="|agreement - 1| <= 0.30 (the guidelines' tolerance)"))
    done.item("training_flops", "Training compute used for the check", c.training)
    done.item("two_significant", "To two significant figures (for a notification)",
              derive(sig2, c.training, method="decimal half-up rounding (stages/compliance/numbers.py)", fmt=str))
    done.item("order_of_magnitude", "Order of magnitude", derive(order_of_magnitude, c.training, method="power of ten of the rounded value",
                                                                 fmt=lambda e: f"10^{e}"))
    done.item("tokens_seen", "Tokens seen", training_time_facts(rec)["tokens_seen"])
    done.item("verdict", "Check", threshold_check(c.training, "Training compute"))

    plan = doc.section("2", "Projected compute of the configured run")
    plan.text("The configured run in full: steps x global batch x sequence length x FLOPs per token, as recorded by the "
              "pretrain stage. A projection above the threshold makes the notification due before the run ends.")
    plan.item("planned_tokens", "Planned tokens", rec.pretrain.projection.planned_tokens.fact(with_sig2))
    plan.item("projected_flops", "Projected training compute", c.projected)
    plan.item("verdict", "Check", threshold_check(c.projected, "Projected training compute"))
    plan.text("Not counted (as the guidelines say): evaluations, failed experiments, activation recomputation. Counted when "
              "they happen: fine-tuning and non-public synthetic-data generation for this model.")
    return doc
