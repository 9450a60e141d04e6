#!/usr/bin/env python3
"""Shard writing and reading speed, against SentencePiece's raw encode speed in the same process.

Input: the ~1 KB FLORES-200 + NTREX-128 documents of bench/reference/make_docs.py (../shared/data), written as
ingest-style Parquet (one file per language); a 32k BPE tokenizer trained by the project's own code on the
NTREX text. Measured:
  raw       sp.encode of the same texts, one thread (the limit: tokenization is the work)
  1 process stages.shards.tokenize.tokenize_file over every language file (what a shards unit runs)
  2 processes the same files split over two worker processes, wall clock
  read      the dataloader's packed rows (seq_len 4096) from the written shards
Goals (issue 4): >= 0.9x raw with one process, >= 1.8x raw with two, >= 10M tokens/s read.

    .venv/bin/python bench/shards_bench.py [--data ../shared/data]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
RESULTS = ROOT / "bench" / "results"


def _tokenize(args):
    from stages.shards.tokenize import tokenize_file

    model, file, out = args
    out.mkdir(parents=True, exist_ok=True)
    return sum(r["tokens"] for r in tokenize_file(model, file, out, seed=1, val_threshold=int(0.01 * 2**64), max_shard_tokens=1 << 26))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data")
    ap.add_argument("--json", type=Path, default=RESULTS / "shards_bench.json", help="Where to write the figures (bench/summary.py reads them).")
    args = ap.parse_args()
    if not args.data.exists():
        print(f"benchmark data not found at {args.data} (../shared/data is not part of a clone); nothing measured")
        return 0
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq
    import sentencepiece as spm

    from europa_model.data.packing import PackedSequences
    from europa_model.data.streams import MixtureStream, open_shards
    from stages.tokenizer.config import TokenizerConfig
    from stages.tokenizer.train import train_sentencepiece

    docs_path = RESULTS / "reference_docs.jsonl"
    if not docs_path.exists():
        RESULTS.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, str(ROOT / "bench/reference/make_docs.py"), "--data-dir", str(args.data), "--out", str(docs_path)], check=True)
    docs = [json.loads(line) for line in docs_path.open(encoding="utf-8")]
    tmp = Path(tempfile.mkdtemp(prefix="shards-bench-"))
    by_lang: dict[str, list[dict]] = {}
    for d in docs:
        by_lang.setdefault(d["lang"], []).append(d)
    files = []
    for lang, items in sorted(by_lang.items()):
        path = tmp / "ingest" / lang / "part-00000.parquet"
        path.parent.mkdir(parents=True)
        pq.write_table(pa.table({"id": [d["id"] for d in items], "text": [d["text"] for d in items]}), path)
        files.append(path)
    sample = tmp / "sample.txt"
    sample.write_text("\n".join(line for d in docs for line in d["text"].split("\n")), encoding="utf-8")
    print("training a 32k BPE tokenizer on the benchmark text ...", file=sys.stderr)
    model = train_sentencepiece([sample], tmp / "tok", TokenizerConfig(vocab_size=32000, reserved_tokens=0), seed=1)

    sp = spm.SentencePieceProcessor(model_file=str(model))
    texts = [d["text"] for d in docs]
    sp.encode(texts[:200], num_threads=1)
    t0 = time.perf_counter()
    raw_tokens = sum(len(x) for i in range(0, len(texts), 1024) for x in sp.encode(texts[i : i + 1024], num_threads=1))
    t_raw = time.perf_counter() - t0

    jobs = [(model, f, tmp / "one" / f.parent.name) for f in files]
    t0 = time.perf_counter()
    written = sum(map(_tokenize, jobs))
    t_one = time.perf_counter() - t0
    jobs2 = [(model, f, tmp / "two" / f.parent.name) for f in files]
    with mp.get_context("spawn").Pool(2) as pool:
        pool.map(_tokenize, [(model, files[0], tmp / "warm" / "a"), (model, files[1], tmp / "warm" / "b")])
        t0 = time.perf_counter()
        written2 = sum(pool.map(_tokenize, jobs2, chunksize=1))
        t_two = time.perf_counter() - t0
    assert written == written2 == raw_tokens + len(docs), (written, written2, raw_tokens)

    # Read: assemble an index.json over the 1-process output and pack rows of 4096 tokens.
    shards = []
    for f in files:
        lang = f.parent.name
        for rec in json.loads(json.dumps(_records(tmp / "one" / lang))):
            shards.append({**rec, "path": f"{lang}/{rec['name']}", "split": rec["split"], "lang": lang})
    index = {"bos_id": sp.bos_id(), "eos_id": sp.eos_id(), "shards": shards}
    (tmp / "one" / "index.json").write_text(json.dumps(index))
    _, readers = open_shards(tmp / "one", "train")
    packer = PackedSequences(MixtureStream(readers, {lang: 1.0 for lang in readers}, 1, 0, 1), 4096, sp.bos_id())
    for _ in range(20):
        packer.next_row()
    t0, read = time.perf_counter(), 0
    while time.perf_counter() - t0 < 3.0:
        read += len(packer.next_row()[0])
    t_read = time.perf_counter() - t0

    raw_rate, one_rate, two_rate, read_rate = raw_tokens / t_raw, written / t_one, written2 / t_two, read / t_read
    print(f"\n{'measure':<40}{'tokens/s':>14}{'x raw':>8}{'goal':>10}")
    print(f"{'raw sp.encode (1 thread)':<40}{raw_rate:>14,.0f}{1.0:>8.2f}")
    print(f"{'shards, 1 process':<40}{one_rate:>14,.0f}{one_rate / raw_rate:>8.2f}{'>= 0.9':>10}")
    print(f"{'shards, 2 processes (wall)':<40}{two_rate:>14,.0f}{two_rate / raw_rate:>8.2f}{'>= 1.8':>10}")
    print(f"{'dataloader read (seq_len 4096)':<40}{read_rate:>14,.0f}{'':>8}{'>= 10M':>10}")
    print(f"\n{len(docs):,} documents, {written:,} tokens (incl. EOS) in {sum(1 for s in shards)} shards; dtype {np.dtype(shards[0]['dtype'])}")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"raw_tokens_per_s": raw_rate, "one_process_tokens_per_s": one_rate,
        "two_process_tokens_per_s": two_rate, "read_tokens_per_s": read_rate, "tokens": written}, indent=2))
    return 0


def _records(folder: Path) -> list[dict]:
    """Rebuild shard records from files (the stage keeps them in index.json; the benchmark skips finalize)."""
    import hashlib

    import numpy as np

    out = []
    for b in sorted(folder.glob("*.bin")):
        idx = b.with_suffix(".idx")
        offsets = np.fromfile(idx, dtype="<i8")
        out.append({"name": b.stem, "split": b.stem.split("-")[0], "dtype": "<u2", "tokens": int(offsets[-1]), "docs": len(offsets) - 1,
                    "sha256_bin": hashlib.sha256(b.read_bytes()).hexdigest(), "sha256_idx": hashlib.sha256(idx.read_bytes()).hexdigest()})
    return out


if __name__ == "__main__":
    sys.exit(main())
