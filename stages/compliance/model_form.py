"""The Code of Practice's Model Documentation Form (Transparency chapter, 10 July 2025) as JSON, with its schema.

Why JSON: the form is kept up to date and handed to the AI Office, authorities and downstream providers; a
machine-checkable file lets them (and us) validate it. The schema below is the project's: one property per
field of the form, grouped as the form groups them; a value nothing provides is null (and an open item). The
form is also rendered as a document (markdown/HTML) from the same facts, so the JSON and the page agree.

Item ids are JSON paths: the item "general.provider_legal_name" is `form["general"]["provider_legal_name"]`.
"""

from __future__ import annotations

from typing import Any

from stages.compliance import model_facts as mf
from stages.compliance import training_data as td
from stages.compliance.compute import compute_facts, energy_fact, inference_fact, training_time_facts
from stages.compliance.document import Document, Item
from stages.compliance.facts import Fact, Records, derive
from stages.compliance.numbers import PARAMETER_BINS, TRAINING_TIME_RANGES, order_of_magnitude, sig2
from stages.compliance.summary import dependencies, versioned_name

DOC_ID = "model_documentation_form"
FORM_NAME = "Model Documentation Form (GPAI Code of Practice, Transparency chapter, 10 July 2025)"
SCHEMA_ID = "https://europa.invalid/schemas/model_documentation_form/v1"
SCHEMA_VERSION = 1

_STR = {"type": ["string", "null"]}
_STRS = {"type": ["array", "null"], "items": {"type": "string"}}
_INT = {"type": ["integer", "null"], "minimum": 0}
_NUM = {"type": ["number", "null"], "minimum": 0}
_BOOL = {"type": ["boolean", "null"]}
_DATE = {"type": ["string", "null"], "pattern": r"^\d{4}-\d{2}-\d{2}$"}
_SIG2 = {"type": ["string", "null"], "pattern": r"^\d\.\de-?\d+$"}


def _enum(values) -> dict[str, Any]:
    return {"enum": [*values, None]}


# section -> field -> schema. The order is the form's order and the JSON's.
FIELDS: dict[str, dict[str, dict[str, Any]]] = {
    "general": {
        "provider_legal_name": _STR, "model_name": _STR, "model_version": _STR, "authenticity_sha256": {"type": ["string", "null"], "pattern": "^[0-9a-f]{64}$"},
        "release_date": _DATE, "eu_market_date": _DATE, "dependencies": _STRS,
    },
    "model_properties": {
        "architecture": _STR, "design_specifications": _STR, "input_modalities": _STRS, "input_max_tokens": _INT,
        "output_modalities": _STRS, "output_max_tokens": _INT, "total_parameters": _INT, "total_parameters_two_significant": _SIG2,
        "parameter_size_range": _enum(label for _, label in PARAMETER_BINS), "active_parameters": _INT,
    },
    "distribution": {"distribution_channels": _STRS, "licence": _STR},
    "use": {
        "acceptable_use_policy": _STR, "intended_uses": _STRS, "restricted_uses": _STRS, "ai_system_types": _STRS,
        "integration_means": _STR, "required_hardware": _STR, "required_software": _STR,
    },
    "training_process": {"design_and_rationale": _STR, "objective": _STR},
    "training_data": {
        "modalities": _STRS,
        "provenance": {"type": ["object", "null"], "additionalProperties": False,
                       "required": ["web_crawling", "private_third_party", "user_data", "publicly_available_datasets",
                                    "synthetic_non_public", "other"],
                       "properties": {k: {"type": "boolean"} for k in ("web_crawling", "private_third_party", "user_data",
                                                                         "publicly_available_datasets", "synthetic_non_public", "other")}},
        "obtained_and_selected": _STR,
        "data_points": {"type": ["object", "null"], "additionalProperties": False, "required": ["documents", "train_tokens", "validation_tokens"],
                        "properties": {k: {"type": "integer", "minimum": 0} for k in ("documents", "train_tokens", "validation_tokens")}},
        "scope_and_characteristics": _STR, "curation_methods": _STR, "unsuitability_detection": _STR, "bias_detection": _STR,
    },
    "computational_resources": {
        "training_time_range": _enum(TRAINING_TIME_RANGES), "training_time_days": _NUM, "hardware_days": _NUM,
        "training_flops": _NUM, "training_flops_two_significant": _SIG2, "training_flops_order_of_magnitude": {"type": ["integer", "null"]},
        "method": _STR,
    },
    "energy": {"training_energy_mwh": _NUM, "training_energy_mwh_two_significant": _SIG2, "measured_or_estimated": _enum(["estimated", "measured"]),
               "method": _STR},
    "inference": {"benchmarked_task": _STR, "flops": _NUM, "method": _STR},
}
SECTION_TITLES = {
    "general": "General information", "model_properties": "Model properties", "distribution": "Methods of distribution and licences",
    "use": "Use", "training_process": "Training process", "training_data": "Information on the data used for training, testing and validation",
    "computational_resources": "Computational resources (training)", "energy": "Energy consumption (training)",
    "inference": "Inference compute",
}


