"""The ingest stage's record (manifest `statistics`): what was read, kept and removed, per language, filter,
domain and source. The tokenizer and shards stages plan from it; the compliance documents are written from it."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from pipeline.records import Record, declared
# the removal reasons (per_filter, removed), exported here: other stages import ingest through its record only
from stages.ingest.reasons import (ALL_REASONS, BLOCKLIST, EMPTY, EXACT_DUP, LANGID_REASONS, NEAR_DUP,  # noqa: F401
                                   OPT_OUT, QUALITY_REASONS)

PII_KINDS: tuple[str, ...] = ("email", "ip", "phone", "iban")  # what the PII step redacts (stages/ingest/pii.py)


class Totals(Record):
    docs_in: int = Field(description="Documents read from all sources.")
    bytes_in: int = Field(description="UTF-8 bytes of those documents as read.")
    kept: int = Field(description="Documents published.")
    kept_bytes: int = Field(description="UTF-8 bytes of the published documents.")


class LanguageCounts(Record):
    docs_in: int = Field(description="Documents read for the language (by the source's language, before language ID).")
    bytes_in: int
    kept: int = Field(description="Documents published for the language.")
    kept_bytes: int
    kept_chars: int = Field(description="Characters of the published documents (the tokenizer samples by them).")
    kept_words: int
    mojibake_fixed: int = Field(description="Documents whose mojibake (double-encoded UTF-8) was repaired.")
    removed: dict[str, int] = Field(description="Documents removed, by reason (only reasons that fired).")


class OptOut(Record):
    protocols: list[str] = Field(description="Opt-out protocols honoured when the data was collected.")
    honoured_by: Literal["provider", "third_party", "not_applicable"]
    domains: list[str] = Field(description="Registrable domains whose documents are dropped (tdm_opt_out).")
    domains_file: str | None
    notes: str


SOURCE_KEY = '[[ingest.sources]] name = "{key}":'


class SourceRecord(Record):
    kind: str = Field(description="Reader: jsonl, parquet, text, hf, udhr.")
    category: str = declared(f"{SOURCE_KEY} category",
                             "Data category of the AI Office template (public dataset, crawled, ...).")
    licence: str | None = declared(f"{SOURCE_KEY} licence", "The licence the source is used under.")
    homepage: str | None = declared(f"{SOURCE_KEY} homepage")
    collected: str | None = declared(f"{SOURCE_KEY} collected", "When the data was collected (downloaded; YYYY-MM).")
    version: str | None = declared(f"{SOURCE_KEY} version", "The dataset's version or revision.", default=None)
    version_found: str | None = Field(None, description="The version read from the data itself (the udhr package's "
                                      "package.json); null where the reader cannot tell.")
    content_period: str | None = declared(f"{SOURCE_KEY} content_period", "When the content was created or crawled.",
                                          default=None)
    repo: str | None = declared(f"{SOURCE_KEY} repo", "Hugging Face dataset repository, for hf sources.")
    hf_config: str | None = declared(f"{SOURCE_KEY} hf_config")
    opt_out: OptOut = declared(f"{SOURCE_KEY} opt_out",
                               "How text-and-data-mining reservations were honoured for the source.")
    counts: dict[str, int] = Field(description="docs_in, bytes_in, kept, kept_bytes and removed_<reason> of this source.")
    domain_bytes_in: dict[str, int] = Field(
        description="Crawled sources only (else empty): UTF-8 bytes read per registrable domain of the document URLs, "
        "before any filter, largest first; (none) for documents without a URL.")


class BlocklistRecord(Record):
    path: str
    description: str | None
    sha256: str = Field(description="Over the list's files: the version that ran.")
    domains: int = Field(description="Domain entries.")
    urls: int = Field(description="URL entries.")
    entries: int
    removed: int = Field(description="Documents this list removed (reason blocklist; the first matching list counts).")


class ClusterRecord(Record):
    rule: Literal["greedy", "components"] = Field(description="Which documents of a cluster were dropped ([ingest.dedup] rule; "
                                                  "components for a group clustered in rounds).")
    in_rounds: bool = Field(description="Clustered as connected components in rounds of partitioned units (more verified "
                            "pairs than [ingest.dedup] cluster_unit_pairs), not in one unit.")
    rounds: int = Field(description="Rounds to converge: of the greedy rule in one unit, or of the partitioned components.")
    pairs: int = Field(description="Distinct verified near-duplicate pairs.")
    docs_in_pairs: int = Field(description="Documents in at least one pair.")
    components: int = Field(description="Connected components of the pairs (each keeps at least one document).")
    largest_component: int = Field(description="Documents in the largest component.")
    dropped: int = Field(description="Documents dropped as near duplicates.")
    kept_by_greedy_not_by_components: int | None = Field(
        description="Documents the greedy rule keeps that components would drop; null where greedy did not run.")


class BucketRecord(Record):
    largest_bucket: int = Field(description="Documents in the largest band bucket of the group (distinct texts).")
    capped_buckets: int = Field(description="Buckets of more than [ingest.dedup] bucket_leaders + 1 documents, whose "
                                "members were compared only with their bucket's first bucket_leaders.")
    uncompared_pairs: int = Field(description="Candidate pairs of those buckets not compared (between two members "
                                  "that are not leaders); 0: every pair sharing a band was compared.")


class MergeLevels(Record):
    keys: list[int] = Field(description="Keys folders at each merge level before the buckets (dedup/merge.py); the last "
                            "is how many each buckets and clusters unit read.")
    rounds: list[int] = Field(description="Edge folders at each merge level between two components rounds (a group "
                              "clustered in rounds with more partitions than fan_in).")
    drops: list[int] = Field(description="Drops folders at each gather level before the filter (dedup/gather.py); the "
                             "last is how many each filter unit read.")


class IngestRecord(Record):
    totals: Totals = Field(description="Over all languages and sources.")
    per_language: dict[str, LanguageCounts] = Field(description="Keyed by ISO 639-1 code, every configured language.")
    per_filter: dict[str, int] = Field(description="Documents removed per filter, every known filter (zeros included).")
    per_domain_bytes: dict[str, int] = Field(description="Kept bytes per registrable domain, largest first.")
    per_source: dict[str, SourceRecord] = Field(description="Keyed by the source's name in [[ingest.sources]].")
    pii_redactions: dict[str, int] = Field(description=f"Redactions by kind ({', '.join(PII_KINDS)}).")
    blocklists: dict[str, BlocklistRecord] = Field(description="Per [[ingest.blocklists]] list; empty when none is configured.")
    languages_without_documents: list[str] = Field(description="Configured languages with no kept document.")
    dedup_scope: Literal["language", "source", "dump"] = Field(
        "language", description="Which documents were compared for duplicates ([ingest.dedup] scope).")
    dedup_clusters: dict[str, ClusterRecord] = Field(
        default_factory=dict, description="Near-duplicate clustering per dedup group (absent with near dedup off).")
    dedup_groups: dict[str, list[str]] = Field(
        default_factory=dict, description="Per language, its groups of documents deduplicated apart from each other: "
        "the language itself, or `<lang>-<source>` / `<lang>-dump-<dump>` under the source and dump scopes.")
    dedup_buckets: dict[str, BucketRecord] = Field(
        default_factory=dict, description="Per dedup group with near dedup on: its band buckets over all partitions.")
    dedup_merges: dict[str, MergeLevels] = Field(
        default_factory=dict, description="Per dedup group with more documents units or partitions than [ingest.dedup] "
        "fan_in: how its folders were merged so that no unit opened more than fan_in. Absent: none was needed.")
