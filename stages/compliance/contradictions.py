"""Cross-checks: declarations that contradict the records, or records that contradict each other.

Why: every value in the documents is traced, but two traced values can still be impossible together (a model
released before its training ended; an estimate above what the hardware could have computed). Such a pair is
not a footnote: it is listed in open_items.md next to the open items and fails the stage under `--strict`, so it
is fixed (in the declaration, or by rerunning the stage whose record is wrong) before anything is filed.
Each check names both sides with their sources and says what to fix.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from stages.compliance import training_data as td
from stages.compliance.compute import CHECK_TOLERANCE, compute_facts
from stages.compliance.facts import Records
from stages.compliance.facts import config_key as _key
from stages.compliance.numbers import percent


@dataclass(frozen=True)
class Contradiction:
    check: str  # stable id, e.g. "release_before_training_end"
    message: str  # both sides, with their values
    sources: tuple[str, ...]
    fix: str


def config_key(key: str) -> str:
    return f"run config {_key(key)}"


def contradictions(rec: Records) -> list[Contradiction]:
    found = [c for check in CHECKS for c in check(rec)]
    return sorted(found, key=lambda c: c.check)


def _dates(rec: Records) -> list[Contradiction]:
    m = rec.settings.model
    out = []
    if m.released is False and (m.release_date or m.eu_market_date):
        out.append(Contradiction(
            "dates_for_an_unreleased_model", "the model is declared not released but has a release or market date "
            f"(release_date {m.release_date}, eu_market_date {m.eu_market_date})",
            (config_key("model.released"), config_key("model.release_date"), config_key("model.eu_market_date")),
            "remove the dates, or set released = true"))
    end = rec.manifests.get("pretrain")
    trained = end.finished_at[:10] if end is not None and end.finished_at else None
    for key, date in (("model.release_date", m.release_date), ("model.eu_market_date", m.eu_market_date)):
        if date and trained and date < trained:
            out.append(Contradiction(
                "release_before_training_end", f"{config_key(key)} {date} is before the end of training ({trained})",
                (config_key(key), "pretrain/manifest.json: finished_at"),
                "declare the date the trained model is (or will be) released: a model cannot be released before "
                "it is trained"))
    if m.release_date and m.eu_market_date and m.eu_market_date < m.release_date:
        out.append(Contradiction(
            "market_before_release", f"the Union market date {m.eu_market_date} is before the first release {m.release_date}",
            (config_key("model.eu_market_date"), config_key("model.release_date")),
            "the release date is the first release through any channel: it cannot be later than the market date"))
    latest = td.latest_collection(rec)
    if m.release_date and not latest.is_open and m.training_continues is False:
        month, year = latest.value.split("/")
        if f"{year}-{month}" > m.release_date[:7]:
            out.append(Contradiction(
                "data_collected_after_release", f"data collected in {latest.value} is later than the release "
                f"({m.release_date}) of a model declared not to be trained further",
                latest.sources + (config_key("model.release_date"), config_key("model.training_continues")),
                "check the sources' collected dates, the release date, or training_continues"))
    return out


def _compute(rec: Records) -> list[Contradiction]:
    c = compute_facts(rec)
    out = []
    if not c.utilisation.is_open and c.utilisation.value > 1:
        out.append(Contradiction(
            "utilisation_above_100_percent",
            f"the architecture-based estimate {c.analytic.text} exceeds the hardware bound {c.bound.text} (devices x seconds x "
            f"peak): an implied utilisation of {percent(c.utilisation.value)} is impossible",
            c.analytic.sources + c.bound.sources,
            "the FLOPs formula (europa_model/flops.py) or the device's peak (stages/pretrain/peak_flops.py, "
            "[pretrain] peak_flops_per_device) is wrong; fix it and rerun the pretrain stage"))
    if not c.ratio.is_open and abs(c.ratio.value - 1) > CHECK_TOLERANCE:
        out.append(Contradiction(
            "estimates_disagree", f"the counted operations {c.counted.text} and the architecture-based estimate "
            f"{c.analytic.text} differ by {abs(c.ratio.value - 1):.0%} (more than {CHECK_TOLERANCE:.0%})",
            c.counted.sources + c.analytic.sources,
            "find which is wrong (the per-operation counts of the pretrain record's compute.counted.by_operation show "
            "where) before reporting either"))
    return out


def _categories(rec: Records) -> list[Contradiction]:
    cats = {src.category for src in td.sources(rec)}
    s = rec.settings
    out = []
    where = td.source_key("category")
    crawler_set = [k for k, v in s.crawler.model_dump().items() if v is not None]
    if "crawled" in cats and not crawler_set:
        out.append(Contradiction("crawled_without_a_crawler", "a source has category 'crawled' but no crawler is declared",
                                 (where, "run config [compliance.crawler]"),
                                 "declare the crawler in [compliance.crawler], or correct the source's category"))
    if crawler_set and "crawled" not in cats and rec.has("ingest"):
        out.append(Contradiction("crawler_without_crawled_data",
                                 f"a crawler is declared ({', '.join(crawler_set)}) but no source has category 'crawled'",
                                 (where, "run config [compliance.crawler]"),
                                 "remove [compliance.crawler], or give the crawled sources category = \"crawled\""))
    d = s.data
    if rec.has("ingest") and "user_data" not in cats and (d.user_data_from_model_interactions or d.user_data_from_other_services):
        out.append(Contradiction("user_data_without_a_source", "user data is declared used but no source has category 'user_data'",
                                 (where, config_key("data.user_data_from_model_interactions"), config_key("data.user_data_from_other_services")),
                                 "correct the declaration, or the source's category"))
    if "user_data" in cats and d.user_data_from_model_interactions is False and d.user_data_from_other_services is False:
        out.append(Contradiction("user_data_source_declared_unused", "a source has category 'user_data' but neither kind of "
                                 "user data is declared used", (where, config_key("data.user_data_from_model_interactions"),
                                                                config_key("data.user_data_from_other_services")),
                                 "declare which kind it is, or correct the source's category"))
    if rec.has("ingest") and "synthetic" not in cats and (d.synthetic_gpai_models or d.synthetic_other_models):
        out.append(Contradiction("synthetic_models_without_synthetic_data",
                                 "models that generated synthetic data are declared but no source has category 'synthetic'",
                                 (where, config_key("data.synthetic_gpai_models"), config_key("data.synthetic_other_models")),
                                 "correct the declaration, or the source's category"))
    return out


def _energy(rec: Records) -> list[Contradiction]:
    e = rec.settings.energy
    if e.not_available is not None and (e.watts_per_device is not None or e.pue is not None):
        return [Contradiction("energy_both_stated_and_not_available",
                              "energy is declared not available, yet power figures are declared",
                              (config_key("energy.not_available"), config_key("energy.watts_per_device"), config_key("energy.pue")),
                              "keep either the power figures or not_available")]
    return []


CHECKS: tuple[Callable[[Records], list[Contradiction]], ...] = (_dates, _compute, _categories, _energy)
