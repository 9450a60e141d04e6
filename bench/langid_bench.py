"""Language-ID accuracy and speed on ~1 KB documents built from FLORES-200 devtest, per EU language.

    python bench/langid_bench.py [--data ../shared/data] [--min-accuracy 0.99]

Documents are consecutive devtest sentences joined with spaces until they reach 1,000 UTF-8 bytes (the last,
shorter remainder is dropped). "accuracy" is `identify()` == the file's language; "kept" is the fraction that
`decide()` with the default LangIdConfig would keep. Exits 1 when a language is below --min-accuracy, and 0
with a message when the data directory is absent (a fresh clone has no ../shared).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from stages.ingest.langid import LangIdConfig, LanguageIdentifier  # noqa: E402

FLORES_CODES = {
    "bg": "bul_Cyrl", "cs": "ces_Latn", "da": "dan_Latn", "de": "deu_Latn", "el": "ell_Grek",
    "en": "eng_Latn", "es": "spa_Latn", "et": "est_Latn", "fi": "fin_Latn", "fr": "fra_Latn",
    "ga": "gle_Latn", "hr": "hrv_Latn", "hu": "hun_Latn", "it": "ita_Latn", "lt": "lit_Latn",
    "lv": "lvs_Latn", "mt": "mlt_Latn", "nl": "nld_Latn", "pl": "pol_Latn", "pt": "por_Latn",
    "ro": "ron_Latn", "sk": "slk_Latn", "sl": "slv_Latn", "sv": "swe_Latn",
}  # fmt: skip


def flores_documents(path: Path, min_bytes: int = 1000) -> list[str]:
    docs, current, size = [], [], 0
    for line in path.read_text(encoding="utf-8").splitlines():
        current.append(line)
        size += len(line.encode("utf-8")) + 1
        if size - 1 >= min_bytes:
            docs.append(" ".join(current))
            current, size = [], 0
    return docs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data")
    ap.add_argument("--min-accuracy", type=float, default=0.99)
    ap.add_argument("--json", type=Path, default=REPO / "bench" / "results" / "langid_bench.json",
                    help="Where to write the figures (bench/summary.py reads them).")
    args = ap.parse_args()
    devtest = args.data / "flores200" / "devtest"
    if not devtest.is_dir():
        print(f"langid bench skipped: {devtest} not found (FLORES-200 lives outside the repo; pass --data).")
        return 0

    docs = {lang: flores_documents(devtest / f"{code}.devtest") for lang, code in FLORES_CODES.items()}
    ident = LanguageIdentifier(LangIdConfig())
    n_docs = sum(map(len, docs.values()))
    n_bytes = sum(len(d.encode("utf-8")) for ds in docs.values() for d in ds)

    t0 = time.process_time()
    results = {lang: [ident.identify(d) for d in ds] for lang, ds in docs.items()}
    cpu = time.process_time() - t0

    print(f"{'lang':<5}{'docs':>6}{'accuracy':>10}{'kept':>8}{'score':>8}  errors")
    worst, per_language = 1.0, {}
    for lang, res in results.items():
        acc = sum(code == lang for code, _ in res) / len(res)
        kept = sum(ident.decide(lang, d)[2] is None for d in docs[lang]) / len(res)
        score = sum(s for _, s in res) / len(res)
        errors = Counter(code for code, _ in res if code != lang)
        worst = min(worst, acc)
        per_language[lang] = {"docs": len(res), "accuracy": acc, "kept": kept, "score": score, "errors": dict(errors)}
        print(f"{lang:<5}{len(res):>6}{acc:>10.4f}{kept:>8.4f}{score:>8.3f}  {dict(errors) or ''}")
    print(f"\n{n_docs} docs, {n_bytes / n_docs:.0f} bytes/doc: {n_docs / cpu:,.0f} docs/s, "
          f"{n_bytes / cpu / 1e6:.1f} MB/s per core (identify, CPU time)")
    print(f"minimum accuracy {worst:.4f} (required {args.min_accuracy})")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"min_accuracy": worst, "required_accuracy": args.min_accuracy, "docs": n_docs,
                                     "docs_per_s": n_docs / cpu, "mb_per_s_per_core": n_bytes / cpu / 1e6,
                                     "per_language": per_language}, indent=2))
    return 0 if worst >= args.min_accuracy else 1


if __name__ == "__main__":
    sys.exit(main())
