"""Evaluation results printed with their precision: standard errors, sample sizes, the task results and the
languages a task does not cover (Annex XI 1.3), and the capabilities and limitations they show (Annex XII 3)."""

from __future__ import annotations

import json

from pipeline.manifest import MANIFEST_NAME
from pipeline.rundir import RunDir
from stages.compliance.evaluation import decimals_for, with_error
from stages.compliance.generate import generate
from tests.compliance.fake_records import _manifest, _validated, evaluate_statistics


def write_evaluate_with_a_task(run) -> None:
    stats = evaluate_statistics(["de", "fi", "mt"])
    for lang, acc in (("de", 0.5), ("fi", 0.25)):  # lm-eval has no task for mt here
        stats["per_language"][lang].update({"cloze_acc": acc, "cloze_acc_stderr": 0.125, "cloze_examples": 16.0})
    stats["per_language"]["mt"]["val_bits_per_byte_stderr"] = 0.00123
    stats["tasks"] = [{"name": "cloze", "metric": "acc", "num_fewshot": 0,
                       "lm_eval_tasks": {"de": "europa_cloze_de", "fi": "europa_cloze_fi"}, "missing": ["mt"]}]
    m = _manifest("evaluate", {}, {}, _validated("evaluate", stats), "2026-11-30T11:00:00+00:00")
    (run / "evaluate" / MANIFEST_NAME).write_text(m.to_json(), encoding="utf-8")


def test_precision_follows_the_standard_error():
    assert decimals_for(0.14) == 2 and decimals_for(0.0012) == 4 and decimals_for(3.0) == 1 and decimals_for(30.0) == 0
    assert with_error(3.47746, 0.1426) == "3.48 ± 0.14" and with_error(2.5, 0.0) == "2.5000 ± 0.0000"


def test_annex_xi_gives_each_result_with_its_error_and_count_and_the_missing_task(run, demo_settings):
    write_evaluate_with_a_task(run)
    bundle = generate(RunDir(run), demo_settings)
    assert bundle.open_items == []
    md = bundle.files["annex_xi_technical_documentation.md"]
    header = next(line for line in md.splitlines() if line.startswith("| language |"))
    assert header.split("|")[2:6] == [" val bits per byte ± s.e. ", " val documents ", " cloze acc ± s.e. ", " cloze examples "]
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]]
            for line in md.splitlines() if line.startswith(("| de |", "| fi |", "| mt |"))}
    assert rows["de"][0].startswith("2.500 ± 0.062") and rows["de"][1] == "3" and rows["de"][2].startswith("0.50 ± 0.12")
    assert rows["mt"][0].startswith("2.6250 ± 0.0012") and rows["mt"][2].startswith("no task for the language")
    v = bundle.provenance["documents"]["annex_xi_technical_documentation"]["values"]
    cell = v["1.3.evaluation[de].val bits per byte ± s.e."]
    assert cell["value"] == {"value": 2.5, "stderr": 0.0625} and cell["kind"] == "measured"
    assert "statistics.per_language.de.val_bits_per_byte_stderr" in " ".join(cell["sources"])


def test_annex_xii_states_capabilities_and_limitations_from_the_records(run, demo_settings):
    write_evaluate_with_a_task(run)
    bundle = generate(RunDir(run), demo_settings)
    v = bundle.provenance["documents"]["annex_xii_downstream_information"]["values"]
    text = v["3.evaluated"]["text"]
    assert "best de 2.500 ± 0.062, worst mt 2.6250 ± 0.0012, a gap of 0.125" in text
    assert "Task cloze (acc, 0-shot): from 25.00% to 50.00% over 2 languages; no result for mt." in text
    assert "from 3 to 3 documents per language" in text and "flagged for a regression: none" in text
    assert v["3.limitations"]["kind"] == "declared"
    stats = json.loads((run / "evaluate" / MANIFEST_NAME).read_text())["statistics"]
    assert stats["tasks"][0]["missing"] == ["mt"]
