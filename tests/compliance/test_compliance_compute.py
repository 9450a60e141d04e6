"""Training compute: the three figures and their methods, the checks between them, the 1e25 presumption on both
sides, the projection, and the energy estimate (or N/A)."""

from __future__ import annotations

import pytest

from pipeline.rundir import RunDir
from stages.compliance import annex_xi, compute_check
from stages.compliance.compute import compute_facts, energy_fact, presumed_systemic, threshold_check
from stages.compliance.facts import Records
from stages.compliance.generate import generate
from tests.compliance.fake_records import pretrain_statistics, write_pretrain

A = "pretrain/manifest.json: statistics.compute.architecture.flops"


def values(bundle, doc: str) -> dict:
    return bundle.provenance["documents"][doc]["values"]


def test_presumption_is_greater_than_1e25():
    # Art. 51(2): "greater than 10^25"; exactly 1e25 is not presumed.
    assert not presumed_systemic(9.9e24)
    assert not presumed_systemic(1e25)
    assert presumed_systemic(1.01e25)


@pytest.mark.parametrize("flops, section_2", [(7.0e24, False), (9.9e24, True), (1.1e25, True)])
def test_section_2_and_the_notification_on_both_sides_of_the_threshold(run, demo_settings, flops, section_2):
    write_pretrain(run, flops=flops)
    bundle = generate(RunDir(run), demo_settings)
    xi, cc = values(bundle, annex_xi.DOC_ID), values(bundle, compute_check.DOC_ID)
    check = xi["1.2.d.check"]["text"]
    assert set(annex_xi.REQUIRED_SECTION_2) <= set(xi) if section_2 else not set(annex_xi.REQUIRED_SECTION_2) & set(xi)
    assert xi["1.3.results"]["sources"] == ["evaluate/manifest.json: statistics.per_language"]  # for every model
    needs = [i.need for i in bundle.open_items]
    if flops > 1e25:
        assert "ABOVE" in check and "two weeks" in check
    if section_2:
        # section 2 and the notification ask for declarations the demo does not make: open, never invented
        assert any("[compliance.systemic_risk] adversarial_testing" in n for n in needs)
        assert any("[compliance.systemic_risk] notification" in n for n in needs) and cc["3.notification"].get("open")
        assert "may be due within two weeks" in bundle.files["compute_check.md"]
    else:
        assert not bundle.open_items and not bundle.contradictions
        assert cc["3.notification"]["text"].startswith("not due")
    if flops == 9.9e24:  # 9.9e24 x 1.3 > 1e25: an estimate 30% low would cross the threshold
        assert "below" in check and "30% low (the accuracy the guidelines require)" in check
        assert "within the 30% accuracy margin" in bundle.files["annex_xi_technical_documentation.md"]
        assert "treat it as foreseeably met" not in check


def test_projection_above_threshold_makes_section_2_due(run, demo_settings):
    write_pretrain(run, flops=3e22, projected=2.4e25)
    bundle = generate(RunDir(run), demo_settings)
    xi = values(bundle, annex_xi.DOC_ID)
    assert "2.2.adversarial_testing" in xi
    cc = values(bundle, compute_check.DOC_ID)
    assert "ABOVE" in cc["2.verdict"]["text"] and "below" in cc["1.verdict"]["text"]
    assert cc["2.projected_flops"]["value"] == 2.4e25
    assert cc["2.projected_flops"]["sources"] == ["pretrain/manifest.json: statistics.projection.planned_flops"]
    assert "projected" in bundle.files["annex_xi_technical_documentation.md"]


