"""The documents: every required item present and traced to a record, open items, strict, byte-identical reruns."""

from __future__ import annotations

import json
import shutil
import tomllib
from pathlib import Path

import pytest

from pipeline.config import OrchestrationConfig, PipelineConfig, RunConfig
from pipeline.rundir import RunDir
from pipeline.stage import StageContext, StageError
from stages.compliance import annex_xi, annex_xii, compute_check, copyright, model_form, summary
from stages.compliance.generate import generate, write
from stages.compliance.stage import ComplianceStage
from tests.compliance.conftest import edit_manifest, settings_without
from tests.compliance.fake_records import demo_compliance_section, write_pretrain

REQUIRED = {
    summary.DOC_ID: summary.REQUIRED,
    annex_xi.DOC_ID: annex_xi.REQUIRED_SECTION_1,
    annex_xii.DOC_ID: annex_xii.REQUIRED,
    copyright.DOC_ID: copyright.REQUIRED,
    compute_check.DOC_ID: compute_check.REQUIRED,
}
RECORD = ("ingest/manifest.json: ", "tokenizer/manifest.json: ", "shards/manifest.json: ", "pretrain/manifest.json: ",
          "evaluate/manifest.json: ", "run config [compliance", "run config [[ingest.sources]]", "run config [pretrain]",
          "pipeline code: ", "Art. ", "stages/ingest/record.py")


def test_demo_declarations_leave_nothing_open_and_every_item_is_traced(run, demo_settings, tmp_path):
    bundle = generate(RunDir(run), demo_settings)
    assert bundle.open_items == []
    files = write(bundle, tmp_path / "out")
    assert {f"{d}.md" for d in REQUIRED} | {"model_documentation_form.md", "model_documentation_downstream_providers.md",
                                            "model_documentation_form.json", "index.html", "provenance.json", "open_items.md",
                                            "model_documentation_form.schema.json", "released_files.sha256"} == set(files)
    assert "Nothing is open" in (tmp_path / "out" / "open_items.md").read_text()
    prov = json.loads((tmp_path / "out" / "provenance.json").read_text())
    for doc, required in REQUIRED.items():
        got = prov["documents"][doc]["values"]
        missing = [i for i in required if i not in got]
        assert not missing, f"{doc}: required items missing: {missing}"
        for item_id in required:
            v = got[item_id]
            assert v["sources"] and all(s.startswith(RECORD) for s in v["sources"]), (doc, item_id, v)
    # every value of every document names where it came from
    for doc in prov["documents"].values():
        for item_id, v in doc["values"].items():
            assert v.get("sources"), item_id
    assert set(prov["records"]) == {"ingest", "tokenizer", "shards", "pretrain", "evaluate"}


def test_template_sections_and_figures(run, demo_settings):
    bundle = generate(RunDir(run), demo_settings)
    v = bundle.provenance["documents"][summary.DOC_ID]["values"]
    shards = json.loads((run / "shards" / "manifest.json").read_text())["statistics"]
    assert v["1.3.size_tokens"]["value"] == shards["totals"]["train_tokens"]
    assert v["1.3.size_bin"]["value"] == "less than 1 billion tokens"
    shares = {k: x["value"] for k, x in v.items() if k.startswith("1.3.languages[") and k.endswith("share of training tokens")}
    assert len(shares) == 3 and sum(shares.values()) == pytest.approx(1.0)
    assert v["1.3.languages[mt].training tokens"]["sources"] == ["shards/manifest.json: statistics.per_language.mt.train_tokens"]
    assert v["1.3.latest_collection"]["value"] == "05/2024"
    assert v["2.1.used"]["value"] is True and v["2.3.used"]["value"] is False
    assert not any(k.startswith("2.3.domains") for k in v)  # nothing crawled: no domain list (unicode.org is a fallback)
    assert v["3.3.pii_total"]["value"] == 0 and v["3.3.pii[email].redaction on"]["value"] is True
    md = bundle.files["public_summary.md"]
    for heading in ("## 1 General information", "### 1.3 ", "## 2 List of data sources", "### 2.3 ", "## 3 Data processing aspects",
                    "### 3.1 ", "### 3.2 "):
        assert heading in md


