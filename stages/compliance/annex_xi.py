"""Annex XI: the technical documentation every GPAI provider keeps for the AI Office (Art. 53(1)(a)).

Section 1 (all providers) item by item, (a), (b), ... as in the Annex. Section 2 (evaluation, adversarial
testing, system architecture) only when the model is presumed to have systemic risk: training compute, or the
projected compute of the configured run, greater than 1e25 FLOP (stages/compliance/compute.py).
"""

from __future__ import annotations

from stages.compliance import model_facts as mf
from stages.compliance import training_data as td
from stages.compliance.compute import compute_facts, energy_fact, presumed_systemic, threshold_check, training_time_facts
from stages.compliance.document import Document, Table
from stages.compliance.facts import Fact, Records, derive
from stages.compliance.numbers import percent
from stages.compliance.summary import versioned_name

DOC_ID = "annex_xi_technical_documentation"

REQUIRED_SECTION_1 = (
    "1.1.a.intended_tasks", "1.1.a.ai_system_types", "1.1.b.acceptable_use_policy", "1.1.c.release_date",
    "1.1.c.distribution_channels", "1.1.d.architecture", "1.1.d.total_params", "1.1.d.active_params", "1.1.e.input",
    "1.1.e.output", "1.1.e.format", "1.1.f.licence",
    "1.2.a.integration_means", "1.2.a.software", "1.2.b.training_design", "1.2.b.design_rationale",
    "1.2.c.type", "1.2.c.provenance", "1.2.c.curation", "1.2.c.data_points", "1.2.c.scope", "1.2.c.obtained_selected",
    "1.2.c.unsuitability", "1.2.c.biases", "1.2.c.validation",
    "1.2.d.flops_analytic", "1.2.d.flops_hardware", "1.2.d.agreement", "1.2.d.training_time", "1.2.d.device_hours",
    "1.2.e.energy",
)
REQUIRED_SECTION_2 = ("2.1.evaluation_strategy", "2.1.results", "2.2.adversarial_testing", "2.2.model_adaptations",
                      "2.3.system_architecture")


def systemic(rec: Records) -> tuple[bool, str]:
    """Whether section 2 applies, and why (actual training FLOPs, or the configured run's projection)."""
    c = compute_facts(rec)
    if not c.training.is_open and presumed_systemic(c.training.value):
        return True, "training compute is greater than 1e25 FLOP"
    if not c.projected.is_open and presumed_systemic(c.projected.value):
        return True, "the configured run's projected compute is greater than 1e25 FLOP"
    return False, ""


def build(rec: Records) -> Document:
    doc = Document(DOC_ID, "Technical documentation (Annex XI)",
                   "Art. 53(1)(a) EU AI Act: for the AI Office and national competent authorities, on request.")
    head = doc.section("model", "Model")
    head.item("model", "Model", versioned_name(rec))
    head.item("provider", "Provider", rec.setting("provider.name"))
    s1 = doc.section("1", "Section 1: information to be provided by all providers of general-purpose AI models")
    _general(s1.section("1.1", "General description of the model"), rec)
    _detailed(s1.section("1.2", "Detailed description of the elements of the model and of its development"), rec)
    applies, why = systemic(rec)
    if applies:
        _systemic(doc, rec, why)
    else:
        s2 = doc.section("2", "Section 2: providers of models with systemic risk")
        s2.text("Not applicable: neither the training compute nor the projected compute of the configured run is greater "
                "than 1e25 FLOP (see section 1.2(d) and compute_check.md).")
    return doc


def _general(s, rec: Records) -> None:
    a = s.section("1.1.a", "(a) Tasks the model is intended to perform; type and nature of AI systems it can be integrated in")
    a.item("intended_tasks", "Intended tasks", rec.setting("model.intended_uses"))
    a.item("ai_system_types", "Types of AI systems", rec.setting("model.ai_system_types"))
    s.section("1.1.b", "(b) Acceptable use policies").item("acceptable_use_policy", "Acceptable use policy", rec.setting("model.acceptable_use_policy"))
    c = s.section("1.1.c", "(c) Date of release and methods of distribution")
    c.item("release_date", "Release date", rec.setting("model.release_date"))
    c.item("distribution_channels", "Methods of distribution", rec.setting("model.distribution_channels"))
    d = s.section("1.1.d", "(d) Architecture and number of parameters")
    d.item("architecture", "Architecture", mf.architecture_summary(rec))
    d.item("total_params", "Parameters, total", mf.total_params(rec))
    d.item("active_params", "Parameters, active per token", mf.active_params(rec))
    d.item("size_bin", "Size range", mf.size_bin(rec))
    d.add(Table("dimensions", "Model dimensions", ["dimension", "value"], mf.dimensions_rows(rec), numeric=(1,)))
    e = s.section("1.1.e", "(e) Modality and format of inputs and outputs")
    e.item("input", "Input modality", td.modality())
    e.item("output", "Output modality", td.modality())
    e.item("format", "Format", mf.io_format(rec))
    e.item("max_input", "Maximum input size", mf.max_input(rec))
    s.section("1.1.f", "(f) Licence").item("licence", "Licence", rec.setting("model.licence"))


