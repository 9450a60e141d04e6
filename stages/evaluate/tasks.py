"""Downstream tasks: lm-evaluation-harness on the checkpoint's Hugging Face export, offline, per language.

What is fixed here, and why:
- offline: HF_HUB_OFFLINE=1 and HF_DATASETS_OFFLINE=1 before lm-eval, transformers and datasets look (the Hub
  is unreachable on compute nodes and here); a task's data comes from a local folder ([[evaluate.tasks]]
  dataset_path replaces each task's `dataset_path`) or from its own YAML (include_path);
- BOS: `add_bos_token=True`. Multiple-choice scores compare continuations after a context, and the model was
  trained with BOS before every document, so the context must start with it (without, every choice is scored
  off-distribution). Perplexity tasks (loglikelihood_rolling) would want False: lm-eval then prefixes BOS itself
  and True adds a second, which inflates the figure; bits per byte is the project's own evaluator's job, so no
  such task is configured by default;
- float32 weights (the fp32 export): the figures are those of the checkpoint, not of a bf16 rounding of it;
- per language: each [[evaluate.tasks]] names an lm-eval task per language through a template
  (belebele_{flores}, xnli_{lang}, ...); a language whose task lm-eval does not know, or whose data is not
  there, is listed as missing with the reason, never silently dropped.
The standard error is lm-eval's (for a mean metric such as accuracy: the sample standard deviation / sqrt(n)).
"""

from __future__ import annotations

import contextlib
import functools
import io
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline.languages import expand_template
from stages.evaluate.config import EvalTaskConfig

OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


@dataclass
class TaskResults:
    results: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)  # task -> lang -> figures
    missing: dict[str, list[str]] = field(default_factory=dict)  # task -> languages
    reasons: dict[str, dict[str, str]] = field(default_factory=dict)  # task -> lang -> why it is missing


@contextlib.contextmanager
def offline():
    """The Hub is not reachable: tell transformers, datasets and huggingface_hub before they try, for the
    duration of the tasks only (the process may read from the Hub otherwise, e.g. an ingest source)."""
    import datasets.config
    import huggingface_hub.constants

    env = {**OFFLINE, "TQDM_DISABLE": "1"}  # and no progress bars: lm-eval's would flood the log
    saved_env = {k: os.environ.get(k) for k in env}
    saved = (datasets.config.HF_HUB_OFFLINE, huggingface_hub.constants.HF_HUB_OFFLINE)
    os.environ.update(env)
    datasets.config.HF_HUB_OFFLINE = huggingface_hub.constants.HF_HUB_OFFLINE = True
    try:
        # tqdm reads TQDM_DISABLE when it is imported, so the bars datasets and lm-eval draw on stderr go to the
        # run's log file instead of the terminal (the stage reports each task's outcome itself)
        with contextlib.redirect_stderr(_ToLog("europa.lm_eval")):
            yield
    finally:
        datasets.config.HF_HUB_OFFLINE, huggingface_hub.constants.HF_HUB_OFFLINE = saved
        for k, v in saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


class _ToLog(io.TextIOBase):
    """A text stream whose lines go to a logger (the run's log file), not to the terminal."""

    def __init__(self, name: str):
        self.log, self.buffer_ = logging.getLogger(name), ""

    def write(self, text: str) -> int:
        self.buffer_ += text.replace("\r", "\n")
        *lines, self.buffer_ = self.buffer_.split("\n")
        for line in lines:
            if line.strip():
                self.log.info(line.strip())
        return len(text)


@functools.lru_cache(maxsize=8)
def manager(include_path: str | None, defaults: bool):
    """lm-eval's task index over the YAML files it may use (~14,700 with its own: seconds to build), once per
    process and kind (the files do not change while it runs)."""
    from lm_eval.tasks import TaskManager

    return TaskManager(include_path=include_path, include_defaults=defaults)


