"""Downstream tasks through `europa evaluate`: a multiple-choice task the project builds from the run's own text
(stages/evaluate/cloze.py, lm-eval's YAML format) in the run's 6 languages, run by lm-evaluation-harness on
the checkpoint's Hugging Face export, offline; per-language accuracies with standard errors land in the metrics,
the history, the report, the plots and the evaluate record. A task lm-eval knows but whose data is not here
(xnli, from the Hub) and languages it has no task for are listed as missing, with the reason."""

from __future__ import annotations

import json
import shutil

import pyarrow.parquet as pq
import pytest

from pipeline.cli import main
from pipeline.config import load_config
from pipeline.rundir import RunDir
from pipeline.runconfig import save_run_config
from tests.runs import LANGS

pytestmark = pytest.mark.slow
LANG_LIST = json.loads(LANGS)


def test_cloze_task_builder_writes_lm_eval_yaml(tmp_path):
    from stages.evaluate.cloze import N_CHOICES, build

    words = ["Haus", "Baum", "Fluss", "Berg", "Stadt", "Feld"]
    sentences = {"de": [f"Satz Nummer {i} endet mit dem Wort {w} hier." for i, w in enumerate(words)],
                 "fi": ["liian lyhyt"]}
    counts = build(sentences, tmp_path, seed=1, max_examples=5)
    assert counts == {"de": 5}  # fi: no sentence long enough, no task rather than a broken one
    rows = [json.loads(line) for line in (tmp_path / "de.jsonl").read_text().splitlines()]
    for i, r in enumerate(rows):
        assert len(r["choices"]) == N_CHOICES and len(set(r["choices"])) == N_CHOICES
        assert r["context"] + " " + r["choices"][r["label"]] == sentences["de"][i]  # the true ending is the label
    assert {r["label"] for r in rows} != {0}  # shuffled
    yaml = (tmp_path / "europa_cloze_de.yaml").read_text()
    assert "task: europa_cloze_de" in yaml and "output_type: multiple_choice" in yaml and "dataset_path: json" in yaml


def test_tasks_run_through_europa_evaluate(trained_run, tmp_path, capsys):
    from stages.evaluate.cloze import build, sentences_from_run

    cfg, src = trained_run
    run_dir = tmp_path / "run"
    shutil.copytree(src, run_dir, ignore=shutil.ignore_patterns(".lock", "eval", "evaluate"))
    tasks_dir = tmp_path / "cloze"
    counts = build(sentences_from_run(run_dir, LANG_LIST), tasks_dir, max_examples=12)
    assert sorted(counts) == sorted(LANG_LIST)
    text = cfg.read_text() + f"""
[evaluate]
[[evaluate.tasks]]
name = "cloze"
task = "europa_cloze_{{lang}}"
include_path = "{tasks_dir}"
limit = 8
[[evaluate.tasks]]
name = "xnli"
task = "xnli_{{lang}}"
limit = 2
"""
    (tmp_path / "tasks.toml").write_text(text)
    save_run_config(RunDir(run_dir), load_config(tmp_path / "tasks.toml"))  # what `europa run --config` records
    assert main(["evaluate", "--run-dir", str(run_dir), "--checkpoint", "step-6"]) == 0
    assert "evaluated step-6" in capsys.readouterr().out
    m = json.loads((run_dir / "eval" / "step-6" / "metrics.json").read_text())
    cloze = m["tasks"]["cloze"]
    assert sorted(cloze) == sorted(LANG_LIST)
    for lang, f in cloze.items():
        assert f["lm_eval_task"] == f"europa_cloze_{lang}" and f["examples"] == 8 and f["metric"] == "acc"
        assert f["value"] in {k / 8 for k in range(9)} and 0 < f["stderr"] < 0.5
    assert m["tasks"].get("xnli", {}) == {} and sorted(m["tasks_missing"]["xnli"]) == sorted(LANG_LIST)
    reasons = m["task_reasons"]["xnli"]
    assert reasons["fi"] == "lm-eval has no task xnli_fi" and "xnli_de" in reasons["de"]  # known, data absent
    history = [r for r in pq.read_table(run_dir / "eval" / "history.parquet").to_pylist() if r["kind"] == "task"]
    assert {(r["set"], r["lang"]) for r in history} == {("cloze", lang) for lang in LANG_LIST}
    assert all(r["value"] == cloze[r["lang"]]["value"] and r["examples"] == 8 for r in history)
    report = (run_dir / "eval" / "report.md").read_text()
    assert "Downstream tasks" in report and all(f"| cloze | {lang} | 8 | acc |" in report for lang in LANG_LIST)
    assert "xnli: " in report  # missing, listed
    for png in ("tasks_latest.png", "tasks_over_steps.png", "bpb_over_steps.png"):
        assert (run_dir / "eval" / png).read_bytes()[:4] == b"\x89PNG"

    # the stage publishes them in its record (step 3 gets its tasks too: the configuration asks for them)
    assert main(["stage", "evaluate", "--run-dir", str(run_dir)]) == 0
    s = json.loads((run_dir / "evaluate" / "manifest.json").read_text())["statistics"]
    assert [t["name"] for t in s["tasks"]] == ["cloze", "xnli"] and sorted(s["tasks"][1]["missing"]) == sorted(LANG_LIST)
    assert all(s["per_language"][lang]["cloze_acc"] == cloze[lang]["value"] for lang in LANG_LIST)
    assert all(s["per_language"][lang]["cloze_examples"] == 8 for lang in LANG_LIST)


