"""The pretrain stage: train the EUROPA MoE with torchtitan on the run's tokenizer and shards.

A `RunStage` with a long job: `run` trains (training.py: a subprocess here, or a Slurm job on [pretrain.machine]
that it follows) in the stage's job folder, which survives crashes, until the last step's checkpoint exists, then
publishes the job folder with its record (publish.py). [pretrain.slurm] and [pretrain.machine] decide where and
how the job runs, not what it trains: they stay out of the fingerprint, so raising a time limit continues the
same checkpoints.
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from pipeline.manifest import Manifest
from pipeline.stage import RunStage, StageContext, StageOutcome
from stages.pretrain.config import PretrainConfig
from stages.pretrain.folders import holds_training
from stages.pretrain.publish import publish, summary_markdown
from stages.pretrain.record import PretrainRecord
from stages.pretrain.training import TrainingJob

Ctx = StageContext[PretrainConfig]


class PretrainStage(RunStage[PretrainConfig]):
    name: ClassVar[str] = "pretrain"
    code_version: ClassVar[str] = "4"
    config_model = PretrainConfig
    long_job: ClassVar[bool] = True  # trains in ctx.job_dir, which evaluation reads while the job runs
    launch_only_settings: ClassVar[tuple[str, ...]] = ("slurm", "machine")  # where it runs, not what it trains

    def keep_work(self, folder: Path) -> bool:
        """A work folder of other settings that holds checkpoints outlives a publish: only --force deletes it."""
        return holds_training(folder)

    def run(self, ctx: Ctx, out_dir: Path) -> StageOutcome:
        job = TrainingJob(self, ctx).run()
        return publish(ctx.settings, job, out_dir)

    def summary_markdown(self, manifest: Manifest) -> str:
        return summary_markdown(PretrainRecord.model_validate(manifest.statistics))
