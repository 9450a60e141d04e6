"""The ingest stage's steps: what each unit is given (payload) and what it hands back (result).

The executor validates both against these models, so a unit that travels to a Dask worker, or a result.json read
back after a crash, is checked field by field; the statistics of the dedup steps are the ones each step also
records in its own stats.json (dedup/files.py).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from pipeline.stage import Payload, Step, UnitResult


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Piece(BaseModel):
    """Part `part` of `parts` of one input file: what one documents unit reads of it (inputs.split_files)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    ref: str  # what to open: a local path, or a path inside the Hugging Face repo
    key: str  # the file's name relative to the source's root (part of every document id)
    size: int  # of the whole file
    format: str
    part: int = 0
    parts: int = 1

    @property
    def bytes(self) -> int:
        return self.size * (self.part + 1) // self.parts - self.size * self.part // self.parts


class Problem(_Strict):
    """An input the stage skipped, with why and the fix (the manifest's `skipped`)."""

    source: str
    lang: str
    input: str
    line: int | None = None
    reason: str
    message: str


class PartFile(_Strict):
    """A Parquet part a unit wrote (parts.py): its name in the unit folder, rows and checksum."""

    file: str
    rows: int
    sha256: str


class DedupSettings(_Strict):
    """What ties the outputs of the dedup steps together: a step refuses outputs made under other settings."""

    exact: bool
    near: bool
    num_perm: int
    bands: int
    rows: int
    threshold: float
    seed: int
    partitions: int


# --- documents: language x source x pieces of input files ------------------------------------------------
class DocumentsPayload(Payload):
    lang: str
    source: str
    pieces: list[Piece]
    pattern: str | None = None  # no pieces: what was looked for ...
    problem: tuple[str, str] | None = None  # ... and the (reason, message) recorded for it


class DocumentStats(_Strict):
    """What the document chain did to one unit's input; a unit without input has only its problems."""

    docs_in: int | None = None  # None: the unit read no input (an optional source without files)
    bytes_in: int = 0
    kept: int = 0
    kept_bytes: int = 0
    mojibake_fixed: int = 0
    removed: dict[str, int] = Field(default_factory=dict)  # filter reason -> documents
    pii: dict[str, int] = Field(default_factory=dict)  # kind -> redactions
    problems: list[Problem] = Field(default_factory=list)
    blocklist: dict[str, int] = Field(default_factory=dict)  # block list -> documents removed
    domain_bytes_in: dict[str, int] = Field(default_factory=dict)  # crawled sources: bytes read per URL domain


class DocumentsResult(UnitResult):
    lang: str
    source: str
    stats: DocumentStats
    removed_parts: list[PartFile] = Field(default_factory=list)

    @property
    def read_documents(self) -> bool:
        return self.stats.docs_in is not None


# --- signatures and filter: one per documents unit that read documents ------------------------------------
class RankedUnitPayload(Payload):
    lang: str
    group: str  # the documents compared with each other: the language, or one source or dump of it ([ingest.dedup] scope)
    rank: int  # the unit's position among its group's documents units: its place in the dedup order
    partitions: int
    kept: int  # documents the unit kept: what the step's cost follows
    near_parts: int = 0  # filter: the group's near drops are in this many clusters units (0: one, named by the group)
    gathered: int = 0  # filter: the group's drops were gathered into this many folders of its last gather level


class StepStats(_Strict):
    """What every dedup step records in its stats.json: the settings its outputs were made under, and counts."""

    settings: DedupSettings


class SignatureStats(StepStats):
    """Step 1 (dedup/signatures.py), per documents unit."""

    docs: int
    empty_docs: int  # sentinel signatures (no text to shingle): exact rows only
    band_rows: int


class SignaturesResult(SignatureStats, UnitResult):
    lang: str


# --- merge: per run of at most fan_in keys folders, in levels (dedup/merge.py) ----------------------------------
class MergePayload(Payload):
    lang: str
    group: str
    level: int  # 1 merges step-1 folders, level k the folders of level k - 1
    input_step: str  # signatures for level 1, else the level below
    inputs: list[str]  # its unit ids, in rank order
    first_rank: int  # the rank of the first unit the inputs hold
    partitions: int
    kept: int  # documents the inputs hold: what the step's cost follows


class MergeStats(StepStats):
    """A merge unit (dedup/merge.py): the ranks its folder holds and what it read and wrote."""

    first_rank: int
    ranks: int
    inputs: int  # keys folders it read: at most [ingest.dedup] fan_in
    docs: int
    band_rows: int
    exact_rows: int
    bytes_written: int


class MergeResult(MergeStats, UnitResult):
    lang: str
    group: str


# --- buckets: language x band partition ---------------------------------------------------------------------
class BucketsPayload(Payload):
    lang: str
    group: str
    partition: int
    partitions: int
    units: list[str]  # the units of `key_step` holding the group's keys, in rank order
    kept: float  # expected documents in the partition
    key_step: str = "signatures"  # the group's last merge level when it has more units than fan_in


class ExactStats(StepStats):
    """Step 2a (dedup/exact.py), per partition."""

    partition: int
    rows_read: int
    distinct: int
    groups_with_copies: int
    dropped: int