def schema() -> dict[str, Any]:
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": SCHEMA_ID,
        "title": FORM_NAME,
        "type": "object",
        "additionalProperties": False,
        "required": ["form", "schema_version", *FIELDS],
        "properties": {
            "form": {"const": FORM_NAME},
            "schema_version": {"const": SCHEMA_VERSION},
            **{section: {"type": "object", "additionalProperties": False, "required": list(fields), "properties": fields}
               for section, fields in FIELDS.items()},
        },
    }


def _same(fact: Fact, fmt=None) -> Fact:
    return fact if fmt is None else derive(lambda v: v, fact, method=fact.method, fmt=fmt)


def _facts(rec: Records) -> dict[str, dict[str, tuple[str, Fact]]]:
    """section -> field -> (label, fact); each fact's value is the JSON value."""
    comp, time = compute_facts(rec), training_time_facts(rec)
    ctx = mf.context_length(rec)
    text = td.modality()
    texts = derive(lambda m: [m], text, method="", fmt=lambda v: ", ".join(v))
    categories = td.sources_fact(rec)

    def provenance(ps: dict) -> dict[str, bool]:
        cats = {r.get("category") for r in ps.values()}
        return {"web_crawling": "crawled" in cats, "private_third_party": bool(cats & {"private_licensed", "private_third_party"}),
                "user_data": "user_data" in cats, "publicly_available_datasets": "public_dataset" in cats,
                "synthetic_non_public": "synthetic" in cats, "other": "other" in cats}

    energy = energy_fact(rec)
    return {
        "general": {
            "provider_legal_name": ("Provider's legal name", rec.setting("provider.name")),
            "model_name": ("Model name", versioned_name(rec)),
            "model_version": ("Model version", rec.setting("model.version")),
            "authenticity_sha256": ("Model authenticity (sha256 of the released checkpoint)", rec.pretrain.checkpoint.sha256.fact()),
            "release_date": ("Release date", rec.setting("model.release_date")),
            "eu_market_date": ("Union market release date", rec.setting("model.eu_market_date")),
            "dependencies": ("Model dependencies", dependencies(rec)),
        },
        "model_properties": {
            "architecture": ("Architecture (about 20 words)", mf.architecture_summary(rec)),
            "design_specifications": ("Design specifications (about 100 words)", rec.setting("model.design_rationale")),
            "input_modalities": ("Input modalities", texts),
            "input_max_tokens": ("Maximum input size (tokens)", ctx),
            "output_modalities": ("Output modalities", texts),
            "output_max_tokens": ("Maximum output size (tokens, shared context window)", ctx),
            "total_parameters": ("Total parameters", mf.total_params(rec)),
            "total_parameters_two_significant": ("Total parameters, two significant figures",
                                                 derive(sig2, mf.total_params(rec), method="decimal half-up", fmt=str)),
            "parameter_size_range": ("Parameter size range", mf.size_bin(rec)),
            "active_parameters": ("Active parameters per token (MoE)", mf.active_params(rec)),
        },
        "distribution": {
            "distribution_channels": ("Distribution channels", rec.setting("model.distribution_channels")),
            "licence": ("Licence", rec.setting("model.licence")),
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
            "design_and_rationale": ("Training process: design and methodology", mf.training_design(rec)),
            "objective": ("Training objective", mf.objective()),
        },
        "training_data": {
            "modalities": ("Data modalities", texts),
            "provenance": ("Data provenance", derive(provenance, categories, method="ingest per-source categories",
                                                      fmt=lambda p: ", ".join(k.replace("_", " ") for k, v in p.items() if v) or "none")),
            "obtained_and_selected": ("How the data was obtained and selected", td.selection_text(rec)),
            "data_points": ("Number of data points", td.data_points(rec)),
            "scope_and_characteristics": ("Scope and main characteristics", td.language_mix_text(rec)),
            "curation_methods": ("Data curation methods", td.curation_text(rec)),
            "unsuitability_detection": ("Measures to detect unsuitable data sources", td.unsuitable_measures(rec)),
            "bias_detection": ("Methods to detect identifiable biases", td.bias_measures(rec)),
        },
        "computational_resources": {
            "training_time_range": ("Training time range", time["range"]),
            "training_time_days": ("Training time (wall-clock days)", time["wall_days"]),
            "hardware_days": ("Training time (hardware-days)", time["hardware_days"]),
            "training_flops": ("Training compute (FLOP)", comp.training),
            "training_flops_two_significant": ("Training compute, two significant figures", derive(sig2, comp.training, method="decimal half-up", fmt=str)),
            "training_flops_order_of_magnitude": ("Training compute, order of magnitude", derive(order_of_magnitude, comp.training,
                                                                                                  method="power of ten", fmt=lambda e: f"10^{e}")),
            "method": ("Compute estimation method", derive(lambda a, h, used: f"architecture-based: {a}; hardware-based: {h}; reported: {used}",
                                                             comp.method_analytic, comp.method_hardware,
                                                             derive(lambda v: comp.training.method, comp.training, method=""), method="", fmt=str)),
        },
        "energy": {
            "training_energy_mwh": ("Training energy (MWh)", energy),
            "training_energy_mwh_two_significant": ("Training energy, two significant figures (MWh)", derive(sig2, energy, method="decimal half-up", fmt=str)),
            "measured_or_estimated": ("Measured or estimated", derive(lambda e: "estimated", energy, method="computed from device-hours and stated power", fmt=str)),
            "method": ("Energy estimation method", derive(lambda b: f"device-hours x watts per device x PUE; power figures: {b}",
                                                            rec.setting("energy.basis"), method="", fmt=str)),
        },
        "inference": {
            "benchmarked_task": ("Benchmarked task", rec.setting("inference.task")),
            "flops": ("Inference compute for the task (FLOP)", inference_fact(rec)),
            "method": ("Inference compute method", derive(lambda t: "forward pass = 1/3 of the training FLOPs per token (2N of 6N), "
                                                                   f"times the task's {t:,} tokens", rec.setting("inference.tokens"),
                                                          method="", fmt=str)),
        },
    }


def build(rec: Records) -> Document:
    doc = Document(DOC_ID, "Model Documentation Form",
                   f"{FORM_NAME}; also as model_documentation_form.json (schema: model_documentation_form.schema.json).")
    for section, fields in _facts(rec).items():
        s = doc.section(section, SECTION_TITLES[section])
        for key in FIELDS[section]:
            label, fact = fields[key]
            s.item(key, label, fact)
    return doc


def to_json(doc: Document) -> dict[str, Any]:
    """The form as JSON: open values are null (they are listed in open_items.md)."""
    out: dict[str, Any] = {"form": FORM_NAME, "schema_version": SCHEMA_VERSION}
    for s in doc.sections:
        out[s.id] = {b.key: b.fact.value for b in s.blocks if isinstance(b, Item)}
    return out


def validate(form: dict[str, Any]) -> list[str]:
    """Schema problems as 'path: message' lines (empty when the form is valid)."""
    import jsonschema

    validator = jsonschema.Draft202012Validator(schema())
    return [f"{'/'.join(map(str, e.absolute_path)) or '(root)'}: {e.message}"
            for e in sorted(validator.iter_errors(form), key=lambda e: list(map(str, e.absolute_path)))]
