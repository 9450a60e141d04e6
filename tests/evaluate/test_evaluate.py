"""Evaluation of real checkpoints of the tiny model: per-language bits per byte, history, report, plots; each
checkpoint once; partial and damaged checkpoints; external sets with missing languages; the scheduled deployment."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import sentencepiece as spm

from pipeline.cli import main
from pipeline.config import load_config
from pipeline.rundir import RunDir
from stages.evaluate.metrics import CheckpointMetrics
from stages.evaluate.results import changes
from stages.evaluate.runner import evaluate_run
from europa_model.data.streams import open_shards
from tests.runs import LANGS

LANG_LIST = json.loads(LANGS)


@pytest.fixture
def run(tmp_path, trained_run) -> tuple[Path, Path]:
    cfg, src = trained_run
    dst = tmp_path / "run"
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns(".lock", "eval", "evaluate"))
    return cfg, dst


def add_checkpoint(run_dir: Path, step: int, *, complete: bool = True, damaged: bool = False) -> Path:
    """A checkpoint as training leaves it: a copy of step-6's files under a new step (the weights of step 6)."""
    src = run_dir / "pretrain" / "checkpoints" / "step-6"
    dst = src.parent / f"step-{step}"
    shutil.copytree(src, dst)
    if not complete:
        (dst / ".metadata").unlink()  # DCP writes .metadata last: this one is still being written
    if damaged:
        for f in dst.glob("*.distcp"):
            f.write_bytes(b"\0" * 64)
    return dst


