"""The per-document chain of the ingest stage, and one unit of its documents step (a language x some pieces of
input files, inputs.py).

Order matters for cost and for the record: cheap decisions first (empty text, opted-out domain, block lists), then language
identification, then quality filters, and only kept documents pay for PII redaction and dedup signatures.
Every document that is not kept leaves a row with its reason. A unit streams: documents go through in batches
of at most BATCH_DOCS documents / BATCH_BYTES of text, each batch's rows are written before the next is read,
so a unit's memory does not depend on its size.
"""

from __future__ import annotations

import functools
import hashlib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stages.ingest import blocklist
from stages.ingest.config import IngestConfig, SourceConfig
from stages.ingest.langid import LanguageIdentifier
from stages.ingest.minhash import dedup_keys
from stages.ingest.normalize import normalize_text
from stages.ingest.pii import redact_pii
from stages.ingest.quality import check_quality, quality_word_stats
from stages.ingest.inputs import Piece
from stages.ingest.readers import InputProblem, RawDoc, read_piece
from stages.ingest.reasons import BLOCKLIST, EMPTY, EVAL_OVERLAP, OPT_OUT
from stages.ingest.units import DocumentStats, PartFile, Problem
from stages.ngrams import file_ngrams, ngrams

NO_DOMAIN = "(none)"
BATCH_DOCS = 2048  # documents per batch through dedup keys and the Parquet writers
BATCH_BYTES = 16 << 20  # ... or this much text, whichever comes first
KEPT = "kept.parquet"  # a documents unit's kept rows with their dedup keys (UNIT_KEPT_SCHEMA), in input order
REMOVED = "removed"  # ... and its removed rows, as bounded parts removed-NNNNN.parquet (REJECTED_SCHEMA)


@functools.lru_cache(maxsize=4096)
def _registrable_domain(host_or_url: str) -> str | None:
    extract = _extractor()
    result = extract(host_or_url)
    return result.top_domain_under_public_suffix or result.domain or None


@functools.lru_cache(maxsize=1)
def _extractor():
    import tldextract

    # The bundled Public Suffix List snapshot: no network at run time.
    return tldextract.TLDExtract(suffix_list_urls=(), cache_dir=None)


def registrable_domain(url: str | None, fallback: str | None) -> str | None:
    """Domain as the AI Office template counts it (e.g. bbc.co.uk for https://news.bbc.co.uk/...)."""
    if url:
        host = url.split("://", 1)[-1].split("/", 1)[0].split("@")[-1].split(":")[0].lower()
        if host:
            return _registrable_domain(host)
    return fallback


def document_id(source: str, lang: str, key: str, index: int) -> str:
    """Stable id from where the document came from, so reruns and resumed runs produce the same ids. The language
    is part of it: two languages read from the same file layout (`data/{lang}/1.jsonl`) never share an id."""
    return hashlib.sha1(f"{source}\x00{lang}\x00{key}\x00{index}".encode()).hexdigest()[:20]


