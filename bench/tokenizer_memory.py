"""The memory part of bench/tokenizer_bench.py: sampling + SentencePiece training, peak memory and time against the
sample size, at 32k and 262k pieces, through the stage's own code (stages.tokenizer.sample.plan_sample and
write_language_sample reading ingest-style Parquet, then train_sentencepiece in a child process).

Corpus: per language, the NTREX-128 and FLORES-200 dev sentences grouped five to a document (~1 KB), repeated
until the language has --memory-corpus-chars / 24 characters; on every repetition 15% of the words get a seeded
random suffix, so the distinct words keep growing with the corpus the way a web crawl's do (names, typos,
numbers). That is pessimistic: real text's distinct words grow slower, so SentencePiece needs less on it than
measured here. Written like the ingest stage's output: files of 2,000 documents in row groups of 250.

BPE at 32k and 262k pieces by default; --memory-unigram adds unigram at 32k (samples up to 16M characters).
Reported per sample size: the sampling time and the share of the corpus's row groups it read; per model type
and vocabulary: training seconds and peak RSS of the training process. Then a linear fit (peak = a + b x chars)
per series, the per-piece cost (262k vs 32k at the same sample), whether stages/tokenizer/memory.py's estimate
covers every measured point, and what it says the full run (configs/jupiter-1t.toml) needs.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path
from typing import Callable

DOCS_PER_FILE, DOCS_PER_ROW_GROUP, LINES_PER_DOC = 2_000, 250, 5
BPE_SERIES = (("bpe", 32_000), ("bpe", 262_144))
UNIGRAM_SERIES = (("unigram", 32_000),)  # --memory-unigram: ~10x slower than BPE (90 s more), so not by default
UNIGRAM_MAX_CHARS = 16_000_000
FULL_RUN = {"config": "configs/jupiter-1t.toml", "model_type": "bpe", "vocab_size": 262_144, "budget_chars": 20_000_000_000}


def base_documents(data: Path, lang: str, ntrex_code: str) -> list[str]:
    from pipeline.languages import language

    lines = []
    for path in (data / "ntrex128" / f"newstest2019-ref.{ntrex_code}.txt", data / "flores200" / "dev" / f"{language(lang).flores}.dev"):
        if path.exists():
            lines += [x.strip() for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]
    return ["\n".join(lines[i : i + LINES_PER_DOC]) for i in range(0, len(lines), LINES_PER_DOC)]


def mutated(docs: list[str], rng: random.Random) -> list[str]:
    suffixes = ["".join(rng.choice("aeioukmnrstlvp") for _ in range(rng.randint(1, 4))) for _ in range(4096)]
    out = []
    for doc in docs:
        words = doc.split(" ")
        for i in range(len(words)):
            if rng.random() < 0.15:
                words[i] += suffixes[rng.randrange(4096)]
        out.append(" ".join(words))
    return out


def build_corpus(data: Path, folder: Path, ntrex_codes: dict[str, str], chars_per_language: int, seed: int) -> tuple[dict, dict]:
    """Parquet files per language (ingest layout) -> ({lang: [files]}, {lang: characters})."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    files: dict[str, list[Path]] = {}
    chars: dict[str, int] = {}
    for lang, code in ntrex_codes.items():
        base, rng = base_documents(data, lang, code), random.Random(f"{seed}:{lang}")
        docs: list[str] = []
        n = 0
        while n < chars_per_language:
            for doc in mutated(base, rng):
                docs.append(doc)
                n += len(doc)
                if n >= chars_per_language:
                    break
        chars[lang] = n
        (folder / lang).mkdir(parents=True)
        files[lang] = []
        for k in range(0, len(docs), DOCS_PER_FILE):
            part = docs[k : k + DOCS_PER_FILE]
            path = folder / lang / f"part-{k // DOCS_PER_FILE:05d}.parquet"
            pq.write_table(pa.table({"id": [f"{lang}-{k + j}" for j in range(len(part))], "text": part}), path,
                           row_group_size=DOCS_PER_ROW_GROUP, compression="zstd")
            files[lang].append(path)
    return files, chars


def fit(points: list[tuple[int, float]]) -> tuple[float, float]:
    """Least squares peak = a + b * chars over (chars, peak bytes) points -> (a, b)."""
    n = len(points)
    mx, my = sum(p[0] for p in points) / n, sum(p[1] for p in points) / n
    sxx = sum((p[0] - mx) ** 2 for p in points)
    b = sum((p[0] - mx) * (p[1] - my) for p in points) / sxx if sxx else 0.0
    return my - b * mx, b


