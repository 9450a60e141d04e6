"""The compliance documents from a real pretrain record (the tiny flavor, a few steps on the CPU).

Checks the contract between the pretrain stage's manifest and what compliance reads: with the demo
declarations nothing is open except what the evaluate stage (not built yet: its manifest is written by hand
here) would provide.
"""

from __future__ import annotations

import json
import shutil

import pytest

from pipeline.cli import main
from pipeline.rundir import RunDir
from stages.compliance.generate import generate
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
    assert [i.need for i in bundle.open_items] == []
    form = bundle.form
    stats = json.loads((run / "pretrain" / "manifest.json").read_text())["statistics"]
    assert form["model_properties"]["total_parameters"] == stats["model"]["total_params"]
    assert form["model_properties"]["input_max_tokens"] == 64
    assert form["general"]["authenticity_sha256"] == stats["checkpoint"]["sha256"]
    assert form["computational_resources"]["training_flops"] == max(stats["compute"]["flops_analytic"], stats["compute"]["flops_hardware"])
    xi = bundle.provenance["documents"]["annex_xi_technical_documentation"]["values"]
    assert xi["1.2.d.device_hours"]["sources"] == ["pretrain/manifest.json: statistics.training.device_hours"]
    assert "below the 10^25 FLOP presumption" in xi["1.2.d.check"]["text"]
