"""Annex XII: what downstream providers who integrate the model must be told (Art. 53(1)(b)).

Item by item as in the Annex; the figures are the same facts as Annex XI's (model_facts, training_data), so
the two documents cannot disagree.
"""

from __future__ import annotations

from stages.compliance import evaluation as ev
from stages.compliance import model_facts as mf
from stages.compliance import training_data as td
from stages.compliance.document import Document
from stages.compliance.facts import Records, constant, derive
from stages.compliance.summary import versioned_name

DOC_ID = "annex_xii_downstream_information"

REQUIRED = (
    "1.a.intended_tasks", "1.a.ai_system_types", "1.b.acceptable_use_policy", "1.c.release_date", "1.c.distribution_channels",
    "1.d.external_interaction", "1.e.software", "1.f.architecture", "1.f.total_params", "1.g.input", "1.g.output",
    "1.g.format", "1.h.licence",
    "2.a.integration_means", "2.a.required_hardware", "2.b.modality", "2.b.format", "2.b.max_size",
    "2.c.type", "2.c.provenance", "2.c.curation", "3.evaluated", "3.limitations",
)


def build(rec: Records) -> Document:
    doc = Document(DOC_ID, "Information for downstream providers (Annex XII)",
                   "Art. 53(1)(b) EU AI Act: for providers of AI systems who intend to integrate the model.")
    head = doc.section("model", "Model")
    head.item("model", "Model", versioned_name(rec))
    head.item("provider", "Provider", rec.setting("provider.name"))
    head.item("contact", "Contact", rec.setting("provider.contact"))
    head.item("document_date", "Document date (date of the newest record)", rec.newest_record_date())
    head.item("document_version", "Document version", rec.setting("documentation_version"))

    s1 = doc.section("1", "General description of the model")
    a = s1.section("1.a", "(a) Intended tasks; type and nature of AI systems it can be integrated into")
    a.item("intended_tasks", "Intended tasks", rec.setting("model.intended_uses"))
    a.item("restricted_uses", "Restricted or prohibited uses", rec.setting("model.restricted_uses"))
    a.item("ai_system_types", "Types of AI systems", rec.setting("model.ai_system_types"))
    s1.section("1.b", "(b) Acceptable use policies").item("acceptable_use_policy", "Acceptable use policy", rec.setting("model.acceptable_use_policy"))
    c = s1.section("1.c", "(c) Date of release and methods of distribution")
    c.item("release_date", "Release date", mf.release_date(rec))
    c.item("distribution_channels", "Methods of distribution", rec.setting("model.distribution_channels"))
    s1.section("1.d", "(d) Interaction with hardware or software that is not part of the model").item(
        "external_interaction", "Interaction", rec.setting("model.external_interaction"))
    s1.section("1.e", "(e) Versions of relevant software").item("software", "Software", mf.software(rec))
    f = s1.section("1.f", "(f) Architecture and number of parameters")
    f.item("architecture", "Architecture", mf.architecture_summary(rec))
    f.item("total_params", "Parameters, total", mf.total_params(rec))
    f.item("active_params", "Parameters, active per token", mf.active_params(rec))
    f.item("size_bin", "Size range (total / active parameters)", derive(lambda t, a: f"{t} total / {a} active", mf.size_bin(rec),
                                                                          mf.active_size_bin(rec), method="the form's size ranges", fmt=str))
    g = s1.section("1.g", "(g) Modality and format of inputs and outputs")
    g.item("input", "Input modality", td.modality())
    g.item("output", "Output modality", td.modality())
    g.item("format", "Format", mf.io_format(rec))
    s1.section("1.h", "(h) Licence").item("licence", "Licence", rec.setting("model.licence"))

    s2 = doc.section("2", "Elements of the model and its development")
    a2 = s2.section("2.a", "(a) Technical means required for integration (instructions for use, infrastructure, tools)")
    a2.item("integration_means", "Integration", rec.setting("model.integration_means"))
    a2.item("required_hardware", "Required hardware", rec.setting("model.required_hardware"))
    a2.item("checkpoint", "Weights (checkpoint)", mf.checkpoint_path(rec))
    a2.item("released_files", "Released files and their sha256", mf.released_files(rec))
    a2.item("digest_method", "How the digests are computed", constant(mf.DIGEST_METHOD, source="pipeline code: stages/compliance/model_facts.py"))
    b2 = s2.section("2.b", "(b) Modality, format and maximum size of inputs and outputs")
    b2.item("modality", "Modality", td.modality())
    b2.item("format", "Format", mf.io_format(rec))
    b2.item("max_size", "Maximum size (context window)", mf.max_input(rec))
    c2 = s2.section("2.c", "(c) Data used for training, testing and validation")
    c2.item("type", "Type", td.modality())
    c2.item("provenance", "Provenance", td.provenance_text(rec))
    c2.item("curation", "Curation methods", td.curation_text(rec))
    c2.item("validation", "Testing and validation data", td.validation_text(rec))

    s3 = doc.section("3", "Capabilities and limitations (Art. 53(1)(b)(i))")
    s3.item("evaluated", "Capabilities and limitations shown by the evaluation", ev.capabilities_text(rec))
    s3.item("limitations", "Known limitations (the provider's declaration)", rec.setting("model.known_limitations"))
    return doc