class PairStats(StepStats):
    """Step 2b (dedup/buckets.py), per partition."""

    partition: int
    rows_read: int
    candidate_docs: int
    largest_bucket: int
    capped_buckets: int = 0  # buckets of more than bucket_leaders + 1 documents
    uncompared: int = 0  # pairs of those buckets not generated as candidates
    candidates: int
    first_shared_band: int
    verified: int


class BucketsResult(UnitResult):
    lang: str
    exact: ExactStats
    pairs: PairStats


# --- clusters: one per language with near dedup on ----------------------------------------------------------
class ClustersPayload(Payload):
    lang: str
    group: str
    partitions: int
    units: list[str]  # the units of `key_step` holding the group's keys (the representatives' ids), in rank order
    kept: int
    key_step: str = "signatures"
    partition: int | None = None  # a group clustered in rounds: one clusters unit per partition of its nodes
    rounds: int = 0  # ... reading the labels of this round, the first that found a star forest


# --- components rounds: per group clustered in rounds x partition of its nodes (dedup/components.py) --------
class RoundPayload(Payload):
    lang: str
    group: str
    partition: int
    partitions: int
    round: int
    kept: float  # expected documents in the partition: what the step's cost follows


class RoundMergePayload(Payload):
    """A run of at most fan_in folders of a components round (or of a lower merge level of it) merged into one."""

    lang: str
    group: str
    round: int
    level: int
    input_step: str
    inputs: list[str]
    partitions: int
    kept: float


class RoundStats(_Strict):
    """What a round unit of dedup/components.py records: the partitioning that ties its files to the next
    round's, and counts."""

    round: int
    kind: Literal["scatter", "large", "small", "merge"]  # merge: a run of the round's folders (its edges only)
    partition: int
    partitions: int
    edges_in: int  # distinct undirected edges of its nodes read (each counted by its smaller node's unit)
    nodes: int  # nodes with an edge, in its partition
    violations: int  # nodes with a smaller neighbour and another neighbour: 0 everywhere means a star forest
    edges_out: int  # distinct undirected edges it emitted
    largest_degree: int


class RoundResult(RoundStats, UnitResult):
    lang: str
    group: str


class ClusterStats(StepStats):
    """Step 3 (dedup/clusters.py), per language."""

    rule: str
    pairs_read: int
    pairs: int
    docs_in_pairs: int
    components: int
    largest_component: int
    dropped: int
    rounds: int
    kept_by_greedy_not_by_components: int | None  # documents the greedy rule keeps, components drop (None: not run)


class ClustersResult(ClusterStats, UnitResult):
    lang: str
    group: str
    in_rounds: bool  # one of the partitions of a group clustered in rounds


# --- gather: per run of at most fan_in partitions' drops, in levels (dedup/gather.py) --------------------------
class GatherPayload(Payload):
    lang: str
    group: str
    level: int  # 1 gathers the buckets units' exact drops (and the node partitions' near drops), k level k - 1's
    first_partition: int
    inputs: int  # folders of the level below: partitions at level 1
    partitions: int
    near: bool  # the group's near drops are per node partition (clustered in rounds): gathered too
    kept: float


class GatherStats(StepStats):
    """A gather unit (dedup/gather.py): the partitions its folder holds and the rows of each file."""

    first_partition: int
    count: int
    near: bool
    inputs: int
    exact_drops: int = 0
    exact_copies: int = 0
    near_drops: int = 0
    near_copies: int = 0


class GatherResult(GatherStats, UnitResult):
    lang: str
    group: str


# --- filter: one per documents unit that read documents (RankedUnitPayload) ---------------------------------
class FilterStats(StepStats):
    """Step 4 (dedup/filter.py), per documents unit: its published parts and what the record sums of them."""

    docs: int
    kept: int
    kept_bytes: int
    kept_chars: int
    kept_words: int
    exact_duplicate: int  # documents dropped, by reason (reasons.EXACT_DUP, NEAR_DUP)
    near_duplicate: int
    parts: list[PartFile]
    duplicate_parts: list[PartFile]


class FilterResult(FilterStats, UnitResult):
    lang: str


DOCUMENTS = Step("documents", DocumentsPayload, DocumentsResult)
SIGNATURES = Step("signatures", RankedUnitPayload, SignaturesResult)
MERGE = Step("merge", MergePayload, MergeResult)  # run as levels merge-001, ... for groups above fan_in (iter_steps)
BUCKETS = Step("buckets", BucketsPayload, BucketsResult)
CLUSTERS = Step("clusters", ClustersPayload, ClustersResult)
COMPONENTS = Step("components", RoundPayload, RoundResult)  # run as rounds components-000, -001, ... (iter_steps)
# the merges of round r's folders, level l, as components-merge-<r * 100 + l>: before round r + 1 (iter_steps)
COMPONENTS_MERGE = Step("components-merge", RoundMergePayload, RoundResult)
GATHER = Step("gather", GatherPayload, GatherResult)  # levels gather-001, ... for groups above fan_in partitions
FILTER = Step("filter", RankedUnitPayload, FilterResult)