def test_tasks_that_cannot_run_are_one_line_and_exit_2_before_any_checkpoint(trained_run, tmp_path, capsys):
    cfg, src = trained_run
    run_dir = tmp_path / "run"
    shutil.copytree(src, run_dir, ignore=shutil.ignore_patterns(".lock", "eval", "evaluate"))

    def conf(i: int, task: str):
        path = tmp_path / f"bad-{i}.toml"
        path.write_text(cfg.read_text() + f'\n[evaluate]\n[[evaluate.tasks]]\nname = "t"\n{task}\n')
        return path

    cases = [('task = "nosuchtask_{lang}"', "lm-eval knows no task 'nosuchtask_{lang}' for any language of the run"),
             (f'task = "xnli_{{lang}}"\ndataset_path = "{tmp_path / "absent"}"', "dataset_path")]
    for i, (task, message) in enumerate(cases):
        save_run_config(RunDir(run_dir), load_config(conf(i, task)))  # what `europa run --config` records
        capsys.readouterr()
        assert main(["evaluate", "--run-dir", str(run_dir), "--checkpoint", "step-6"]) == 2, task
        err = capsys.readouterr().err
        assert message in err and len(err.strip().splitlines()) == 1, err
        assert not (run_dir / "eval" / "step-6").exists()  # refused before the checkpoint was loaded
    assert main(["stage", "evaluate", "--config", str(conf(2, 'task = "belebele"')), "--run-dir", str(run_dir)]) == 2
    assert "names no language" in capsys.readouterr().err
    assert not (run_dir / "evaluate").exists()


def test_belebele_and_multiblimp_run_offline_from_local_datasets(trained_run, tmp_path, capsys):
    """The real lm-eval task names with local data in their Hub layouts (tests/evaluate/task_data.py): belebele
    has no Irish, MultiBLiMP no Maltese, so together they cover the run's six languages, and the report and the
    record say which language lacks which task."""
    from stages.evaluate.cloze import sentences_from_run
    from tests.evaluate import task_data

    cfg, src = trained_run
    run_dir = tmp_path / "run"
    shutil.copytree(src, run_dir, ignore=shutil.ignore_patterns(".lock", "eval", "evaluate"))
    sentences = {lang: s[:3] for lang, s in sentences_from_run(run_dir, LANG_LIST).items()}
    with_belebele = [lang for lang in LANG_LIST if lang != "ga"]
    with_multiblimp = [lang for lang in LANG_LIST if lang != "mt"]
    bb = task_data.belebele(tmp_path / "belebele", with_belebele, {lang: sentences[lang][0] for lang in with_belebele})
    mb = task_data.multiblimp(tmp_path / "multiblimp", with_multiblimp, sentences)
    (tmp_path / "tasks.toml").write_text(cfg.read_text() + f"""
[evaluate]
[[evaluate.tasks]]
name = "belebele"
task = "belebele_{{flores}}"
dataset_path = "{bb}"
limit = 2
[[evaluate.tasks]]
name = "multiblimp"
task = "multiblimp_{{iso3}}"
dataset_path = "{mb}"
limit = 2
""")
    save_run_config(RunDir(run_dir), load_config(tmp_path / "tasks.toml"))
    assert main(["evaluate", "--run-dir", str(run_dir), "--checkpoint", "step-6"]) == 0
    m = json.loads((run_dir / "eval" / "step-6" / "metrics.json").read_text())
    assert sorted(m["tasks"]["belebele"]) == sorted(with_belebele)
    assert sorted(m["tasks"]["multiblimp"]) == sorted(with_multiblimp)
    assert all(f["examples"] == 2 and 0 <= f["value"] <= 1 for t in m["tasks"].values() for f in t.values())
    assert m["tasks"]["belebele"]["de"]["lm_eval_task"] == "belebele_deu_Latn"
    assert m["tasks_missing"]["belebele"] == ["ga"] and m["tasks_missing"]["multiblimp"] == ["mt"]
    report = (run_dir / "eval" / "report.md").read_text()
    assert "belebele: ga" in report and "multiblimp: mt" in report
    # the coverage table: per language, which set and task has figures, and how many tasks it has
    header = next(line for line in report.splitlines() if line.startswith("| language |"))
    assert header == "| language | val | belebele | multiblimp | tasks |"
    assert "| ga | yes | - | yes | 1 |" in report and "| mt | yes | yes | - | 1 |" in report
    assert "| de | yes | yes | yes | 2 |" in report


