#!/usr/bin/env python3
"""Reference benchmark: datatrove 0.10.1's FineWeb-2 filter chain and MinHash signature step, one core.

Run with the reference venv (see bench/reference/README.md), NOT the project venv:

    .cache/bench-venv-datatrove/bin/python bench/reference/datatrove_chain.py --input DOCS.jsonl

Input: JSONL, one {"id", "text", "lang" (ISO 639-1)} per line (bench/reference/make_docs.py writes it).
Output: ONE JSON object on stdout; every log line goes to stderr.

What runs, all in this one process (so the figures are per core):
  (a) filters: per language, the FineWeb-2 filtering step as in huggingface/fineweb-2's
      fineweb-2-pipeline.py: GopherRepetitionFilter -> FineWebQualityFilter -> GopherQualityFilter, each built
      with language="<iso3>_<Script>" (datatrove then picks the word tokenizer from its
      assets/tokenizer_assignment.csv via load_word_tokenizer) and FineWeb-2's per-language thresholds and
      stop words (FW2_CONFIGS below). No C4 filters (FineWeb-2 dropped them). The steps' own .run()
      generators are chained exactly as a datatrove pipeline chains them (stats and timers included).
  (b) minhash: per language, the real MinhashDedupSignature step with FineWeb-2's MinhashConfig
      (xxhash 64-bit, 5-grams, 14 buckets x 8 hashes) and language=<iso3>_<Script>; it writes its
      signature files (and sorts them, as the step does) into a temporary folder that is deleted afterwards.

Timing: wall clock (time.perf_counter) of each part over the WHOLE input, excluding imports, JSON reading,
Document construction and step construction; every language's tokenizer is warmed up first on a few of its
documents (spaCy builds its tokenizer lazily on first use). MB = 10^6 bytes of UTF-8 text.

Word tokenizers that cannot run offline (Maltese -> Stanza, which downloads its model on first use and is
not installed in the reference venv) are replaced by a fallback tokenizer (--fallback): by default Maltese gets
mudt_tokenizer.MudtTokenizer (datatrove's WhitespaceTokenizer with the token rules of the treebank Stanza's
Maltese model is trained on) and any other language datatrove's WhitespaceTokenizer (spaCy's multi-language
"xx" tokenizer); "whitespace" or "en" give every such language that one. Such languages are listed in
"fallback_languages", their tokenizer in "fallback_tokenizers".
"""

from __future__ import annotations

import os

# One core, no hidden thread pools (set before numpy / spaCy are imported).
for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS",
           "NUMEXPR_NUM_THREADS", "VECLIB_MAXIMUM_THREADS", "RAYON_NUM_THREADS", "TOKENIZERS_PARALLELISM"):
    os.environ.setdefault(_v, "false" if _v == "TOKENIZERS_PARALLELISM" else "1")
# Nothing here should touch the network; make the HF client fail fast if anything tries.
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import argparse  # noqa: E402
import json  # noqa: E402
import shutil  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections import Counter, defaultdict  # noqa: E402

# ISO 639-1 -> datatrove / FineWeb-2 language key "<iso3>_<Script>" (FineWeb-2 uses GlotLID's labels:
# Standard Estonian is ekk, Standard Latvian is lvs).
LANG_KEYS: dict[str, str] = {
    "bg": "bul_Cyrl", "cs": "ces_Latn", "da": "dan_Latn", "de": "deu_Latn", "el": "ell_Grek",
    "en": "eng_Latn", "es": "spa_Latn", "et": "ekk_Latn", "fi": "fin_Latn", "fr": "fra_Latn",
    "ga": "gle_Latn", "hr": "hrv_Latn", "hu": "hun_Latn", "it": "ita_Latn", "lt": "lit_Latn",
    "lv": "lvs_Latn", "mt": "mlt_Latn", "nl": "nld_Latn", "pl": "pol_Latn", "pt": "por_Latn",
    "ro": "ron_Latn", "sk": "slk_Latn", "sl": "slv_Latn", "sv": "swe_Latn",
}