def test_domain_rule_applied_to_the_crawled_sources_before_filtering(run, demo_settings):
    def crawled(m):
        src = m["statistics"]["per_source"]["udhr"]
        src["category"] = "crawled"
        src["domain_bytes_in"] = {**{f"site{i:02d}.eu": 1000 - i for i in range(25)}, "(none)": 5}
        m["statistics"]["per_domain_bytes"] = {"kept-only.eu": 10**9}  # kept bytes over all sources: not the population
    edit_manifest(run, "ingest", crawled)
    for sme, listed in ((True, ["site00.eu", "site01.eu"]), (False, ["site00.eu", "site01.eu", "site02.eu"])):
        settings = demo_settings.model_copy(update={"provider": demo_settings.provider.model_copy(update={"sme": sme})})
        v = generate(RunDir(run), settings).provenance["documents"][summary.DOC_ID]["values"]
        assert [k.split("[")[1].split("]")[0] for k in v if k.startswith("2.3.domains[") and k.endswith(".bytes")] == listed
        assert v["2.3.domains_ranked"]["value"] == 25 and v["2.3.no_domain_bytes"]["value"] == 5
        assert v["2.3.domains_ranked"]["sources"] == ["ingest/manifest.json: statistics.per_source.udhr.domain_bytes_in"]


def test_parameters_two_significant_figures_everywhere(run, demo_settings):
    bundle = generate(RunDir(run), demo_settings)
    assert bundle.form["model_properties"]["total_parameters"] == 812_352
    assert bundle.form["model_properties"]["total_parameters_two_significant"] == "8.1e5"
    assert bundle.form["model_properties"]["parameter_size_range"] == "1-500M"
    assert bundle.form["model_properties"]["active_parameter_size_range"] == "1-500M"
    assert "812,352 (8.1 × 10^5)" in bundle.files["annex_xi_technical_documentation.md"]
    assert "812,352 (8.1 × 10^5)" in bundle.files["annex_xii_downstream_information.md"]
    ctx = bundle.provenance["documents"][annex_xii.DOC_ID]["values"]["2.b.max_size"]
    assert ctx["sources"] == ["pretrain/manifest.json: statistics.model.context_length"]


def test_form_json_validates_and_schema_catches_errors(run, demo_settings):
    bundle = generate(RunDir(run), demo_settings)
    assert model_form.validate(bundle.form) == []
    assert json.loads(bundle.files["model_documentation_form.json"]) == bundle.form
    bad = json.loads(json.dumps(bundle.form))
    bad["model_properties"]["parameter_size_range"] = "huge"
    bad["general"]["surprise"] = 1
    problems = model_form.validate(bad)
    assert any("general" in p and "surprise" in p for p in problems) and any("parameter_size_range" in p for p in problems)


def test_a_missing_declaration_is_listed_and_strict_fails(run, tmp_path):
    settings = settings_without(demo_compliance_section(), "model.licence")
    # the fake pretrain record has no checkpoint to export
    settings = settings.model_copy(update={"model": settings.model.model_copy(update={"release_export": None})})
    bundle = generate(RunDir(run), settings)
    assert [i.need.split(":")[0] for i in bundle.open_items] == ["set [compliance.model] licence in the run config"]
    used_by = bundle.open_items[0].used_by
    assert any("Annex XI" in u and "1.1.f.licence" in u for u in used_by) and any("Annex XII" in u for u in used_by)
    assert bundle.form["distribution"]["licence"] is None
    assert "OPEN: needs set [compliance.model] licence" in bundle.files["annex_xi_technical_documentation.md"]
    assert "1 open item(s)" in bundle.files["open_items.md"]

    stage = ComplianceStage()
    out = tmp_path / "staging"
    out.mkdir()
    stage.run(_ctx(run, settings), out)  # not strict: published with the open item
    assert (out / "open_items.md").exists()
    strict = settings.model_copy(update={"strict": True})
    with pytest.raises(StageError, match=r"1 open item\(s\) and 0 contradiction\(s\) while \[compliance\] strict = true: "
                                         r"set \[compliance.model\] licence"):
        stage.run(_ctx(run, strict), tmp_path / "strict")


def test_a_stage_that_did_not_run_becomes_open_items(run, demo_settings):
    shutil.rmtree(run / "evaluate")
    bundle = generate(RunDir(run), demo_settings)
    needs = [i.need for i in bundle.open_items]
    assert "the evaluate stage's record (evaluate/manifest.json): run the evaluate stage" in needs
    assert "OPEN" in bundle.files["annex_xi_technical_documentation.md"]


def test_a_record_that_breaks_its_contract_fails_naming_the_field(run, demo_settings):
    """A missing, renamed or masked field of a typed record is an error, never a silent open item (issue 13)."""
    from pipeline.records import RecordError

    write_pretrain(run, drop=("model.context_length",))
    with pytest.raises(RecordError, match=r"pretrain/manifest.json: statistics.model.context_length: Field required; .*"
                                          r"europa stage pretrain --force"):
        generate(RunDir(run), demo_settings)
    write_pretrain(run)
    edit_manifest(run, "shards", lambda m: m["statistics"]["totals"].update(train_tokens="***"))
    with pytest.raises(RecordError, match=r"shards/manifest.json: statistics.totals.train_tokens: Input should be a valid integer"):
        generate(RunDir(run), demo_settings)


