"""The compliance documents from a real pretrain record (the tiny flavor, a few steps on the CPU).

Checks the contract between the pretrain stage's manifest and what compliance reads: with the demo
declarations nothing is open except what the evaluate stage (not built yet: its manifest is written by hand
here) would provide.
"""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from pipeline.cli import main
from pipeline.rundir import RunDir
from stages.compliance.generate import generate
from stages.compliance.stage import ComplianceStage
from tests.compliance.test_compliance_documents import _ctx
from tests.compliance.fake_records import LANGS, upstream_config, write_evaluate
from tests.conftest import write_config

pytestmark = pytest.mark.slow

PRETRAIN = """
[pretrain]
flavor = "tiny"
seq_len = 64
local_batch_size = 4
steps = 4
[pretrain.schedule]
warmup_steps = 1
[pretrain.checkpoint]
interval = 2
"""


def test_documents_from_a_real_pretrain_record(upstream_run, tmp_path, udhr_dir, demo_settings):
    run = tmp_path / "run"
    shutil.copytree(upstream_run, run, ignore=shutil.ignore_patterns(".lock", "run.toml", ".work", ".state"))
    cfg = write_config(tmp_path, upstream_config(udhr_dir) + PRETRAIN, languages=LANGS)
    assert main(["stage", "pretrain", "--config", str(cfg), "--run-dir", str(run)]) == 0
    write_evaluate(run, json.loads(LANGS))

    bundle = generate(RunDir(run), demo_settings)
    assert [i.need for i in bundle.open_items] == [] and bundle.contradictions == []
    form = bundle.form
    stats = json.loads((run / "pretrain" / "manifest.json").read_text())["statistics"]
    assert form["model_properties"]["total_parameters"] == stats["model"]["total_params"]
    assert form["model_properties"]["input_max_tokens"] == 64 and form["model_properties"]["parameter_size_range"] == "1-500M"
    # the three compute figures of a recorded run: (a) reported, (b) agrees within 30%, (a) <= (c)
    a, b, c = (stats["compute"][k] for k in ("architecture", "counted", "hardware"))
    assert form["computational_resources"]["training_flops"] == a["flops"]
    assert abs(b["flops"] / a["flops"] - 1) <= 0.30 and a["flops"] <= c["flops"] and c["implied_utilisation"] < 1
    assert form["computational_resources"]["counted_flops_check"] == b["flops"]
    assert form["computational_resources"]["hardware_bound_flops"] == c["flops"]
    xi = bundle.provenance["documents"]["annex_xi_technical_documentation"]["values"]
    assert xi["1.2.d.device_hours"]["sources"] == ["pretrain/manifest.json: statistics.training.device_hours"]
    assert "below the 10^25 FLOP presumption" in xi["1.2.d.check"]["text"]
    # without a declared released form the digests are the training checkpoint's, and say so
    assert len(form["general"]["authenticity"]["files"]) == len(stats["checkpoint"]["files"]) + 3
    assert "not a distributable form" in bundle.files["annex_xii_downstream_information.md"]

    # with one, the stage writes the Hugging Face export of the final checkpoint and the digests are its files';
    # sha256sum checks every one of them
    released = demo_settings.model_copy(update={"model": demo_settings.model.model_copy(update={"release_export": "bf16"})})
    out = tmp_path / "staging"
    out.mkdir()
    ComplianceStage().run(_ctx(run, released), out)
    export = run / "export" / "step-4-bf16"
    sums = (out / "released_files.sha256").read_text()
    names = sorted(line.split("  ")[1] for line in sums.splitlines())
    assert names == sorted(f"export/step-4-bf16/{p.name}" for p in export.iterdir() if p.name != "SHA256SUMS")
    assert any(n.endswith(".safetensors") for n in names) and "export/step-4-bf16/README.md" in names
    (run / "compliance").mkdir()
    (run / "compliance" / "released_files.sha256").write_text(sums)
    check = subprocess.run(["sha256sum", "-c", "compliance/released_files.sha256"], cwd=run, capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    prov = json.loads((out / "provenance.json").read_text())
    auth = prov["documents"]["annex_xii_downstream_information"]["values"]["2.a.released_files"]
    assert auth["sources"] == ["export/step-4-bf16/SHA256SUMS"] and auth["kind"] == "measured"
    # a second run reuses the finished export (same files, same digests)
    before = {p.name: p.stat().st_mtime_ns for p in export.iterdir()}
    ComplianceStage().run(_ctx(run, released), tmp_path / "again")
    assert {p.name: p.stat().st_mtime_ns for p in export.iterdir()} == before
