"""Deduplication of one group of documents as waves of units, with bounded memory per unit.

Why: deduplicating a whole language in one process (signatures and an LSH index in memory) does not fit a
machine at web scale. Each step is a pure function of files on disk that writes into the folder it is given
(the executor publishes unit folders atomically), so a task runner can run each wave's units anywhere, in any
order, kill and rerun them, and get byte-identical outputs. The decisions are those of the single-process
dedup (exact first, first occurrence kept; then the greedy MinHash LSH rule among the survivors;
tests/ingest/dedup_reference.py, tested equal).

    wave  function                            one unit =          reads                        writes
    1     signatures.write_signatures         input unit          its kept.parquet             bands/exact rows, signatures.npy, ids
    1b    merge.merge_key_folders, per level  run of <= fan_in    those keys folders           the same files, one span per partition
          (only a group of more than fan_in units: levels until at most fan_in keys folders are left)
    2a    exact.find_exact_duplicates         partition p         partition p of all keys f.   exact-drops.parquet
    2b    buckets.find_candidate_pairs        partition p         partition p of all keys f.   pairs.parquet (verified)
    3     clusters.resolve_clusters           group               all pairs of the group       near-drops.parquet
    3'    components.scatter_pairs            partition p         its pairs.parquet            edges by node (many pairs:
          components.star_round, per round    group x node part.  its edges, previous round    edges, labels;
          clusters.resolve_from_rounds        group x node part.  its labels, last round       near-drops.parquet)
    3b    gather.gather_drops, per level      run of <= fan_in    those partitions' drops      the same files, merged in order
          partitions (only a group of more partitions than fan_in)
    4     filter.filter_unit                  input unit          its kept.parquet + its drops kept-/duplicates-NNNNN.parquet

A group is the documents compared with each other ([ingest.dedup] scope: a language, a source or a dump of it).
Step 3' replaces step 3 for a group with more verified pairs than cluster_unit_pairs: connected components in
rounds of partitioned units (components.py), so no unit holds the group's pairs; a group of more partitions
than fan_in merges each round's folders before the next round reads them (components.merge_round_folders).
With steps 1b and 3b no unit of any step opens more than fan_in folders of another step.

A document is named by its order key `(unit rank << 32) | row` (keys.py): the rank is the unit's position in
the language's units in the stage's order (sorted unit ids), so callers pass the step-1 folders in that order.
(This package file imports nothing, so the step modules can import their siblings through it without a cycle.)
"""
