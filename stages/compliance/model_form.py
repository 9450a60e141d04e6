"""The Code of Practice's Model Documentation Form (Transparency chapter, 10 July 2025) as JSON, with its schema,
and the extract for downstream providers as a document of its own.

Why JSON: the form is kept up to date and handed to the AI Office, authorities and downstream providers; a
machine-checkable file lets them (and us) validate it. The schema below is the project's: one property per field
of the form, grouped as the form groups them; a value nothing provides is null (and an open item).

Recipients: the form marks every item for the AI Office (AIO), the national competent authorities (NCAs) and/or
downstream providers (DPs); `FIELDS` carries the marks and the JSON repeats them under "recipients". Pinned from
the final form (../shared/notes/eu-ai-act.md): energy, training compute and inference compute go to the AIO and
NCAs only; some items are split between recipients: distribution channels (all channels for the authorities,
those open to downstream providers for them), training time (a range for NCAs, wall-clock days and
hardware-days for the AIO), training compute (order of magnitude for NCAs, two significant figures for the AIO)
and the number of data points (exact for the AIO, order of magnitude for NCAs). The other items are marked as
the form marks the general items, for all three, except what only Annex XI asks (decision rationale, how data was
obtained and selected, unsuitability and bias detection): AIO and NCAs. Check the marks against the form before
filing if it is republished.

Item ids are JSON paths: the item "general.provider_legal_name" is `form["general"]["provider_legal_name"]`.
"""

from __future__ import annotations

from typing import Any

from stages.compliance import model_facts as mf
from stages.compliance import training_data as td
from stages.compliance.compute import compute_facts, energy_fact, inference_fact, training_time_facts
from stages.compliance.document import RECIPIENTS, Document, Item
from stages.compliance.facts import Fact, Records, constant, derive
from stages.compliance.numbers import PARAMETER_BINS, TRAINING_TIME_RANGES, order_of_magnitude, sig2
from stages.compliance.summary import dependencies, versioned_name

DOC_ID = "model_documentation_form"
DOWNSTREAM_DOC_ID = "model_documentation_downstream_providers"
FORM_NAME = "Model Documentation Form (GPAI Code of Practice, Transparency chapter, 10 July 2025)"
SCHEMA_ID = "https://europa.invalid/schemas/model_documentation_form/v2"
SCHEMA_VERSION = 2

ALL = RECIPIENTS
AUTH = ("AIO", "NCAs")
AIO, NCA, DP = ("AIO",), ("NCAs",), ("DPs",)

_STR = {"type": ["string", "null"]}
_STRS = {"type": ["array", "null"], "items": {"type": "string"}}
_INT = {"type": ["integer", "null"], "minimum": 0}
_NUM = {"type": ["number", "null"], "minimum": 0}
_BOOL = {"type": ["boolean", "null"]}
_SIG2 = {"type": ["string", "null"], "pattern": r"^\d\.\de-?\d+$"}
_DATE_OR = lambda *words: {"anyOf": [{"type": "string", "pattern": r"^\d{4}-\d{2}-\d{2}$"}, {"enum": [*words, None]}]}  # noqa: E731
_NA = lambda schema: {"anyOf": [schema, {"const": "N/A"}]}  # noqa: E731
_FILES = {"type": ["object", "null"], "additionalProperties": False, "required": ["algorithm", "method", "files"],
          "properties": {"algorithm": {"const": "sha256"}, "method": {"type": "string"},
                         "files": {"type": "array", "items": {"type": "object", "additionalProperties": False,
                                                              "required": ["path", "sha256", "bytes"],
                                                              "properties": {"path": {"type": "string"},
                                                                             "sha256": {"type": "string", "pattern": "^[0-9a-f]{64}$"},
                                                                             "bytes": {"type": "integer", "minimum": 0}}}}}}


def _enum(values) -> dict[str, Any]:
    return {"enum": [*values, None]}