def test_the_architecture_based_estimate_is_reported_and_checked(run, demo_settings):
    write_pretrain(run, flops=2e24, counted_ratio=1.1, utilisation=0.4)
    rec = Records.load(RunDir(run), demo_settings)
    c = compute_facts(rec)
    assert c.training.value == 2e24 and c.training.sources == (A,)
    assert c.counted.value == pytest.approx(2.2e24) and c.ratio.value == pytest.approx(1.1) and c.agreement.value is True
    assert c.bound.value == pytest.approx(5e24) and c.utilisation.value == pytest.approx(0.4)
    verdict = threshold_check(c.training, "Training compute")
    assert verdict.value["factor_to_threshold"] == pytest.approx(5.0) and verdict.value["difference"] == pytest.approx(8e24)
    assert "a factor of 5.0 × 10^0 below" in verdict.text and not verdict.value["within_accuracy_margin"]
    bundle = generate(RunDir(run), demo_settings)
    form = bundle.form["computational_resources"]
    assert form["training_flops"] == 2e24 and form["training_flops_two_significant"] == "2.0e24"
    assert form["training_flops_order_of_magnitude"] == 24 and form["implied_utilisation"] == pytest.approx(0.4)
    assert form["counted_flops_check"] == pytest.approx(2.2e24) and form["hardware_bound_flops"] == pytest.approx(5e24)
    # each figure is named with its method and its uncertainty
    xi = values(bundle, annex_xi.DOC_ID)
    for fig in ("analytic", "counted", "bound"):
        assert xi[f"1.2.d.method_{fig}"]["value"] and xi[f"1.2.d.uncertainty_{fig}"]["value"]
    md = bundle.files["compute_check.md"]
    assert "this project's check on (a), not a rule of the guidelines" in md and "C(2025) 7719" in md


@pytest.mark.parametrize("ratio, contradiction", [(0.71, False), (1.29, False), (0.69, True), (1.31, True)])
def test_estimates_that_disagree_beyond_30_percent_are_a_contradiction(run, demo_settings, ratio, contradiction):
    from stages.compliance.stage import ComplianceStage
    from pipeline.stage import StageError
    from tests.compliance.test_compliance_documents import _ctx

    write_pretrain(run, counted_ratio=ratio)
    bundle = generate(RunDir(run), demo_settings)
    assert [c.check for c in bundle.contradictions] == (["estimates_disagree"] if contradiction else [])
    if contradiction:
        assert "Contradictions" in bundle.files["open_items.md"] and "estimates_disagree" in bundle.files["open_items.md"]
        with pytest.raises(StageError, match="0 open item\\(s\\) and 1 contradiction\\(s\\).*estimates_disagree"):
            ComplianceStage().run(_ctx(run, demo_settings.model_copy(update={"strict": True})), run / "strict-out")


def test_utilisation_above_100_percent_is_a_contradiction(run, demo_settings):
    write_pretrain(run, utilisation=1.8)  # (a) 1.8 x the bound: impossible, the 179% "MFU"
    bundle = generate(RunDir(run), demo_settings)
    assert [c.check for c in bundle.contradictions] == ["utilisation_above_100_percent"]
    assert "180.00%" in bundle.contradictions[0].message and A in bundle.contradictions[0].sources


def test_a_figure_the_record_could_not_make_is_open_with_its_reason(run, demo_settings):
    stats = pretrain_statistics()
    del stats["compute"]["counted"], stats["compute"]["hardware"]
    stats["compute"]["not_counted"] = "no flop_count.json in the job folder"
    stats["compute"]["no_hardware_bound"] = "no table entry for device 'NVIDIA A40'"
    write_pretrain(run, stats)
    bundle = generate(RunDir(run), demo_settings)
    needs = [i.need for i in bundle.open_items]
    assert ("(b) counted operations: no flop_count.json in the job folder (pretrain/manifest.json: statistics.compute.not_counted)"
            in needs)
    assert any(n.startswith("(c) hardware bound: no table entry for device 'NVIDIA A40'") for n in needs)
    assert values(bundle, compute_check.DOC_ID)["1.training_flops"]["sources"] == [A]  # (a) is still reported


