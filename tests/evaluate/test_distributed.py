"""Evaluation as a distributed job: 2 gloo ranks under torchrun, the model sharded as training shards it (FSDP2
over both ranks, the routed experts split over them: expert parallel 2), give the per-language figures of one
process, and the downstream tasks' (lm-eval's requests answered by the sharded model, stages/evaluate/
sharded_lm.py) those of lm-eval on the Hugging Face export in one process; a rank that fails is named with its
error. Slow: each torchrun job starts 2 Python processes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.config import REPO_ROOT, load_config
from pipeline.rundir import RunDir
from stages.evaluate.job import EvalJobFailed
from stages.evaluate.runner import evaluate_run
from tests.runs import LANGS

pytestmark = pytest.mark.slow

JOB = '\n[evaluate.job]\nlauncher = "torchrun"\nprocesses_per_node = 2\nexpert_parallel = 2\n'


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns(".lock", "eval", "evaluate"))
    return dst


def test_two_ranks_with_expert_parallel_give_the_numbers_of_one_process(trained_run, tmp_path):
    cfg, src = trained_run
    one, two = _copy(src, tmp_path / "one"), _copy(src, tmp_path / "two")
    flores = tmp_path / "flores"
    flores.mkdir()
    from pipeline.languages import language

    (flores / f"{language('de').flores}.devtest").write_text(
        "Alle Menschen sind frei und gleich an Würde und Rechten geboren.\nSie sind mit Vernunft und Gewissen begabt.\n")
    sets = (f'\n[evaluate]\nbatch_size = 3\n[[evaluate.sets]]\nname = "mini"\npath = "{flores}"\n'
            '[[evaluate.tasks]]\nname = "cloze"\ntask = "europa_cloze_{lang}"\nbuild = "validation"\nlimit = 4\n')
    (tmp_path / "one.toml").write_text(cfg.read_text() + sets)
    (tmp_path / "two.toml").write_text(cfg.read_text() + sets + JOB)
    assert evaluate_run(RunDir(one), load_config(tmp_path / "one.toml"), which="step-6").evaluated == [6]
    assert evaluate_run(RunDir(two), load_config(tmp_path / "two.toml"), which="step-6").evaluated == [6]
    a, b = (json.loads((r / "eval" / "step-6" / "metrics.json").read_text()) for r in (one, two))
    assert b["job"] == {"launcher": "torchrun", "ranks": 2, "expert_parallel": 2, "precision": "float32", "device": "cpu"}
    assert sorted(b["sets"]["val"]) == sorted(json.loads(LANGS)) and list(b["sets"]["mini"]) == ["de"]
    worst = 0.0
    for set_name, langs in a["sets"].items():
        for lang, f in langs.items():
            g = b["sets"][set_name][lang]
            assert (g["tokens"], g["bytes"], g["documents"]) == (f["tokens"], f["bytes"], f["documents"])
            for key in ("loss", "bits_per_byte", "bits_per_byte_stderr", "token_accuracy"):
                worst = max(worst, abs(g[key] - f[key]) / max(abs(f[key]), 1e-9))
    print(f"2 ranks (FSDP2 + EP 2) vs 1 process: max relative difference {worst:.1e}")
    assert worst < 1e-5
    # the tasks: lm-eval's figures from the sharded model on 2 ranks = from the HF export in one process
    assert sorted(b["tasks"]["cloze"]) == sorted(json.loads(LANGS))
    assert b["tasks_missing"] == a["tasks_missing"] and b["task_reasons"] == a["task_reasons"]
    for task, langs in a["tasks"].items():
        assert sorted(b["tasks"][task]) == sorted(langs)
        for lang, f in langs.items():
            g = b["tasks"][task][lang]
            assert (g["examples"], g["lm_eval_task"]) == (f["examples"], f["lm_eval_task"])
            assert g["value"] == pytest.approx(f["value"], abs=1e-9) and g["stderr"] == pytest.approx(f["stderr"], abs=1e-9)
    # and below the accuracies, each request's loglikelihood (a BOS lost, a truncation done otherwise, shows here)
    answers = tmp_path / "answers.json"
    job = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                          str(Path(__file__).with_name("sharded_lm_job.py")), str(two), str(answers)],
                         cwd=REPO_ROOT, capture_output=True, text=True, timeout=600,
                         env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO_ROOT)})
    assert job.returncode == 0, job.stderr[-3000:]
    got = json.loads(answers.read_text())
    diff = max(abs(s_[0] - h[0]) for s_, h in zip(got["sharded"], got["hf"], strict=True))
    print(f"loglikelihoods, sharded on 2 ranks vs HFLM on the export: max difference {diff:.1e}")
    assert diff < 1e-4 and [s_[1] for s_ in got["sharded"]] == [h[1] for h in got["hf"]]
    job = RunDir(two).store_job_dir("eval", "step-6")
    assert (job / "result.json").exists() and (job / "config.toml").exists()
    assert "[evaluate.job]" in (job / "config.toml").read_text()  # the job ran with this process's settings

    # a damaged checkpoint: the job fails, the error names the rank and the cause
    bad = two / "pretrain" / "checkpoints" / "step-9"
    shutil.copytree(two / "pretrain" / "checkpoints" / "step-6", bad)
    for f in bad.glob("*.distcp"):
        f.write_bytes(b"\0" * 64)
    with pytest.raises(EvalJobFailed, match=r"rank \d: CheckpointError: checkpoint .*step-9: cannot be loaded"):
        evaluate_run(RunDir(two), load_config(tmp_path / "two.toml"), which="step-9")


def test_layouts_that_cannot_run_are_refused_by_the_config(tmp_path):
    from pipeline.config import ConfigError

    for job, match in (('launcher = "torchrun"\nprocesses_per_node = 2\nexpert_parallel = 4', "must divide"),
                       ('processes_per_node = 2', 'launcher "local" evaluates in this one process')):
        (tmp_path / "c.toml").write_text(f'[run]\nname = "x"\n[evaluate.job]\n{job}\n')
        with pytest.raises(ConfigError, match=match):
            load_config(tmp_path / "c.toml")
