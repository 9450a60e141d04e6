"""The model card (README.md in the Hugging Face Hub's format) of an exported checkpoint, written from the run's
records: what a downloader needs to know about the model, with every figure from a manifest, never typed in.

Hub format: a YAML front matter (language, license, library_name, pipeline_tag, tags, model-index with the
evaluation results) and a markdown body. Sources, each read through `pipeline.records.load_record` (so a
renamed field fails loudly instead of printing nothing):
- architecture and parameter counts: the flavor (europa_model/flavors.py, as trained) and the pretrain record;
- languages and data: the ingest record (documents and bytes kept per language and source) and the shards
  record (training tokens per language, the mixture weights);
- evaluation: the evaluate record (bits per byte per set and language, downstream task accuracies with their
  standard errors), with the step it was measured at (which may differ from the exported step: said so);
- licence, name and version: the `[compliance.model]` declarations, the same the EU AI Act documents use;
- the EU AI Act documents: a link to <run>/compliance/ and the documents its record lists.
A record that is absent (a stage not run yet) becomes a sentence saying so and the command that provides it.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from pipeline.config import PipelineConfig
from pipeline.languages import language
from pipeline.records import load_record
from pipeline.rundir import RunDir

# SPDX ids the Hub accepts as `license:` values (lower case); anything else is `other` + license_name.
HUB_LICENSES = {"apache-2.0", "mit", "bsd-3-clause", "cc-by-4.0", "cc-by-sa-4.0", "cc-by-nc-4.0", "openrail",
                "llama3", "gemma", "gpl-3.0", "lgpl-3.0", "mpl-2.0", "cc0-1.0", "unlicense", "eupl-1.2"}


def _record(rd: RunDir, stage: str):
    manifest = rd.manifest(stage)
    return None if manifest is None else load_record(rd, stage, manifest, "export")


def hub_license(declared: str | None) -> dict[str, str]:
    """The front matter's licence keys for a declared licence ("Apache-2.0", "Apache-2.0 (demo)", a URL...)."""
    if not declared:
        return {"license": "other", "license_name": "not declared ([compliance.model] licence)"}
    head = re.split(r"[\s(;,]", declared.strip(), maxsplit=1)[0].lower()
    if head in HUB_LICENSES and declared.strip().lower() == head:
        return {"license": head}
    out = {"license": "other", "license_name": declared.strip()}
    if head in HUB_LICENSES:
        out["license_name"] = f"{declared.strip()} (as declared; SPDX {head})"
    return out


