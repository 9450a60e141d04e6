#!/usr/bin/env python3
"""Synthetic 24-language corpora of any size from FLORES-200 + NTREX-128 text, with planted duplicates.

Why synthetic: the ingest stage must be measured at sizes (gigabytes) far beyond the real text available here
(15 MB), with duplicates whose truth is known. Each language's documents are drawn from its own sentences (so
language ID and the quality filters see real prose of that language):
- an *original* is 4-14 random sentences of the language, every third sentence with one word swapped for a
  random word of the language (so originals differ from each other; two originals share at most a sentence or
  two, a Jaccard similarity of their word 5-grams far below the 0.7 threshold);
- an *exact copy* (rate `exact`) is an original with other letter case and whitespace (the exact key ignores both);
- a *near copy* (rate `near`) is an original with one contiguous span of 2-5% of its words replaced by random
  words of the language (Jaccard of 5-gram sets ~0.75-0.9);
copies are shuffled among the originals (a copy may come first) and everything is written as JSONL files of
about `file_bytes`, `data/<lang>/NNNN.jsonl`, each line {"text", "id": "<family>:<member>:<kind>", "url"} with
kind o (original), e (exact copy) or n (near copy), so a document's family and kind are known from its id.

    .venv/bin/python bench/scale_corpus.py OUT --bytes 30e6 [--data ../shared/data]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pipeline.languages import EU_LANGUAGE_CODES, LANGUAGES  # noqa: E402

NTREX = {"en": "eng-GB", "lv": "lav"}


def sentences(data: Path, lang: str) -> list[str]:
    code = LANGUAGES[lang].flores
    out = []
    for split in ("dev", "devtest"):
        out += (data / "flores200" / split / f"{code}.{split}").read_text(encoding="utf-8").splitlines()
    out += (data / "ntrex128" / f"newstest2019-ref.{NTREX.get(lang, LANGUAGES[lang].iso3)}.txt").read_text(encoding="utf-8").splitlines()
    return [s.strip() for s in out if len(s.split()) >= 5]


def _near(text: str, rng: random.Random, vocab: list[str]) -> str:
    words = text.split(" ")
    k = max(1, round(len(words) * rng.uniform(0.02, 0.05)))
    start = rng.randrange(0, len(words) - k)
    words[start : start + k] = rng.choices(vocab, k=k)
    return " ".join(words)


def _exact(text: str, rng: random.Random) -> str:
    head, _, tail = text.partition(" ")
    return "  " + head.upper() + " \n " + tail.replace(". ", ".  ", 3) + " "


def write_language(data: Path, lang: str, folder: Path, n_bytes: int, seed: int, *, exact: float, near: float,
                   file_bytes: int) -> dict[str, int]:
    rng = random.Random(seed)
    pool = sentences(data, lang)
    vocab = sorted({w for s in pool for w in s.split() if w.isalpha()})
    folder.mkdir(parents=True, exist_ok=True)
    docs: list[tuple[str, str]] = []
    size = family = 0
    counts = {"original": 0, "exact": 0, "near": 0, "bytes": 0}
    while size < n_bytes:
        picked = rng.sample(pool, rng.randint(4, 14))
        for i in range(0, len(picked), 3):
            words = picked[i].split(" ")
            words[rng.randrange(len(words))] = rng.choice(vocab)
            picked[i] = " ".join(words)
        text = " ".join(picked)
        members = [("original", text)]
        if rng.random() < exact:
            members.append(("exact", _exact(text, rng)))
        if rng.random() < near:
            members.append(("near", _near(text, rng, vocab)))
        for m, (kind, t) in enumerate(members):
            docs.append((t, f"{family}:{m}:{kind[0]}"))
            counts[kind] += 1
            size += len(t.encode())
        family += 1
    rng.shuffle(docs)
    out, written, index = None, file_bytes, 0
    for text, ident in docs:
        if written >= file_bytes:
            if out:
                out.close()
            out = (folder / f"{index:04d}.jsonl").open("w", encoding="utf-8")
            index, written = index + 1, 0
        fam = ident.split(":")[0]
        line = json.dumps({"text": text, "id": ident, "url": f"https://site{int(fam) % 997}.example.{lang}/{fam}"}, ensure_ascii=False)
        out.write(line + "\n")
        written += len(line) + 1
        counts["bytes"] += len(text.encode())
    if out:
        out.close()
    return counts


def write_corpus(data: Path, out: Path, total_bytes: float, *, seed: int = 0, exact: float = 0.04, near: float = 0.06,
                 file_bytes: int = 8 << 20) -> dict[str, dict[str, int]]:
    """The corpus under `out/data/<lang>/`; returns per language the planted counts (cached in out/truth.json)."""
    truth_path = out / "truth.json"
    if truth_path.exists():
        truth = json.loads(truth_path.read_text())
        if truth.get("_bytes") == total_bytes:
            return {k: v for k, v in truth.items() if not k.startswith("_")}
    per_lang = int(total_bytes / len(EU_LANGUAGE_CODES))
    truth = {lang: write_language(data, lang, out / "data" / lang, per_lang, seed + i, exact=exact, near=near,
                                  file_bytes=file_bytes)
             for i, lang in enumerate(EU_LANGUAGE_CODES)}
    truth_path.write_text(json.dumps({**truth, "_bytes": total_bytes}))
    return truth


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", type=Path)
    ap.add_argument("--bytes", type=float, required=True, help="text bytes in all (split evenly over the 24 languages)")
    ap.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data")
    args = ap.parse_args()
    truth = write_corpus(args.data, args.out, args.bytes)
    print(json.dumps({k: sum(v[k] for v in truth.values()) for k in ("original", "exact", "near", "bytes")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
