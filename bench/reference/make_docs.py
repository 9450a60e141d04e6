#!/usr/bin/env python3
"""Build ~1 KB documents in the 24 EU languages from FLORES-200 and NTREX-128 (benchmark input).

Stdlib only, Python >= 3.11. Each source file (FLORES-200 dev, FLORES-200 devtest, NTREX-128) is read
one sentence per line; consecutive sentences are joined with "\\n" until the document reaches at least
--min-bytes UTF-8 bytes (default 1000). A trailing remainder shorter than that is dropped (and counted).
Documents never span two source files.

Output: JSONL, one object per line: {"id", "text", "lang" (ISO 639-1), "source"}.
A summary (docs / bytes per language) goes to stderr.

    python3 bench/reference/make_docs.py --out bench/results/reference_docs.jsonl

The data are not part of the project (see ../shared/data/README.md); without them this exits 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_DATA_DIR = REPO_ROOT.parent / "shared" / "data"  # "../shared/data" relative to the repo root
DEFAULT_OUT = REPO_ROOT / "bench" / "results" / "reference_docs.jsonl"

# ISO 639-1 -> (FLORES-200 code, NTREX-128 code), as in shared/data/README.md.
EU24: dict[str, tuple[str, str]] = {
    "bg": ("bul_Cyrl", "bul"),
    "cs": ("ces_Latn", "ces"),
    "da": ("dan_Latn", "dan"),
    "de": ("deu_Latn", "deu"),
    "el": ("ell_Grek", "ell"),
    "en": ("eng_Latn", "eng-GB"),
    "es": ("spa_Latn", "spa"),
    "et": ("est_Latn", "est"),
    "fi": ("fin_Latn", "fin"),
    "fr": ("fra_Latn", "fra"),
    "ga": ("gle_Latn", "gle"),
    "hr": ("hrv_Latn", "hrv"),
    "hu": ("hun_Latn", "hun"),
    "it": ("ita_Latn", "ita"),
    "lt": ("lit_Latn", "lit"),
    "lv": ("lvs_Latn", "lav"),
    "mt": ("mlt_Latn", "mlt"),
    "nl": ("nld_Latn", "nld"),
    "pl": ("pol_Latn", "pol"),
    "pt": ("por_Latn", "por"),
    "ro": ("ron_Latn", "ron"),
    "sk": ("slk_Latn", "slk"),
    "sl": ("slv_Latn", "slv"),
    "sv": ("swe_Latn", "swe"),
}


def source_files(data_dir: Path, lang: str) -> list[tuple[str, Path]]:
    flores, ntrex = EU24[lang]
    return [
        ("flores200-dev", data_dir / "flores200" / "dev" / f"{flores}.dev"),
        ("flores200-devtest", data_dir / "flores200" / "devtest" / f"{flores}.devtest"),
        ("ntrex128", data_dir / "ntrex128" / f"newstest2019-ref.{ntrex}.txt"),
    ]


def chunk_sentences(lines: list[str], min_bytes: int) -> tuple[list[str], int]:
    """Join consecutive non-empty lines with newlines until each chunk has >= min_bytes UTF-8 bytes.

    Returns (documents, number of sentences left over in a too-short tail)."""
    docs: list[str] = []
    cur: list[str] = []
    size = 0
    for line in lines:
        line = line.strip()
        if not line:
            continue
        size += len(line.encode("utf-8")) + (1 if cur else 0)
        cur.append(line)
        if size >= min_bytes:
            docs.append("\n".join(cur))
            cur, size = [], 0
    return docs, len(cur)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR,
                    help=f"folder with flores200/ and ntrex128/ (default: {DEFAULT_DATA_DIR})")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"output JSONL (default: {DEFAULT_OUT})")
    ap.add_argument("--min-bytes", type=int, default=1000, help="minimum UTF-8 bytes per document (default 1000)")
    ap.add_argument("--langs", default=",".join(EU24), help="comma-separated ISO 639-1 codes (default: all 24)")
    args = ap.parse_args(argv)

    data_dir: Path = args.data_dir
    if not (data_dir / "flores200").is_dir() and not (data_dir / "ntrex128").is_dir():
        print(f"make_docs: data dir {data_dir} is absent (no flores200/ or ntrex128/ in it); "
              "these benchmark data live outside the repository (../shared/data). Pass --data-dir.",
              file=sys.stderr)
        return 2

    langs = [x.strip() for x in args.langs.split(",") if x.strip()]
    unknown = [x for x in langs if x not in EU24]
    if unknown:
        print(f"make_docs: unknown language code(s) {unknown}; known: {sorted(EU24)}", file=sys.stderr)
        return 2

    args.out.parent.mkdir(parents=True, exist_ok=True)
    total_docs = total_bytes = 0
    missing: list[str] = []
    rows: list[tuple[str, int, int, int]] = []
    with open(args.out, "w", encoding="utf-8") as out:
        for lang in langs:
            n_docs = n_bytes = n_tail = 0
            for source, path in source_files(data_dir, lang):
                if not path.is_file():
                    missing.append(str(path))
                    continue
                lines = path.read_text(encoding="utf-8").splitlines()
                docs, tail = chunk_sentences(lines, args.min_bytes)
                n_tail += tail
                for i, text in enumerate(docs):
                    rec = {"id": f"{lang}-{source}-{i:04d}", "text": text, "lang": lang, "source": source}
                    out.write(json.dumps(rec, ensure_ascii=False) + "\n")
                    n_docs += 1
                    n_bytes += len(text.encode("utf-8"))
            rows.append((lang, n_docs, n_bytes, n_tail))
            total_docs += n_docs
            total_bytes += n_bytes

    print(f"{'lang':<5}{'docs':>7}{'bytes':>11}{'avg B/doc':>11}{'tail sents dropped':>20}", file=sys.stderr)
    for lang, n_docs, n_bytes, n_tail in rows:
        avg = n_bytes / n_docs if n_docs else 0
        print(f"{lang:<5}{n_docs:>7}{n_bytes:>11}{avg:>11.0f}{n_tail:>20}", file=sys.stderr)
    print(f"{'all':<5}{total_docs:>7}{total_bytes:>11}", file=sys.stderr)
    for m in missing:
        print(f"make_docs: warning: missing file {m}", file=sys.stderr)
    print(f"make_docs: wrote {total_docs} docs, {total_bytes} bytes to {args.out}", file=sys.stderr)
    if total_docs == 0:
        print("make_docs: no documents built (no source file found)", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
