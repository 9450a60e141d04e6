"""Settings of the evaluate stage, `europa evaluate` and the scheduled evaluation: `[evaluate]`, its
`[[evaluate.sets]]` (texts scored in bits per byte), `[[evaluate.tasks]]` (lm-evaluation-harness tasks on the
Hugging Face export) and `[evaluate.job]` (where a checkpoint is scored: in this process, or as a distributed
job with the training's parallelism)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from pipeline.config import StrictModel, resolve_config_path


class EvalSetConfig(StrictModel):
    """An external evaluation set in the FLORES-200 layout: one file per language, one sentence per line."""

    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$", description="Short name used in the metrics, e.g. flores-devtest.")
    path: str = Field(description="Folder of the files; relative to the config file.")
    pattern: str = Field("{flores}.devtest", description="File name per language; placeholders {lang}, {iso3}, {flores}.")

    @field_validator("path")
    @classmethod
    def _resolve(cls, v: str, info: ValidationInfo) -> str:
        return resolve_config_path(v, info)

    @field_validator("pattern")
    @classmethod
    def _known_placeholders(cls, v: str) -> str:
        try:
            v.format(lang="x", iso3="x", flores="x")
        except (KeyError, IndexError, ValueError) as e:
            raise ValueError(f"pattern {v!r} uses an unknown placeholder ({e}); use {{lang}}, {{iso3}} or {{flores}}") from None
        return v


class EvalTaskConfig(StrictModel):
    """lm-evaluation-harness tasks, one per language, run offline on the checkpoint's Hugging Face export."""

    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$", description="Short name used in the metrics and the report, e.g. belebele.")
    task: str = Field(description="lm-eval task name per language; placeholders {lang}, {iso3}, {flores}, e.g. belebele_{flores}, "
                      "xnli_{lang}, global_mmlu_{lang}. Languages whose task lm-eval does not know are listed as missing.")
    include_path: str | None = Field(None, description="Folder of extra lm-eval task YAML files (e.g. tasks the project builds: "
                                     "python -m stages.evaluate.cloze); relative to the config file.")
    build: Literal["validation"] | None = Field(
        None, description="validation: the evaluator builds the project's multiple-choice cloze task (task = "
        "\"europa_cloze_{lang}\") from the shards' held-out documents into <run>/eval/tasks/<name>/ (no include_path needed).")
    dataset_path: str | None = Field(None, description="Local copy of the tasks' dataset (a folder `datasets.load_dataset` reads); "
                                     "replaces each task's dataset_path, since the Hugging Face Hub is not reachable offline.")
    metric: str = Field("acc", description="The lm-eval metric reported per language (acc, acc_norm, ...).")
    num_fewshot: int = Field(0, ge=0)
    limit: int | None = Field(None, ge=1, description="At most this many examples per language (time); all when absent.")

    @field_validator("include_path", "dataset_path")
    @classmethod
    def _resolve(cls, v: str | None, info: ValidationInfo) -> str | None:
        return resolve_config_path(v, info)

    @field_validator("task")
    @classmethod
    def _known_placeholders(cls, v: str) -> str:
        try:
            v.format(lang="x", iso3="x", flores="x")
        except (KeyError, IndexError, ValueError) as e:
            raise ValueError(f"task {v!r} uses an unknown placeholder ({e}); use {{lang}}, {{iso3}} or {{flores}}") from None
        if not any(f"{{{p}}}" in v for p in ("lang", "iso3", "flores")):
            raise ValueError(f"task {v!r} names no language: every language would run the same task; give the "
                             "per-language name with a placeholder, e.g. belebele_{flores} or xnli_{lang}")
        return v

    @model_validator(mode="after")
    def _built_task_name(self) -> EvalTaskConfig:
        if self.build and (self.task != "europa_cloze_{lang}" or self.include_path):
            raise ValueError('build = "validation" builds the task europa_cloze_{lang} itself: set task = '
                             '"europa_cloze_{lang}" and no include_path')
        return self


