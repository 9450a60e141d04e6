"""The Public Summary of Training Content, in the structure of the AI Office's template.

Art. 53(1)(d): every GPAI provider publishes it, open-source models included. The template is the annex of the
Commission's Explanatory Notice, Communication C(2025) 8311 of 5.12.2025 (first published 24 July 2025); the
items below follow it section by section: general information (provider, model, size bin and the tokenizer that
counted the tokens, language mix, national/regional/demographic specificities), the data sources by category,
each with its modality (2.3's most relevant domain names only for data crawled by or for the provider, ranked by
the size of the content scraped), and data processing (3.1 text-and-data-mining reservations, 3.2 removal of
illegal content, 3.3 other information such as personal data). Figures come from the ingest, shards and
tokenizer records; the declarations from [compliance]. Nothing is printed that no record or declaration says.
"""

from __future__ import annotations

from stages.compliance.compute import compute_facts, gpai_status
from stages.compliance.document import Document, Section, Table
from stages.compliance.domains import NO_DOMAIN, rule_text, top_domains
from stages.compliance.facts import Fact, Records, constant, derive, open_fact, show
from stages.compliance.numbers import percent
from stages.compliance import training_data as td

DOC_ID = "public_summary"
TEMPLATE = "AI Office template for the Public Summary of Training Content, Communication C(2025) 8311 (5.12.2025)"

# Template items this document must carry (ids of provenance.json); the tests hold the document to them.
REQUIRED = (
    "header.version", "header.last_update", "header.previous_versions",
    "1.1.provider_name", "1.1.contact", "1.1.authorised_representative",
    "1.2.model_name", "1.2.dependencies", "1.2.eu_market_date",
    "1.3.modality", "1.3.size_tokens", "1.3.size_bin", "1.3.tokenizer", "1.3.content_types", "1.3.latest_collection",
    "1.3.training_continues", "1.3.language_mix", "1.3.other",
    "2.1.used", "2.1.modality", "2.2.1.used", "2.2.1.modality", "2.2.2.used", "2.2.2.modality",
    "2.3.used", "2.3.modality", "2.3.domain_rule", "2.4.used", "2.4.modality", "2.4.model_interactions",
    "2.4.other_services", "2.5.used", "2.5.modality", "2.6.used",
    "3.1.signatory", "3.1.opt_out_removed", "3.2.blocklists", "3.2.other_measures", "3.3.pii_total", "3.3.curation",
)
NOT_USED = "not applicable: no source has this category"


def build(rec: Records) -> Document:
    doc = Document(DOC_ID, "Public Summary of Training Content", f"Art. 53(1)(d) EU AI Act; {TEMPLATE}, sections 1-3.")
    header = doc.section("header", "Summary")
    header.item("version", "Version of the summary", rec.setting("summary_version"))
    header.item("last_update", "Last update (date of the newest record)", rec.newest_record_date())
    header.item("previous_versions", "Previous versions of the summary",
                derive(lambda v: v, rec.setting("previous_versions"), method="", fmt=lambda v: "; ".join(v) if v else "none: this is the first version"))

    _general(doc, rec)
    _sources(doc, rec)
    _processing(doc, rec)
    return doc