def _yaml_scalar(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    s = str(v)
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _yaml(value: Any, indent: int = 0) -> list[str]:
    """A small YAML emitter for the front matter (dicts, lists, scalars): no dependency for 40 lines of YAML."""
    pad = " " * indent
    lines: list[str] = []
    if isinstance(value, dict):
        for k, v in value.items():
            if isinstance(v, (dict, list)) and v:
                lines.append(f"{pad}{k}:")
                lines += _yaml(v, indent + 2)
            else:
                lines.append(f"{pad}{k}: {_yaml_scalar(v) if not isinstance(v, (dict, list)) else '[]'}")
    elif isinstance(value, list):
        for item in value:
            if isinstance(item, dict):
                sub = _yaml(item, indent + 2)
                lines.append(f"{pad}- {sub[0].lstrip()}")
                lines += sub[1:]
            else:
                lines.append(f"{pad}- {_yaml_scalar(item)}")
    return lines


def model_card(rd: RunDir, config: PipelineConfig, *, step: int, flavor: str, vocab_size: int, dtype: str,
               known_differences: list[str], training_in_progress: bool) -> str:
    from europa_model.flavors import FLAVORS, count_parameters

    f = FLAVORS[flavor]
    counts = count_parameters(flavor, vocab_size)
    declared = config.stages.get("compliance")
    model_decl = getattr(declared, "model", None)
    name = getattr(model_decl, "name", None) or config.run.name
    version = getattr(model_decl, "version", None)
    licence = getattr(model_decl, "licence", None)
    ingest, shards, pretrain, evaluate, compliance = (_record(rd, s) for s in
                                                      ("ingest", "shards", "pretrain", "evaluate", "compliance"))
    languages = list(config.run.languages)

    front: dict[str, Any] = {"language": languages, **hub_license(licence), "library_name": "transformers",
                             "pipeline_tag": "text-generation",
                             "tags": ["europa", "mixture-of-experts", "deepseek_v3", "multilingual", "eu-languages"]}
    results = _model_index_results(evaluate)
    if results:
        front["model-index"] = [{"name": name, "results": results}]

    body = [f"# {name}" + (f" {version}" if version else ""), ""]
    body += [f"A decoder-only Mixture-of-Experts language model for the {len(languages)} languages below, trained with "
             f"the EUROPA pipeline (torchtitan) and exported from checkpoint step {step:,} of run `{rd.path.name}` "
             f"as a transformers `DeepseekV3ForCausalLM` ({dtype} weights)."
             + (" **Training was still running when this checkpoint was exported.**" if training_in_progress else ""), ""]
    body += ["## Model", "", "| | |", "|---|---|",
             f"| flavor | {flavor} |",
             f"| architecture | {pretrain.model.architecture if pretrain else _architecture(f)} |",
             f"| parameters (total) | {counts['total']:,} |",
             f"| parameters (active per token) | {counts['active']:,} |",
             f"| layers | {f.n_layers} ({f.n_dense_layers} dense, {f.n_layers - f.n_dense_layers} MoE) |",
             f"| routed experts | {f.num_experts}, top-{f.top_k}, + {f.num_shared_experts} shared |",
             f"| hidden size | {f.dim} |", f"| vocabulary | {vocab_size:,} (SentencePiece, byte fallback) |"]
    if pretrain is not None:
        t = pretrain.training
        body += [f"| context length (trained) | {t.seq_len:,} |",
                 f"| training tokens | {t.tokens_seen:,} ({t.steps:,} steps of {t.global_batch_size} x {t.seq_len}) |",
                 f"| training hardware | {t.device_count} x {t.device_name} ({t.device_hours:,.2f} device-hours) |",
                 f"| training compute | {pretrain.compute.architecture.flops:.3e} FLOPs (6 x active parameters x tokens + attention) |"]
    else:
        body.append("| training | not published yet (`europa stage pretrain` publishes the record) |")
    body.append("")

    body += ["## Languages and training data", ""]
    if ingest is None or shards is None:
        body += ["The data records are absent: run `europa run --to shards` to produce them.", ""]
    else:
        total = sum(s.train_tokens for s in shards.per_language.values()) or 1
        weights = {lang: v.weight for lang, v in shards.mixture.languages.items()}
        if pretrain is not None and total > 1:
            body += [f"Training saw {pretrain.training.tokens_seen:,} tokens: {pretrain.training.tokens_seen / total:.2f} "
                     f"passes over the {total:,} tokens of the training split, drawn by the mixture weights below "
                     "(the split tokens of a language, its share of the split, and the weight it was trained at).", ""]
        body += ["| language | documents kept | UTF-8 bytes kept | split tokens | share of the split | mixture weight |",
                 "|---|---|---|---|---|---|"]
        for lang in languages:
            ing = ingest.per_language.get(lang)
            sh = shards.per_language.get(lang)
            w = weights.get(lang)
            body.append(f"| {lang} ({language(lang).english_name}) | {ing.kept if ing else 0:,} | "
                        f"{ing.kept_bytes if ing else 0:,} | {sh.train_tokens if sh else 0:,} | "
                        f"{(sh.train_tokens if sh else 0) / total:.1%} | {'-' if w is None else f'{w:.3f}'} |")
        body += ["", "Sources:", ""]
        for src, s in ingest.per_source.items():
            body.append(f"- **{src}** ({s.category}; licence {s.licence or 'not recorded'}"
                        + (f"; collected {s.collected}" if s.collected else "") + f"): {s.counts.get('kept', 0):,} documents kept"
                        + (f", {s.homepage}" if s.homepage else ""))
        body += ["", f"{ingest.totals.kept:,} documents ({ingest.totals.kept_bytes:,} bytes) kept of {ingest.totals.docs_in:,} "
                     "read, after normalization, language identification, quality filters, PII redaction and "
                     "deduplication.", ""]

    body += ["## Evaluation", ""]
    body += _evaluation(evaluate, step)

    body += ["## Use", "", "```python", "from transformers import AutoModelForCausalLM, AutoTokenizer", "",
             'tok = AutoTokenizer.from_pretrained("<this folder>")',
             'model = AutoModelForCausalLM.from_pretrained("<this folder>")',
             "ids = [tok.bos_token_id] + tok.encode(\"Alle Menschen sind\", add_special_tokens=False)",
             "# the model was trained with BOS before every document and no other special tokens", "```", ""]
    if known_differences:
        body += ["How this export computes differently from the training code:", ""]
        body += [f"- {d}" for d in known_differences] + [""]

    body += ["## Licence", "", licence or "Not declared: set `[compliance.model] licence` in the run's configuration.", ""]
    body += ["## EU AI Act documentation", ""]
    if compliance is None:
        body += [f"Not generated yet: `europa stage compliance --run-dir {rd.path}` writes it to `{rd.stage_dir('compliance')}`.", ""]
    else:
        body += [f"The documentation of this run under the EU AI Act (Art. 53: technical documentation, information for "
                 f"downstream providers, the public summary of training content, the copyright policy) is in "
                 f"`{rd.stage_dir('compliance')}` (`index.html`: all documents on one page):", ""]
        body += [f"- `{Path(rd.stage_dir('compliance')) / name}`" for name in compliance.files if name.endswith((".md", ".html"))]
        if compliance.open_items:
            body += ["", f"{len(compliance.open_items)} item(s) are still open (`open_items.md`)."]
        body.append("")
    return "---\n" + "\n".join(_yaml(front)) + "\n---\n\n" + "\n".join(body).rstrip() + "\n"


def _architecture(f) -> str:
    return (f"decoder-only transformer, Mixture-of-Experts (DeepSeek-V3 / Kimi-K2 layers: MLA attention, {f.num_experts} "
            f"routed experts top-{f.top_k} + {f.num_shared_experts} shared, first {f.n_dense_layers} layers dense)")


def _evaluation(evaluate, step: int) -> list[str]:
    if evaluate is None:
        return ["Not evaluated yet (`europa stage evaluate` publishes the evaluation record).", ""]
    out = []
    if evaluate.latest_step != step:
        out += [f"Measured on checkpoint step {evaluate.latest_step:,} (this export is step {step:,}).", ""]
    cols = [(f"{s}_bits_per_byte", f"{s} bits/byte") for s in evaluate.eval_sets]
    for task in evaluate.tasks:
        cols.append((f"{task.name}_{task.metric}", f"{task.name} {task.metric}"))
    out += ["| language | " + " | ".join(c[1] for c in cols) + " |", "|---|" + "---|" * len(cols)]
    for lang, d in evaluate.per_language.items():
        cells = []
        for key, _ in cols:
            v = d.get(key)
            se = d.get(f"{key}_stderr")
            cells.append("-" if v is None else f"{v:.4f}" + (f" ± {se:.4f}" if se is not None else ""))
        out.append(f"| {lang} | " + " | ".join(cells) + " |")
    out += ["", f"Bits per byte: {evaluate.method}. Lower is better; ± is one standard error."]
    if evaluate.tasks:
        out.append("Downstream tasks: lm-evaluation-harness on this export (" + "; ".join(
            f"{t.name}: {t.metric}, {t.num_fewshot}-shot" for t in evaluate.tasks) + ").")
    return out + [""]


def _model_index_results(evaluate) -> list[dict[str, Any]]:
    if evaluate is None:
        return []
    results = []
    for s in evaluate.eval_sets:
        metrics = [{"type": "bits_per_byte", "name": f"bits per byte ({lang})", "value": round(d[f"{s}_bits_per_byte"], 4)}
                   for lang, d in evaluate.per_language.items() if f"{s}_bits_per_byte" in d]
        if metrics:
            results.append({"task": {"type": "text-generation", "name": "language modelling"},
                            "dataset": {"name": s, "type": s}, "metrics": metrics})
    for t in evaluate.tasks:
        metrics = [{"type": t.metric, "name": f"{t.metric} ({lang})", "value": round(d[f"{t.name}_{t.metric}"], 4)}
                   for lang, d in evaluate.per_language.items() if f"{t.name}_{t.metric}" in d]
        if metrics:
            results.append({"task": {"type": "multiple-choice", "name": t.name},
                            "dataset": {"name": t.name, "type": t.name}, "metrics": metrics})
    return results
