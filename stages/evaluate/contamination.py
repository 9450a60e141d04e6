"""Contamination: which evaluated texts share a word 13-gram with the training split.

A score on text the model trained on measures memory, not generalisation, so every set the stage scores (the
shards' held-out split and each [[evaluate.sets]]) is checked against the training shards of its language:
word n-grams (lowercased, split on whitespace, the n = 13 of GPT-3's and the Llama reports' checks), an
evaluated text counts as contaminated when any of its n-grams occurs in a training document of the language.
Texts shorter than n words cannot match and are counted apart. The training split is read back by decoding its
shards (the tokenizer round-trips exactly, which the shards stage checks), one document at a time: memory is
the evaluation n-grams, time is one pass over the training tokens. Downstream tasks are checked the same way,
as sets named `task:<name>`: each example as the model reads it, its prompt and its choices (tasks.task_texts).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from stages.ngrams import N, ngrams

METHOD = (f"word {N}-grams (lowercased, whitespace-split) of each evaluated text against every training document "
          "of its language (the shards' train split, decoded); a text is contaminated when one of its n-grams occurs "
          f"there; texts under {N} words cannot match")


@dataclass
class Overlap:
    texts: int = 0  # evaluated texts
    short: int = 0  # of them, under n words
    contaminated: int = 0  # of them, sharing an n-gram with the training split
    training_documents: int = 0  # training documents that share an n-gram with any evaluated text of the set


def check(shards_dir: Path, eval_texts: dict[str, dict[str, list[str]]], sp) -> dict[str, dict[str, Overlap]]:
    """{set: {lang: Overlap}} for `eval_texts` ({set: {lang: texts}}) against the training shards."""
    from europa_model.data.streams import open_shards

    languages = sorted({lang for langs in eval_texts.values() for lang in langs})
    _, by_lang = open_shards(shards_dir, "train", languages)
    eos = sp.eos_id()
    out: dict[str, dict[str, Overlap]] = {s: {} for s in eval_texts}
    for lang in languages:
        grams = {s: [ngrams(t) for t in langs[lang]] for s, langs in eval_texts.items() if lang in langs}
        wanted = {s: set().union(*g) if g else set() for s, g in grams.items()}
        every = set().union(*wanted.values())
        seen: set[int] = set()
        touched = {s: 0 for s in grams}
        for shard in by_lang.get(lang, []) if every else []:
            for i in range(len(shard)):
                ids = shard.doc(i).tolist()
                found = ngrams(sp.decode(ids[:-1] if ids and ids[-1] == eos else ids)) & every
                if found:
                    seen |= found
                    for s in grams:
                        touched[s] += bool(found & wanted[s])
        for s, per_text in grams.items():
            out[s][lang] = Overlap(texts=len(per_text), short=sum(not g for g in per_text),
                                   contaminated=sum(bool(g & seen) for g in per_text), training_documents=touched[s])
    return out


def markdown(result: dict[str, dict[str, Overlap]]) -> str:
    lines = ["## Contamination", "", METHOD + ".", "",
             "| set | language | texts | under 13 words | contaminated | share | training documents |",
             "|---|---|---:|---:|---:|---:|---:|"]
    for s, langs in result.items():
        for lang, o in sorted(langs.items()):
            share = o.contaminated / o.texts if o.texts else 0.0
            lines.append(f"| {s} | {lang} | {o.texts:,} | {o.short:,} | {o.contaminated:,} | {share:.1%} | "
                         f"{o.training_documents:,} |")
    return "\n".join(lines) + "\n"
