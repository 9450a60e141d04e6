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
from stages.compliance.numbers import percent, sci


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
    unnamed = {c.check for c in found} - set(CHECK_NAMES)
    assert not unnamed, f"checks not listed in CHECK_NAMES: {sorted(unnamed)}"
    return sorted(found, key=lambda c: c.check)


NOT_RELEASED_WORDS = ("not released", "not made available", "nothing is distributed", "is not distributed")
NO_CRAWLING_WORDS = ("no web crawling", "no crawling", "not crawled", "nothing is crawled")


def declared_texts(rec: Records) -> list[tuple[str, str]]:
    """(config key, text) of every free-text declaration in [compliance], lists entry by entry."""
    out: list[tuple[str, str]] = []

    def walk(prefix: str, value) -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                walk(f"{prefix}.{k}" if prefix else k, v)
        elif isinstance(value, str):
            out.append((prefix, value))
        elif isinstance(value, list):
            out.extend((prefix, v) for v in value if isinstance(v, str))

    walk("", rec.settings.model_dump(mode="json"))
    return out


def _saying(rec: Records, words: tuple[str, ...]) -> list[tuple[str, str]]:
    return [(k, t) for k, t in declared_texts(rec) if any(w in t.lower() for w in words)]


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


def _release(rec: Records) -> list[Contradiction]:
    """The release flags against the distribution declarations and every declared text that speaks of it."""
    m = rec.settings.model
    out = []
    channels = m.distribution_channels
    if m.released is True:
        if channels is not None and all(c.strip().lower().startswith("none") for c in channels):
            out.append(Contradiction(
                "released_without_distribution", f"the model is declared released, yet its methods of distribution are "
                f"{channels or 'empty'}", (config_key("model.released"), config_key("model.distribution_channels")),
                "declare how the released model is distributed (weights download, API, ...), or set released = false"))
        for key, text in _saying(rec, NOT_RELEASED_WORDS):
            out.append(Contradiction(
                "released_but_a_text_says_not", f"the model is declared released, yet {config_key(key)} says: {text!r}",
                (config_key("model.released"), config_key(key)), "rewrite the text for the released model"))
    if m.released is True and m.release_export is None:
        out.append(Contradiction(
            "released_without_an_export", "the model is declared released, yet no released form is declared: the "
            "authenticity digests would describe the training checkpoint (with the optimizer state), not what is "
            "distributed", (config_key("model.released"), config_key("model.release_export")),
            "declare [compliance.model] release_export = \"bf16\" (the Hugging Face export the compliance stage writes "
            "or reuses)"))
    if m.released is False and channels and not all(c.strip().lower().startswith("none") for c in channels):
        out.append(Contradiction(
            "distributed_but_not_released", f"the model is declared not released, yet distributed through {channels}",
            (config_key("model.released"), config_key("model.distribution_channels")),
            "set released = true with its dates, or declare distribution_channels = [\"none: ...\"]"))
    return out


def _crawling(rec: Records) -> list[Contradiction]:
    """A crawled source against what its record shows and what the declarations say about crawling."""
    if not rec.has("ingest"):
        return []
    crawled = [src for src in td.sources(rec) if src.category == "crawled"]
    out = []
    robots = rec.settings.crawler.robots_txt
    for src in crawled:
        domains = [d for d in (src.record.domain_bytes_in.value or {}) if d != "(none)"]
        if not domains:
            out.append(Contradiction(
                "crawled_source_without_domains", f"source {src.name} is declared crawled, yet its record shows no "
                "registrable domain read (no document has a URL)", (td.source_key("category"),
                                                                   f"{src.record.domain_bytes_in.where}"),
                "give the crawled documents their URLs ([[ingest.sources]] url_field), or correct the category"))
        honoured = src.record.opt_out.honoured_by.value
        if robots is not None and honoured == "not_applicable":
            out.append(Contradiction(
                "crawler_opt_out_not_recorded", f"a crawler honouring machine-readable opt-outs is declared ({robots!r}), "
                f"yet the crawled source {src.name} records its opt-out as not applicable",
                (config_key("crawler.robots_txt"), td.source_key("opt_out.honoured_by")),
                "record in the source's opt_out what the crawler honoured (honoured_by = \"provider\", protocols = "
                "[\"robots.txt (RFC 9309)\", ...])"))
    if crawled:
        for key, text in _saying(rec, NO_CRAWLING_WORDS):
            out.append(Contradiction(
                "crawled_but_a_text_says_not", f"source(s) {', '.join(s.name for s in crawled)} are declared crawled, yet "
                f"{config_key(key)} says: {text!r}", (td.source_key("category"), config_key(key)),
                "rewrite the text for the crawled data, or correct the category"))
    return out