@dataclass
class DocumentChain:
    """Normalize -> opt-out -> language ID -> quality -> PII, for one source and language.

    Row sizes: `n_chars` and `n_bytes` (UTF-8) of the final text, `n_words` its number of whitespace-separated
    tokens (`len(text.split())`, punctuation attached; not the quality filters' word count, which drops
    punctuation and splits "1,5" or "e.g."). Documents that reach the quality filters get both counts from
    one `quality_word_stats`.
    """

    settings: IngestConfig
    source: SourceConfig
    lang: str
    opted_out: frozenset[str] = frozenset()
    blocklists: list[blocklist.Blocklist] = field(default_factory=list)
    langid: LanguageIdentifier = field(init=False)
    blocked_by: str | None = field(init=False, default=None)  # the list that removed the last blocked document

    def __post_init__(self) -> None:
        self.langid = LanguageIdentifier(self.settings.langid)
        self.thresholds = self.settings.quality.for_language(self.lang)
        self.eval_ngrams = evaluation_ngrams(tuple(self.settings.decontaminate), self.lang)
        self._id_key: str | None = None
        self._id_prefix = hashlib.sha1()

    def _document_id(self, key: str, index: int) -> str:
        """`document_id(self.source.name, self.lang, key, index)`, with the hash of the part that is the
        same for every document of an input computed once per input."""
        if key != self._id_key:
            self._id_prefix = hashlib.sha1(f"{self.source.name}\x00{self.lang}\x00{key}\x00".encode())
            self._id_key = key
        h = self._id_prefix.copy()
        h.update(f"{index}".encode())
        return h.hexdigest()[:20]

    def process(self, doc: RawDoc, key: str) -> tuple[dict[str, Any], str | None]:
        """The output row for a document and the reason it was removed (None when kept)."""
        text, repaired = normalize_text(doc.text, self.settings.normalize)
        domain = registrable_domain(doc.url, self.source.domain)
        row = {
            "id": self._document_id(key, doc.index),
            "text": text,
            "lang": self.lang,
            "lang_detected": None,
            "lang_score": 0.0,
            "source": self.source.name,
            "source_doc_id": doc.source_doc_id,
            "url": doc.url,
            "domain": domain,
            "licence": self.source.licence,
            "collected": self.source.collected,
            "input": key,
            "input_index": doc.index,
            "mojibake_fixed": repaired,
            "pii_redactions": 0,
        }
        reason, n_words = self._decide(row)
        text = row["text"]
        row["n_chars"] = len(text)
        row["n_bytes"] = len(text) if text.isascii() else len(text.encode("utf-8"))
        row["n_words"] = len(text.split()) if n_words is None else n_words
        return row, reason

    def _decide(self, row: dict[str, Any]) -> tuple[str | None, int | None]:
        """(reason or None, `len(row["text"].split())` of the final text when it was counted on the way)."""
        text = row["text"]
        if not text or text.isspace():
            return EMPTY, 0
        if row["domain"] and row["domain"] in self.opted_out:
            return OPT_OUT, None
        if self.blocklists:
            self.blocked_by = blocklist.first_match(self.blocklists, row["url"], row["domain"])
            if self.blocked_by:
                return BLOCKLIST, None
        detected, score, reason = self.langid.decide(self.lang, text)
        row["lang_detected"], row["lang_score"] = detected, float(score)
        if reason:
            return reason, None
        stats = quality_word_stats(text, self.thresholds)
        n_words = stats.n_tokens
        reason = check_quality(text, self.thresholds, stats)
        if reason:
            return reason, n_words
        if self.eval_ngrams and not self.eval_ngrams.isdisjoint(ngrams(text)):
            return EVAL_OVERLAP, n_words
        if self.settings.pii.enabled:
            redacted, counts = redact_pii(text, self.settings.pii)
            row["text"], row["pii_counts"], row["pii_redactions"] = redacted, counts, sum(counts.values())
            if redacted != text:
                n_words = None
        return None, n_words


def evaluation_ngrams(sets: tuple, lang: str) -> frozenset[int]:
    """The word 13-grams of the language's lines in the declared evaluation sets (files that exist)."""
    from pipeline.languages import expand_template

    out: set[int] = set()
    for s in sets:
        path = Path(s.path) / expand_template(s.pattern, lang)
        if path.is_file():
            out |= file_ngrams(path)
    return frozenset(out)


def load_opt_out_domains(source: SourceConfig) -> frozenset[str]:
    domains = {d.strip().lower() for d in source.opt_out.domains if d.strip()}
    if source.opt_out.domains_file:
        for line in Path(source.opt_out.domains_file).read_text(encoding="utf-8").splitlines():
            line = line.split("#", 1)[0].strip().lower()
            if line:
                domains.add(line)
    return frozenset(domains)


@dataclass
class UnitStats:
    """What a unit counts while its documents stream through (plain counters: one update per document), handed
    back as the unit's DocumentStats."""

    docs_in: int = 0
    bytes_in: int = 0
    kept: int = 0
    kept_bytes: int = 0
    mojibake_fixed: int = 0
    removed: Counter = field(default_factory=Counter)
    pii: Counter = field(default_factory=Counter)
    blocklist: Counter = field(default_factory=Counter)  # documents removed per block list
    domain_bytes_in: Counter = field(default_factory=Counter)  # crawled sources: bytes read per URL domain
    problems: list[Problem] = field(default_factory=list)

    def result(self) -> DocumentStats:
        return DocumentStats(
            docs_in=self.docs_in, bytes_in=self.bytes_in, kept=self.kept, kept_bytes=self.kept_bytes,
            mojibake_fixed=self.mojibake_fixed, removed=dict(sorted(self.removed.items())),
            pii=dict(sorted(self.pii.items())), problems=self.problems, blocklist=dict(sorted(self.blocklist.items())),
            domain_bytes_in=dict(sorted(self.domain_bytes_in.items())))


