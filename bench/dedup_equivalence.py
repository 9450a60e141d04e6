#!/usr/bin/env python3
"""Does the ingest stage's dedup (five steps of units, stages/ingest/dedup/) decide what the single-process dedup
(tests/ingest/dedup_reference.py) decides, on real text?

Two corpora go through the real ingest stage (`IngestStage.plan` / `run_unit` for every step, then `finalize`),
and per language its published rows are compared with `dedup_in_memory` over the same documents units' kept rows:
  udhr    the demo (configs/demo.toml: the UDHR in 24 languages, one unit per language)
  flores  FLORES-200 dev+devtest (6 sentences a document) and NTREX-128 (one news story a document) from
          ../shared/data, with planted exact copies (case, whitespace), near copies (a span of ~5% of the
          words replaced), chains A -> B -> C (each an edit of the previous) and exact copies of near copies,
          shuffled over 5 files, each cut into 2 units (max_unit_bytes): 10 units per language
Compared: kept rows (every column, in order) and duplicate rows (reason, duplicate_of) of the greedy rule, and
how many more documents the connected-components rule would drop. Prints one line per corpus; --json writes
the per-language figures.

    .venv/bin/python bench/dedup_equivalence.py [--data ../shared/data] [--json bench/results/dedup_equivalence.json]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import textwrap
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
RESULTS = ROOT / "bench" / "results"

import pyarrow as pa  # noqa: E402
import pyarrow.compute as pc  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

from pipeline.executor import map_units_locally, run_steps  # noqa: E402
from pipeline.status import build_context  # noqa: E402
from pipeline.languages import EU_LANGUAGE_CODES, LANGUAGES  # noqa: E402
from pipeline.runconfig import resolve  # noqa: E402
from stages.ingest.dedup import files  # noqa: E402
from stages.ingest.process import KEPT  # noqa: E402
from stages.ingest.reasons import EXACT_DUP, NEAR_DUP  # noqa: E402
from stages.ingest.schema import DOCUMENT_SCHEMA, REJECTED_SCHEMA  # noqa: E402
from stages.ingest.stage import IngestStage  # noqa: E402
from stages.ingest.units import DOCUMENTS  # noqa: E402
from tests.ingest.dedup_local import dedup_language  # noqa: E402
from tests.ingest.dedup_reference import dedup_in_memory  # noqa: E402

NTREX = {"en": "eng-GB", "lv": "lav"}


def flores_documents(data: Path, lang: str) -> list[str]:
    code = LANGUAGES[lang].flores
    sentences = []
    for split in ("dev", "devtest"):
        path = data / "flores200" / split / f"{code}.{split}"
        sentences += path.read_text(encoding="utf-8").splitlines()
    docs = [" ".join(sentences[i : i + 6]) for i in range(0, len(sentences), 6)]
    ntrex = data / "ntrex128" / f"newstest2019-ref.{NTREX.get(lang, LANGUAGES[lang].iso3)}.txt"
    story_of = (data / "ntrex128" / "DOCUMENT_IDS.tsv").read_text(encoding="utf-8").splitlines()
    stories: dict[str, list[str]] = {}
    for story, line in zip(story_of, ntrex.read_text(encoding="utf-8").splitlines()):
        stories.setdefault(story, []).append(line)
    return docs + [" ".join(lines) for lines in stories.values()]


def _edit(doc: str, rng: random.Random, vocab: list[str], fraction: float = 0.05) -> str:
    words = doc.split()
    k = max(1, int(len(words) * fraction))
    start = rng.randrange(0, max(1, len(words) - k))
    words[start : start + k] = rng.choices(vocab, k=k)
    return " ".join(words)


def planted_corpus(data: Path, lang: str, out: Path, seed: int) -> dict[str, int]:
    rng = random.Random(seed)
    originals = flores_documents(data, lang)
    vocab = " ".join(originals).split()
    picks = rng.sample(range(len(originals)), 60)
    docs = [(d, "original") for d in originals]
    for i in picks[:15]:
        docs.append(("  " + originals[i].upper().replace(" ", "\n ", 2), "exact"))
    for i in picks[15:40]:
        docs.append((_edit(originals[i], rng, vocab), "near"))
    for i in picks[40:52]:
        b = _edit(originals[i], rng, vocab, 0.06)
        docs += [(b, "chain_b"), (_edit(b, rng, vocab, 0.06), "chain_c")]
    for i in picks[52:60]:
        near = _edit(originals[i], rng, vocab)
        docs += [(near, "near"), (near.lower(), "exact_of_near")]
    rng.shuffle(docs)
    folder = out / lang
    folder.mkdir(parents=True)
    for f in range(5):
        with (folder / f"part-{f}.jsonl").open("w", encoding="utf-8") as fh:
            for text, kind in docs[f::5]:
                fh.write(json.dumps({"text": text, "kind": kind}, ensure_ascii=False) + "\n")
    kinds: dict[str, int] = {}
    for _, k in docs:
        kinds[k] = kinds.get(k, 0) + 1
    return kinds


def run_stage(config_path: Path, run_dir: Path, out: Path):
    """Every step of the real stage in this process, then finalize into `out` (the units stay in .work)."""
    rd, config = resolve(str(config_path), str(run_dir))
    ctx = build_context(rd, config, "ingest", require_fresh_upstream=False)
    stage = IngestStage()
    done = run_steps(stage, ctx, map_units_locally, {})
    out.mkdir(parents=True)
    stage.finalize(ctx, done, out)
    return ctx, done


def compare(ctx, done, out: Path, tmp: Path) -> dict[str, dict]:
    cfg = ctx.settings.dedup
    per_lang = {}
    for lang in ctx.config.run.languages:
        uids = sorted(u for u, r in DOCUMENTS.results(done).items() if r.lang == lang and r.read_documents)
        kept = [ctx.unit_dir(DOCUMENTS.name, u) / KEPT for u in uids]
        ref_kept, ref_dups = dedup_in_memory(pa.concat_tables(pq.read_table(k) for k in kept), cfg)
        got_kept = files.read_parts(out / "data" / lang, "part", DOCUMENT_SCHEMA)
        rejected = files.read_parts(out / "rejected" / lang, "part", REJECTED_SCHEMA)
        got_dups = rejected.filter(pc.is_in(rejected.column("reason"), pa.array([EXACT_DUP, NEAR_DUP])))
        row = {"units": len(uids), "docs": ref_kept.num_rows + ref_dups.num_rows,
               "identical": got_kept.equals(ref_kept) and got_dups.equals(ref_dups),
               "exact": pc.sum(pc.equal(ref_dups.column("reason"), EXACT_DUP)).as_py() or 0,
               "near": pc.sum(pc.equal(ref_dups.column("reason"), NEAR_DUP)).as_py() or 0}
        res = dedup_language(kept, tmp / "components" / lang, cfg, 4, rule="components")
        comp_dups = pa.concat_tables(files.read_parts(d, files.DUPLICATE_PARTS, REJECTED_SCHEMA) for d in res.folders.filtered)
        clusters = res.stats.clusters
        assert clusters is not None
        row["pairs"] = clusters.pairs
        row["largest_component"] = clusters.largest_component
        row["components_drop_more"] = comp_dups.num_rows - ref_dups.num_rows
        per_lang[lang] = row
    return per_lang


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data")
    ap.add_argument("--json", type=Path, default=RESULTS / "dedup_equivalence.json")
    args = ap.parse_args()
    report = {}
    with tempfile.TemporaryDirectory(prefix="dedup-eq-") as t:
        tmp = Path(t)
        t0 = time.monotonic()
        ctx, done = run_stage(ROOT / "configs" / "demo.toml", tmp / "udhr-run", tmp / "udhr-out")
        report["udhr"] = compare(ctx, done, tmp / "udhr-out", tmp / "udhr")
        print(f"udhr: {time.monotonic() - t0:.0f} s", file=sys.stderr)
        if (args.data / "flores200").is_dir():
            t0 = time.monotonic()
            planted = {lang: planted_corpus(args.data, lang, tmp / "flores-src", i) for i, lang in enumerate(EU_LANGUAGE_CODES)}
            cfg = tmp / "flores.toml"
            cfg.write_text(textwrap.dedent(f"""
                [run]
                name = "dedup-eq"
                languages = ["all"]
                [orchestration]
                engine = "local"
                [ingest]
                max_unit_bytes = 150000
                [[ingest.sources]]
                name = "flores"
                kind = "jsonl"
                path = "{tmp}/flores-src/{{lang}}/*.jsonl"
                licence = "CC-BY-SA-4.0"
                collected = "2025-01"
                [ingest.quality]
                min_words = 10
                """), encoding="utf-8")
            ctx, done = run_stage(cfg, tmp / "flores-run", tmp / "flores-out")
            report["flores"] = compare(ctx, done, tmp / "flores-out", tmp / "flores")
            for lang, kinds in planted.items():
                report["flores"][lang]["planted"] = kinds
            print(f"flores: {time.monotonic() - t0:.0f} s", file=sys.stderr)
        else:
            print(f"no {args.data}/flores200: FLORES/NTREX corpus skipped", file=sys.stderr)
    ok = True
    for corpus, per_lang in report.items():
        same = sum(r["identical"] for r in per_lang.values())
        ok &= same == len(per_lang)
        tot = {k: sum(r[k] for r in per_lang.values()) for k in ("units", "docs", "exact", "near", "pairs", "components_drop_more")}
        print(f"{corpus}: {same}/{len(per_lang)} languages identical to the single-process dedup (kept rows, duplicates, duplicate_of); "
              f"{tot['units']} units, {tot['docs']:,} kept docs in, {tot['exact']} exact + {tot['near']} near dropped, "
              f"{tot['pairs']} verified pairs; connected components would drop {tot['components_drop_more']} more")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=1))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
