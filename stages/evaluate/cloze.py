"""A multiple-choice task the project builds from its own text, in lm-evaluation-harness's YAML format, for every
language that has text: each sentence is cut at a word boundary near its middle; the model sees the first half
and chooses the true second half among it and the second halves of 3 other sentences of the same language
(distractors drawn with a fixed seed). Chance is 1/4; a model that learned the language does better.

It exists because the standard tasks (belebele, Global-MMLU, XNLI, ...) come from the Hugging Face Hub, which is
unreachable offline and in the tests: this one is built from FLORES-layout files ({flores}.devtest, one sentence
per line), from the run's held-out validation documents, or from all its ingested text (training text: then it
measures fit, not generalisation), and runs through `europa evaluate` exactly like them
(`[[evaluate.tasks]] include_path = <folder>, task = "europa_cloze_{lang}"`, or `build = "validation"` and
the evaluator builds it into <run>/eval/tasks/<name>/ itself).

    python -m stages.evaluate.cloze --out DIR (--flores DIR [--pattern {flores}.devtest] | --validation R |
        --run-dir R) [--languages de,fr,...] [--max-examples 200] [--seed 0]

writes DIR/<lang>.jsonl (context, choices, label) and DIR/europa_cloze_<lang>.yaml per language.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
from pathlib import Path

TASK_PREFIX = "europa_cloze"
N_CHOICES = 4
MIN_WORDS = 6  # a sentence shorter than this has no meaningful halves

_SENTENCE_END = re.compile(r"(?<=[.!?;])\s+")


def split_sentence(sentence: str) -> tuple[str, str] | None:
    """(first half, second half) at the word boundary nearest the middle, or None for a too-short sentence."""
    words = sentence.split()
    if len(words) < MIN_WORDS:
        return None
    cut = len(words) // 2
    return " ".join(words[:cut]), " ".join(words[cut:])


def examples(sentences: list[str], *, seed: int, max_examples: int) -> list[dict]:
    """The task's examples for one language: context, N_CHOICES choices, the index of the true continuation."""
    halves = [h for h in (split_sentence(s.strip()) for s in sentences) if h]
    seen: set[str] = set()
    halves = [h for h in halves if not (h[1] in seen or seen.add(h[1]))]  # distinct endings only
    if len(halves) < N_CHOICES:
        return []
    rng = random.Random(seed)
    out = []
    for i, (context, ending) in enumerate(halves[:max_examples]):
        others = rng.sample([j for j in range(len(halves)) if j != i], N_CHOICES - 1)
        choices = [ending] + [halves[j][1] for j in others]
        rng.shuffle(choices)
        out.append({"id": i, "context": context, "choices": choices, "label": choices.index(ending)})
    return out


def task_yaml(lang: str, data_file: Path) -> str:
    """lm-eval's task definition: a local JSON file (the `json` builder: no Hub), multiple choice, accuracy."""
    return "\n".join([
        f"task: {TASK_PREFIX}_{lang}",
        "dataset_path: json",
        "dataset_kwargs:",
        "  data_files:",
        f"    test: {json.dumps(str(data_file.resolve()))}",
        "test_split: test",
        "output_type: multiple_choice",
        'doc_to_text: "{{context}}"',
        'doc_to_choice: "{{choices}}"',
        "doc_to_target: label",
        "metric_list:",
        "  - metric: acc",
        "    aggregation: mean",
        "    higher_is_better: true",
        "  - metric: acc_norm",
        "    aggregation: mean",
        "    higher_is_better: true",
        "metadata:",
        "  version: 1.0",
        "",
    ])


def build(sentences_by_lang: dict[str, list[str]], out: Path, *, seed: int = 0, max_examples: int = 200) -> dict[str, int]:
    """Write the task for every language with at least N_CHOICES usable sentences; returns examples per language."""
    out.mkdir(parents=True, exist_ok=True)
    counts = {}
    for lang, sentences in sorted(sentences_by_lang.items()):
        rows = examples(sentences, seed=seed, max_examples=max_examples)
        if not rows:
            continue
        data = out / f"{lang}.jsonl"
        data.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
        (out / f"{TASK_PREFIX}_{lang}.yaml").write_text(task_yaml(lang, data), encoding="utf-8")
        counts[lang] = len(rows)
    return counts


def sentences_from_flores(folder: Path, pattern: str, languages: list[str]) -> dict[str, list[str]]:
    from pipeline.languages import expand_template

    out = {}
    for lang in languages:
        path = Path(folder) / expand_template(pattern, lang)
        if path.is_file():
            out[lang] = [ln for ln in path.read_text(encoding="utf-8").splitlines() if ln.strip()]
    return out


def sentences_from_run(run_dir: Path, languages: list[str]) -> dict[str, list[str]]:
    """The sentences of the run's ingested documents (ingest/data/<lang>/*.parquet), in document order."""
    import pyarrow.parquet as pq

    out: dict[str, list[str]] = {}
    for lang in languages:
        for part in sorted((Path(run_dir) / "ingest" / "data" / lang).glob("*.parquet")):
            for text in pq.read_table(part, columns=["text"]).column("text").to_pylist():
                out.setdefault(lang, []).extend(s for s in _SENTENCE_END.split(text) if s.strip())
    return out


def sentences_from_validation(run_dir: Path, languages: list[str]) -> dict[str, list[str]]:
    """The sentences of the shards stage's held-out documents (never trained on), decoded with the run's
    tokenizer: a held-out task from the run's own text."""
    import sentencepiece as spm

    from stages.evaluate.texts import validation_texts

    sp = spm.SentencePieceProcessor(model_file=str(Path(run_dir) / "tokenizer" / "tokenizer.model"))
    by_lang, _ = validation_texts(Path(run_dir) / "shards", languages, sp, max_tokens=1 << 62)
    out: dict[str, list[str]] = {}
    for lang, texts in by_lang.items():
        for doc in texts.docs:
            text = sp.decode([int(t) for t in doc if t != sp.eos_id()])
            out.setdefault(lang, []).extend(s for s in _SENTENCE_END.split(text) if s.strip())
    return out


def main(argv: list[str] | None = None) -> int:
    from pipeline.languages import LANGUAGES

    ap = argparse.ArgumentParser(prog="python -m stages.evaluate.cloze", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, type=Path)
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--flores", type=Path, help="folder of one-sentence-per-line files (FLORES-200 layout)")
    src.add_argument("--run-dir", type=Path, help="a run whose ingest stage has run: its documents' sentences")
    src.add_argument("--validation", type=Path, metavar="RUN_DIR",
                     help="a run whose shards stage has run: the sentences of its held-out documents")
    ap.add_argument("--pattern", default="{flores}.devtest")
    ap.add_argument("--languages", default=",".join(LANGUAGES))
    ap.add_argument("--max-examples", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    langs = [x.strip() for x in args.languages.split(",") if x.strip()]
    if args.flores:
        sentences = sentences_from_flores(args.flores, args.pattern, langs)
    elif args.validation:
        sentences = sentences_from_validation(args.validation, langs)
    else:
        sentences = sentences_from_run(args.run_dir, langs)
    counts = build(sentences, args.out, seed=args.seed, max_examples=args.max_examples)
    if not counts:
        print(f"no language had {N_CHOICES} sentences of {MIN_WORDS}+ words; nothing written", file=sys.stderr)
        return 2
    print(f"wrote {TASK_PREFIX}_<lang> for {len(counts)} languages into {args.out}: "
          + ", ".join(f"{k} {v}" for k, v in counts.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