class InputFailed(RuntimeError):
    """Raised with on_error = "fail": the stage stops before publishing anything."""


def process_unit(settings: IngestConfig, source: SourceConfig, lang: str, pieces: list[Piece],
                 out_dir: Path) -> tuple[DocumentStats, list[PartFile]]:
    """Run the chain over some pieces of one source and language, streaming: kept rows with their dedup keys to
    `out_dir/kept.parquet`, removed rows to bounded parts (when kept at all). Returns (statistics, removed parts)."""
    import pyarrow.parquet as pq

    from stages.ingest.parts import PartWriter
    from stages.ingest.schema import REJECTED_SCHEMA, UNIT_KEPT_SCHEMA, parquet_options, to_table

    chain = DocumentChain(settings, source, lang, load_opt_out_domains(source), [blocklist.load(b) for b in settings.blocklists])
    crawled = source.category == "crawled"
    stats = UnitStats()
    # The MinHash signatures (512 bytes a row, uniformly random) do not compress: zstd only spends CPU on them.
    options = parquet_options(UNIT_KEPT_SCHEMA)
    options["compression"] = {name: "none" if name == "signature" else "zstd" for name in UNIT_KEPT_SCHEMA.names}
    kept_out = pq.ParquetWriter(out_dir / KEPT, UNIT_KEPT_SCHEMA, **options)
    removed_out = PartWriter(out_dir, REMOVED, REJECTED_SCHEMA, settings.max_rows_per_file, enabled=settings.keep_rejected)
    kept: list[dict] = []
    removed: list[dict] = []
    pending = 0

    def flush() -> None:
        nonlocal pending
        if kept:
            add_dedup_keys(kept, settings)
            kept_out.write_table(to_table(kept, UNIT_KEPT_SCHEMA))
        if removed and settings.keep_rejected:
            removed_out.write(to_table(removed, REJECTED_SCHEMA))
        kept.clear()
        removed.clear()
        pending = 0

    limit = source.max_documents
    try:
        for piece in pieces:
            for item in read_piece(source, lang, piece):
                if isinstance(item, InputProblem):
                    if settings.on_error == "fail":
                        raise InputFailed(f"source {source.name}: {item.message} (on_error = \"fail\"; set \"skip\" to go on)")
                    stats.problems.append(Problem(source=source.name, lang=lang, input=item.input, line=item.line,
                                                  reason=item.reason, message=item.message))
                    continue
                stats.docs_in += 1
                n_bytes = len(item.text) if item.text.isascii() else len(item.text.encode("utf-8"))
                stats.bytes_in += n_bytes
                pending += n_bytes
                if crawled:  # the public summary ranks crawled domains by content scraped: before any filter
                    stats.domain_bytes_in[registrable_domain(item.url, None) or NO_DOMAIN] += n_bytes
                row, reason = chain.process(item, piece.key)
                stats.mojibake_fixed += row["mojibake_fixed"]
                if reason is None:
                    stats.pii.update(row.pop("pii_counts", {}))
                    stats.kept += 1
                    stats.kept_bytes += row["n_bytes"]
                    kept.append(row)
                else:
                    row["reason"] = reason
                    stats.removed[reason] += 1
                    if reason == BLOCKLIST:
                        stats.blocklist[chain.blocked_by] += 1
                    removed.append(row)
                if len(kept) + len(removed) >= BATCH_DOCS or pending >= BATCH_BYTES:
                    flush()
                if limit and stats.docs_in >= limit:
                    break
            if limit and stats.docs_in >= limit:
                break
        flush()
    finally:
        kept_out.close()
        parts = removed_out.close()
    return stats.result(), parts


def add_dedup_keys(rows: list[dict], settings: IngestConfig) -> None:
    """Exact-duplicate key and MinHash signature per kept row: what the dedup steps need."""
    if not rows:
        return
    keys, sigs = dedup_keys([r["text"] for r in rows], settings.dedup)
    for row, key, sig in zip(rows, keys, sigs):
        row["exact_key"] = key
        row["signature"] = sig.tobytes()
