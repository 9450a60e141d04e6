"""The compute check: training FLOPs and the configured run's projected FLOPs against the 1e25 presumption.

Why a document of its own: the notification to the Commission (Art. 52(1), within two weeks) is due as soon as
it is known that the threshold will be met, i.e. possibly before training ends; this page is what a person
reads to decide that: the reported estimate, how the count and the hardware bound confirm it, and the projection.
"""

from __future__ import annotations

from stages.compliance.compute import (GUIDELINES, compute_facts, notification_reason, threshold_check,
                                      training_time_facts)
from stages.compliance.document import Document
from stages.compliance.facts import Records, constant, derive
from stages.compliance.numbers import order_of_magnitude, sig2, with_sig2

DOC_ID = "compute_check"

REQUIRED = ("1.flops_analytic", "1.flops_counted", "1.agreement", "1.flops_bound", "1.utilisation", "1.training_flops",
            "1.verdict", "2.planned_tokens", "2.projected_flops", "2.verdict")


def build(rec: Records) -> Document:
    doc = Document(DOC_ID, "Training compute and the systemic-risk presumption",
                   f"Art. 51(2) and 52(1) EU AI Act; {GUIDELINES} (compute estimation).")
    c = compute_facts(rec)
    done = doc.section("1", "Training compute of the planned run (projected: no step has run)" if rec.projected
                       else "Training compute so far (cumulative, this run)")
    done.item("threshold", "Threshold", constant(1e25, "greater than 10^25 FLOP", source="Art. 51(2) EU AI Act"))
    done.item("flops_analytic", "(a) Architecture-based estimate (reported)", c.analytic)
    done.item("method_analytic", "(a) Method", c.method_analytic)
    done.item("uncertainty_analytic", "(a) Uncertainty", c.uncertainty_analytic)
    done.item("flops_counted", "(b) Operations counted in one training step x steps (check on (a))", c.counted)
    done.item("method_counted", "(b) Method", c.method_counted)
    done.item("ratio", "(b) / (a)", c.ratio)
    done.item("agreement", "(a) and (b) agree within 30%", c.agreement)
    done.text("The guidelines require an estimate accurate within an overall error margin of 30%; that (a) and (b) agree "
              "within 30% is this project's check on (a), not a rule of the guidelines. A larger gap is listed as a "
              "contradiction and fails the stage under --strict.")
    done.item("flops_bound", "(c) Hardware-based bound: devices x seconds x peak theoretical FLOP/s", c.bound)
    done.item("method_bound", "(c) Method", c.method_bound)
    done.item("peak_source", "(c) Peak theoretical throughput: source", c.peak_source)
    done.item("utilisation", "Utilisation implied by (a) / (c)", c.utilisation)
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
    plan.text("Not counted, as the guidelines say: evaluations, failed experiments, activation recomputation. This page "
              "covers this run's pretraining only (the pretrain record): compute spent on this model outside this run "
              "(a later fine-tuning, generating synthetic data for it) is not recorded by the pipeline and not in these "
              "figures.")

    notify = doc.section("3", "Notification to the Commission (Art. 52(1))")
    why = notification_reason(rec)
    if why is None:
        notify.item("notification", "Notification", derive(
            lambda t, p: "not due: neither figure is greater than 1e25 FLOP or within the 30% accuracy margin below it",
            c.training, c.projected, method="sections 1 and 2 of this page", fmt=str))
    else:
        notify.text(f"A notification may be due within two weeks: {why}.")
        notify.item("notification", "Notification (the provider's declaration)",
                    rec.setting("systemic_risk.notification", why=why))

    how = doc.section("4", "Assumptions of these figures (the pipeline's code)")
    how.text("Tokens are the final step x the tokens per step (global batch x sequence length): steps redone after a "
             "restart from a checkpoint are not counted again, so compute spent on them is missing from (a) and (b). "
             "Training time is the sum of the training processes' lifetimes (the pretrain record's wall_time_s over its "
             "segments), not calendar time: queueing and time between restarts are not in it. The hardware figure (c) "
             "assumes every device computes at its peak for that whole time (utilisation 1): it is an upper bound, not "
             "the guidelines' hardware-based estimate, which multiplies by the average utilisation.")
    return doc
