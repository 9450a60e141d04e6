"""The Public Summary of Training Content, in the structure of the AI Office template (24 July 2025).

Art. 53(1)(d): every GPAI provider publishes it, open-source models included. Sections 1-3 of the template:
general information (provider, model, size bin, language mix), the list of data sources by category (with the
most relevant domain names), and data processing (text-and-data-mining opt-outs, illegal content and personal
data). Figures come from the ingest, shards and tokenizer records; the declarations from [compliance].
"""

from __future__ import annotations

from stages.compliance.document import Document, Section, Table
from stages.compliance.domains import rule_text, top_domains
from stages.compliance.facts import Fact, Records, constant, derive, open_fact, show
from stages.compliance.numbers import percent
from stages.compliance import training_data as td

DOC_ID = "public_summary"

# Template items this document must carry (ids of provenance.json); the tests hold the document to them.
REQUIRED = (
    "header.version", "header.last_update",
    "1.1.provider_name", "1.1.contact", "1.1.authorised_representative",
    "1.2.model_name", "1.2.dependencies", "1.2.eu_market_date",
    "1.3.modality", "1.3.size_tokens", "1.3.size_bin", "1.3.content_types", "1.3.latest_collection",
    "1.3.training_continues", "1.3.language_mix", "1.3.other",
    "2.1.used", "2.2.1.used", "2.2.2.used", "2.3.used", "2.3.domain_rule", "2.4.used", "2.5.used", "2.6.used",
    "3.1.signatory", "3.1.opt_out_removed", "3.2.pii_total", "3.2.other_measures", "3.3.curation",
)


def build(rec: Records) -> Document:
    doc = Document(DOC_ID, "Public Summary of Training Content",
                   "Art. 53(1)(d) EU AI Act; structure of the AI Office template (24 July 2025), sections 1-3.")
    header = doc.section("header", "Summary")
    header.item("version", "Version of the summary", rec.setting("summary_version"))
    header.item("last_update", "Last update (date of the newest record)", rec.newest_record_date())

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

    m = s.section("1.2", "Model identification")
    m.item("model_name", "Versioned model name", versioned_name(rec))
    m.item("dependencies", "Model dependencies (base models modified)", dependencies(rec))
    m.item("eu_market_date", "Date placed on the Union market", rec.setting("model.eu_market_date"))

    c = s.section("1.3", "Modalities, overall training data size and other characteristics")
    c.item("modality", "Modality", td.modality())
    c.item("size_tokens", "Training data size (tokens, training split)", td.train_tokens(rec))
    c.item("size_bin", "Training data size bin (text)", td.size_bin(rec))
    c.item("content_types", "Types of content", content_types(rec))
    c.item("latest_collection", "Latest date of data collection (MM/YYYY)", td.latest_collection(rec))
    c.item("training_continues", "Model continues to be trained on new data after release", rec.setting("model.training_continues"))
    c.item("language_mix", "Linguistic characteristics", td.language_mix_text(rec))
    c.add(Table("languages", "Language mix: training tokens, their share, the mixture weight used in training, documents",
                ["language", "training tokens", "share of training tokens", "mixture weight", "documents kept"],
                td.language_rows(rec), numeric=(1, 2, 3, 4)))
    c.item("other", "Other characteristics", td.data_points(rec))


def _sources(doc: Document, rec: Records) -> None:
    s = doc.section("2", "List of data sources")
    all_sources = td.sources(rec)

    def by_category(section: Section, category: str, caption: str) -> None:
        section.item("used", "Used", td.category_used(rec, category))
        rows = [source_row(rec, src) for src in all_sources if src.category == category]
        if rows:
            section.add(Table("sources", caption, ["source", "identifier / link", "licence", "collected", "share of kept bytes", "description"],
                              rows, numeric=(4,)))

    pub = s.section("2.1", "Publicly available datasets")
    pub.item("modality", "Modality", td.modality())
    by_category(pub, "public_dataset", "Publicly available datasets (all are listed, largest share of kept text included)")

    priv = s.section("2.2", "Private non-publicly available datasets obtained from third parties")
    by_category(priv.section("2.2.1", "Datasets commercially licensed by rightsholders or their representatives"),
                "private_licensed", "Licensed datasets")
    by_category(priv.section("2.2.2", "Private datasets obtained from other third parties"), "private_third_party",
                "Datasets from other third parties")

    crawl = s.section("2.3", "Data crawled and scraped from online sources by or on behalf of the provider")
    by_category(crawl, "crawled", "Crawled sources")
    crawled = any(src.category == "crawled" for src in all_sources)
    if crawled:
        for key, label in (("name", "Crawler name"), ("user_agent", "User agent"), ("purposes", "Purposes"),
                           ("robots_txt", "Behaviour: robots.txt and other opt-outs"), ("paywalls_and_logins", "Behaviour: paywalls and log-ins"),
                           ("captchas", "Behaviour: captchas"), ("collection_period", "Collection period"), ("info_url", "Public crawler information")):
            crawl.item(f"crawler_{key}", label, rec.setting(f"crawler.{key}", why="a source has category 'crawled'"))
    _domains(crawl, rec, crawled)

    for sid, category, title in (("2.4", "user_data", "User data"), ("2.5", "synthetic", "Synthetic data"), ("2.6", "other", "Other sources of data")):
        sec = s.section(sid, title)
        by_category(sec, category, title)
        if category == "synthetic":
            sec.text("The description of each synthetic source names the models that generated it.")


