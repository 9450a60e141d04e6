"""The copyright policy (Art. 53(1)(c)), in the order of the Code of Practice's Copyright chapter.

The policy's commitments are the provider's to state ([compliance.copyright]); what the pipeline did about
text-and-data-mining reservations is recorded per source by ingest: the opt-out protocols honoured and by whom,
the opted-out domains, and how many documents were dropped because of them.
"""

from __future__ import annotations

from stages.compliance import training_data as td
from stages.compliance.document import Document, Table
from stages.compliance.facts import Fact, Records, constant
from stages.compliance.summary import OPT_OUT_AT_INGEST, opt_out_row

DOC_ID = "copyright_policy"

REQUIRED = ("1.1.policy_url", "1.2.lawful_access", "1.2.infringing_sites", "1.3.opt_out_removed", "1.3.signatory",
            "1.4.output_safeguards", "1.5.complaint_contact")


def build(rec: Records) -> Document:
    doc = Document(DOC_ID, "Copyright policy",
                   "Art. 53(1)(c) EU AI Act; Code of Practice (10 July 2025), Copyright chapter, Measures 1.1-1.5.")
    s = doc.section("1", "Commitments and how they were carried out in this run")
    s.section("1.1", "Copyright policy").item("policy_url", "Published policy", rec.setting("copyright.policy_url"))

    lawful = s.section("1.2", "Lawfully accessible content only")
    lawful.item("lawful_access", "Lawful access; no circumvention of paywalls or other technical measures", rec.setting("copyright.lawful_access"))
    lawful.item("infringing_sites", "Websites recognised as persistently infringing", rec.setting("copyright.infringing_sites"))

    tdm = s.section("1.3", "Identifying and complying with reservations of rights (Art. 4(3) Directive (EU) 2019/790)")
    tdm.item("signatory", "Signatory of the GPAI Code of Practice", rec.setting("provider.code_of_practice_signatory"))
    tdm.item("opt_out_removed", "Documents dropped because their domain reserved TDM rights",
             rec.ingest.per_filter["tdm_opt_out"].fact())
    sources = td.sources(rec)
    tdm.add(Table("opt_out", "Per source: opt-out protocols honoured and by whom",
                  ["source", "protocols honoured", "honoured by", "opted-out domains listed", "notes"], [opt_out_row(rec, src) for src in sources]))
    tdm.add(Table("dropped", "Per source: documents read and documents dropped for a TDM reservation",
                  ["source", "category", "documents read", "dropped (tdm_opt_out)"],
                  [[constant(src.name, source=rec.ingest.per_source.where), src.fact("category"),
                    src.count("docs_in"), src.count("removed_tdm_opt_out")] for src in sources], numeric=(2, 3)))
    if any(src.category == "crawled" for src in sources):
        tdm.item("crawler_robots", "Crawler: robots.txt (RFC 9309) and other machine-readable protocols",
                 rec.setting("crawler.robots_txt", why="a source has category 'crawled'"))
        tdm.item("crawler_info", "Crawler: public information", rec.setting("crawler.info_url", why="a source has category 'crawled'"))
    else:
        tdm.item("crawler", "Crawling by the provider", Fact(False, "none: no source has category 'crawled'",
                                                             (td.source_key("category"),)))
    tdm.text(OPT_OUT_AT_INGEST)

    s.section("1.4", "Mitigating the risk of infringing outputs").item("output_safeguards", "Safeguards", rec.setting("copyright.output_safeguards"))
    s.section("1.5", "Point of contact and complaints").item("complaint_contact", "Contact and complaint mechanism",
                                                             rec.setting("copyright.complaint_contact"))
    return doc