class EvalJobConfig(StrictModel):
    """Where a checkpoint is scored. `local`: this process loads the whole model (fine while it fits one device).
    `torchrun` (ranks on this machine) and `slurm` (JUPITER: on [pretrain.machine] with [pretrain.slurm], submitted
    through stages/cluster): a job that shards the model as training does, FSDP2 over all ranks and the
    routed experts over `expert_parallel` of them (torchtitan's parallelize), for checkpoints no device holds."""

    launcher: Literal["local", "torchrun", "slurm"] = "local"
    nodes: int = Field(1, ge=1, description="slurm: nodes of the evaluation job (each with [pretrain.parallelism] processes_per_node ranks: one per GPU of [pretrain.machine]).")
    processes_per_node: int = Field(1, ge=1, description="torchrun: ranks on this machine (slurm: [pretrain.parallelism] processes_per_node per node).")
    expert_parallel: int = Field(1, ge=1, description="Ranks the routed experts are spread over; must divide the ranks.")
    precision: Literal["float32", "bfloat16"] = Field(
        "float32", description="Parameter dtype, stored and computed: bfloat16 halves the memory per rank; float32 gives the one-process figures.")
    time_limit: str = Field("04:00:00", pattern=r"^(\d+-)?\d{1,2}:\d{2}:\d{2}$", description="slurm: time limit of one evaluation job.")
    poll_s: float = Field(60.0, gt=0, description="slurm: seconds between looks at a running evaluation job.")

    @model_validator(mode="after")
    def _experts_divide_ranks(self) -> EvalJobConfig:
        if self.launcher == "torchrun" and self.processes_per_node % self.expert_parallel:
            raise ValueError(f"expert_parallel {self.expert_parallel} must divide processes_per_node "
                             f"{self.processes_per_node} (the experts are spread over the ranks)")
        if self.launcher == "local" and (self.processes_per_node, self.expert_parallel) != (1, 1):
            raise ValueError('launcher "local" evaluates in this one process; set launcher = "torchrun" (or "slurm") '
                             "to use processes_per_node / expert_parallel")
        return self


class EvaluateConfig(StrictModel):
    sets: list[EvalSetConfig] = Field(default_factory=list, description="External sets besides the shards' validation split.")
    validation_split: bool = Field(True, description="Evaluate the shards stage's held-out documents per language.")
    batch_size: int = Field(8, ge=1, description="Sequences per forward pass (memory: batch x seq_len x vocab logits).")
    seq_len: int | None = Field(None, ge=8, description="Tokens per sequence; default: [pretrain] seq_len.")
    max_tokens_per_language: int = Field(200_000, ge=1, description="Bound on evaluated tokens per language and set (time and memory).")
    regression_threshold: float = Field(
        0.02, ge=0, description="Flag a language whose bits per byte worsen (or a task's accuracy drops) by more than this fraction "
        "since the previous checkpoint, and by more than regression_sigma standard errors of the change.")
    regression_sigma: float = Field(
        2.0, ge=0, description="Standard errors of the change (its noise) a worsening must exceed too to be flagged; 0 = the threshold alone.")
    tasks: list[EvalTaskConfig] = Field(default_factory=list, description="lm-evaluation-harness tasks on the export, per language.")
    job: EvalJobConfig = Field(default_factory=EvalJobConfig)
    device: Literal["auto", "cpu", "cuda"] = "auto"
    cron: str = Field("*/30 * * * *", description="Default schedule of `europa eval-schedule` (cron, UTC).")

    @model_validator(mode="after")
    def _unique_names(self) -> EvaluateConfig:
        names = [s.name for s in self.sets] + [t.name for t in self.tasks]
        dup = sorted({n for n in names if names.count(n) > 1} | ({"val"} & set(names)))
        if dup:
            raise ValueError(f"[[evaluate.sets]]/[[evaluate.tasks]] name {dup[0]!r} is used twice (or is 'val', the held-out "
                             "split's); give each a name of its own")
        return self