def _general(doc: Document, rec: Records) -> None:
    s = doc.section("1", "General information")
    p = s.section("1.1", "Provider identification")
    p.item("provider_name", "Provider name", rec.setting("provider.name"))
    p.item("contact", "Contact", rec.setting("provider.contact"))
    p.item("authorised_representative", "Authorised representative", authorised_representative(rec))

    from stages.compliance.model_facts import release_date

    m = s.section("1.2", "Model identification")
    m.item("model_name", "Versioned model name", versioned_name(rec))
    m.item("dependencies", "Model dependencies (base models modified)", dependencies(rec))
    m.item("gpai_status", "General-purpose AI model status (not a template item: the guidelines' criteria)",
           gpai_status(compute_facts(rec).training, td.modality()))
    m.item("eu_market_date", "Date placed on the Union market", release_date(rec, "model.eu_market_date"))

    c = s.section("1.3", "Modalities, overall training data size and other characteristics")
    c.item("modality", "Modality", td.modality())
    c.item("size_tokens", "Training data size (tokens, training split)", td.train_tokens(rec))
    c.item("tokens_seen", "Tokens seen in training (the split, repeated as the mixture weights say)",
           rec.pretrain.training.tokens_seen.fact())
    c.item("passes", "Passes over the training split", td.passes(rec))
    c.item("rehydration", "Upsampling by duplicate cluster size (rehydration)", td.rehydration_text(rec))
    c.item("size_bin", "Training data size bin (text)", td.size_bin(rec))
    c.item("tokenizer", "Tokens counted with", td.tokenizer_text(rec))
    c.item("content_types", "Types of content", content_types(rec))
    c.item("latest_collection", "Latest date of data collection (MM/YYYY)", td.latest_collection(rec))
    c.item("training_continues", "Model continues to be trained on new data after release", rec.setting("model.training_continues"))
    c.item("language_mix", "Linguistic characteristics", td.language_mix_text(rec))
    c.add(Table("languages", "Language mix: training tokens, their share, the mixture weight used in training, documents",
                ["language", "training tokens", "share of training tokens", "mixture weight", "documents kept"],
                td.language_rows(rec), numeric=(1, 2, 3, 4)))
    c.item("other", "Other relevant characteristics (national, regional or demographic specificities)",
           rec.setting("data.other_characteristics"))


def _sources(doc: Document, rec: Records) -> None:
    s = doc.section("2", "List of data sources")
    all_sources = td.sources(rec)

    def by_category(section: Section, category: str, caption: str) -> bool:
        used = td.category_used(rec, category)
        section.item("used", "Used", used)
        section.item("modality", "Modality", td.category_modality(rec, category))
        rows = [source_row(rec, src) for src in all_sources if src.category == category]
        if rows:
            section.add(Table("sources", caption, ["source", "identifier / link", "version", "licence", "downloaded",
                                                                  "content period", "share of kept bytes", "description"],
                              rows, numeric=(6,)))
        return bool(rows)

    by_category(s.section("2.1", "Publicly available datasets"), "public_dataset",
                "Publicly available datasets (all are listed, largest share of kept text included)")

    priv = s.section("2.2", "Private non-publicly available datasets obtained from third parties")
    by_category(priv.section("2.2.1", "Datasets commercially licensed by rightsholders or their representatives"),
                "private_licensed", "Licensed datasets")
    by_category(priv.section("2.2.2", "Private datasets obtained from other third parties"), "private_third_party",
                "Datasets from other third parties")

    crawl = s.section("2.3", "Data crawled and scraped from online sources by or on behalf of the provider")
    if by_category(crawl, "crawled", "Crawled sources"):
        why = "a source has category 'crawled'"
        for key, label in (("name", "Crawler name"), ("user_agent", "User agent"), ("purposes", "Purposes"),
                           ("robots_txt", "Behaviour: robots.txt and other opt-outs"), ("paywalls_and_logins", "Behaviour: paywalls and log-ins"),
                           ("captchas", "Behaviour: captchas"), ("collection_period", "Collection period"),
                           ("content_description", "Content and sources crawled"), ("info_url", "Public crawler information")):
            crawl.item(f"crawler_{key}", label, rec.setting(f"crawler.{key}", why=why))
        _domains(crawl, rec)
    else:
        crawl.item("domain_rule", "Most relevant domain names", derive(
            lambda used: "not applicable: no source was crawled or scraped by or on behalf of the provider (the list covers "
                         "that category only; public datasets are listed in 2.1)", td.category_used(rec, "crawled"),
            method="no source has category 'crawled'", fmt=str))

    user = s.section("2.4", "User data")
    if by_category(user, "user_data", "User data sources"):
        why = "a source has category 'user_data'"
        user.item("model_interactions", "Data from user interactions with the model used", rec.setting("data.user_data_from_model_interactions", why=why))
        user.item("other_services", "Data from the provider's other services or products used", rec.setting("data.user_data_from_other_services", why=why))
        user.item("services", "Services or products the user data comes from", rec.setting("data.user_data_services", why=why))
    else:
        for key, label in (("model_interactions", "Data from user interactions with the model used"),
                           ("other_services", "Data from the provider's other services or products used")):
            user.item(key, label, derive(lambda used: False, td.category_used(rec, "user_data"),
                                         method="no source has category 'user_data'", fmt=lambda _: "no"))

    synth = s.section("2.5", "Synthetic data")
    if by_category(synth, "synthetic", "Synthetic data sources"):
        why = "a source has category 'synthetic'"
        synth.item("gpai_models", "General-purpose AI models used to generate it (with links to their summaries)",
                   rec.setting("data.synthetic_gpai_models", why=why))
        synth.item("other_models", "Other AI models used to generate it", rec.setting("data.synthetic_other_models", why=why))

    by_category(s.section("2.6", "Other sources of data"), "other", "Other sources")