# FineWeb-2 per-language filter settings, transcribed from huggingface/fineweb-2 configs/<iso3>_<Script>.yml
# (thresholds and stop words only). Tuple fields:
#   dup_line_frac, top_n_grams fractions for n=2,3,4, dup_n_grams fractions for n=5..10,
#   line_punct_thr, new_line_ratio, min_avg_word_length, max_avg_word_length, max_non_alpha_words_ratio,
#   stopwords.
# English is not a FineWeb-2 language: it gets datatrove's defaults (the Gopher paper's values, FineWeb's
# line_punct_thr / new_line_ratio and datatrove's English STOP_WORDS).
FW2_CONFIGS: dict[str, tuple] = {
    "bg": (0.35, (0.086, 0.109, 0.127), (0.205, 0.185, 0.165, 0.149, 0.136, 0.126), 0.273, 0.18, 3, 9, 0.756,
           ["\u043D\u0430", "\u0438", "\u0432", "\u0435", "\u043E\u0442", "\u0437\u0430", "\u0441\u0435",
            "\u0433.", "\u0441", "\u043F\u0440\u0435\u0437", "\u0434\u0430", "\u043F\u043E"]),
    "cs": (0.333, (0.095, 0.121, 0.144), (0.193, 0.175, 0.157, 0.144, 0.132, 0.121), 0.125, 0.233, 3, 11, 0.781,
           ["v", "a", "se", "na", "je", "z", "s", "do"]),
    "da": (0.305, (0.367, 0.297, 0.232), (0.169, 0.158, 0.147, 0.134, 0.123, 0.112), 0.1, 0.182, 3, 11, 0.798,
           ["i", "og", "af", "en", "til", "er", "den", "at", "som", "p\xE5", "for", "med", "det", "blev", "var",
            "der", "fra", "de", "han", "et"]),
    "de": (0.263, (0.169, 0.153, 0.137), (0.141, 0.134, 0.126, 0.117, 0.108, 0.098), 0.0, 0.152, 0, 15, 0.774,
           ["der", "und", "die", "in", "von", "im", "den", "des", "mit", "das", "er", "dem", "als", "wurde",
            "f\xFCr"]),
    "el": (0.31, (0.194, 0.175, 0.156), (0.174, 0.163, 0.153, 0.142, 0.13, 0.119), 0.167, 0.116, 3, 11, 0.809,
           ["\u03C4\u03BF\u03C5", "\u03BA\u03B1\u03B9", "\u03C4\u03BF", "\u03C4\u03B7\u03C2", "\u03B7",
            "\u03C4\u03B7\u03BD", "\u03B1\u03C0\u03CC", "\u03BF", "\u03BC\u03B5", "\u03C4\u03BF\u03BD",
            "\u03BD\u03B1", "\u03C0\u03BF\u03C5", "\u03C4\u03C9\u03BD", "\u03C3\u03C4\u03B7\u03BD",
            "\u03B3\u03B9\u03B1", "\u03C3\u03C4\u03BF", "\u03C3\u03B5", "\u03B5\u03AF\u03BD\u03B1\u03B9",
            "\u03C4\u03B7", "\u03C4\u03B1", "\u03BF\u03B9"]),
    "en": (0.3, (0.2, 0.18, 0.16), (0.15, 0.14, 0.13, 0.12, 0.11, 0.10), 0.12, 0.3, 3, 10, 0.8, None),
    "es": (0.265, (0.077, 0.097, 0.112), (0.152, 0.137, 0.123, 0.114, 0.107, 0.099), 0.3, 0.171, 4, 14, 0.825,
           ["de", "la", "en", "el", "y", "a", "que", "del", "los", "se", "por", "un", "con", "una", "las", "su"]),
    "et": (0.363, (0.345, 0.268, 0.215), (0.172, 0.161, 0.15, 0.139, 0.125, 0.113), 0.143, 0.213, 3, 13, 0.722,
           ["ja", "on", "oli", "ta", "aastal", "eesti", "ka", "ning", "et", "mis", "kui", "aasta", "ei",
            "v\xF5i", "see", "oma", "tema"]),
    "fi": (0.333, (0.101, 0.132, 0.163), (0.171, 0.149, 0.131, 0.119, 0.106, 0.094), 0.25, 0.219, 4, 13, 0.755,
           ["ja", "on", "oli", "h\xE4n", "vuonna", "my\xF6s", "joka", "se", "ei", "sen", "ovat", "sek\xE4",
            "mutta", "ett\xE4", "tai", "vuoden", "kanssa", "h\xE4nen", "s.", "j\xE4lkeen", "the"]),
    "fr": (0.264, (0.161, 0.149, 0.134), (0.15, 0.141, 0.131, 0.121, 0.111, 0.1), 0.1, 0.185, 2, 11, 0.812,
           ["de", "la", "le", "et", "\xE0", "en", "l'", "des", "du", "les", "est", "d'", "un", "une", "il", "dans",
            "par", "au"]),
    "ga": (0.395, (0.533, 0.421, 0.379), (0.203, 0.181, 0.181, 0.155, 0.145, 0.132), 0.0, 0.214, 2, 11, 0.816,
           ["an", "a", "na", "agus", "ar", "i", "is", "le", "sa", "go", "\xE9", "ag", "s\xE9", "bh\xED", "de"]),
    "hr": (0.333, (0.097, 0.122, 0.147), (0.208, 0.188, 0.171, 0.157, 0.145, 0.134), 0.2, 0.26, 3, 11, 0.751,
           ["je", "u", "i", "se", "na", "su", "za", "od", "s", "a"]),
    "hu": (0.322, (0.226, 0.198, 0.172), (0.169, 0.159, 0.148, 0.136, 0.124, 0.112), 0.067, 0.231, 3, 15, 0.766,
           ["a", "az", "\xE9s", "is", "egy", "volt", "hogy", "nem", "meg", "de", "magyar", "els\u0151", "el",
            "k\xF6z\xF6tt"]),
    "it": (0.246, (0.198, 0.156, 0.133), (0.144, 0.136, 0.127, 0.118, 0.109, 0.1), 0.025, 0.2, 3, 21, 0.807,
           ["di", "e", "il", "la", "in", "a", "del", "che", "\xE8", "della", "un", "per", "nel", "l'", "con", "da",
            "i", "una"]),
    "lt": (0.353, (0.098, 0.126, 0.152), (0.213, 0.19, 0.173, 0.159, 0.147, 0.136), 0.273, 0.25, 3, 11, 0.688,
           ["m", "ir", "buvo", "\u012F", "nuo", "i\u0161", "d", "su", "yra", "lietuvos", "a", "iki", "o", "kaip",
            "kad", "apie", "po", "km"]),
    "lv": (0.364, (0.147, 0.162, 0.178), (0.199, 0.177, 0.157, 0.142, 0.124, 0.11), 0.2, 0.222, 3, 13, 0.727,
           ["un", "ir", "no", "ar", "gad\u0101", "gada", "par", "bija", "ar\u012B"]),
    "mt": (0.458, (0.533, 0.607, 0.596), (0.267, 0.232, 0.207, 0.189, 0.171, 0.149), 0.2, 0.207, 4, 12, 0.823,
           ["l-", "tal-", "u", "ta'", "il-", "li", "fl-", "fil-", "mill-"]),
    "nl": (0.333, (0.093, 0.117, 0.14), (0.177, 0.16, 0.145, 0.133, 0.123, 0.112), 0.238, 0.194, 3, 16, 0.828,
           ["de", "van", "in", "het", "een", "en", "is", "op", "voor", "met", "door", "zijn", "werd", "hij",
            "uit"]),
    "pl": (0.353, (0.096, 0.12, 0.144), (0.203, 0.182, 0.163, 0.15, 0.137, 0.126), 0.2, 0.209, 3, 11, 0.726,
           ["w", "i", "na", "z", "do", "si\u0119", "roku", "od", "a", "jest", "przez", "po", "jako", "oraz", "o",
            "zosta\u0142", "by\u0142", "nie"]),
    "pt": (0.325, (0.093, 0.117, 0.139), (0.19, 0.172, 0.154, 0.142, 0.131, 0.12), 0.154, 0.23, 3, 13, 0.814,
           ["de", "a", "e", "o", "em", "do", "da", "que", "um", "no", "uma", "com", "para", "na", "\xE9", "foi"]),
    "ro": (0.289, (0.161, 0.146, 0.131), (0.16, 0.149, 0.138, 0.127, 0.117, 0.106), 0.081, 0.207, 1, 14, 0.779,
           ["de", "\xEEn", "a", "\u0219i", "din", "la", "o", "cu", "este", "un", "pe", "fost", "care", "al"]),
    "sk": (0.319, (0.316, 0.218, 0.171), (0.176, 0.165, 0.152, 0.14, 0.127, 0.115), 0.0, 0.214, 2, 11, 0.752,
           ["v", "a", "na", "sa", "je", "z", "roku", "s"]),
    "sl": (0.317, (0.262, 0.225, 0.189), (0.17, 0.158, 0.146, 0.135, 0.123, 0.111), 0.045, 0.273, 2, 12, 0.781,
           ["je", "v", "in", "na", "so", "se", "ki", "za", "leta", "z"]),
    "sv": (0.292, (0.242, 0.195, 0.174), (0.156, 0.147, 0.136, 0.125, 0.116, 0.105), 0.2, 0.135, 3, 12, 0.841,
           ["i", "och", "\xE4r", "av", "en", "som", "den", "med", "p\xE5", "till", "att", "f\xF6r"]),
}


