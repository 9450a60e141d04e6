"""Evidence and declarations told apart: every value of every document is measured (a record), declared (a config
key) or fixed (the code, the law), and no document cites a declaration's copy in a manifest as a record."""

from __future__ import annotations

import re
import typing

from pydantic import BaseModel

from pipeline.records import declared_in
from pipeline.registry import STAGE_NAMES, record_model
from pipeline.rundir import RunDir
from stages.compliance.facts import DECLARED, FIXED, MEASURED, source_kind
from stages.compliance.generate import generate


def _models_in(tp) -> list[tuple[str, type[BaseModel]]]:
    """(path suffix, model) for a field type: a model, a dict of models (<key>), a list of models ([])."""
    tp = typing.get_args(tp)[0] if typing.get_origin(tp) in (typing.Union, type(int | None)) and type(None) in typing.get_args(tp) else tp
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return [("", tp)]
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is dict and args:
        return [(r"\.[^.]+" + sub, m) for sub, m in _models_in(args[-1])]
    if origin is list and args:
        return [(r"(\.\d+)?" + sub, m) for sub, m in _models_in(args[0])]
    return []


def declared_field_patterns() -> dict[str, str]:
    """Regex of each declared record field's manifest path (and everything under it) -> the config key it copies."""
    out: dict[str, str] = {}

    def walk(stage: str, prefix: str, model: type[BaseModel]) -> None:
        for name, field in model.model_fields.items():
            path = f"{prefix}\\.{name}"
            if (key := declared_in(field)) is not None:
                out[f"^{stage}/manifest\\.json: {path}(\\..*)?$"] = key
                continue
            for sub, m in _models_in(field.annotation):
                walk(stage, path + sub, m)

    for stage in STAGE_NAMES:
        walk(stage, "statistics", record_model(stage))
    return out


def test_the_record_models_mark_the_declarations_they_copy():
    keys = set(declared_field_patterns().values())
    for field in ("licence", "category", "collected", "opt_out", "homepage"):
        assert f'[[ingest.sources]] name = "{{key}}": {field}' in keys
    assert "[pretrain] steps x global_batch_size x seq_len" in keys


def test_no_document_cites_a_config_value_as_a_record(run, demo_settings):
    bundle = generate(RunDir(run), demo_settings)
    patterns = [re.compile(p) for p in declared_field_patterns()]
    seen = {MEASURED: 0, DECLARED: 0, FIXED: 0}
    for doc_id, doc in bundle.provenance["documents"].items():
        for item_id, v in doc["values"].items():
            for src in v.get("sources", []):
                kind = source_kind(src)
                seen[kind] += 1
                if kind == MEASURED:
                    hit = [p.pattern for p in patterns if p.match(src)]
                    assert not hit, f"{doc_id} {item_id}: cites the declared field {src} as a record"
            if not v.get("open"):
                assert v["kind"] in (MEASURED, DECLARED, FIXED, f"{DECLARED} and {MEASURED}"), (item_id, v)
    assert all(seen.values()), seen
    values = bundle.provenance["documents"]["public_summary"]["values"]
    assert values["1.3.latest_collection"]["kind"] == DECLARED
    assert values["1.3.latest_collection"]["sources"] == ['run config [[ingest.sources]] name = "udhr": collected']
    assert values["1.3.size_tokens"]["kind"] == MEASURED


def test_every_footnote_says_whether_it_is_measured_or_declared(run, demo_settings):
    files = generate(RunDir(run), demo_settings).files
    notes = [line for name, text in files.items() if name.endswith(".md") for line in text.splitlines()
             if re.match(r"^\[\^\d+\]: ", line)]
    assert len(notes) > 50
    unlabelled = [n for n in notes if not re.match(r"^\[\^\d+\]: (measured|declared|fixed|projected): ", n)]
    assert not unlabelled, unlabelled[:3]
    for n in notes:  # each source of a footnote is labelled, and the label is the source's own kind
        body = re.sub(r"^\[\^\d+\]: ", "", n)
        for part in re.findall(r"(?:^|; )(measured|declared|fixed|projected): (.+?)(?=; (?:measured|declared|fixed): | \(|$)", body):
            assert source_kind(part[1]) == part[0], n


def test_a_source_names_its_version_found_in_the_data_and_its_dates_as_declared(run, demo_settings):
    record = RunDir(run).manifest("ingest").statistics["per_source"]["udhr"]
    assert record["version_found"] == "6.0.0"  # read from the udhr package's package.json, not from the config
    bundle = generate(RunDir(run), demo_settings)
    md = bundle.files["public_summary.md"]
    row = next(line for line in md.splitlines() if line.startswith("| udhr | https://"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[2].startswith("6.0.0") and cells[4].startswith("2024-05") and cells[5].startswith("not declared")
    header = next(line for line in md.splitlines() if line.startswith("| source | identifier"))
    assert "| version |" in header and "| downloaded |" in header and "| content period |" in header
