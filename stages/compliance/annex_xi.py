"""Annex XI: the technical documentation every GPAI provider keeps for the AI Office (Art. 53(1)(a)).

Section 1 (all providers) item by item, (a), (b), ... as in the Annex, then the results of the model's evaluation,
which Art. 53(1)(a) requires in the technical documentation of every model ("including its training and testing
process and the results of its evaluation"), not only of models with systemic risk. Section 2 (evaluation
strategies, adversarial testing, system architecture) only when the model is presumed to have systemic risk:
training compute, or the projected compute of the configured run, greater than 1e25 FLOP
(stages/compliance/compute.py). Training compute is given three ways, each with its method and uncertainty.
"""

from __future__ import annotations

from stages.compliance import model_facts as mf
from stages.compliance import evaluation as ev
from stages.compliance import training_data as td
from stages.compliance.compute import (BASE_MODEL_WHY, GUIDELINES, compute_facts, energy_fact, gpai_status, modification_status,
                                      notification_reason, threshold_check, training_time_facts)
from stages.compliance.document import Document, Table
from stages.compliance.facts import Fact, Records, constant, derive
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
    "1.2.d.flops_analytic", "1.2.d.method_analytic", "1.2.d.uncertainty_analytic", "1.2.d.flops_counted",
    "1.2.d.method_counted", "1.2.d.uncertainty_counted", "1.2.d.agreement", "1.2.d.flops_bound", "1.2.d.method_bound",
    "1.2.d.uncertainty_bound", "1.2.d.utilisation", "1.2.d.training_time", "1.2.d.device_hours",
    "1.2.e.energy", "1.3.results",
)
REQUIRED_SECTION_2 = ("2.1.evaluation_strategy", "2.2.adversarial_testing", "2.2.model_adaptations",
                      "2.3.system_architecture")


def systemic(rec: Records) -> tuple[bool, str]:
    """Whether section 2 is prepared, and why: compute or projection above 1e25 FLOP, or within the accuracy margin
    below it (compute.notification_reason), so that it exists before a notification could be due."""
    why = notification_reason(rec)
    return why is not None, why or ""


def build(rec: Records) -> Document:
    doc = Document(DOC_ID, "Technical documentation (Annex XI)",
                   "Art. 53(1)(a) EU AI Act: for the AI Office and national competent authorities, on request.")
    head = doc.section("model", "Model")
    head.item("model", "Model", versioned_name(rec))
    head.item("provider", "Provider", rec.setting("provider.name"))
    head.item("document_date", "Document date (date of the newest record)", rec.newest_record_date())
    head.item("document_version", "Document version", rec.setting("documentation_version"))
    s1 = doc.section("1", "Section 1: information to be provided by all providers of general-purpose AI models")
    _general(s1.section("1.1", "General description of the model"), rec)
    _detailed(s1.section("1.2", "Detailed description of the elements of the model and of its development"), rec)
    _evaluation(s1.section("1.3", "Results of the evaluation of the model (Art. 53(1)(a))"), rec)
    applies, why = systemic(rec)
    if applies:
        _systemic(doc, rec, why)
    else:
        s2 = doc.section("2", "Section 2: providers of models with systemic risk")
        s2.text("Not applicable: neither the training compute nor the projected compute of the configured run is greater "
                "than 1e25 FLOP or within the 30% accuracy margin below it (see section 1.2(d) and compute_check.md).")
    return doc