def _domains(section: Section, rec: Records) -> None:
    sme = rec.setting("provider.sme")
    per_domain = td.crawled_domain_bytes(rec)
    section.item("domain_rule", "Rule", derive(lambda s: rule_text(s), sme, method="template 2.3 rule for the provider's size", fmt=str))
    if sme.is_open or per_domain.is_open:
        section.item("domains", "Most relevant domain names", derive(lambda a, b: None, sme, per_domain, method="top domains"))
        return
    listed, n_ranked, no_domain = top_domains(per_domain.value, sme=sme.value)
    total = sum(int(b) for b in per_domain.value.values())
    section.item("domains_ranked", "Domains crawled", Fact(n_ranked, show(n_ranked), per_domain.sources, f"registrable domains other than {NO_DOMAIN}"))
    section.item("domains_listed", "Domains listed", Fact(len(listed), show(len(listed)), per_domain.sources + sme.sources,
                                                           "ceil(share x domains crawled), see the rule"))
    if no_domain:
        section.item("no_domain_bytes", "Bytes crawled without a URL", Fact(no_domain, show(no_domain), per_domain.sources))
    rows = [[constant(d, source=per_domain.sources[0] if per_domain.sources else "ingest"),
             Fact(b, show(b), per_domain.sources),
             Fact(b / total, percent(b / total), per_domain.sources, "bytes of the domain / bytes crawled")]
            for d, b in listed]
    section.add(Table("domains", "Most relevant domain names by size of content scraped (bytes read, before filtering)",
                      ["domain", "bytes", "share"], rows, numeric=(1, 2)))


def _processing(doc: Document, rec: Records) -> None:
    s = doc.section("3", "Data processing aspects")
    tdm = s.section("3.1", "Respect of reservation of rights from the text and data mining exception")
    tdm.item("signatory", "Signatory of the GPAI Code of Practice", rec.setting("provider.code_of_practice_signatory"))
    tdm.item("opt_out_removed", "Documents dropped because their domain reserved TDM rights", rec.ingest.per_filter["tdm_opt_out"].fact())
    tdm.add(Table("opt_out", "Opt-out protocols per source, honoured before and during collection", ["source", "protocols honoured",
                  "honoured by", "opted-out domains listed", "notes"], [opt_out_row(rec, src) for src in td.sources(rec)]))
    tdm.text(OPT_OUT_AT_INGEST)

    ill = s.section("3.2", "Removal of illegal content")
    lists = td.blocklist_rows(rec)
    ill.item("blocklists", "URL and domain block lists applied at ingest", blocklists_fact(rec))
    if lists:
        ill.add(Table("blocklist", "Block lists: documents whose URL or domain is listed are removed before training",
                      ["list", "what it is", "entries", "documents removed", "sha256 (version)"], lists, numeric=(2, 3)))
    ill.item("keywords_classifiers", "Keyword filters and classifiers for illegal content",
             constant(False, "none: the pipeline runs no keyword filter or classifier for illegal content",
                      source="pipeline code: stages/ingest/ (no such filter)"))
    ill.item("other_measures", "Other measures against illegal content (declared)", rec.setting("data.illegal_content_measures"))

    other = s.section("3.3", "Other information")
    rows = td.pii_rows(rec)
    total = derive(lambda *counts: sum(counts), *[r[2] for r in rows], method="sum over the kinds of personal data", fmt=lambda n: f"{n:,} redactions")
    other.item("pii_total", "Personal data redacted (e-mail, IP, phone, IBAN)", total)
    other.add(Table("pii", "Personal data redaction by kind", ["kind", "redaction on", "redacted"], rows, numeric=(2,)))
    other.text("Names and other personal data without a fixed shape are not redacted (that needs named-entity recognition).")
    other.item("curation", "Curation", td.curation_text(rec))
    other.add(Table("filters", "Documents removed per filter", ["filter", "documents removed"], td.filter_rows(rec), numeric=(1,)))