def log(*a) -> None:
    print("[datatrove_chain]", *a, file=sys.stderr, flush=True)


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--input", required=True, help="JSONL with id, text, lang (ISO 639-1)")
    ap.add_argument("--parts", default="filters,minhash", help="comma list of parts to run (filters,minhash)")
    ap.add_argument("--warmup-docs", type=int, default=3, help="docs per language used to warm up (default 3)")
    ap.add_argument("--fallback", choices=["mudt", "whitespace", "en"], default="mudt",
                    help="tokenizer for languages whose own cannot run offline: mudt (default: Maltese by UD MUDT's "
                         "token rules, others datatrove's WhitespaceTokenizer), whitespace (datatrove's "
                         "WhitespaceTokenizer, spaCy 'xx' words) or en (the English spaCy tokenizer)")
    ap.add_argument("--every", type=int, default=1,
                    help="use every N-th input document only (a quicker, still all-language run; default 1: all)")
    ap.add_argument("--pin-cpu", type=int, default=None, help="pin this process to one CPU (sched_setaffinity)")
    ap.add_argument("--tmpdir", default=None, help="parent folder for the MinHash signature files")
    ap.add_argument("--decisions", default=None,
                    help="also write each document's decision here (JSONL: id, lang, kept, reason = '<Filter>:<reason>' "
                         "of the first filter that drops it), from the filters' own filter() methods, outside the timing")
    return ap.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    parts = {p.strip() for p in args.parts.split(",") if p.strip()}
    if args.pin_cpu is not None:
        os.sched_setaffinity(0, {args.pin_cpu})
    t_import = time.perf_counter()

    from datatrove.data import Document
    from datatrove.pipeline.dedup.minhash import MinhashConfig, MinhashDedupSignature
    from datatrove.pipeline.filters import FineWebQualityFilter, GopherQualityFilter, GopherRepetitionFilter
    from datatrove.utils.hashing import HashConfig
    from datatrove.utils.text import split_into_parts
    from datatrove.utils.word_tokenizers import SpaCyTokenizer, WhitespaceTokenizer, load_word_tokenizer
    from importlib.metadata import version
    from loguru import logger

    # datatrove's loguru logger writes to stderr; keep it there, warnings and up only.
    logger.remove()
    logger.add(sys.stderr, level="WARNING")
    log(f"imports {time.perf_counter() - t_import:.2f}s; datatrove {version('datatrove')}, spacy {version('spacy')}")

    # ---- read input ------------------------------------------------------------------------------------
    by_lang: dict[str, list] = defaultdict(list)
    n_in = 0
    with open(args.input, encoding="utf-8") as f:
        for lineno, line in enumerate(f):
            if not line.strip() or lineno % max(args.every, 1):
                continue
            rec = json.loads(line)
            lang = rec["lang"]
            if lang not in LANG_KEYS:
                log(f"skipping doc {rec.get('id')} with unsupported lang {lang!r}")
                continue
            by_lang[lang].append((str(rec["id"]), rec["text"]))
            n_in += 1
    if not n_in:
        log(f"no usable documents in {args.input}")
        return 2
    langs = sorted(by_lang)
    total_bytes = sum(len(t.encode("utf-8")) for docs in by_lang.values() for _, t in docs)
    log(f"read {n_in} docs, {total_bytes} bytes, {len(langs)} languages: {' '.join(langs)}")

    # ---- pick each language's word tokenizer, fall back where it cannot run offline ---------------------
    fallback_tok = SpaCyTokenizer("en") if args.fallback == "en" else WhitespaceTokenizer()
    fallback_name = "SpaCyTokenizer(en)" if args.fallback == "en" else "WhitespaceTokenizer(spaCy xx)"
    special = {}
    if args.fallback == "mudt":
        from mudt_tokenizer import MudtTokenizer  # beside this script; it imports datatrove

        special["mt"] = (MudtTokenizer(), "MudtTokenizer(spaCy xx + UD MUDT token rules)")
    fallback_tokenizers: dict[str, str] = {}
    tok_for: dict[str, object] = {}
    fallback_languages: list[str] = []
    fallback_reasons: dict[str, str] = {}
    for lang in langs:
        key = LANG_KEYS[lang]
        try:
            tok = load_word_tokenizer(key)
            tok.word_tokenize(by_lang[lang][0][1])  # forces the lazy model load (Stanza would download here)
            tok_for[lang] = key  # pass the language key, exactly as FineWeb-2 does
            log(f"{lang}: {key} -> {type(tok).__name__}({getattr(tok, 'language', '') or ''})")
        except Exception as e:  # ImportError (stanza not installed), download/network errors, ...
            reason = f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
            tok_for[lang], fallback_tokenizers[lang] = special.get(lang, (fallback_tok, fallback_name))
            log(f"{lang}: {key} word tokenizer cannot run offline ({reason}); falling back to {fallback_tokenizers[lang]}")
            fallback_languages.append(lang)
            fallback_reasons[lang] = reason

    # Document objects are built outside the timed regions (a reader's cost is not measured).
    docs_by_lang = {lang: [Document(text=t, id=i) for i, t in by_lang[lang]] for lang in langs}
    bytes_by_lang = {lang: sum(len(d.text.encode("utf-8")) for d in docs_by_lang[lang]) for lang in langs}
    result: dict = {}

    # ---- (a) FineWeb-2 filter chain -------------------------------------------------------------------
    if "filters" in parts:
        def make_chain(lang):
            (dup_line_frac, top, dup, line_punct_thr, new_line_ratio, min_avg, max_avg, non_alpha,
             stop) = FW2_CONFIGS[lang]
            language = tok_for[lang]
            return [
                GopherRepetitionFilter(
                    language=language,
                    dup_para_frac=0, dup_line_char_frac=0, dup_para_char_frac=0,  # disabled in FineWeb-2
                    dup_line_frac=dup_line_frac,
                    top_n_grams=tuple(zip((2, 3, 4), top)),
                    dup_n_grams=tuple(zip(range(5, 11), dup)),
                ),
                FineWebQualityFilter(
                    language=language,
                    short_line_thr=999,  # disabled in FineWeb-2
                    char_duplicates_ratio=0.1,  # FineWeb-2 raised it from 0.01
                    line_punct_thr=line_punct_thr,
                    new_line_ratio=new_line_ratio,
                ),
                GopherQualityFilter(
                    language=language,
                    max_avg_word_length=max_avg,
                    min_avg_word_length=min_avg,
                    stop_words=stop,
                    max_non_alpha_words_ratio=non_alpha,
                    min_stop_words=2,
                ),
            ]

        def run_chain(chain, docs):
            data = iter(docs)
            for step in chain:
                data = step.run(data, rank=0, world_size=1)
            return sum(1 for _ in data)

        # warm-up: every language's tokenizer + the filters' code paths
        t = time.perf_counter()
        for lang in langs:
            run_chain(make_chain(lang), docs_by_lang[lang][: args.warmup_docs])
        log(f"filters warm-up {time.perf_counter() - t:.2f}s")

        chains = {lang: make_chain(lang) for lang in langs}
        per_lang = {}
        reasons: Counter = Counter()
        split_into_parts.cache_clear()
        seconds = cpu_seconds = 0.0
        kept = 0
        for lang in langs:
            c0, t0 = time.process_time(), time.perf_counter()
            k = run_chain(chains[lang], docs_by_lang[lang])
            dt = time.perf_counter() - t0
            cpu_seconds += time.process_time() - c0
            seconds += dt
            kept += k
            lang_reasons: Counter = Counter()
            for step in chains[lang]:
                for name, st in step.stats.stats.items():
                    if name.startswith("dropped_"):
                        lang_reasons[name[len("dropped_"):]] += int(st.total)
            reasons.update(lang_reasons)
            per_lang[lang] = {"docs": len(docs_by_lang[lang]), "kept": k, "bytes": bytes_by_lang[lang],
                              "seconds": round(dt, 4),
                              "mb_per_s": round(bytes_by_lang[lang] / 1e6 / dt, 4) if dt > 0 else None,
                              "drop_reasons": dict(lang_reasons.most_common())}
            log(f"filters {lang}: {len(docs_by_lang[lang])} docs, kept {k}, {dt:.2f}s, "
                f"{bytes_by_lang[lang] / 1e6 / dt:.3f} MB/s")
        if args.decisions:  # untimed: the first filter of the chain that drops each document, and why
            from datatrove.pipeline.filters.base_filter import get_filter_result

            with open(args.decisions, "w", encoding="utf-8") as out:
                for lang in langs:
                    chain = make_chain(lang)
                    for doc in docs_by_lang[lang]:
                        reason = None
                        for step in chain:
                            ok, why = get_filter_result(step.filter(doc))[:2]
                            if not ok:
                                reason = f"{type(step).__name__}:{why}"
                                break
                        out.write(json.dumps({"id": doc.id, "lang": lang, "kept": reason is None, "reason": reason}) + "\n")
        result["filters"] = {
            "bytes": total_bytes, "seconds": round(seconds, 4),
            "mb_per_s": round(total_bytes / 1e6 / seconds, 4) if seconds > 0 else None,
            "cpu_seconds": round(cpu_seconds, 4),
            "mb_per_cpu_s": round(total_bytes / 1e6 / cpu_seconds, 4) if cpu_seconds > 0 else None,
            "docs": n_in, "kept": kept, "fallback_languages": fallback_languages,
            "fallback_tokenizers": fallback_tokenizers,
            "fallback_reasons": fallback_reasons,
            "drop_reasons": dict(reasons.most_common()),
            "chain": ["GopherRepetitionFilter", "FineWebQualityFilter", "GopherQualityFilter"],
            "per_language": per_lang,
        }
        log(f"filters total: {n_in} docs, kept {kept}, {seconds:.2f}s wall ({total_bytes / 1e6 / seconds:.3f} MB/s), "
            f"{cpu_seconds:.2f}s CPU ({total_bytes / 1e6 / cpu_seconds:.3f} MB/CPU-s)")

    # ---- (b) MinHash signatures -----------------------------------------------------------------------
    if "minhash" in parts:
        cfg = MinhashConfig(hash_config=HashConfig(hash_fc="xxhash", precision=64),
                            num_buckets=14, hashes_per_bucket=8, n_grams=5)  # FineWeb-2's config
        tmp = tempfile.mkdtemp(prefix="dt_minhash_", dir=args.tmpdir)
        try:
            # warm-up in its own folder (tokenizers, numpy paths, file layer)
            t = time.perf_counter()
            for lang in langs:
                step = MinhashDedupSignature(output_folder=os.path.join(tmp, "warmup", lang), config=cfg,
                                             language=tok_for[lang])
                run = step.run(iter(docs_by_lang[lang][: args.warmup_docs]), rank=0, world_size=1)
                if run is not None:
                    for _ in run:
                        pass
            log(f"minhash warm-up {time.perf_counter() - t:.2f}s")

            steps = {lang: MinhashDedupSignature(output_folder=os.path.join(tmp, "sigs", lang), config=cfg,
                                                 language=tok_for[lang]) for lang in langs}
            per_lang = {}
            seconds = cpu_seconds = 0.0
            n_sigs = 0
            for lang in langs:
                step = steps[lang]
                c0, t0 = time.process_time(), time.perf_counter()
                run = step.run(iter(docs_by_lang[lang]), rank=0, world_size=1)
                if run is not None:  # run() is a generator function in some versions; drain it
                    for _ in run:
                        pass
                dt = time.perf_counter() - t0
                cpu_seconds += time.process_time() - c0
                seconds += dt
                sig_bytes = os.path.getsize(os.path.join(tmp, "sigs", lang, "bucket_000", "00000.minhash.sig"))
                n = sig_bytes // (cfg.hashes_per_bucket * 8 + 4)
                n_sigs += n
                per_lang[lang] = {"docs": len(docs_by_lang[lang]), "signatures": n, "bytes": bytes_by_lang[lang],
                                  "seconds": round(dt, 4),
                                  "mb_per_s": round(bytes_by_lang[lang] / 1e6 / dt, 4) if dt > 0 else None}
                log(f"minhash {lang}: {len(docs_by_lang[lang])} docs, {dt:.2f}s, "
                    f"{bytes_by_lang[lang] / 1e6 / dt:.3f} MB/s")
            sig_total = sum(os.path.getsize(os.path.join(dp, fn))
                            for dp, _, fns in os.walk(os.path.join(tmp, "sigs")) for fn in fns)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        result["minhash"] = {
            "bytes": total_bytes, "seconds": round(seconds, 4),
            "mb_per_s": round(total_bytes / 1e6 / seconds, 4) if seconds > 0 else None,
            "cpu_seconds": round(cpu_seconds, 4),
            "mb_per_cpu_s": round(total_bytes / 1e6 / cpu_seconds, 4) if cpu_seconds > 0 else None,
            "docs": n_in, "signatures": n_sigs, "signature_file_bytes": sig_total,
            "fallback_languages": fallback_languages,
            "config": {"hash_fc": "xxhash", "precision": 64, "n_grams": 5, "num_buckets": 14,
                       "hashes_per_bucket": 8},
            "per_language": per_lang,
        }
        log(f"minhash total: {n_in} docs, {seconds:.2f}s wall ({total_bytes / 1e6 / seconds:.3f} MB/s), "
            f"{cpu_seconds:.2f}s CPU ({total_bytes / 1e6 / cpu_seconds:.3f} MB/CPU-s)")

    result["datatrove_version"] = version("datatrove")
    result["spacy_version"] = version("spacy")
    result["python"] = sys.version.split()[0]
    result["cpu_affinity"] = sorted(os.sched_getaffinity(0))
    result["input"] = args.input
    print(json.dumps(result, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