_BINS = _enum(label for _, label in PARAMETER_BINS)

# section -> field -> (schema, recipients). The order is the form's order and the JSON's.
FIELDS: dict[str, dict[str, tuple[dict[str, Any], tuple[str, ...]]]] = {
    "document": {"date": ({"type": ["string", "null"], "pattern": r"^\d{4}-\d{2}-\d{2}$"}, ALL), "version": (_STR, ALL)},
    "general": {
        "provider_legal_name": (_STR, ALL), "model_name": (_STR, ALL), "model_version": (_STR, ALL),
        "authenticity": (_FILES, ALL), "release_date": (_DATE_OR("not released"), ALL),
        "eu_market_date": (_DATE_OR("not placed on the Union market"), ALL), "dependencies": (_STRS, ALL),
    },
    "model_properties": {
        "architecture": (_STR, ALL), "design_specifications": (_STR, ALL), "input_modalities": (_STRS, ALL),
        "input_max_tokens": (_INT, ALL), "output_modalities": (_STRS, ALL), "output_max_tokens": (_INT, ALL),
        "total_parameters": (_INT, ALL), "total_parameters_two_significant": (_SIG2, ALL), "parameter_size_range": (_BINS, ALL),
        "active_parameters": (_INT, ALL), "active_parameter_size_range": (_BINS, ALL),
    },
    "distribution": {"distribution_channels": (_STRS, AUTH), "downstream_distribution_channels": (_STRS, DP),
                     "licence": (_STR, ALL), "licence_category": (_STR, ALL)},
    "use": {
        "acceptable_use_policy": (_STR, ALL), "intended_uses": (_STRS, ALL), "restricted_uses": (_STRS, ALL),
        "ai_system_types": (_STRS, ALL), "integration_means": (_STR, ALL), "required_hardware": (_STR, ALL),
        "required_software": (_STR, ALL),
    },
    "training_process": {"design_specifications": (_STR, ALL), "decision_rationale": (_STR, AUTH), "objective": (_STR, ALL)},
    "training_data": {
        "modalities": (_STRS, ALL),
        "provenance": ({"type": ["object", "null"], "additionalProperties": False,
                        "required": ["web_crawling", "private_third_party", "user_data", "publicly_available_datasets",
                                     "synthetic_non_public", "other"],
                        "properties": {k: {"type": "boolean"} for k in ("web_crawling", "private_third_party", "user_data",
                                                                          "publicly_available_datasets", "synthetic_non_public", "other")}}, ALL),
        "obtained_and_selected": (_STR, AUTH),
        "data_points": ({"type": ["object", "null"], "additionalProperties": False, "required": ["documents", "train_tokens", "validation_tokens"],
                         "properties": {k: {"type": "integer", "minimum": 0} for k in ("documents", "train_tokens", "validation_tokens")}}, AIO),
        "data_points_order_of_magnitude": ({"type": ["integer", "null"]}, NCA),
        "scope_and_characteristics": (_STR, ALL), "curation_methods": (_STR, ALL), "unsuitability_detection": (_STR, AUTH),
        "bias_detection": (_STR, AUTH),
    },
    "computational_resources": {
        "training_time_range": (_enum(TRAINING_TIME_RANGES), NCA), "training_time_days": (_NUM, AIO), "hardware_days": (_NUM, AIO),
        "training_flops": (_NUM, AIO), "training_flops_two_significant": (_SIG2, AIO),
        "training_flops_order_of_magnitude": ({"type": ["integer", "null"]}, NCA), "method": (_STR, AUTH),
        "uncertainty": (_STR, AUTH), "counted_flops_check": (_NUM, AUTH), "hardware_bound_flops": (_NUM, AUTH),
        "implied_utilisation": (_NUM, AUTH),
    },
    "energy": {"training_energy_mwh": (_NA(_NUM), AUTH), "training_energy_mwh_two_significant": (_NA(_SIG2), AUTH),
               "measured_or_estimated": (_enum(["estimated", "measured", "N/A"]), AUTH), "method": (_STR, AUTH)},
    "inference": {"benchmarked_task": (_STR, AUTH), "hardware": (_STR, AUTH), "flops": (_NUM, AUTH),
                  "flops_two_significant": (_SIG2, AUTH), "method": (_STR, AUTH)},
}
SECTION_TITLES = {
    "document": "Document", "general": "General information", "model_properties": "Model properties",
    "distribution": "Methods of distribution and licences", "use": "Use", "training_process": "Training process",
    "training_data": "Information on the data used for training, testing and validation",
    "computational_resources": "Computational resources (training)", "energy": "Energy consumption (training)",
    "inference": "Computational resources (inference)",
}