def blocklists_fact(rec: Records) -> Fact:
    """What 3.2 says about block lists: the lists that ran and what they removed, or plainly that none ran."""
    lists = rec.ingest.blocklists.fact()
    return derive(lambda d: d, lists, method="ingest statistics.blocklists",
                  fmt=lambda d: (f"{len(d)} list(s): " + "; ".join(f"{n} ({b['entries']:,} entries) removed {b['removed']:,} documents"
                                                                      for n, b in d.items())) if d else
                  "none: no block list was applied to this training data ([[ingest.blocklists]] is empty)")


# --- facts used here and by the other documents ---------------------------------------------------------
def authorised_representative(rec: Records) -> Fact:
    in_eu = rec.settings.provider.established_in_eu
    if in_eu is None:
        return open_fact("set [compliance.provider] established_in_eu in the run config (decides whether an authorised representative is needed)")
    if in_eu:
        return Fact("not applicable", "not applicable: the provider is established in the Union",
                    ("run config [compliance.provider] established_in_eu",))
    return rec.setting("provider.authorised_representative", why="the provider is not established in the Union (Art. 54)")


def versioned_name(rec: Records) -> Fact:
    return derive(lambda n, v: f"{n} {v}", rec.setting("model.name"), rec.setting("model.version"), method="name and version", fmt=str)


def dependencies(rec: Records) -> Fact:
    return derive(lambda d: d, rec.setting("model.dependencies"), method="",
                  fmt=lambda d: "; ".join(d) if d else "none: trained from scratch (N/A)")


def content_types(rec: Records) -> Fact:
    descs = [td.description(rec, src.name) for src in td.sources(rec)]
    if not descs:
        return open_fact("ingest/manifest.json: statistics.per_source (no source recorded)")
    names = [src.name for src in td.sources(rec)]
    return derive(lambda *d: {n: x for n, x in zip(names, d)}, *descs, method="the description of every source",
                  fmt=lambda d: "; ".join(f"{n}: {x}" for n, x in d.items()))


OPT_OUT_AT_INGEST = (
    "After collection, at ingest: this run's ingest stage dropped the documents from the domains each source lists as "
    "opted out (reason tdm_opt_out; counted above). A reservation listed after this run's ingest is not applied to "
    "this run's data: it takes effect when the ingest stage, and the stages after it, run again.")


def source_row(rec: Records, src: td.SourceRecord) -> list[Fact]:
    r = src.record
    ident_field = r.repo if r.repo.value else r.homepage
    ident = ident_field.value
    ident_fact = (Fact(ident, ident + (f" ({r.hf_config.value})" if r.hf_config.value else ""), (ident_field.cited,))
                  if ident else open_fact(f"homepage or repo of ingest source {src.name} ([[ingest.sources]] homepage)"))
    total = rec.ingest.totals.kept_bytes
    kept = src.count("kept_bytes")
    share = (Fact(kept.value / total.value, percent(kept.value / total.value), kept.sources + (total.where,),
                  "kept bytes of the source / all kept bytes") if total.value else open_fact(total.where))
    return [constant(src.name, source=rec.ingest.per_source.where), ident_fact, td.version(src), src.fact("licence"),
            src.fact("collected"), td.content_period(src), share, td.description(rec, src.name)]


def opt_out_row(rec: Records, src: td.SourceRecord) -> list[Fact]:
    oo = src.record.opt_out
    n_domains = len(oo.domains.value or [])
    domains_file = oo.domains_file.value
    domains_text = f"{n_domains:,}" + (f" + file {domains_file.rsplit('/', 1)[-1]}" if domains_file else "")
    return [constant(src.name, source=rec.ingest.per_source.where),
            src.fact("opt_out.protocols", lambda v: ", ".join(v) if v else "none recorded"),
            src.fact("opt_out.honoured_by", lambda v: {"provider": "the provider", "third_party": "the dataset's publisher",
                                                       "not_applicable": "not applicable"}.get(v, v)),
            Fact(n_domains, domains_text, (oo.domains.cited,)),
            src.fact("opt_out.notes", lambda v: v or "-")]