def _domains(section: Section, rec: Records, crawled: bool) -> None:
    sme = rec.setting("provider.sme")
    per_domain = rec.ingest.per_domain_bytes.fact()
    section.item("domain_rule", "Rule", derive(lambda s: rule_text(s), sme, method="template 2.3 rule for the provider's size", fmt=str))
    if sme.is_open or per_domain.is_open:
        section.item("domains", "Most relevant domain names", derive(lambda a, b: None, sme, per_domain, method="top domains"))
        return
    listed, n_ranked, no_domain = top_domains(per_domain.value, sme=sme.value)
    total = sum(int(b) for b in per_domain.value.values())
    section.text(("Most relevant domain names of the crawled content." if crawled else
                  "The provider did not crawl; for transparency the same rule is applied to the domains of all kept text.")
                 + " Ranked over all kept text: the ingest record counts bytes per domain across sources.")
    section.item("domains_ranked", "Domains ranked", Fact(n_ranked, show(n_ranked), per_domain.sources, "domains other than (none)"))
    section.item("domains_listed", "Domains listed", Fact(len(listed), show(len(listed)), per_domain.sources + sme.sources,
                                                           "ceil(share x domains ranked), see the rule"))
    if no_domain:
        section.item("no_domain_bytes", "Bytes of kept text without a domain", Fact(no_domain, show(no_domain), per_domain.sources))
    domain_bytes = rec.ingest.per_domain_bytes
    rows = [[constant(d, source=domain_bytes.where),
             Fact(b, show(b), (domain_bytes[d].where,)),
             Fact(b / total, percent(b / total), (domain_bytes[d].where,), "bytes of the domain / bytes of all kept text")]
            for d, b in listed]
    section.add(Table("domains", "Most relevant domain names by bytes of kept text", ["domain", "bytes", "share"], rows, numeric=(1, 2)))


def _processing(doc: Document, rec: Records) -> None:
    s = doc.section("3", "Data processing aspects")
    tdm = s.section("3.1", "Respect of reservation of rights from the text and data mining exception")
    tdm.item("signatory", "Signatory of the GPAI Code of Practice", rec.setting("provider.code_of_practice_signatory"))
    tdm.item("opt_out_removed", "Documents dropped because their domain reserved TDM rights", rec.ingest.per_filter["tdm_opt_out"].fact())
    tdm.add(Table("opt_out", "Opt-out protocols per source", ["source", "protocols honoured", "honoured by", "opted-out domains listed", "notes"],
                  [opt_out_row(rec, src) for src in td.sources(rec)]))
    tdm.text("Before and during training: domains listed as opted out are dropped at ingest with the reason tdm_opt_out, "
             "so a reservation recorded after collection still takes effect on the next run.")

    ill = s.section("3.2", "Removal of illegal content and personal data")
    rows = td.pii_rows(rec)
    total = derive(lambda *counts: sum(counts), *[r[2] for r in rows], method="sum over the kinds of personal data", fmt=lambda n: f"{n:,} redactions")
    ill.item("pii_total", "Personal data redacted (e-mail, IP, phone, IBAN)", total)
    ill.add(Table("pii", "Personal data redaction by kind", ["kind", "redaction on", "redacted"], rows, numeric=(2,)))
    ill.item("other_measures", "Measures against illegal content", rec.setting("data.illegal_content_measures"))
    ill.text("Names and other personal data without a fixed shape are not redacted (that needs named-entity recognition).")

    other = s.section("3.3", "Other information")
    other.item("curation", "Curation", td.curation_text(rec))
    other.add(Table("filters", "Documents removed per filter", ["filter", "documents removed"], td.filter_rows(rec), numeric=(1,)))


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


def source_row(rec: Records, src: td.SourceRecord) -> list[Fact]:
    r = src.record
    ident_field = r.repo if r.repo.value else r.homepage
    ident = ident_field.value
    ident_fact = (Fact(ident, ident + (f" ({r.hf_config.value})" if r.hf_config.value else ""), (ident_field.where,))
                  if ident else open_fact(f"homepage or repo of ingest source {src.name} ([[ingest.sources]] homepage)"))
    total = rec.ingest.totals.kept_bytes
    kept = src.count("kept_bytes")
    share = (Fact(kept.value / total.value, percent(kept.value / total.value), kept.sources + (total.where,),
                  "kept bytes of the source / all kept bytes") if total.value else open_fact(total.where))
    return [constant(src.name, source=rec.ingest.per_source.where), ident_fact, src.fact("licence"),
            src.fact("collected"), share, td.description(rec, src.name)]


def opt_out_row(rec: Records, src: td.SourceRecord) -> list[Fact]:
    oo = src.record.opt_out
    n_domains = len(oo.domains.value or [])
    domains_file = oo.domains_file.value
    domains_text = f"{n_domains:,}" + (f" + file {domains_file.rsplit('/', 1)[-1]}" if domains_file else "")
    return [constant(src.name, source=rec.ingest.per_source.where),
            src.fact("opt_out.protocols", lambda v: ", ".join(v) if v else "none recorded"),
            src.fact("opt_out.honoured_by", lambda v: {"provider": "the provider", "third_party": "the dataset's publisher",
                                                       "not_applicable": "not applicable"}.get(v, v)),
            Fact(n_domains, domains_text, (oo.domains.where,)),
            src.fact("opt_out.notes", lambda v: v or "-")]