def test_a_field_the_documents_ask_for_must_exist_in_the_record_model(run, demo_settings):
    from stages.compliance.facts import Records

    rec = Records.load(RunDir(run), demo_settings)
    assert rec.pretrain.model.context_length.value == 256
    with pytest.raises(AttributeError, match=r"ModelFacts \(stages/pretrain/record.py\) has no field 'context_len'"):
        rec.pretrain.model.context_len  # noqa: B018
    shutil.rmtree(run / "pretrain")
    with pytest.raises(AttributeError, match="has no field 'context_len'"):  # checked even when the stage is absent
        Records.load(RunDir(run), demo_settings).pretrain.model.context_len  # noqa: B018


def test_crawled_source_needs_the_crawler_declarations(run, demo_settings):
    edit_manifest(run, "ingest", lambda m: m["statistics"]["per_source"]["udhr"].update(category="crawled"))
    bundle = generate(RunDir(run), demo_settings)
    needs = {i.need.split(":")[0] for i in bundle.open_items}
    assert "set [compliance.crawler] name in the run config (a source has category 'crawled')" in needs
    assert "set [compliance.crawler] robots_txt in the run config (a source has category 'crawled')" in needs
    assert bundle.form["training_data"]["provenance"]["web_crawling"] is True


def test_regeneration_is_byte_identical_anywhere(run, demo_settings, tmp_path):
    a = write(generate(RunDir(run), demo_settings), tmp_path / "a")
    moved = tmp_path / "elsewhere" / "run"
    shutil.copytree(run, moved)
    write(generate(RunDir(moved), demo_settings), tmp_path / "b")
    for name in a:
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name
    assert str(tmp_path) not in (tmp_path / "a" / "index.html").read_text()


def test_html_is_one_page_with_hover_sources_and_links(run, demo_settings):
    html = generate(RunDir(run), demo_settings).files["index.html"]
    for doc in REQUIRED:
        assert f'<section class="doc" id="{doc}">' in html and f'href="{doc}.md"' in html
    assert 'href="model_documentation_form.json"' in html and 'href="open_items.md"' in html
    assert 'title="measured: pretrain/manifest.json: statistics.model.total_params"' in html
    assert "@media print" in html and html.count("<html") == 1


def test_demo_config_section_is_valid_and_labelled_demo():
    data = tomllib.loads((Path(__file__).resolve().parents[2] / "configs" / "demo.toml").read_text())["compliance"]
    assert "not a real provider" in data["provider"]["name"]
    from stages.compliance.config import ComplianceConfig

    cfg = ComplianceConfig.model_validate(data)
    assert cfg.strict is False and cfg.model.released is False and cfg.model.release_date is None


def _ctx(run: Path, settings) -> StageContext:
    """What the executor hands the stage: the upstream manifests and their validated records."""
    from pipeline.records import load_record
    from stages.compliance.facts import RECORD_STAGES

    rd = RunDir(run)
    config = PipelineConfig(RunConfig(), OrchestrationConfig(engine="local"), {"compliance": settings}, None)
    upstream = {s: m for s in RECORD_STAGES if (m := rd.manifest(s)) is not None}
    records = {s: load_record(rd, s, m, "compliance") for s, m in upstream.items()}
    return StageContext(rd, config, "compliance", "test", upstream, records)


def test_registered_stage_config_errors_and_summary(run, demo_settings, tmp_path):
    from types import SimpleNamespace

    from pipeline.config import ConfigError, load_config
    from pipeline.registry import get_stage

    assert isinstance(get_stage("compliance"), ComplianceStage)
    bad = tmp_path / "bad.toml"
    bad.write_text('[compliance.model]\nlicense = "MIT"\n')
    with pytest.raises(ConfigError, match=r"\[compliance.model.license\]: unknown key"):
        load_config(bad)
    bad.write_text('[compliance.model]\nrelease_date = "next spring"\n')
    with pytest.raises(ConfigError, match=r"\[compliance.model.release_date\]: must be a date"):
        load_config(bad)

    (tmp_path / "out").mkdir()
    outcome = ComplianceStage().run(_ctx(run, demo_settings), tmp_path / "out")
    assert outcome.summary["open items"] == 0 and outcome.summary["contradictions"] == 0
    assert outcome.statistics.compute.presumed_systemic_risk is False
    text = ComplianceStage().summary_markdown(SimpleNamespace(statistics=outcome.statistics.model_dump(mode="json")))
    assert text.startswith("# compliance: 7 documents, 0 open item(s), 0 contradiction(s)") and "below the 1e25 FLOP presumption" in text
