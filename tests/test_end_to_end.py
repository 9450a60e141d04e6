"""The whole flow as users run it, on a config smaller than the demo: all six stages through the Prefect flow,
their lineage, and the rerun behaviours (skip when fresh, --force cascades, --from/--to, a changed setting
reruns exactly what it affects, --strict compliance)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from pipeline.cli import main
from pipeline.config import REPO_ROOT
from pipeline.registry import DEPENDS_ON, STAGE_NAMES
from pipeline.rundir import RunDir
from tests.conftest import udhr_source, write_config
from tests.runs import DATA, LANGS, pretrain_section


def demo_compliance_section() -> str:
    """The demo config's [compliance] tables (what only a person can declare), so the test tracks the demo."""
    text = (REPO_ROOT / "configs" / "demo.toml").read_text()
    return "\n" + text[text.index("[compliance]"):]


def manifests(run_dir: Path) -> dict[str, dict]:
    return {s: json.loads((run_dir / s / "manifest.json").read_text()) for s in STAGE_NAMES}


def ran(out: str) -> list[str]:
    return [s for s in STAGE_NAMES if f"europa: {s}: ran" in out]


@pytest.mark.slow
def test_full_flow_lineage_and_reruns(prefect_harness, tmp_path, udhr_dir, capsys):
    body = udhr_source(udhr_dir) + DATA + pretrain_section() + demo_compliance_section()
    cfg = write_config(tmp_path, body, engine="prefect", languages=LANGS)
    run_dir = tmp_path / "run"
    assert main(["run", "--config", str(cfg), "--run-dir", str(run_dir)]) == 0
    out = capsys.readouterr().out
    assert ran(out) == list(STAGE_NAMES)

    # lineage: every stage consumed exactly the upstream outputs that are published now
    m = manifests(run_dir)
    for stage, deps in DEPENDS_ON.items():
        assert sorted(m[stage]["upstream"]) == sorted(deps)
        for dep in deps:
            assert m[stage]["upstream"][dep] == {"fingerprint": m[dep]["fingerprint"], "output_digest": m[dep]["output_digest"]}
    assert m["pretrain"]["statistics"]["training"]["steps"] == 6
    assert m["evaluate"]["statistics"]["checkpoints_evaluated"] == [3, 6]
    assert (run_dir / "compliance" / "index.html").exists() and m["compliance"]["summary"]["open items"] == 0
    # the documents hash the exported model (the demo's release_export), state the GPAI status and the precision
    import subprocess

    check = subprocess.run(["sha256sum", "-c", "compliance/released_files.sha256"], cwd=run_dir, capture_output=True, text=True)
    assert check.returncode == 0 and "export/step-6-bf16/model-00001-of-00001.safetensors: OK" in check.stdout, check.stdout
    xi = (run_dir / "compliance" / "annex_xi_technical_documentation.md").read_text()
    assert "indicative criterion" in xi and "presumably not a general-purpose AI model" in xi
    assert " ± " in xi and "bits per byte ± s.e." in xi
    from prefect.artifacts import Artifact  # what the Prefect UI shows for each stage

    from flows.stages import artifact_key
    from pipeline.rundir import RunDir

    for stage in STAGE_NAMES:
        assert Artifact.get(artifact_key(RunDir(run_dir), f"{stage}-summary")) is not None, stage
    assert "bits/byte" in Artifact.get(artifact_key(RunDir(run_dir), "evaluate-summary")).data

    # everything fresh: skipped in seconds
    t0 = time.monotonic()
    assert main(["run", "--run-dir", str(run_dir)]) == 0
    assert time.monotonic() - t0 < 15 and "fresh, nothing to do" in capsys.readouterr().out
    assert main(["status", "--run-dir", str(run_dir)]) == 0
    status = capsys.readouterr().out
    assert all(f"{s:<11} fresh" in status for s in STAGE_NAMES), status

    # --force tokenizer: tokenizer and everything downstream, not ingest
    assert main(["run", "--run-dir", str(run_dir), "--force", "tokenizer"]) == 0
    assert ran(capsys.readouterr().out) == ["tokenizer", "shards", "pretrain", "evaluate", "compliance"]

    # --from shards --to pretrain: just those
    assert main(["run", "--run-dir", str(run_dir), "--from", "shards", "--to", "pretrain", "--force", "shards"]) == 0
    assert ran(capsys.readouterr().out) == ["shards", "pretrain"]
    assert main(["run", "--run-dir", str(run_dir)]) == 0  # brings evaluate and compliance up to date
    assert ran(capsys.readouterr().out) == ["evaluate", "compliance"]

    # one changed setting reruns exactly the stages it affects
    changed = tmp_path / "changed.toml"
    changed.write_text(cfg.read_text().replace("[shards]\n", "[evaluate]\nregression_threshold = 0.05\n[shards]\n", 1))
    assert main(["run", "--config", str(changed), "--run-dir", str(run_dir)]) == 0
    assert ran(capsys.readouterr().out) == ["evaluate", "compliance"]

    # compliance --strict fails while a person-only value is missing, naming it
    no_contact = tmp_path / "no_contact.toml"
    no_contact.write_text("\n".join(l for l in changed.read_text().splitlines() if not l.startswith("contact = ")))
    assert main(["stage", "compliance", "--config", str(no_contact), "--run-dir", str(run_dir), "--strict"]) == 1
    last = capsys.readouterr().err.strip().splitlines()[-1]  # Prefect logs above it; the error is one line
    assert last.startswith("europa: error: stage compliance") and "contact" in last
    assert main(["stage", "compliance", "--config", str(no_contact), "--run-dir", str(run_dir)]) == 0
    assert "contact" in (run_dir / "compliance" / "open_items.md").read_text()
    assert RunDir(run_dir).manifest("pretrain") is not None  # a failed stage left earlier outputs untouched