def _opt_out(rec: Records) -> list[Contradiction]:
    """Domains whose rightsholders reserved their rights (declared per source) against the kept bytes per domain."""
    if not rec.has("ingest"):
        return []
    kept = rec.ingest.per_domain_bytes.value or {}
    out = []
    for src in td.sources(rec):
        for domain in src.record.opt_out.domains.value or []:
            if kept.get(domain, 0) > 0:
                out.append(Contradiction(
                    "opted_out_domain_kept", f"{domain} is declared opted out (source {src.name}), yet "
                    f"{kept[domain]:,} bytes from it are kept", (td.source_key("opt_out.domains"),
                                                                 f"{rec.ingest.per_domain_bytes.where}.{domain}"),
                    "drop the domain's documents in every source that carries them (list it in each source's opt_out "
                    "domains) and rerun the ingest stage"))
    return out


def _sources(rec: Records) -> list[Contradiction]:
    out = []
    for src in td.sources(rec) if rec.has("ingest") else []:
        found, declared = src.record.version_found.value, src.record.version.value
        if found and declared and found != declared:
            out.append(Contradiction(
                "source_version_differs", f"source {src.name} is declared version {declared}, but the data read is "
                f"version {found}", (td.source_key("version"), src.record.version_found.where),
                "declare the version that was read, or fetch the declared one"))
    return out


PROJECTION_TOLERANCE = 0.01  # rounding of the recorded figures, not a modelling error


def _projection(rec: Records) -> list[Contradiction]:
    p, per_token = rec.pretrain.projection, rec.pretrain.compute.architecture.flops_per_token
    tokens, flops, rate = p.planned_tokens.value, p.planned_flops.value, per_token.value
    if not (tokens and flops and rate):
        return []
    expected = tokens * rate
    if abs(flops / expected - 1) > PROJECTION_TOLERANCE:
        return [Contradiction(
            "projection_arithmetic", f"the projected compute {sci(flops)} FLOP is not planned tokens x FLOPs per token "
            f"({tokens:,} x {rate:,} = {sci(expected)} FLOP)",
            (p.planned_flops.where, p.planned_tokens.cited, per_token.where),
            "the pretrain record is inconsistent: rerun the pretrain stage (stages/pretrain/publish.py writes both)")]
    return []


def _training_data(rec: Records) -> list[Contradiction]:
    """What training consumed against what the shards stage planned: the mixture's epoch cap and its languages."""
    mix, seen = rec.shards.mixture, rec.pretrain.training.tokens_seen.value
    out = []
    planned = mix.planned_tokens.value
    if seen and planned:
        scale = seen / planned
        over = {lang: e.expected_epochs.value * scale for lang, e in mix.languages.items()
                if e.expected_epochs.value is not None and e.expected_epochs.value * scale > mix.max_epochs.value * (1 + 1e-6)}
        if over:
            worst = max(over, key=over.get)
            out.append(Contradiction(
                "tokens_seen_beyond_the_mixture", f"training saw {seen:,} tokens, {scale:.2f} x the {planned:,} the mixture "
                f"planned: {len(over)} language(s) repeated more than the mixture's cap of {mix.max_epochs.value:g} epochs "
                f"({worst}: {over[worst]:.2f})", (rec.pretrain.training.tokens_seen.where, mix.planned_tokens.where,
                                                   mix.max_epochs.where),
                "plan the mixture for the tokens the run trains ([shards.mixture] total_tokens, or [pretrain] steps) "
                "and rerun the shards stage"))
    if rec.has("shards"):
        split = {lang for lang, v in rec.shards.per_language.items() if (v.train_tokens.value or 0) > 0}
        weighted = {lang for lang, e in mix.languages.items() if (e.weight.value or 0) > 0}
        if split != weighted:
            out.append(Contradiction(
                "mixture_and_split_languages_differ", f"languages with training tokens {sorted(split - weighted)} have no "
                f"mixture weight; languages weighted {sorted(weighted - split)} have no training tokens",
                (rec.shards.per_language.where, mix.languages.where), "rerun the shards stage"))
    return out


CHECKS: tuple[Callable[[Records], list[Contradiction]], ...] = (
    _dates, _compute, _categories, _energy, _release, _crawling, _opt_out, _sources, _projection, _training_data)
CHECK_NAMES: tuple[str, ...] = (
    "dates_for_an_unreleased_model", "release_before_training_end", "market_before_release", "data_collected_after_release",
    "utilisation_above_100_percent", "estimates_disagree",
    "crawled_without_a_crawler", "crawler_without_crawled_data", "user_data_without_a_source",
    "user_data_source_declared_unused", "synthetic_models_without_synthetic_data",
    "energy_both_stated_and_not_available",
    "released_without_distribution", "released_but_a_text_says_not", "distributed_but_not_released",
    "released_without_an_export",
    "crawled_source_without_domains", "crawler_opt_out_not_recorded", "crawled_but_a_text_says_not",
    "opted_out_domain_kept", "source_version_differs", "projection_arithmetic",
    "tokens_seen_beyond_the_mixture", "mixture_and_split_languages_differ",
)
"""Every named check (the documents say how many ran); a check raising a name not listed here is a bug."""
