"""`europa export hf` and `europa generate` on a run the pipeline trained (6 tiny steps, 6 languages): the folder
loads offline with AutoModelForCausalLM and scores the validation text as the evaluator does; its README.md is a
model card in the Hub's format written from the run's records; a checkpoint of a training job still running
exports too. Slow: it needs the session's trained run."""

from __future__ import annotations

import json
import os
import shutil

os.environ["HF_HUB_OFFLINE"] = "1"

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from pipeline.cli import main  # noqa: E402
from pipeline.rundir import RunDir  # noqa: E402
from tests.runs import LANGS  # noqa: E402

pytestmark = pytest.mark.slow
LANG_LIST = json.loads(LANGS)


@pytest.fixture
def run(tmp_path, trained_run):
    _, src = trained_run
    dst = tmp_path / "run"
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns(".lock", "eval", "evaluate", "export"))
    return dst


def test_export_loads_offline_scores_like_the_evaluator_and_has_a_model_card(run, tmp_path, capsys):
    import sentencepiece as spm
    from transformers import AutoModelForCausalLM

    from europa_model.data.streams import open_shards
    from tests.evaluate.hf_scoring import hf_nll

    assert main(["stage", "evaluate", "--run-dir", str(run)]) == 0
    out = tmp_path / "hf"
    assert main(["export", "hf", "--run-dir", str(run), "--dtype", "fp32", "--out", str(out)]) == 0
    assert "exported step-6" in capsys.readouterr().out
    model = AutoModelForCausalLM.from_pretrained(out, local_files_only=True).eval()
    assert type(model).__name__ == "DeepseekV3ForCausalLM"

    # the validation text's loss under transformers = the evaluator's (its routed experts run in bf16: ~1e-5)
    metrics = json.loads((run / "eval" / "step-6" / "metrics.json").read_text())
    sp = spm.SentencePieceProcessor(model_file=str(run / "tokenizer" / "tokenizer.model"))
    _, by_lang = open_shards(run / "shards", "val", LANG_LIST)
    worst = 0.0
    for lang in LANG_LIST:
        docs = [np.asarray(s.doc(i), dtype=np.int64) for s in by_lang[lang] for i in range(len(s))]
        nll, tokens = hf_nll(model, docs, seq_len=metrics["seq_len"], bos=sp.bos_id())
        ev = metrics["sets"]["val"][lang]
        assert tokens == ev["tokens"]
        worst = max(worst, abs(nll / tokens - ev["loss"]) / ev["loss"])
    print(f"validation loss, HF export vs evaluator: max relative difference {worst:.1e}")
    assert worst < 1e-4

    card = (out / "README.md").read_text()
    front, body = card.split("---\n")[1], card.split("---\n", 2)[2]
    assert "language:\n" + "".join(f'  - "{lang}"\n' for lang in LANG_LIST) in front
    assert "library_name: \"transformers\"" in front and "pipeline_tag: \"text-generation\"" in front
    assert "model-index:" in front and 'type: "bits_per_byte"' in front
    from europa_model.flavors import count_parameters

    counts = count_parameters("tiny", 1000)
    assert f"| parameters (total) | {counts['total']:,} |" in body and f"| parameters (active per token) | {counts['active']:,} |" in body
    assert "training tokens" in body and "| de (German) |" in body and "**udhr**" in body
    assert "val bits/byte" in body and "## Licence" in body and "## EU AI Act documentation" in body
    assert "europa stage compliance" in body  # not generated in this run: the card says how
    assert "README.md" in (out / "SHA256SUMS").read_text()


def test_generate_prints_text_greedy_and_seeded(run, capsys):
    assert main(["generate", "--run-dir", str(run), "--prompt", "Alle Menschen", "--max-new-tokens", "6"]) == 0
    greedy = capsys.readouterr().out
    assert greedy.startswith("Alle Menschen") and len(greedy.strip()) > len("Alle Menschen")
    runs = []
    for _ in range(2):
        assert main(["generate", "--run-dir", str(run), "--prompt", "Alle Menschen", "--max-new-tokens", "6",
                     "--sampled", "--seed", "7", "--checkpoint", "step-3"]) == 0
        runs.append(capsys.readouterr().out)
    assert runs[0] == runs[1]


def test_refusals_and_a_live_training_job(run, tmp_path, capsys):
    out = tmp_path / "hf"
    assert main(["export", "hf", "--run-dir", str(run), "--out", str(out)]) == 0
    capsys.readouterr()
    assert main(["export", "hf", "--run-dir", str(run), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "already exists" in err and "--force" in err
    assert main(["export", "hf", "--run-dir", str(run), "--out", str(out), "--force"]) == 0
    assert main(["export", "hf", "--run-dir", str(run), "--checkpoint", "step-99"]) == 2
    assert "no complete checkpoint step-99 (complete: step-3, step-6)" in capsys.readouterr().err
    tokenizer = sorted(p.name for p in (run / "tokenizer").iterdir())
    for inside in (run / "tokenizer", run, run.parent):  # a published stage, the run itself, a folder above it
        assert main(["export", "hf", "--run-dir", str(run), "--out", str(inside), "--force"]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f"--out {inside} is " in err and "the run directory" in err
    assert sorted(p.name for p in (run / "tokenizer").iterdir()) == tokenizer

    # training still running: its job folder's checkpoints export too, and the card says so
    rd = RunDir(run)
    job = rd.job_dir("pretrain", "cd" * 32)
    (job / "checkpoints").mkdir(parents=True)
    shutil.copytree(run / "pretrain" / "checkpoints" / "step-6", job / "checkpoints" / "step-9")
    shutil.copy2(run / "pretrain" / "job_info.json", job / "job_info.json")
    rd.record_attempt("pretrain", "running", "cd" * 32, job_dir=job)
    capsys.readouterr()
    assert main(["export", "hf", "--run-dir", str(run)]) == 0  # default: latest, into <run>/export/
    assert "exported step-9 (training still running)" in capsys.readouterr().out
    card = (rd.export_dir("step-9-bf16") / "README.md").read_text()
    assert "Training was still running" in card and "bf16 weights" in card
