#!/usr/bin/env python3
"""Ingestion speed: our chain against datatrove 0.10.1's FineWeb-2 chain, on the same documents, in one run.

Input: ~1 KB documents built from FLORES-200 + NTREX-128 in ../shared/data (bench/reference/make_docs.py).
Measured, per core (one process):
  chain   normalize + language ID + quality/repetition filters + PII redaction (our DocumentChain)
  minhash MinHash signatures over word 5-grams (our minhash_signatures, batches of 1,000 documents)
and the chain's scaling from 1 to 2 worker processes. The reference runs bench/reference/datatrove_chain.py
in its own venv (bench/reference/README.md; `--setup-reference` creates it) and the same input.
Goals (issue 2): >= 5 MB/s per core for each, near-linear 1 -> 2 process scaling.

Agreement (issue 14): how often our keep/drop decision equals datatrove's FineWeb-2 chain on the same documents
with the same thresholds. Our chain runs with FineWeb-2's per-language values mapped onto our filters
(FW2_CONFIGS in bench/reference/datatrove_chain.py: duplicate-line fraction, top and duplicate n-gram ratios,
mean word length, alphabetic-word ratio; the paragraph and line-character repetition checks off, as FineWeb-2
has them); datatrove writes each document's first failing filter (--decisions). Every disagreement is counted
by kind: what only one side has (our language ID; datatrove's FineWebQualityFilter and stop-word check) and
what both have but decide differently (their spaCy tokens count punctuation as words, our regex words do not).

    .venv/bin/python bench/ingest_bench.py [--data ../shared/data] [--no-reference] [--setup-reference]
                                           [--reference-venv DIR]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
from collections import Counter
import os
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
RESULTS = ROOT / "bench" / "results"
REF_VENV = ROOT / ".cache" / "bench-venv-datatrove"

from stages.ingest.config import IngestConfig, SourceConfig  # noqa: E402
from stages.ingest.minhash import minhash_signatures  # noqa: E402
from stages.ingest.process import DocumentChain  # noqa: E402
from stages.ingest.readers import RawDoc  # noqa: E402
from stages.ingest.wordstats import COMPILED  # noqa: E402
from stages.ingest import normalize as _normalize  # noqa: E402

SETTINGS = IngestConfig()  # the production defaults, not tuned for the benchmark
_chains: dict[str, DocumentChain] = {}


def _chain(lang: str) -> DocumentChain:
    if lang not in _chains:
        src = SourceConfig(name="bench", kind="jsonl", path="x", licence="x", collected="2025-01")
        _chains[lang] = DocumentChain(SETTINGS, src, lang)
    return _chains[lang]


def run_chain(docs: list[dict]) -> tuple[int, int]:
    kept = 0
    for i, d in enumerate(docs):
        _, reason = _chain(d["lang"]).process(RawDoc(d["text"], i), "bench")
        kept += reason is None
    return kept, len(docs)


def timed(fn, *args, clock=time.process_time, repeat: int = 1):
    """CPU seconds of this process by default: "per core" on a machine other work may share. With `repeat`,
    the fastest of that many runs (timeit's rule: noise only ever adds time, so the minimum is the estimate)."""
    best, out = float("inf"), None
    for _ in range(repeat):
        t0 = clock()
        out = fn(*args)
        best = min(best, clock() - t0)
    return out, best


REPEAT = 3  # our measurements take a few seconds each; datatrove's takes far longer and runs once


def load_docs(data: Path) -> list[dict]:
    out = RESULTS / "reference_docs.jsonl"
    if not out.exists():
        RESULTS.mkdir(parents=True, exist_ok=True)
        rc = subprocess.run([sys.executable, str(ROOT / "bench/reference/make_docs.py"), "--data-dir", str(data), "--out", str(out)]).returncode
        if rc:
            sys.exit(rc)
    return [json.loads(line) for line in out.open(encoding="utf-8")]


def reference(input_path: Path, setup: bool, venv: Path = REF_VENV, decisions: Path | None = None) -> dict | None:
    py = venv / "bin" / "python"
    if not py.exists():
        if not setup:
            print(f"(reference skipped: no datatrove venv at {venv}; rerun with --setup-reference)", file=sys.stderr)
            return None
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(py), "-m", "pip", "install", "-q", "-r", str(ROOT / "bench/reference/requirements-datatrove.txt")], check=True)
    extra = ["--decisions", str(decisions)] if decisions else []
    out = subprocess.run([str(py), str(ROOT / "bench/reference/datatrove_chain.py"), "--input", str(input_path), *extra],
                         capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    if out.returncode:
        print(out.stderr[-3000:], file=sys.stderr)
        return None
    return json.loads(out.stdout)


def fineweb2_settings() -> IngestConfig:
    """Our filters with FineWeb-2's per-language thresholds where the two chains have the same filter."""
    from bench.reference.datatrove_chain import FW2_CONFIGS

    per_language = {}
    for lang, (dup_line, top, dup, _punct, _newline, min_avg, max_avg, alpha, _stop) in FW2_CONFIGS.items():
        per_language[lang] = {
            "max_duplicate_line_ratio": dup_line, "min_avg_word_length": float(min_avg), "max_avg_word_length": float(max_avg),
            "min_alpha_words_ratio": alpha, "top_ngram_char_ratios": dict(zip((2, 3, 4), top)),
            "dup_ngram_char_ratios": dict(zip(range(5, 11), dup)),
        }
    return IngestConfig.model_validate({"quality": {
        "max_duplicate_line_chars_ratio": 1.0, "max_duplicate_paragraph_ratio": 1.0,  # off in FineWeb-2
        "max_duplicate_paragraph_chars_ratio": 1.0, "alpha_ratio_counts_punctuation": True,  # its tokens, its ratio
        "per_language": per_language}})


def our_decisions(docs: list[dict], settings: IngestConfig) -> dict[str, str | None]:
    src = SourceConfig(name="bench", kind="jsonl", path="x", licence="x", collected="2025-01")
    chains: dict[str, DocumentChain] = {}
    out = {}
    for i, d in enumerate(docs):
        chain = chains.get(d["lang"]) or chains.setdefault(d["lang"], DocumentChain(settings, src, d["lang"]))
        out[str(d["id"])] = chain.process(RawDoc(d["text"], i), "bench")[1]
    return out


def disagreement_kind(ours: str | None, theirs: str | None) -> str:
    if ours is not None and ours.startswith("lang"):
        return f"ours only: language ID ({ours}); datatrove's chain has none"
    if theirs is not None and theirs.startswith("FineWebQualityFilter"):
        return f"datatrove only: {theirs} (we have no FineWebQualityFilter)"
    if theirs is not None and "stop_words" in theirs:
        return f"datatrove only: {theirs} (we have no stop-word check)"
    return f"both have the filter, other decision: ours {ours or 'keep'} / datatrove {theirs or 'keep'} (word tokens: spaCy vs regex)"


def agreement(docs: list[dict], theirs_path: Path, fallback: list[str] = ()) -> dict:
    theirs = {}
    for line in theirs_path.open(encoding="utf-8"):
        r = json.loads(line)
        theirs[str(r["id"])] = r["reason"]
    ours = our_decisions(docs, fineweb2_settings())
    lang_by_id = {str(d["id"]): d["lang"] for d in docs}
    kinds: Counter = Counter()
    by_lang: Counter = Counter()
    same = 0
    for doc_id, t in theirs.items():
        o = ours[doc_id]
        if (o is None) == (t is None):
            same += 1
        else:
            kinds[disagreement_kind(o, t)] += 1
            by_lang[lang_by_id[doc_id]] += 1
    n = len(theirs)
    lang_of = {str(d["id"]): d["lang"] for d in docs}
    n_ok = sum(lang_of[i] not in fallback for i in theirs)
    same_ok = n_ok - sum(v for lang, v in by_lang.items() if lang not in fallback)
    return {"documents": n, "agree": same, "agreement": same / n if n else None,
            "fallback_languages": list(fallback), "agreement_without_fallback": same_ok / n_ok if n_ok else None,
            "documents_without_fallback": n_ok,
            "both_keep": sum(ours[i] is None and t is None for i, t in theirs.items()),
            "both_drop": sum(ours[i] is not None and t is not None for i, t in theirs.items()),
            "disagreements": dict(kinds.most_common()), "disagreements_by_language": dict(by_lang.most_common())}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data")
    ap.add_argument("--no-reference", action="store_true")
    ap.add_argument("--setup-reference", action="store_true")
    ap.add_argument("--reference-venv", type=Path, default=REF_VENV, help="datatrove's own venv (created by --setup-reference)")
    ap.add_argument("--json", type=Path, default=RESULTS / "ingest_bench.json", help="Where to write the figures (bench/summary.py reads them).")
    args = ap.parse_args()
    if not args.data.exists():
        print(f"benchmark data not found at {args.data} (../shared/data is not part of a clone); nothing measured")
        return 0
    docs = load_docs(args.data)
    mb = sum(len(d["text"].encode()) for d in docs) / 1e6
    print(f"input: {len(docs):,} documents, {mb:.2f} MB, {len({d['lang'] for d in docs})} languages", file=sys.stderr)
    print("word statistics: " + ("C extension (stages/ingest/_wordstats.c)" if COMPILED else
          "Python reference: the C extension was not built (pip install -e . with a C compiler)"), file=sys.stderr)
    print("text scans: " + ("C extension (stages/ingest/_textscan.c)" if _normalize._suspect_compiled else
          "the regexes: the C extension was not built (pip install -e . with a C compiler)"), file=sys.stderr)

    run_chain(docs[:200])  # warm-up: imports, compiled regexes, cld2 tables
    (kept, n), t_chain = timed(run_chain, docs, repeat=REPEAT)
    minhash_signatures([d["text"] for d in docs[:100]], SETTINGS.dedup)
    texts = [d["text"] for d in docs]
    _, t_mh = timed(lambda: [minhash_signatures(texts[i : i + 1000], SETTINGS.dedup) for i in range(0, len(texts), 1000)],
                    repeat=REPEAT)

    halves = [docs[0::2], docs[1::2]]
    with mp.get_context("fork").Pool(2) as pool:
        pool.map(run_chain, [docs[:100], docs[100:200]])  # warm both workers
        _, t_two = timed(pool.map, run_chain, halves, clock=time.perf_counter, repeat=REPEAT)
    _, t_one_wall = timed(run_chain, docs, clock=time.perf_counter, repeat=REPEAT)

    ours = {"chain_mb_per_s": mb / t_chain, "minhash_mb_per_s": mb / t_mh, "two_process_speedup": t_one_wall / t_two,
            "kept": kept, "docs": n, "word_stats_compiled": COMPILED, "chain_seconds": t_chain, "minhash_seconds": t_mh, "two_process_seconds": t_two, "one_process_wall_seconds": t_one_wall}
    decisions = RESULTS / "datatrove_decisions.jsonl"
    ref = None if args.no_reference else reference(RESULTS / "reference_docs.jsonl", args.setup_reference,
                                                   args.reference_venv, decisions)
    agree = agreement(docs, decisions, ref["filters"].get("fallback_languages") or []) if ref else None

    print(f"\n{'measure':<34}{'ours':>12}{'datatrove':>12}{'ratio':>9}{'goal':>12}")
    rows = [("filter chain, MB/s per core", ours["chain_mb_per_s"], ref and ref["filters"].get("mb_per_cpu_s", ref["filters"]["mb_per_s"]), ">= 5 MB/s"),
            ("MinHash signatures, MB/s per core", ours["minhash_mb_per_s"], ref and ref["minhash"].get("mb_per_cpu_s", ref["minhash"]["mb_per_s"]), ">= 5 MB/s"),
            ("chain speed-up 1 -> 2 processes", ours["two_process_speedup"], None, "~2x")]
    for name, a, b, goal in rows:
        ratio = f"{a / b:>8.1f}x" if b else f"{'-':>9}"
        print(f"{name:<34}{a:>12.2f}{(f'{b:.2f}' if b else '-'):>12}{ratio}{goal:>12}")
    print(f"\nkept {kept:,} of {n:,} documents (production defaults)"
          + (f"; datatrove kept {ref['filters']['kept']:,}" if ref else ""))
    for lang, tok in ((ref or {}).get("filters", {}).get("fallback_tokenizers") or {}).items():
        print(f"datatrove's own word tokenizer for {lang} cannot run offline; it used {tok} (bench/reference/README.md)")
    if agree:
        print(f"\nkeep/drop agreement with datatrove's FineWeb-2 chain, same thresholds: {agree['agreement']:.2%} of "
              f"{agree['documents']:,} documents (goal >= 99%); both keep {agree['both_keep']:,}, both drop {agree['both_drop']:,}")
        if agree["fallback_languages"]:
            print(f"without {', '.join(agree['fallback_languages'])} (a stand-in for datatrove's own word tokenizer "
                  f"there): {agree['agreement_without_fallback']:.2%} of "
                  f"{agree['documents_without_fallback']:,} documents")
        for kind, count in agree["disagreements"].items():
            print(f"  {count:>6,}  {kind}")
        print(f"  by language: {agree['disagreements_by_language']}")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"ours": ours, "datatrove": ref, "agreement": agree}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