def test_a_task_passage_taken_from_the_training_split_is_found(trained_run, tmp_path):
    """Task data is checked like the sets: a belebele passage that is 20 words of a German training document
    makes each German example contaminated; the French passage, made up, none."""
    import sentencepiece as spm

    from europa_model.data.streams import open_shards
    from stages.evaluate.config import EvalTaskConfig
    from stages.evaluate.contamination import check
    from stages.evaluate.tasks import task_texts
    from tests.evaluate import task_data

    _, run_dir = trained_run
    sp = spm.SentencePieceProcessor(model_file=str(run_dir / "tokenizer" / "tokenizer.model"))
    _, by_lang = open_shards(run_dir / "shards", "train", ["de"])
    words = next(t.split() for shard in by_lang["de"] for t in (sp.decode(shard.doc(i).tolist()[:-1])
                                                                 for i in range(len(shard))) if len(t.split()) >= 40)
    planted, clean = " ".join(words[10:30]), " ".join(f"mot{i}" for i in range(20))
    bb = task_data.belebele(tmp_path / "belebele", ["de", "fr"], {"de": planted, "fr": clean}, n=2)
    tasks = [EvalTaskConfig(name="belebele", task="belebele_{flores}", dataset_path=str(bb))]
    texts = task_texts(tasks, ["de", "fr"])
    assert [len(texts["belebele"][lang]) for lang in ("de", "fr")] == [2, 2]
    assert planted in texts["belebele"]["de"][0] and "1?" in texts["belebele"]["de"][1]  # passage, question, choices
    found = check(run_dir / "shards", {"task:belebele": texts["belebele"]}, sp)["task:belebele"]
    assert (found["de"].texts, found["de"].contaminated) == (2, 2) and found["de"].training_documents >= 1
    assert (found["fr"].texts, found["fr"].contaminated) == (2, 0)


def test_an_lm_eval_group_is_listed_as_missing_not_scored_by_its_first_subtask():
    """Global-MMLU's per-language names are groups of subject tasks: loading one gave its first subtask."""
    from pathlib import Path

    import lm_eval.tasks

    from stages.evaluate.config import EvalTaskConfig
    from stages.evaluate.tasks import TaskResults, _load_tasks, offline

    folder = Path(lm_eval.tasks.__file__).parent / "global_mmlu" / "full" / "de"
    out = TaskResults()
    with offline():
        loaded = _load_tasks([EvalTaskConfig(name="gmmlu", task="global_mmlu_full_{lang}", include_path=str(folder))],
                             ["de", "fr"], out)
    assert loaded[0][1] == {} and sorted(out.missing["gmmlu"]) == ["de", "fr"]
    assert "is an lm-eval group of several tasks" in out.reasons["gmmlu"]["de"]
    assert out.reasons["gmmlu"]["fr"] == "lm-eval has no task global_mmlu_full_fr"  # not in that folder