def with_dataset_path(tm: Any, name: str, dataset_path: str) -> dict[str, Any]:
    """The registered task's whole config with its dataset_path replaced, as a spec for TaskManager.load.

    Why not {"task": name, "dataset_path": ...}: lm-eval 0.4.13 (pinned) builds a dict spec as a new inline task
    from the dict alone, so the registered task's YAML (dataset_name, prompts, splits, metrics) would be lost and
    a per-language config such as belebele's could not load. The YAML is read through the index's private
    entry and factory: the one place that depends on them, checked by tests/evaluate/test_tasks.py."""
    entry = tm._index[name]
    return tm._factory._load_full_config(entry, {"dataset_path": dataset_path})


def check_tasks(tasks: list[EvalTaskConfig], languages: list[str]) -> None:
    """Settings no checkpoint can satisfy, refused with one line before any checkpoint is loaded: a dataset_path
    that is not there, a task lm-eval knows under none of the run's languages (a per-language gap is reported as
    missing instead). Built tasks (build = "validation") are made by the evaluator and not checked here."""
    from pipeline.stage import InputError

    for cfg in tasks:
        if cfg.dataset_path and not Path(cfg.dataset_path).exists():
            raise InputError(f"[[evaluate.tasks]] {cfg.name}: dataset_path {cfg.dataset_path} does not exist; point it "
                             "at the local copy of the task's dataset (the Hub is not reachable offline)")
        if cfg.include_path and not Path(cfg.include_path).is_dir():
            raise InputError(f"[[evaluate.tasks]] {cfg.name}: include_path {cfg.include_path} is not a folder of lm-eval "
                             "task YAML files")
    unbuilt = [cfg for cfg in tasks if not cfg.build]
    if not unbuilt:
        return
    with offline():
        logging.getLogger("lm_eval").setLevel(logging.WARNING)
        for cfg in unbuilt:
            names = {expand_template(cfg.task, lang) for lang in languages}
            known = set(manager(cfg.include_path, False).all_tasks) if cfg.include_path else set()
            if not names & known:
                known = set(manager(cfg.include_path, True).all_tasks)
            if not names & known:
                example = sorted(names)[0]
                raise InputError(f"[[evaluate.tasks]] {cfg.name}: lm-eval knows no task {cfg.task!r} for any language of "
                                 f"the run (e.g. {example}); check the name with `lm-eval ls tasks`, or add include_path")


def _load_tasks(tasks: list[EvalTaskConfig], languages: list[str],
                out: TaskResults) -> list[tuple[EvalTaskConfig, dict[str, Any], Any]]:
    """Per task config: (it, {lang: lm-eval task object}, its task manager); what cannot load goes to `out`'s
    missing languages with the reason."""
    loaded: list[tuple[EvalTaskConfig, dict[str, Any], Any]] = []
    for cfg in tasks:
        names = {lang: expand_template(cfg.task, lang) for lang in languages}
        # tasks of an include_path (the project's own) need no index of lm-eval's 14,700
        tm = manager(cfg.include_path, False) if cfg.include_path else None
        if tm is None or not set(names.values()) & set(tm.all_tasks):
            tm = manager(cfg.include_path, True)
        known = set(tm.all_tasks)
        by_lang: dict[str, Any] = {}
        for lang, name in names.items():
            if name not in known:
                out.missing.setdefault(cfg.name, []).append(lang)
                out.reasons.setdefault(cfg.name, {})[lang] = f"lm-eval has no task {name}"
                continue
            kind = getattr(getattr(tm._index.get(name), "kind", None), "name", "TASK")  # the index's entry
            if kind in ("GROUP", "TAG"):  # loading one would give its first subtask's score under its name
                out.missing.setdefault(cfg.name, []).append(lang)
                out.reasons.setdefault(cfg.name, {})[lang] = (
                    f"{name} is an lm-eval {kind.lower()} of several tasks, which the evaluator does not score as "
                    "one task yet: name one of its tasks")
                continue
            spec: Any = with_dataset_path(tm, name, cfg.dataset_path) if cfg.dataset_path else name
            try:
                by_lang[lang] = next(iter(tm.load(spec)["tasks"].values()))
            except Exception as e:  # noqa: BLE001 - a task whose data is absent is reported, not fatal
                why = str(e).strip().splitlines()[-1][:200] if str(e).strip() else type(e).__name__
                out.missing.setdefault(cfg.name, []).append(lang)
                out.reasons.setdefault(cfg.name, {})[lang] = f"{name}: {why}"
        loaded.append((cfg, by_lang, tm))
    return loaded