def test_energy_from_device_hours_power_and_pue(run, demo_settings):
    stats = pretrain_statistics()
    stats["training"]["device_hours"] = 1_000_000.0
    write_pretrain(run, stats)
    settings = demo_settings.model_copy(update={"energy": demo_settings.energy.model_copy(update={"watts_per_device": 700.0, "pue": 1.2})})
    e = energy_fact(Records.load(RunDir(run), settings))
    assert e.value == pytest.approx(840.0)  # 1e6 h x 700 W x 1.2 = 8.4e8 Wh = 840 MWh
    assert e.text == "8.4 × 10^2 MWh (estimated)"
    assert e.sources == ("pretrain/manifest.json: statistics.training.device_hours", "run config [compliance.energy] watts_per_device",
                         "run config [compliance.energy] pue")


def test_energy_not_available_reads_na_and_power_figures_with_it_contradict(run, demo_settings):
    na = demo_settings.energy.model_copy(update={"watts_per_device": None, "pue": None, "basis": None,
                                                 "not_available": "the cloud provider discloses no power data"})
    bundle = generate(RunDir(run), demo_settings.model_copy(update={"energy": na}))
    assert bundle.form["energy"] == {"training_energy_mwh": "N/A", "training_energy_mwh_two_significant": "N/A",
                                     "measured_or_estimated": "N/A", "method": "N/A"}
    assert not bundle.open_items and not bundle.contradictions
    both = demo_settings.energy.model_copy(update={"not_available": "undisclosed"})
    bundle = generate(RunDir(run), demo_settings.model_copy(update={"energy": both}))
    assert [c.check for c in bundle.contradictions] == ["energy_both_stated_and_not_available"]


@pytest.mark.parametrize("flops, met, systemic", [(5.1e11, False, False), (2e23, True, False), (3e25, True, True)])
def test_gpai_status_against_1e23_with_the_modality_and_1e25(run, demo_settings, flops, met, systemic):
    """The guidelines' indicative criterion (greater than 1e23 FLOP and the model generates language) in Annex XI
    and in the public summary: a demo-sized model says it is presumably not a general-purpose AI model."""
    write_pretrain(run, flops=flops)
    bundle = generate(RunDir(run), demo_settings)
    status = values(bundle, annex_xi.DOC_ID)["1.2.d.gpai_status"]
    in_summary = values(bundle, "public_summary")["1.2.gpai_status"]
    assert (status["text"], status["sources"]) == (in_summary["text"], in_summary["sources"])
    assert A in status["sources"]
    text = status["text"]
    assert ("met: a general-purpose AI model" in text) == met
    assert ("presumably not a general-purpose AI model" in text) == (not met)
    assert ("presumed to have systemic risk" in text) == systemic
    if not met:
        assert "not met (a factor of " in text and " below 10^23 FLOP)" in text


@pytest.mark.parametrize("dependencies, base, expect", [
    ([], None, "Not a modification: trained from scratch"),
    (["base-7b (https://example.org/summary)"], 1e12, "more than one third): a new model"),
    (["base-7b (https://example.org/summary)"], 1e14, "not more than one third): not a new model"),
    (["base-7b (https://example.org/summary)"], None, None),  # open: the base model's compute is asked for
])
def test_a_modification_is_a_new_model_above_one_third_of_the_base_models_compute(run, demo_settings, dependencies,
                                                                                   base, expect):
    write_pretrain(run, flops=5.1e11)
    model = demo_settings.model.model_copy(update={"dependencies": dependencies, "base_model_training_flops": base})
    bundle = generate(RunDir(run), demo_settings.model_copy(update={"model": model}))
    item = values(bundle, annex_xi.DOC_ID)["1.2.d.modification"]
    if expect is None:
        assert item.get("value") is None and "text" not in item  # an open item, listed in open_items.md
        assert any("[compliance.model] base_model_training_flops" in i.need for i in bundle.open_items)
    else:
        assert expect in item["text"]