def _general(s, rec: Records) -> None:
    a = s.section("1.1.a", "(a) Tasks the model is intended to perform; type and nature of AI systems it can be integrated in")
    a.item("intended_tasks", "Intended tasks", rec.setting("model.intended_uses"))
    a.item("ai_system_types", "Types of AI systems", rec.setting("model.ai_system_types"))
    s.section("1.1.b", "(b) Acceptable use policies").item("acceptable_use_policy", "Acceptable use policy", rec.setting("model.acceptable_use_policy"))
    c = s.section("1.1.c", "(c) Date of release and methods of distribution")
    c.item("release_date", "Release date", mf.release_date(rec))
    c.item("distribution_channels", "Methods of distribution", rec.setting("model.distribution_channels"))
    d = s.section("1.1.d", "(d) Architecture and number of parameters")
    d.item("architecture", "Architecture", mf.architecture_summary(rec))
    d.item("total_params", "Parameters, total", mf.total_params(rec))
    d.item("active_params", "Parameters, active per token", mf.active_params(rec))
    d.item("size_bin", "Size range (total parameters)", mf.size_bin(rec))
    d.item("active_size_bin", "Size range (active parameters)", mf.active_size_bin(rec))
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
    a.item("released_files", "Released files and their sha256", mf.released_files(rec))
    a.item("digest_method", "How the digests are computed", constant(mf.DIGEST_METHOD, source="pipeline code: stages/compliance/model_facts.py"))

    b = s.section("1.2.b", "(b) Design specifications of the model and the training process")
    b.item("training_design", "Training methodology", mf.training_design(rec))
    b.item("design_rationale", "Key design choices, rationale, assumptions; what it is optimised for", rec.setting("model.design_rationale"))

    c = s.section("1.2.c", "(c) Data used for training, testing and validation")
    c.item("type", "Type", td.modality())
    c.item("provenance", "Provenance", td.provenance_text(rec))
    c.item("curation", "Curation methods", td.curation_text(rec))
    c.item("rehydration", "Upsampling by duplicate cluster size (rehydration)", td.rehydration_text(rec))
    c.item("data_points", "Number of data points", td.data_points(rec))
    c.item("scope", "Scope and main characteristics", td.language_mix_text(rec))
    c.item("obtained_selected", "How the data was obtained and selected", td.selection_text(rec))
    c.item("unsuitability", "Measures to detect unsuitable data sources", td.unsuitable_measures(rec))
    c.item("biases", "Methods to detect identifiable biases", td.bias_measures(rec))
    c.item("validation", "Testing and validation data", td.validation_text(rec))

    d = s.section("1.2.d", "(d) Computational resources used to train the model")
    comp, time = compute_facts(rec), training_time_facts(rec)
    d.text(f"Three figures. (a) is the architecture-based approach of the {GUIDELINES}, and the one reported. (b), the "
           "operations counted in a real training step, is this project's check on (a). (c) is the guidelines' "
           "hardware-based approach with the utilisation set to 1 (devices x seconds x peak theoretical throughput): "
           "a bound on (a), and the utilisation (a) implies.")
    d.item("flops_analytic", "(a) Training compute, architecture-based estimate (reported)", comp.analytic)
    d.item("method_analytic", "(a) Method", comp.method_analytic)
    d.item("uncertainty_analytic", "(a) Uncertainty", comp.uncertainty_analytic)
    d.item("flops_counted", "(b) Training compute, operations counted in one training step x steps", comp.counted)
    d.item("method_counted", "(b) Method", comp.method_counted)
    d.item("uncertainty_counted", "(b) Uncertainty", comp.uncertainty_counted)
    d.item("ratio", "(b) / (a)", comp.ratio)
    d.item("agreement", "(a) and (b) agree within 30% (the project's check)", comp.agreement)
    d.item("flops_bound", "(c) Hardware-based bound: devices x seconds x peak theoretical FLOP/s", comp.bound)
    d.item("method_bound", "(c) Method", comp.method_bound)
    d.item("uncertainty_bound", "(c) Uncertainty", comp.uncertainty_bound)
    d.item("peak", "(c) Peak theoretical throughput of one device", comp.peak)
    d.item("peak_source", "(c) Where the peak comes from", comp.peak_source)
    d.item("utilisation", "Utilisation implied by (a) / (c)", comp.utilisation)
    d.item("check", "Systemic-risk check (on (a))", threshold_check(comp.training, "Training compute"))
    d.item("gpai_status", "General-purpose AI model status (on (a))", gpai_status(comp.training, td.modality()))
    d.item("modification", "Modification of a base model (one-third rule)", modification_status(
        rec.setting("model.dependencies"), rec.setting("model.base_model_training_flops", why=BASE_MODEL_WHY), comp.training))
    d.item("training_time", "Training time (wall clock)", time["wall_time"])
    d.item("training_range", "Training time range", time["range"])
    d.item("device_hours", "Device-hours", time["device_hours"])
    d.item("devices", "Hardware", derive(lambda n, name, t, nodes: f"{n} x {name} ({t}) on {nodes} node(s)", time["device_count"],
                                         time["device_name"], time["device_type"], time["nodes"], method="pretrain statistics.training", fmt=str))
    d.item("steps", "Optimizer steps", time["steps"])
    d.item("tokens_seen", "Tokens seen in training", time["tokens_seen"])
    d.item("passes", "Passes over the training split (tokens seen / training-split tokens)", td.passes(rec))

    e = s.section("1.2.e", "(e) Known or estimated energy consumption")
    e.item("energy", "Training energy", energy_fact(rec))
    if rec.settings.energy.not_available is None:
        e.item("energy_basis", "Basis of the power figures", rec.setting("energy.basis"))


def _evaluation(s, rec: Records) -> None:
    s.item("results", "Results (validation, per language)", rec.evaluate.per_language.fact(lambda d: f"{len(d)} languages evaluated (table below)"))
    s.item("checkpoint", "Checkpoint evaluated", rec.evaluate.latest_step.fact(lambda v: f"step {v:,}"))
    s.item("sets", "Evaluation sets", rec.evaluate.eval_sets.fact())
    s.item("method", "Method", rec.evaluate.method.fact())
    s.item("capabilities", "What the results show", ev.capabilities_text(rec))
    s.item("contamination", "Overlap of the evaluation texts with the training data", ev.contamination_text(rec))
    cols = ev.columns(rec)
    s.add(Table("evaluation", "Results per language at the latest checkpoint evaluated, each with its standard error and "
                "the documents or examples behind it", cols, ev.rows(rec), numeric=tuple(range(1, len(cols)))))


def _systemic(doc: Document, rec: Records, why: str) -> None:
    s2 = doc.section("2", "Section 2: additional information for models with systemic risk")
    s2.text(f"Applies because {why}.")
    ev = s2.section("2.1", "Evaluation strategies and results")
    ev.item("evaluation_strategy", "Evaluation strategies, criteria and methodologies", rec.setting("systemic_risk.evaluation_strategy"))
    ev.text("The results of the evaluation are in section 1.3.")
    adv = s2.section("2.2", "Adversarial testing, model adaptations (alignment, fine-tuning)")
    adv.item("adversarial_testing", "Adversarial testing", rec.setting("systemic_risk.adversarial_testing"))
    adv.item("model_adaptations", "Model adaptations", rec.setting("systemic_risk.model_adaptations"))
    s2.section("2.3", "System architecture").item("system_architecture", "How software components build or feed into each other",
                                                  rec.setting("systemic_risk.system_architecture"))