def _detailed(s, rec: Records) -> None:
    a = s.section("1.2.a", "(a) Technical means required for integration (instructions, infrastructure, tools)")
    a.item("integration_means", "Integration", rec.setting("model.integration_means"))
    a.item("software", "Software", mf.software(rec))
    a.item("checkpoint", "Released weights (checkpoint)", mf.checkpoint_path(rec))
    a.item("checkpoint_sha256", "Checkpoint digest", mf.checkpoint_hash(rec))

    b = s.section("1.2.b", "(b) Design specifications of the model and the training process")
    b.item("training_design", "Training methodology", mf.training_design(rec))
    b.item("design_rationale", "Key design choices, rationale, assumptions; what it is optimised for", rec.setting("model.design_rationale"))

    c = s.section("1.2.c", "(c) Data used for training, testing and validation")
    c.item("type", "Type", td.modality())
    c.item("provenance", "Provenance", td.provenance_text(rec))
    c.item("curation", "Curation methods", td.curation_text(rec))
    c.item("data_points", "Number of data points", td.data_points(rec))
    c.item("scope", "Scope and main characteristics", td.language_mix_text(rec))
    c.item("obtained_selected", "How the data was obtained and selected", td.selection_text(rec))
    c.item("unsuitability", "Measures to detect unsuitable data sources", td.unsuitable_measures(rec))
    c.item("biases", "Methods to detect identifiable biases", td.bias_measures(rec))
    c.item("validation", "Testing and validation data", td.validation_text(rec))

    d = s.section("1.2.d", "(d) Computational resources used to train the model")
    comp, time = compute_facts(rec), training_time_facts(rec)
    d.item("flops_analytic", "Training compute, architecture-based estimate", comp.analytic)
    d.item("method_analytic", "Method (architecture-based)", comp.method_analytic)
    d.item("flops_hardware", "Training compute, hardware-based estimate", comp.hardware)
    d.item("method_hardware", "Method (hardware-based)", comp.method_hardware)
    d.item("peak_source", "Peak FLOP/s of one device: source", comp.peak_source)
    d.item("mfu", "Measured utilisation (MFU)", comp.mfu)
    d.item("agreement", "Agreement of the two estimates", comp.agreement)
    d.item("check", "Systemic-risk check", threshold_check(comp.training, "Training compute"))
    d.item("training_time", "Training time (wall clock)", time["wall_time"])
    d.item("training_range", "Training time range", time["range"])
    d.item("device_hours", "Device-hours", time["device_hours"])
    d.item("devices", "Hardware", derive(lambda n, name, t, nodes: f"{n} x {name} ({t}) on {nodes} node(s)", time["device_count"],
                                         time["device_name"], time["device_type"], time["nodes"], method="pretrain statistics.training", fmt=str))
    d.item("steps", "Optimizer steps", time["steps"])
    d.item("tokens_seen", "Tokens seen in training", time["tokens_seen"])

    e = s.section("1.2.e", "(e) Known or estimated energy consumption")
    e.item("energy", "Training energy", energy_fact(rec))
    e.item("energy_basis", "Basis of the power figures", rec.setting("energy.basis"))


def _systemic(doc: Document, rec: Records, why: str) -> None:
    s2 = doc.section("2", "Section 2: additional information for models with systemic risk")
    s2.text(f"Applies because {why}.")
    ev = s2.section("2.1", "Evaluation strategies and results")
    ev.item("evaluation_strategy", "Evaluation strategies, criteria and methodologies", rec.setting("systemic_risk.evaluation_strategy"))
    ev.item("results", "Results (validation, per language)", rec.evaluate.per_language.fact(lambda d: f"{len(d)} languages evaluated (table below)"))
    ev.add(Table("evaluation", "Validation results per language (latest checkpoint evaluated)",
                 ["language", "validation loss", "bits per byte", "token accuracy"], evaluation_rows(rec), numeric=(1, 2, 3)))
    adv = s2.section("2.2", "Adversarial testing, model adaptations (alignment, fine-tuning)")
    adv.item("adversarial_testing", "Adversarial testing", rec.setting("systemic_risk.adversarial_testing"))
    adv.item("model_adaptations", "Model adaptations", rec.setting("systemic_risk.model_adaptations"))
    s2.section("2.3", "System architecture").item("system_architecture", "How software components build or feed into each other",
                                                  rec.setting("systemic_risk.system_architecture"))


def evaluation_rows(rec: Records) -> list[list[Fact]]:
    from stages.compliance.facts import constant

    per_lang = rec.evaluate.per_language
    rows = []
    for lang in sorted(per_lang.keys()):
        figures = per_lang[lang]
        rows.append([constant(lang, source=per_lang.where),
                     figures["val_loss"].fact(lambda v: f"{v:.4f}"),
                     figures["val_bits_per_byte"].fact(lambda v: f"{v:.4f}"),
                     figures["val_token_accuracy"].fact(percent)])
    return rows