def memory_scaling(args: argparse.Namespace, run_child: Callable[[list[str]], dict], ntrex_codes: dict[str, str]) -> dict:
    import tempfile

    import pyarrow.parquet as pq

    from stages.tokenizer.config import SampleConfig
    from stages.tokenizer.memory import GB, MODELS, estimate_peak_bytes
    from stages.tokenizer.sample import plan_sample, write_language_sample

    sizes = [int(x) for x in args.memory_sizes.split(",")]
    series = BPE_SERIES + (UNIGRAM_SERIES if args.memory_unigram else ())
    languages = sorted(ntrex_codes)
    corpus_chars = args.memory_corpus_chars or 2 * max(sizes)
    tmp = tempfile.TemporaryDirectory(prefix="tokenizer-memory-", dir=args.work)
    work = Path(tmp.name)
    try:
        t0 = time.perf_counter()
        files, available = build_corpus(args.data, work / "ingest", ntrex_codes, corpus_chars // len(languages), args.seed)
        total_rgs = {lang: sum(pq.ParquetFile(f).metadata.num_row_groups for f in fs) for lang, fs in files.items()}
        print(f"\nmemory: corpus of {sum(available.values()):,} characters in {sum(len(f) for f in files.values())} Parquet files "
              f"({sum(total_rgs.values())} row groups), built in {time.perf_counter() - t0:.0f} s", flush=True)
        baseline = run_child(["--_baseline"])["peak_mb"]
        points = []
        for size in sizes:
            plan = plan_sample(available, SampleConfig(budget_chars=size, max_passes=4.0))
            folder = work / f"sample-{size}"
            folder.mkdir()
            t0 = time.perf_counter()
            written = {lang: write_language_sample(files[lang], share, args.seed, 4096, folder / f"{lang}.txt") for lang, share in plan.items()}
            sample_s = time.perf_counter() - t0
            chars, lines = sum(w.chars for w in written.values()), sum(w.lines for w in written.values())
            read_share = sum(w.row_groups_read for w in written.values()) / sum(total_rgs.values())
            print(f"  sample {size:>12,} chars ({size / sum(available.values()):.0%} of the corpus): wrote {chars:,} chars / "
                  f"{lines:,} lines in {sample_s:.1f} s, reading {read_share:.0%} of the corpus's row groups", flush=True)
            for model_type, vocab in series:
                if model_type == "unigram" and size > UNIGRAM_MAX_CHARS:
                    continue
                spec = {"inputs": [str(folder / f"{lang}.txt") for lang in languages], "prefix": str(work / f"m-{size}-{model_type}-{vocab}"),
                        "vocab_size": vocab, "threads": args.threads, "seed": args.seed, "model_type": model_type, "max_sentences": 100_000_000}
                (work / "spec.json").write_text(json.dumps(spec))
                r = run_child(["--_train", str(work / "spec.json")])
                point = {"sample_chars_target": size, "chars": chars, "lines": lines, "sample_seconds": round(sample_s, 2),
                         "row_groups_read_share": round(read_share, 4), "model_type": model_type, "vocab_size": vocab,
                         "train_seconds": round(r["train_seconds"], 2), "peak_mb": round(r["peak_mb"], 1), "error": r.get("error")}
                if r.get("error"):
                    print(f"    {model_type} {vocab:>7,}: not trainable on this sample ({r['error']})", flush=True)
                else:
                    est = estimate_peak_bytes(model_type, vocab, chars) / 1e6
                    point["estimate_mb"] = round(est, 1)
                    print(f"    {model_type} {vocab:>7,}: train {r['train_seconds']:6.1f} s, peak {r['peak_mb']:7.0f} MB "
                          f"(estimate {est:7.0f} MB)", flush=True)
                points.append(point)
    finally:
        tmp.cleanup()

    ok = [p for p in points if not p["error"]]
    fits = {}
    for model_type, vocab in series:
        measured = [(p["chars"], p["peak_mb"] * 1e6) for p in ok if (p["model_type"], p["vocab_size"]) == (model_type, vocab)]
        if len(measured) >= 2:
            a, b = fit(measured)
            fits[f"{model_type}-{vocab}"] = {"base_mb": round(a / 1e6, 1), "bytes_per_char": round(b, 2), "points": len(measured)}
    per_piece = [(q["peak_mb"] - p["peak_mb"]) * 1e6 / (q["vocab_size"] - p["vocab_size"]) for p in ok for q in ok
                 if p["model_type"] == q["model_type"] == "bpe" and p["chars"] == q["chars"] and p["vocab_size"] < q["vocab_size"]]
    covered = all(p["estimate_mb"] >= p["peak_mb"] for p in ok)
    full = estimate_peak_bytes(FULL_RUN["model_type"], FULL_RUN["vocab_size"], FULL_RUN["budget_chars"]) / GB
    print("\n  fits (peak = base + bytes/char x chars): "
          + "; ".join(f"{k}: {v['base_mb']:.0f} MB + {v['bytes_per_char']:.1f} B/char" for k, v in fits.items()))
    if per_piece:
        print(f"  per vocabulary piece (bpe, 262k vs 32k at the same sample): {max(per_piece):.0f} bytes at most")
    print(f"  stages/tokenizer/memory.py: " + "; ".join(f"{t}: {m.base_bytes / 1e6:.0f} MB + {m.bytes_per_char:.0f} B/char + "
                                                        f"{m.bytes_per_piece:.0f} B/piece" for t, m in MODELS.items()))
    print(f"  its estimate covers every measured point: {'yes' if covered else 'NO'} "
          f"(measured / estimate at most {max(p['peak_mb'] / p['estimate_mb'] for p in ok):.2f})")
    print(f"  full run ({FULL_RUN['config']}: {FULL_RUN['model_type']} {FULL_RUN['vocab_size']:,} pieces, "
          f"{FULL_RUN['budget_chars']:,} characters): estimated {full:,.0f} GB peak", flush=True)
    return {"setup": {"corpus_chars": sum(available.values()), "sizes": sizes, "threads": args.threads, "series": series,
                      "baseline_import_only_peak_mb": round(baseline, 1), "mutation": "15% of words get a random suffix per repetition"},
            "points": points, "fits": fits, "bytes_per_piece_max": round(max(per_piece), 1) if per_piece else None,
            "model": {t: vars(m) for t, m in MODELS.items()}, "model_covers_measurements": covered,
            "full_run": {**FULL_RUN, "estimated_peak_gb": round(full, 1)}}
