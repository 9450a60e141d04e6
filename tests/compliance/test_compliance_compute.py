"""The compute check on both sides of 1e25 FLOP, the projection, the margin, and the energy estimate."""

from __future__ import annotations

import pytest

from pipeline.rundir import RunDir
from stages.compliance import annex_xi
from stages.compliance.compute import compute_facts, energy_fact, presumed_systemic, threshold_check
from stages.compliance.facts import Records
from stages.compliance.generate import generate
from tests.compliance.fake_records import write_pretrain


def values(bundle, doc: str) -> dict:
    return bundle.provenance["documents"][doc]["values"]


def test_presumption_is_greater_than_1e25():
    # Art. 51(2): "greater than 10^25"; exactly 1e25 is not presumed.
    assert not presumed_systemic(9.9e24)
    assert not presumed_systemic(1e25)
    assert presumed_systemic(1.01e25)


@pytest.mark.parametrize("flops, systemic", [(9.9e24, False), (1.1e25, True)])
def test_section_2_on_both_sides_of_the_threshold(run, demo_settings, flops, systemic):
    write_pretrain(run, flops=flops)
    bundle = generate(RunDir(run), demo_settings)
    xi = values(bundle, annex_xi.DOC_ID)
    check = xi["1.2.d.check"]["text"]
    assert set(annex_xi.REQUIRED_SECTION_2) <= set(xi) if systemic else not set(annex_xi.REQUIRED_SECTION_2) & set(xi)
    if systemic:
        assert "ABOVE" in check and "two weeks" in check
        # section 2 asks for declarations the demo does not make: they are open, never invented
        assert any("[compliance.systemic_risk] adversarial_testing" in i.need for i in bundle.open_items)
        assert xi["2.1.results"]["sources"] == ["evaluate/manifest.json: statistics.per_language"]
    else:
        assert "below" in check and "within the +-30% accuracy band" in check  # 9.9e24 x 1.3 > 1e25
        assert not bundle.open_items


def test_projection_above_threshold_makes_section_2_due(run, demo_settings):
    write_pretrain(run, flops=3e22, projected=2.4e25)
    bundle = generate(RunDir(run), demo_settings)
    xi = values(bundle, annex_xi.DOC_ID)
    assert "2.2.adversarial_testing" in xi
    cc = values(bundle, "compute_check")
    assert "ABOVE" in cc["2.verdict"]["text"] and "below" in cc["1.verdict"]["text"]
    assert cc["2.projected_flops"]["value"] == 2.4e25
    assert cc["2.projected_flops"]["sources"] == ["pretrain/manifest.json: statistics.projection.planned_flops"]
    assert "projected" in bundle.files["annex_xi_technical_documentation.md"]


def test_margin_and_the_larger_estimate(run, demo_settings):
    write_pretrain(run, flops=2e24)  # hardware estimate = 0.9 x analytic in the fake record
    rec = Records.load(RunDir(run), demo_settings)
    c = compute_facts(rec)
    assert c.training.value == 2e24 and c.training.sources == ("pretrain/manifest.json: statistics.compute.flops_analytic",)
    verdict = threshold_check(c.training, "Training compute")
    assert verdict.value["factor_to_threshold"] == pytest.approx(5.0) and verdict.value["difference"] == pytest.approx(8e24)
    assert "a factor of 5.0 × 10^0 below" in verdict.text and not verdict.value["within_accuracy_band"]


def test_one_estimate_missing_uses_the_other_and_lists_the_gap(run, demo_settings):
    write_pretrain(run, drop=("compute.flops_hardware", "compute.agreement"))
    bundle = generate(RunDir(run), demo_settings)
    cc = values(bundle, "compute_check")
    assert cc["1.training_flops"]["method"] == "the only estimate recorded (the other is open)"
    assert cc["1.flops_hardware"]["open"]
    needs = [i.need for i in bundle.open_items]
    assert "pretrain/manifest.json: statistics.compute.flops_hardware (absent in the record)" in needs


def test_energy_from_device_hours_power_and_pue(run, demo_settings):
    stats_hours = 1_000_000.0
    from tests.compliance.fake_records import pretrain_statistics

    stats = pretrain_statistics()
    stats["training"]["device_hours"] = stats_hours
    write_pretrain(run, stats)
    settings = demo_settings.model_copy(update={"energy": demo_settings.energy.model_copy(update={"watts_per_device": 700.0, "pue": 1.2})})
    e = energy_fact(Records.load(RunDir(run), settings))
    assert e.value == pytest.approx(840.0)  # 1e6 h x 700 W x 1.2 = 8.4e8 Wh = 840 MWh
    assert e.text == "8.4 × 10^2 MWh (estimated)"
    assert e.sources == ("pretrain/manifest.json: statistics.training.device_hours", "run config [compliance.energy] watts_per_device",
                         "run config [compliance.energy] pue")