def schema() -> dict[str, Any]:
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": SCHEMA_ID,
        "title": FORM_NAME,
        "type": "object",
        "additionalProperties": False,
        "required": ["form", "schema_version", "recipients", *FIELDS],
        "properties": {
            "form": {"const": FORM_NAME},
            "schema_version": {"const": SCHEMA_VERSION},
            "recipients": {"const": recipients()},
            **{section: {"type": "object", "additionalProperties": False, "required": list(fields),
                         "properties": {k: sch for k, (sch, _) in fields.items()}}
               for section, fields in FIELDS.items()},
        },
    }


def recipients() -> dict[str, dict[str, list[str]]]:
    return {section: {k: list(r) for k, (_, r) in fields.items()} for section, fields in FIELDS.items()}


def _sig2_or_na(fact: Fact) -> Fact:
    if fact.value == "N/A":
        return fact
    return derive(sig2, fact, method="decimal half-up", fmt=str)


def _facts(rec: Records) -> dict[str, dict[str, tuple[str, Fact]]]:
    """section -> field -> (label, fact); each fact's value is the JSON value."""
    comp, time = compute_facts(rec), training_time_facts(rec)
    ctx = mf.context_length(rec)
    texts = derive(lambda m: [m], td.modality(), method="", fmt=lambda v: ", ".join(v))
    categories = td.sources_fact(rec)

    def provenance(ps: dict) -> dict[str, bool]:
        cats = {r.get("category") for r in ps.values()}
        return {"web_crawling": "crawled" in cats, "private_third_party": bool(cats & {"private_licensed", "private_third_party"}),
                "user_data": "user_data" in cats, "publicly_available_datasets": "public_dataset" in cats,
                "synthetic_non_public": "synthetic" in cats, "other": "other" in cats}

    released = mf.released_files(rec)
    authenticity = derive(lambda files: {"algorithm": "sha256", "method": mf.DIGEST_METHOD,
                                         "files": [{"path": f["path"], "sha256": f["sha256"], "bytes": f["bytes"]} for f in files]},
                          released, method=released.method, fmt=lambda a: f"sha256 of each of {len(a['files'])} released files "
                                                                           f"(listed in {mf.SHA256_FILE}; verify with sha256sum -c)")
    energy = energy_fact(rec)
    inference = inference_fact(rec)
    data_points = td.data_points(rec)
    return {
        "document": {
            "date": ("Document date (date of the newest record)", rec.newest_record_date()),
            "version": ("Document version", rec.setting("documentation_version")),
        },
        "general": {
            "provider_legal_name": ("Provider's legal name", rec.setting("provider.name")),
            "model_name": ("Model name", versioned_name(rec)),
            "model_version": ("Model version", rec.setting("model.version")),
            "authenticity": ("Model authenticity", authenticity),
            "release_date": ("Release date", mf.release_date(rec)),
            "eu_market_date": ("Union market release date", mf.release_date(rec, "model.eu_market_date")),
            "dependencies": ("Model dependencies", dependencies(rec)),
        },
        "model_properties": {
            "architecture": ("Architecture (about 20 words)", mf.architecture_summary(rec)),
            "design_specifications": ("Design specifications of the model (about 100 words)", rec.setting("model.design_rationale")),
            "input_modalities": ("Input modalities", texts),
            "input_max_tokens": ("Maximum input size (tokens)", ctx),
            "output_modalities": ("Output modalities", texts),
            "output_max_tokens": ("Maximum output size (tokens, shared context window)", ctx),
            "total_parameters": ("Total parameters", mf.total_params(rec)),
            "total_parameters_two_significant": ("Total parameters, two significant figures",
                                                 derive(sig2, mf.total_params(rec), method="decimal half-up", fmt=str)),
            "parameter_size_range": ("Total model size range", mf.size_bin(rec)),
            "active_parameters": ("Active parameters per token (MoE)", mf.active_params(rec)),
            "active_parameter_size_range": ("Active parameters size range (MoE)", mf.active_size_bin(rec)),
        },
        "distribution": {
            "distribution_channels": ("Distribution channels", rec.setting("model.distribution_channels")),
            "downstream_distribution_channels": ("Distribution channels for downstream providers", rec.setting("model.downstream_channels")),
            "licence": ("Licence", rec.setting("model.licence")),
            "licence_category": ("Licence category", rec.setting("model.licence_category")),
        },
        "use": {
            "acceptable_use_policy": ("Acceptable use policy", rec.setting("model.acceptable_use_policy")),
            "intended_uses": ("Intended uses", rec.setting("model.intended_uses")),
            "restricted_uses": ("Restricted or prohibited uses", rec.setting("model.restricted_uses")),
            "ai_system_types": ("Type and nature of AI systems", rec.setting("model.ai_system_types")),
            "integration_means": ("Technical means for integration", rec.setting("model.integration_means")),
            "required_hardware": ("Required hardware", rec.setting("model.required_hardware")),
            "required_software": ("Required software", mf.software(rec)),
        },
        "training_process": {
            "design_specifications": ("Design specifications of the training process", mf.training_design(rec)),
            "decision_rationale": ("Decision rationale", rec.setting("model.training_rationale")),
            "objective": ("Training objective", mf.objective()),
        },
        "training_data": {
            "modalities": ("Data modalities", texts),
            "provenance": ("Data provenance", derive(provenance, categories, method="ingest per-source categories",
                                                      fmt=lambda p: ", ".join(k.replace("_", " ") for k, v in p.items() if v) or "none")),
            "obtained_and_selected": ("How the data was obtained and selected", td.selection_text(rec)),
            "data_points": ("Number of data points", data_points),
            "data_points_order_of_magnitude": ("Number of data points, order of magnitude (training tokens)",
                                               derive(lambda d: order_of_magnitude(d["train_tokens"]), data_points,
                                                      method="power of ten of the training tokens", fmt=lambda e: f"10^{e} tokens")),
            "scope_and_characteristics": ("Scope and main characteristics", td.language_mix_text(rec)),
            "curation_methods": ("Data curation methods", td.curation_text(rec)),
            "unsuitability_detection": ("Measures to detect unsuitable data sources", td.unsuitable_measures(rec)),
            "bias_detection": ("Methods to detect identifiable biases", td.bias_measures(rec)),
        },
        "computational_resources": {
            "training_time_range": ("Training time range", time["range"]),
            "training_time_days": ("Training time (wall-clock days)", time["wall_days"]),
            "hardware_days": ("Training time (hardware-days)", time["hardware_days"]),
            "training_flops": ("Training compute (FLOP), architecture-based", comp.training),
            "training_flops_two_significant": ("Training compute, two significant figures", derive(sig2, comp.training, method="decimal half-up", fmt=str)),
            "training_flops_order_of_magnitude": ("Training compute, order of magnitude", derive(order_of_magnitude, comp.training,
                                                                                                  method="power of ten", fmt=lambda e: f"10^{e}")),
            "method": ("Compute estimation method", comp.method_analytic),
            "uncertainty": ("Uncertainty of the estimate", comp.uncertainty_analytic),
            "counted_flops_check": ("Check: operations counted in one training step x steps", comp.counted),
            "hardware_bound_flops": ("Bound: devices x seconds x peak theoretical FLOP/s", comp.bound),
            "implied_utilisation": ("Utilisation implied by the estimate and the bound", comp.utilisation),
        },
        "energy": {
            "training_energy_mwh": ("Training energy (MWh)", energy),
            "training_energy_mwh_two_significant": ("Training energy, two significant figures (MWh)", _sig2_or_na(energy)),
            "measured_or_estimated": ("Measured or estimated", derive(lambda e: "N/A" if e == "N/A" else "estimated", energy,
                                                                       method="computed from device-hours and stated power", fmt=str)),
            "method": ("Energy estimation method", energy_method(rec)),
        },
        "inference": {
            "benchmarked_task": ("Benchmarked task", rec.setting("inference.task")),
            "hardware": ("Hardware the figure refers to", rec.setting("inference.hardware")),
            "flops": ("Inference compute for the task (FLOP)", inference),
            "flops_two_significant": ("Inference compute, two significant figures", derive(sig2, inference, method="decimal half-up", fmt=str)),
            "method": ("Inference compute method", derive(lambda t: "estimated, not measured: a forward pass is 1/3 of the training "
                                                                   f"FLOPs per token (2N of 6N), times the task's {t:,} tokens",
                                                          rec.setting("inference.tokens"), method="", fmt=str)),
        },
    }


