"""Deduplication of one language as four waves of units, with bounded memory per unit.

Why: the stage's finalize deduplicates a whole language in one process (signatures and an LSH index in
memory); at FineWeb-2 scale that is terabytes for German. These steps are pure functions of files on disk,
each writing one folder atomically (`atomic.run_once`), so a task runner can run each wave's units anywhere,
in any order, kill and rerun them, and get byte-identical outputs. The decisions are those of today's finalize
(exact first, first occurrence kept; then today's greedy MinHash LSH rule among the survivors).

    wave  function                            one unit =          reads                        writes
    1     signatures.write_signatures         input unit          its kept.parquet             bands/exact rows, signatures.npy, ids
    2a    exact.find_exact_duplicates         partition p         partition p of all units     exact-drops.parquet
    2b    buckets.find_candidate_pairs        partition p         partition p of all units     pairs.parquet (verified)
    3     clusters.resolve_clusters           language            all pairs of the language    near-drops.parquet
    4     filter.filter_unit                  input unit          its kept.parquet + its drops kept.parquet, duplicates.parquet

A document is named by its order key `(unit rank << 32) | row` (keys.py): the rank is the unit's position in
the language's units in finalize's order (sorted unit ids), so callers pass the step-1 folders in that order.
"""

from stages.ingest.dedup.buckets import find_candidate_pairs
from stages.ingest.dedup.clusters import resolve_clusters
from stages.ingest.dedup.exact import find_exact_duplicates
from stages.ingest.dedup.filter import filter_unit
from stages.ingest.dedup.signatures import write_signatures

__all__ = ["write_signatures", "find_exact_duplicates", "find_candidate_pairs", "resolve_clusters", "filter_unit"]
