"""Documents before training: `europa stage compliance --projected` on the full run's config, no stage run."""

from __future__ import annotations

import json
import re

import pytest

from pipeline.cli import main
from pipeline.config import REPO_ROOT
from stages.compliance.facts import PROJECTED

JUPITER = REPO_ROOT / "configs" / "jupiter-1t.toml"


def projected(tmp_path, config) -> dict:
    run = tmp_path / "run"
    assert main(["stage", "compliance", "--projected", "--config", str(config), "--run-dir", str(run)]) == 0
    out = run / "compliance-projected"
    assert not any((run / s).exists() for s in ("ingest", "tokenizer", "shards", "pretrain", "evaluate", "compliance"))
    return {p.name: p.read_text(encoding="utf-8") for p in out.iterdir()}


@pytest.fixture(scope="module")
def jupiter_documents(tmp_path_factory) -> dict:
    return projected(tmp_path_factory.mktemp("projected"), JUPITER)


def test_projected_documents_for_the_full_run_carry_the_planners_figures(jupiter_documents):
    from pipeline.config import load_config
    from stages.pretrain.planner.report import plan

    files = jupiter_documents
    for name in ("public_summary.md", "annex_xi_technical_documentation.md", "annex_xii_downstream_information.md",
                 "model_documentation_form.md", "copyright_policy.md", "compute_check.md", "index.html"):
        assert name in files and "PROJECTED" in files[name].splitlines()[0] + files[name][:2000], name
    config = load_config(JUPITER)
    expected = plan(config.section("pretrain"), config.stages["tokenizer"].vocab_size).predicted["expected"]
    values = json.loads(files["provenance.json"])["documents"]
    xi = values["annex_xi_technical_documentation"]["values"]
    assert xi["1.2.d.flops_analytic"]["value"] == pytest.approx(expected.total_flops, rel=1e-9)
    assert xi["1.2.d.flops_analytic"]["kind"] == PROJECTED
    assert xi["1.2.d.training_time"]["value"] == pytest.approx(expected.days * 86_400, rel=1e-6)
    form = json.loads(files["model_documentation_form.json"])
    assert form["model_properties"]["parameter_size_range"] == "500B-1T"
    assert form["computational_resources"]["training_time_range"] == ">6 months"
    # what only the run can tell is open, never invented
    assert "statistics.checkpoint.path (absent in the record)" in files["open_items.md"]
    assert "run the ingest stage" in files["open_items.md"]
    # no projected value is presented as a record of a run
    assert not re.search(r"\[\^\d+\]: measured: pretrain/manifest\.json", files["annex_xi_technical_documentation.md"])


def test_a_run_projected_near_the_threshold_asks_for_the_notification(tmp_path):
    text = JUPITER.read_text(encoding="utf-8")
    config = tmp_path / "jupiter-3x.toml"
    steps = int(re.search(r"^steps = (\d+)", text, re.M).group(1))
    config.write_text(re.sub(r"^steps = \d+", f"steps = {steps * 3}", text, count=1, flags=re.M), encoding="utf-8")
    files = projected(tmp_path, config)
    assert "within the 30% accuracy margin" in files["compute_check.md"] or "ABOVE" in files["compute_check.md"]
    assert "[compliance.systemic_risk] notification" in files["open_items.md"]
    assert "## 2 Section 2: additional information for models with systemic risk" in files["annex_xi_technical_documentation.md"]


def test_projected_refuses_strict(tmp_path, capsys):
    code = main(["stage", "compliance", "--projected", "--strict", "--config", str(JUPITER), "--run-dir", str(tmp_path / "r")])
    assert code == 2 and "--projected with --strict" in capsys.readouterr().err