def task_texts(tasks: list[EvalTaskConfig], languages: list[str]) -> dict[str, dict[str, list[str]]]:
    """{task name: {lang: texts}}: each evaluated example as the model reads it (the prompt, then each choice or
    the target), for the contamination check. Built tasks (build = "validation") are the held-out split, which
    is checked as such; a task that cannot load has no texts (its evaluation reports why)."""
    out: dict[str, dict[str, list[str]]] = {}
    with offline():
        logging.getLogger("lm_eval").setLevel(logging.WARNING)
        for cfg, by_lang, _ in _load_tasks([t for t in tasks if not t.build], languages, TaskResults()):
            for lang, task in by_lang.items():
                texts = []
                for doc in task.eval_docs:
                    prompt = task.doc_to_text(doc)
                    if task.OUTPUT_TYPE == "multiple_choice":
                        rest = task.doc_to_choice(doc)
                    else:
                        rest = [task.doc_to_target(doc)]
                    texts.append(" ".join(str(x) for x in [prompt, *rest] if isinstance(x, str) and x))
                out.setdefault(cfg.name, {})[lang] = texts
    return out


def run_tasks(hf_dir: Path, tasks: list[EvalTaskConfig], languages: list[str], *, device: str,
              batch_size: int) -> TaskResults:
    """The tasks on a Hugging Face model folder (the checkpoint's fp32 export), through lm-eval's HFLM."""
    def hflm():
        from lm_eval.models.huggingface import HFLM

        return HFLM(pretrained=str(hf_dir), device=device, dtype="float32", batch_size=batch_size,
                    add_bos_token=True, trust_remote_code=False)

    with offline():
        return evaluate_tasks(hflm, tasks, languages)


def evaluate_tasks(make_lm, tasks: list[EvalTaskConfig], languages: list[str]) -> TaskResults:
    """The tasks through lm-eval on the model `make_lm()` returns (made only when some task loads): HFLM on an
    export in one process, or sharded_lm.ShardedLM on the distributed job's ranks. Call inside `offline()`."""
    logging.getLogger("lm_eval").setLevel(logging.WARNING)
    from lm_eval import simple_evaluate

    out = TaskResults()

    loaded = _load_tasks(tasks, languages, out)
    if not any(by_lang for _, by_lang, _ in loaded):
        return out
    lm = make_lm()
    for cfg, by_lang, tm in loaded:
        if not by_lang:
            continue
        res = simple_evaluate(model=lm, tasks=list(by_lang.values()), task_manager=tm, num_fewshot=cfg.num_fewshot,
                              limit=cfg.limit,
                              log_samples=False, bootstrap_iters=1000, random_seed=0, numpy_random_seed=0,
                              torch_random_seed=0, fewshot_random_seed=0)
        if res is None:  # lm-eval returns the figures on the first rank of a node only (LOCAL_RANK 0)
            continue
        for lang, task in by_lang.items():
            name = task.task_name
            figures = res["results"].get(name, {})
            if f"{cfg.metric},none" not in figures:
                raise ValueError(f"[[evaluate.tasks]] {cfg.name}: lm-eval task {name} reports no metric {cfg.metric!r} "
                                 f"(it has {', '.join(sorted(k.split(',')[0] for k in figures if ',' in k))}); "
                                 "set metric to one of those")
            stderr = figures.get(f"{cfg.metric}_stderr,none")
            out.results.setdefault(cfg.name, {})[lang] = {
                "metric": cfg.metric, "value": float(figures[f"{cfg.metric},none"]),
                "stderr": float(stderr) if isinstance(stderr, (int, float)) else None,
                "examples": int(res["n-samples"][name]["effective"]), "lm_eval_task": name,
                "num_fewshot": cfg.num_fewshot}
    return out
