"""Job folders outlive a change of the fingerprint's recipe: a folder of the same training under another name is
adopted (training continues from its checkpoints, not at step 0), and a folder of other settings that holds
checkpoints is kept (and said so) after the stage publishes, until --force."""

from __future__ import annotations

import json
import shutil

import pytest

from europa_model.checkpoints import complete_checkpoints
from pipeline.cli import main
from pipeline.config import load_config
from pipeline.status import build_context
from pipeline.rundir import RunDir
from stages.pretrain import job as jobdir
from stages.pretrain.folders import TRAINING, current_training
from stages.pretrain.stage import PretrainStage
from tests.runs import make_run


def seeded_folder(run_dir, name: str, trained, inputs: dict, upto: int):
    """A job folder named `name` holding the trained run's checkpoints up to step `upto` and its logs."""
    job = RunDir(run_dir).job_dir("pretrain", name)
    (job / "checkpoints").mkdir(parents=True)
    for c in complete_checkpoints(trained):
        if c.step <= upto:
            shutil.copytree(c.path, job / "checkpoints" / c.name)
    shutil.copy(trained / "job_info.json", job)
    (job / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in jobdir.metrics(trained) if r["step"] <= upto))
    first = jobdir.segments(trained)[0]
    (job / "segments.jsonl").write_text(json.dumps({"event": "start", "time": first.start, "step": 0,
                                                    "world_size": 1, "device_type": "cpu"}) + "\n")
    (job / TRAINING).write_text(json.dumps({"fingerprint": "an older recipe", "inputs": inputs}))
    return job


def test_the_same_training_under_another_name_is_continued_and_other_checkpoints_are_kept(
        tmp_path, data_run, udhr_dir, trained_run, capsys):
    _, reference = trained_run
    cfg, run_dir = make_run(tmp_path, data_run, udhr_dir)
    ctx = build_context(RunDir(run_dir), load_config(cfg), "pretrain")
    mine = current_training(ctx, PretrainStage())
    inputs = {**mine, "config": {**mine["config"], "slurm": {"time_limit": "01:00:00"}}}  # launch-only: ignored
    same = seeded_folder(run_dir, "0000000000000000", reference / "pretrain", inputs, upto=3)
    other_inputs = {**mine, "config": {**mine["config"], "steps": 600}}
    other = seeded_folder(run_dir, "1111111111111111", reference / "pretrain", other_inputs, upto=3)
    capsys.readouterr()

    assert main(["stage", "pretrain", "--config", str(cfg), "--run-dir", str(run_dir)]) == 0
    err = capsys.readouterr().err
    assert f"continuing the same training in {same} (newest checkpoint step-3); its folder is now {ctx.job_dir}" in err
    published = run_dir / "pretrain"
    assert [s.start_step for s in jobdir.segments(published)] == [0, 3]  # resumed, no step 0
    assert [c.step for c in complete_checkpoints(published)] == [3, 6]
    assert f"kept {other.parent}: it holds work of other settings" in err
    assert complete_checkpoints(other) and not same.exists()

    # a stage found fresh keeps it too (and says so); --force means from scratch: everything goes
    assert main(["stage", "pretrain", "--config", str(cfg), "--run-dir", str(run_dir)]) == 0
    assert f"kept {other.parent}" in capsys.readouterr().err and other.exists()
    run = RunDir(run_dir)
    run.remove_work("pretrain")
    assert not other.exists()


def test_checkpoints_of_other_settings_are_named_and_unrecorded_ones_stop_the_stage(tmp_path, data_run, udhr_dir,
                                                                                   trained_run, capsys):
    """A folder of other settings is named when a new one starts at step 0; a folder from before job folders
    recorded their training is not guessed at: the stage stops, with the command that continues it."""
    from pipeline.stage import StageError
    from stages.pretrain.folders import settle_job_folder

    _, reference = trained_run
    cfg, run_dir = make_run(tmp_path, data_run, udhr_dir)
    ctx = build_context(RunDir(run_dir), load_config(cfg), "pretrain")
    mine = current_training(ctx, PretrainStage())
    other = seeded_folder(run_dir, "1111111111111111", reference / "pretrain",
                          {**mine, "config": {**mine["config"], "steps": 600}}, upto=3)
    legacy = seeded_folder(run_dir, "2222222222222222", reference / "pretrain", {}, upto=3)
    (legacy / TRAINING).unlink()
    with pytest.raises(StageError, match=rf"{legacy} holds checkpoints \(newest step-3\) written before job folders "
                                          rf"recorded what they train.*`mv {legacy.parent} {ctx.job_dir.parent}`"):
        settle_job_folder(ctx, PretrainStage())
    assert not ctx.job_dir.exists()
    shutil.rmtree(legacy.parent)
    capsys.readouterr()
    assert settle_job_folder(ctx, PretrainStage()) == ctx.job_dir
    err = capsys.readouterr().err
    assert f"starting a new job folder {ctx.job_dir} at step 0: the checkpoints in {other} (newest step-3) are of other" in err
    assert json.loads((ctx.job_dir / TRAINING).read_text())["fingerprint"] == ctx.fingerprint and other.exists()