def test_evaluates_every_language_once_with_history_report_and_plots(run, capsys):
    _, run_dir = run
    assert main(["evaluate", "--run-dir", str(run_dir)]) == 0
    assert "evaluated step-3, step-6" in capsys.readouterr().out
    ev = run_dir / "eval"
    m3, m6 = (json.loads((ev / f"step-{s}" / "metrics.json").read_text()) for s in (3, 6))
    assert sorted(m6["sets"]["val"]) == sorted(LANG_LIST)
    # bits per byte is the total NLL over the UTF-8 bytes of exactly the held-out documents
    sp = spm.SentencePieceProcessor(model_file=str(run_dir / "tokenizer" / "tokenizer.model"))
    _, by_lang = open_shards(run_dir / "shards", "val", LANG_LIST)
    for lang in LANG_LIST:
        docs = [np.asarray(s.doc(i)) for s in by_lang[lang] for i in range(len(s))]
        n_bytes = sum(len(sp.decode(d[:-1].tolist()).encode()) for d in docs)
        f = m6["sets"]["val"][lang]
        assert f["bytes"] == n_bytes and f["tokens"] == sum(len(d) for d in docs)
        assert f["bits_per_byte"] == pytest.approx(f["loss"] * f["tokens"] / (n_bytes * math.log(2)))
        assert 0 <= f["token_accuracy"] <= 1
    assert m6["checkpoint_id"] != m3["checkpoint_id"]
    history = pq.read_table(ev / "history.parquet").to_pylist()
    bpb = [r for r in history if r["kind"] == "bits_per_byte"]
    assert len(bpb) == 2 * len(LANG_LIST) and {r["step"] for r in bpb} == {3, 6}
    # the best-to-worst language gap, per checkpoint, with its standard error
    gaps = {r["step"]: r for r in history if r["kind"] == "language_gap"}
    assert sorted(gaps) == [3, 6]
    at6 = {lang: f["bits_per_byte"] for lang, f in m6["sets"]["val"].items()}
    worst, best = max(at6, key=at6.get), min(at6, key=at6.get)
    g = gaps[6]
    assert g["lang"] == worst and g["metric"] == f"bits_per_byte gap to {best}"
    assert g["value"] == pytest.approx(at6[worst] - at6[best]) and g["value_stderr"] > 0
    report = (ev / "report.md").read_text()
    assert f"| 6 | val | {best} | {worst} | {g['value']:.4f} ± {g['value_stderr']:.4f} | {len(LANG_LIST)} |" in report
    assert "# Evaluation: step 6" in report and "change since previous" in report
    assert all(f"| val | {lang} |" in report for lang in LANG_LIST)
    for png in ("bpb_latest.png", "bpb_over_steps.png"):
        assert (ev / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # a second call finds nothing new
    assert main(["evaluate", "--run-dir", str(run_dir)]) == 0
    assert "already evaluated; nothing new" in capsys.readouterr().out


def test_partial_and_damaged_checkpoints(run, capsys):
    _, run_dir = run
    add_checkpoint(run_dir, 9, complete=False)
    bad = add_checkpoint(run_dir, 12, damaged=True)
    assert main(["evaluate", "--run-dir", str(run_dir)]) == 0  # the scheduler's view: skip, name it, go on
    out = capsys.readouterr()
    assert "evaluated step-3, step-6; skipped 1 damaged" in out.out
    assert f"skipped step-12: checkpoint {bad}" in out.err
    assert not (run_dir / "eval" / "step-9").exists() and not (run_dir / "eval" / "step-12").exists()
    assert main(["evaluate", "--run-dir", str(run_dir), "--checkpoint", "step-12"]) == 1
    assert str(bad) in capsys.readouterr().err
    assert main(["evaluate", "--run-dir", str(run_dir), "--checkpoint", "step-9"]) == 2
    assert "no complete checkpoint step-9" in capsys.readouterr().err
    # once it is complete it is evaluated, once
    shutil.copy2(run_dir / "pretrain" / "checkpoints" / "step-6" / ".metadata", run_dir / "pretrain" / "checkpoints" / "step-9")
    assert main(["evaluate", "--run-dir", str(run_dir), "--checkpoint", "latest"]) == 1  # latest is the damaged 12
    capsys.readouterr()
    shutil.rmtree(bad)
    assert main(["evaluate", "--run-dir", str(run_dir)]) == 0
    assert "evaluated step-9" in capsys.readouterr().out


def test_no_checkpoint_yet(tmp_path, data_run, capsys):
    run_dir = tmp_path / "run"
    shutil.copytree(data_run, run_dir, ignore=shutil.ignore_patterns(".lock"))
    assert main(["evaluate", "--run-dir", str(run_dir)]) == 0
    assert "no complete checkpoint yet" in capsys.readouterr().out
    assert main(["evaluate", "--run-dir", str(run_dir), "--checkpoint", "latest"]) == 2
    assert "no complete checkpoint yet" in capsys.readouterr().err


def test_external_set_in_flores_layout_with_missing_languages(run, tmp_path):
    cfg, run_dir = run
    flores = tmp_path / "flores" / "devtest"
    flores.mkdir(parents=True)
    lines = {"de": "Alle Menschen sind frei und gleich an Würde und Rechten geboren.",
             "el": "Όλοι οι άνθρωποι γεννιούνται ελεύθεροι και ίσοι στην αξιοπρέπεια και τα δικαιώματα.",
             "fi": "Kaikki ihmiset syntyvät vapaina ja tasavertaisina arvoltaan ja oikeuksiltaan."}
    from pipeline.languages import language

    for lang, text in lines.items():
        (flores / f"{language(lang).flores}.devtest").write_text(f"{text}\n\n{text}\n", encoding="utf-8")
    text = cfg.read_text() + f'\n[evaluate]\n[[evaluate.sets]]\nname = "mini"\npath = "{flores}"\n'
    cfg2 = tmp_path / "eval.toml"
    cfg2.write_text(text)
    outcome = evaluate_run(RunDir(run_dir), load_config(cfg2), which="step-6")
    assert outcome.evaluated == [6]
    m = json.loads((run_dir / "eval" / "step-6" / "metrics.json").read_text())
    assert sorted(m["sets"]["mini"]) == ["de", "el", "fi"] and sorted(m["missing"]["mini"]) == ["bg", "ga", "mt"]
    de = m["sets"]["mini"]["de"]
    assert de["bytes"] == 2 * len(lines["de"].encode())
    assert "Languages without evaluation text or task: mini: " in (run_dir / "eval" / "report.md").read_text()


def test_regression_is_flagged_beyond_the_threshold_and_its_noise():
    """de and fi both worsen by 2.5% (beyond the 2% threshold); de's documents all worsen alike (a paired change
    of many standard errors), fi's by +-50% around it (noise): only de is a regression. Without per-document
    figures (one document: noise unknown) the threshold alone decides; a task accuracy drop likewise needs both."""
    def metrics(step, docs, tasks):
        sets = {"val": {}}
        documents = {"val": {}}
        for lg, bits in docs.items():
            n_bytes = [100] * len(bits)
            sets["val"][lg] = {"bits_per_byte": sum(bits) / sum(n_bytes), "loss": 1.0, "token_accuracy": 0.1,
                               "tokens": 50, "bytes": sum(n_bytes), "documents": len(bits)}
            documents["val"][lg] = {"bits": bits, "bytes": n_bytes}
        return CheckpointMetrics.model_validate({
            "step": step, "checkpoint": f"checkpoints/step-{step}", "checkpoint_id": str(step), "flavor": "tiny",
            "seq_len": 64, "evaluated_at": "", "job": {"launcher": "local", "ranks": 1, "expert_parallel": 1,
                                                       "precision": "float32", "device": "cpu"},
            "sets": sets, "missing": {}, "sources": {}, "documents": documents, "tasks": {"cloze": tasks}})

    before = {"de": [200.0, 220.0, 180.0, 200.0], "fi": [200.0, 220.0, 180.0, 200.0], "mt": [200.0]}
    after = {"de": [205.0, 225.5, 184.5, 205.0], "fi": [300.0, 110.0, 270.0, 140.0], "mt": [205.0]}
    acc = lambda v, se: {"metric": "acc", "value": v, "stderr": se, "examples": 100, "lm_eval_task": "cloze"}  # noqa: E731
    rows = changes([metrics(3, before, {"de": acc(0.60, 0.01), "fi": acc(0.60, 0.05)}),
                    metrics(6, after, {"de": acc(0.50, 0.01), "fi": acc(0.50, 0.05)})], threshold=0.02, sigma=2.0)
    by = {(r.kind, r.lang): r for r in rows}
    de, fi, mt = by["bits_per_byte", "de"], by["bits_per_byte", "fi"], by["bits_per_byte", "mt"]
    assert de.relative_change == pytest.approx(0.025) and fi.relative_change == pytest.approx(0.025)
    assert de.change / de.change_stderr > 10 and de.flagged
    assert fi.change / fi.change_stderr < 2 and not fi.flagged and fi.previous_step == 3
    assert mt.change_stderr is None and mt.flagged  # noise unknown: the threshold decides
    assert by["task", "de"].flagged and not by["task", "fi"].flagged  # -0.10 is 7 SE for de, 1.4 for fi
    assert not any(r.flagged for r in changes([metrics(3, before, {}), metrics(6, after, {})], threshold=0.03))


def test_evaluate_stage_publishes_the_record(run):
    cfg, run_dir = run
    assert main(["stage", "evaluate", "--config", str(cfg), "--run-dir", str(run_dir)]) == 0
    m = json.loads((run_dir / "evaluate" / "manifest.json").read_text())
    s = m["statistics"]
    assert s["checkpoints_evaluated"] == [3, 6] and s["latest_step"] == 6
    assert sorted(s["per_language"]) == sorted(LANG_LIST)
    assert all({"val_loss", "val_bits_per_byte", "val_token_accuracy"} <= set(d) for d in s["per_language"].values())
    assert (run_dir / "evaluate" / "report.md").exists()
    assert main(["stage", "evaluate", "--config", str(cfg), "--run-dir", str(run_dir)]) == 0  # fresh: skipped


@pytest.mark.slow
def test_scheduled_deployment_evaluates_exactly_the_new_checkpoints(prefect_harness, run):
    """A run of the deployment is triggered directly (no waiting for the clock) while 'training' adds
    checkpoints: each run evaluates only what is new and complete."""
    from prefect.deployments import run_deployment
    from prefect.flow_engine import run_flow

    from flows.evaluate import deployment_name, evaluate_new_checkpoints

    _, run_dir = run
    name = deployment_name(RunDir(run_dir))
    deployment = evaluate_new_checkpoints.to_deployment(name=name, cron="*/30 * * * *", parameters={"run_dir": str(run_dir)})
    deployment.apply()
    assert deployment.schedules and deployment.schedules[0].schedule.cron == "*/30 * * * *"

    def trigger() -> dict:
        flow_run = run_deployment(f"europa-evaluate/{name}", timeout=0)
        return run_flow(evaluate_new_checkpoints, flow_run=flow_run, parameters=flow_run.parameters)

    assert trigger()["evaluated"] == [3, 6]
    # make step 6 look much better in German than the weights of step 9 (a copy of step 6) will score
    m6_path = run_dir / "eval" / "step-6" / "metrics.json"
    m6 = json.loads(m6_path.read_text())
    m6["sets"]["val"]["de"]["bits_per_byte"] *= 0.5
    m6_path.write_text(json.dumps(m6))
    add_checkpoint(run_dir, 9)
    add_checkpoint(run_dir, 12, complete=False)  # being written
    result = trigger()
    assert result["evaluated"] == [9] and result["flagged"] == ["de"]
    from prefect.artifacts import Artifact

    from flows.stages import artifact_key

    flags = Artifact.get(artifact_key(RunDir(run_dir), "evaluation-regressions"))
    assert flags is not None and "de" in str(flags.data)  # the table artifact the Prefect UI shows
    assert trigger()["evaluated"] == []
    shutil.copy2(run_dir / "pretrain" / "checkpoints" / "step-6" / ".metadata", run_dir / "pretrain" / "checkpoints" / "step-12")
    assert trigger()["evaluated"] == [12]


def test_live_checkpoints_of_an_unpublished_job_are_found(tmp_path):
    """Evaluation beside training: the checkpoints of the job still training (in .work) count, complete ones only."""
    from pipeline.rundir import RunDir
    from stages.evaluate.runner import run_checkpoints

    rd = RunDir(tmp_path / "run")
    rd.record_attempt("pretrain", "running", "ab" * 32, job_dir=rd.job_dir("pretrain", "ab" * 32))
    job = rd.job_dir("pretrain", "ab" * 32) / "checkpoints"
    for step, complete in ((10, True), (20, True), (30, False)):
        (job / f"step-{step}").mkdir(parents=True)
        if complete:
            (job / f"step-{step}" / ".metadata").write_bytes(b"x")
    published = rd.stage_dir("pretrain") / "checkpoints" / "step-5"
    published.mkdir(parents=True)
    (published / ".metadata").write_bytes(b"x")
    assert [c.step for c in run_checkpoints(rd)] == [5, 10, 20]


def test_latest_never_falls_back_silently_past_a_damaged_published_checkpoint(run, capsys):
    """A published checkpoint is complete by construction: one without .metadata is damage, named, not skipped."""
    _, run_dir = run
    (run_dir / "pretrain" / "checkpoints" / "step-6" / ".metadata").unlink()
    assert main(["evaluate", "--run-dir", str(run_dir), "--checkpoint", "latest"]) == 1
    err = capsys.readouterr().err
    assert f"{run_dir / 'pretrain' / 'checkpoints' / 'step-6'}: has no .metadata" in err and "step-3" in err
    assert main(["status", "--run-dir", str(run_dir), "--json"]) == 0
    pretrain = next(s for s in json.loads(capsys.readouterr().out) if s["stage"] == "pretrain")
    assert pretrain["state"] == "damaged" and "step-6/.metadata: missing" in pretrain["reason"]


def test_eval_schedule_does_not_pretend_without_a_server(run, capsys):
    """No server configured: refused with the one command that works; a configured server that does not
    answer: refused naming it. (With a server, tests/evaluate's deployment test runs the schedule.)"""
    from prefect.settings import PREFECT_API_URL, temporary_settings

    _, run_dir = run
    with temporary_settings(restore_defaults={PREFECT_API_URL}):
        assert main(["eval-schedule", "--run-dir", str(run_dir)]) == 2
    err = capsys.readouterr().err
    assert "no Prefect server is configured" in err and f"europa eval-schedule --run-dir {run_dir} --start-server" in err
    with temporary_settings(updates={PREFECT_API_URL: "http://127.0.0.1:9/api"}):
        assert main(["eval-schedule", "--run-dir", str(run_dir)]) == 2
    assert "http://127.0.0.1:9/api (PREFECT_API_URL) does not answer" in capsys.readouterr().err


def test_a_planted_overlap_with_the_training_split_is_found_and_reported(run, tmp_path):
    """An external set whose first German line is 20 words of a training document, whose second is not."""
    from pipeline.languages import language

    cfg, run_dir = run
    sp = spm.SentencePieceProcessor(model_file=str(run_dir / "tokenizer" / "tokenizer.model"))
    _, by_lang = open_shards(run_dir / "shards", "train", ["de"])
    words = next(t.split() for shard in by_lang["de"] for t in (sp.decode(shard.doc(i).tolist()[:-1]) for i in range(len(shard)))
                 if len(t.split()) >= 40)
    planted = " ".join(words[10:30])
    clean = " ".join(f"wort{i}" for i in range(20))
    flores = tmp_path / "flores"
    flores.mkdir()
    (flores / f"{language('de').flores}.devtest").write_text(f"{planted}\n{clean}\n", encoding="utf-8")
    cfg2 = tmp_path / "eval.toml"
    cfg2.write_text(cfg.read_text() + f'\n[evaluate]\n[[evaluate.sets]]\nname = "mini"\npath = "{flores}"\n')
    assert main(["stage", "evaluate", "--config", str(cfg2), "--run-dir", str(run_dir)]) == 0
    s = json.loads((run_dir / "evaluate" / "manifest.json").read_text())["statistics"]
    assert set(s["language_gap"]) == {"val"} and s["language_gap"]["val"]["gap"] > 0  # mini: one language, no gap
    de = s["contamination"]["mini"]["de"]
    assert (de["texts"], de["contaminated"], de["short"]) == (2, 1, 0) and de["training_documents"] >= 1
    assert set(s["contamination"]["val"]) == set(LANG_LIST)  # the held-out split is checked too
    assert "13-grams" in s["contamination_method"]
    report = (run_dir / "evaluate" / "report.md").read_text()
    assert "## Contamination" in report and "| mini | de | 2 | 0 | 1 | 50.0% |" in report
