"""Each contradiction a regulator would find, built as a fixture: it is a named check, and --strict fails on it."""

from __future__ import annotations

import pytest

from pipeline.rundir import RunDir
from pipeline.stage import StageError
from stages.compliance.contradictions import CHECK_NAMES
from stages.compliance.generate import generate
from stages.compliance.stage import ComplianceStage
from tests.compliance.conftest import edit_manifest
from tests.compliance.fake_records import pretrain_statistics, write_pretrain
from tests.compliance.test_compliance_documents import _ctx
from tests.compliance.test_compliance_texts import released, with_


def checks(run, settings) -> list[str]:
    return [c.check for c in generate(RunDir(run), settings).contradictions]


def strict_fails(run, settings, check: str) -> None:
    with pytest.raises(StageError, match=f"contradiction {check}"):
        ComplianceStage().run(_ctx(run, settings.model_copy(update={"strict": True})), run / "strict-out")


def test_the_fixture_run_passes_every_check_and_says_so(run, demo_settings):
    bundle = generate(RunDir(run), demo_settings)
    assert bundle.contradictions == []
    said = f"{len(CHECK_NAMES)} cross-checks ran, none failed"
    assert said in bundle.files["open_items.md"] and said in bundle.files["index.html"]
    assert len(CHECK_NAMES) == len(set(CHECK_NAMES)) >= 20


def test_released_while_the_texts_say_it_is_not(run, demo_settings):
    settings = with_(demo_settings, "model", released=True, release_date="2027-01-01", eu_market_date="2027-01-01")
    found = generate(RunDir(run), settings).contradictions
    assert {"released_without_distribution", "released_but_a_text_says_not"} <= {c.check for c in found}
    texts = " | ".join(c.message for c in found if c.check == "released_but_a_text_says_not")
    assert "[compliance.copyright] output_safeguards says: 'Demo: none; the demo model is not released.'" in texts
    strict_fails(run, settings, "released_but_a_text_says_not")
    assert checks(run, released(demo_settings, released=True, release_date="2027-01-01", eu_market_date="2027-01-01")) == []


def test_distributed_while_declared_not_released(run, demo_settings):
    settings = with_(demo_settings, "model", distribution_channels=["weights download from the Hub"])
    assert checks(run, settings) == ["distributed_but_not_released"]
    strict_fails(run, settings, "distributed_but_not_released")


def test_crawled_source_with_a_robots_txt_crawler_but_no_crawl_in_the_records(run, demo_settings):
    edit_manifest(run, "ingest", lambda m: m["statistics"]["per_source"]["udhr"].update(category="crawled"))
    settings = with_(demo_settings, "crawler", name="EuropaBot", user_agent="EuropaBot/1.0", purposes="training data",
                     robots_txt="robots.txt (RFC 9309) honoured before every fetch", info_url="https://europa.invalid/bot")
    found = checks(run, settings)
    # "domains crawled: 0", opt-out "not applicable", and the policy's "no web crawling" all contradict the crawl
    assert {"crawled_source_without_domains", "crawler_opt_out_not_recorded", "crawled_but_a_text_says_not"} <= set(found)
    strict_fails(run, settings, "crawled_source_without_domains")


def test_an_opted_out_domain_whose_bytes_are_kept(run, demo_settings):
    def opt_out_own_domain(m):
        stats = m["statistics"]
        domain = next(iter(stats["per_domain_bytes"]))
        stats["per_source"]["udhr"]["opt_out"]["domains"] = [domain]

    edit_manifest(run, "ingest", opt_out_own_domain)
    assert checks(run, demo_settings) == ["opted_out_domain_kept"]
    strict_fails(run, demo_settings, "opted_out_domain_kept")


def test_the_declared_version_against_the_version_in_the_data(run, demo_settings):
    edit_manifest(run, "ingest", lambda m: m["statistics"]["per_source"]["udhr"].update(version="5.0.0", version_found="6.0.0"))
    assert checks(run, demo_settings) == ["source_version_differs"]
    strict_fails(run, demo_settings, "source_version_differs")
    edit_manifest(run, "ingest", lambda m: m["statistics"]["per_source"]["udhr"].update(version="6.0.0"))
    assert checks(run, demo_settings) == []


def test_a_projection_that_planned_tokens_times_flops_per_token_does_not_give(run, demo_settings):
    stats = pretrain_statistics()
    stats["projection"]["planned_flops"] = 8.5e24
    write_pretrain(run, stats)
    found = generate(RunDir(run), demo_settings).contradictions
    assert [c.check for c in found] == ["projection_arithmetic"] and "8.5" in found[0].message
    strict_fails(run, demo_settings, "projection_arithmetic")


def test_training_longer_than_the_mixture_planned(run, demo_settings):
    stats = pretrain_statistics()
    stats["training"]["tokens_seen"] *= 100
    write_pretrain(run, stats)
    assert checks(run, demo_settings) == ["tokens_seen_beyond_the_mixture"]
    strict_fails(run, demo_settings, "tokens_seen_beyond_the_mixture")


def test_a_mixture_that_does_not_weight_a_language_of_the_split(run, demo_settings):
    edit_manifest(run, "shards", lambda m: m["statistics"]["mixture"]["languages"]["mt"].update(weight=0.0))
    assert checks(run, demo_settings) == ["mixture_and_split_languages_differ"]
    strict_fails(run, demo_settings, "mixture_and_split_languages_differ")


def test_released_without_an_export(run, demo_settings):
    settings = released(demo_settings, released=True, release_date="2027-01-01", eu_market_date="2027-01-01")
    settings = with_(settings, "model", release_export=None)
    assert checks(run, settings) == ["released_without_an_export"]
    strict_fails(run, settings, "released_without_an_export")