def energy_method(rec: Records) -> Fact:
    if rec.settings.energy.not_available is not None:
        return constant("N/A", "N/A: the energy is declared not available", source="run config [compliance.energy] not_available")
    return derive(lambda b: f"device-hours x watts per device x PUE; power figures: {b}", rec.setting("energy.basis"), method="", fmt=str)


def build(rec: Records) -> Document:
    doc = Document(DOC_ID, "Model Documentation Form",
                   f"{FORM_NAME}; also as model_documentation_form.json (schema: model_documentation_form.schema.json). "
                   "Each item is marked for the AI Office (AIO), national competent authorities (NCAs) and/or downstream "
                   "providers (DPs), as the form marks it.")
    for section, fields in _facts(rec).items():
        s = doc.section(section, SECTION_TITLES[section])
        for key, (_, recips) in FIELDS[section].items():
            label, fact = fields[key]
            s.item(key, label, fact, recips)
    return doc


def build_downstream(rec: Records) -> Document:
    """The items of the form marked for downstream providers (Measure 1.2 of the Transparency chapter)."""
    doc = Document(DOWNSTREAM_DOC_ID, "Model documentation for downstream providers",
                   f"The items of the {FORM_NAME} marked for downstream providers (DPs); the full form is for the AI Office "
                   "and national competent authorities.")
    for section, fields in _facts(rec).items():
        keys = [k for k, (_, r) in FIELDS[section].items() if "DPs" in r]
        if keys:
            s = doc.section(section, SECTION_TITLES[section])
            for key in keys:
                label, fact = fields[key]
                s.item(key, label, fact)
    return doc


def to_json(doc: Document) -> dict[str, Any]:
    """The form as JSON: open values are null (they are listed in open_items.md)."""
    out: dict[str, Any] = {"form": FORM_NAME, "schema_version": SCHEMA_VERSION, "recipients": recipients()}
    for s in doc.sections:
        out[s.id] = {b.key: b.fact.value for b in s.blocks if isinstance(b, Item)}
    return out


def validate(form: dict[str, Any]) -> list[str]:
    """Schema problems as 'path: message' lines (empty when the form is valid)."""
    import jsonschema

    validator = jsonschema.Draft202012Validator(schema())
    return [f"{'/'.join(map(str, e.absolute_path)) or '(root)'}: {e.message}"
            for e in sorted(validator.iter_errors(form), key=lambda e: list(map(str, e.absolute_path)))]
