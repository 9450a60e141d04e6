"""The production [evaluate] of configs/jupiter-1t.toml: its job fits by the planner, its tasks cover the languages
as its comment says (lm-eval's own task index, offline)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

from pipeline.cli import main
from pipeline.config import REPO_ROOT, load_config
from pipeline.languages import expand_template

PRESET = REPO_ROOT / "configs" / "jupiter-1t.toml"


def test_the_evaluation_job_is_distributed_and_fits_by_the_planner(tmp_path, capsys):
    ev = load_config(PRESET).section("evaluate")
    assert ev.job.launcher == "slurm" and ev.job.precision == "bfloat16" and ev.sets and ev.tasks
    assert main(["plan", "--config", str(PRESET), "--run-dir", str(tmp_path / "run"), "--json"]) == 0
    job = json.loads(capsys.readouterr().out)["evaluation_job"]
    assert job["ranks"] == ev.job.nodes * 4 and job["fits"] and job["total_gib"] < job["hbm_gib"]
    assert job["parameters_gib"] > 0.7 * job["total_gib"]  # the shards are what the job holds
    # half the nodes would not hold the checkpoint
    text = PRESET.read_text().replace(f"nodes = {ev.job.nodes}  ", f"nodes = {ev.job.nodes // 2}  ")
    half = tmp_path / "half.toml"
    half.write_text(text)
    assert main(["plan", "--config", str(half), "--run-dir", str(tmp_path / "run2"), "--json"]) == 0
    assert not json.loads(capsys.readouterr().out)["evaluation_job"]["fits"]


def test_every_language_has_two_tasks_but_the_two_lm_eval_lacks():
    from stages.evaluate.tasks import manager, offline

    config = load_config(PRESET)
    ev, langs = config.section("evaluate"), list(config.run.languages)
    import lm_eval.tasks

    folders = [Path(lm_eval.tasks.__file__).parent / d for d in ("belebele", "multiblimp", "okapi/mmlu_multilingual")]
    with offline():  # the tasks' own folders: indexing all of lm-eval's ~14,700 tasks takes far longer
        logging.getLogger("lm_eval").setLevel(logging.WARNING)
        known = set().union(*(manager(str(f), False).all_tasks for f in folders))
    have = {lang: [t.name for t in ev.tasks if expand_template(t.task, lang) in known] for lang in langs}
    assert len(langs) == 24 and {lang for lang, ts in have.items() if len(ts) < 2} == {"ga", "mt"}
    assert have["ga"] == ["multiblimp"] and have["mt"] == ["belebele"] and have["hr"] == ["belebele", "m_mmlu"]
