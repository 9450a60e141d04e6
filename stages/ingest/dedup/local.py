"""All four waves for one language in this process: the reference wiring, for tests and benchmarks.

Why it exists: it is the smallest complete statement of what an executor must pass to each step (which
folders, in which order, which rank), so the stage integration can copy it wave by wave. `order` lets a test
run the units of a wave in any order: the outputs must not change.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Sequence

from stages.ingest.dedup.buckets import find_candidate_pairs
from stages.ingest.dedup.clusters import Rule, resolve_clusters
from stages.ingest.dedup.exact import find_exact_duplicates
from stages.ingest.dedup.filter import filter_unit
from stages.ingest.dedup.signatures import write_signatures
from stages.ingest.minhash import DedupConfig


def layout(work: Path, n_units: int, partitions: int) -> dict[str, Any]:
    work = Path(work)
    return {"signatures": [work / "1-signatures" / f"{r:05d}" for r in range(n_units)],
            "exact": [work / "2a-exact" / f"{p:05d}" for p in range(partitions)],
            "pairs": [work / "2b-pairs" / f"{p:05d}" for p in range(partitions)],
            "clusters": work / "3-clusters",
            "filtered": [work / "4-filter" / f"{r:05d}" for r in range(n_units)]}


def dedup_language(kept: Sequence[Path], work: Path, cfg: DedupConfig, partitions: int, *, rule: Rule = "greedy",
                   order: Callable[[list], list] = list) -> dict[str, Any]:
    """`kept`: the units' kept.parquet files in unit order. Returns each wave's statistics and the folders."""
    n = len(kept)
    where = layout(work, n, partitions)
    stats: dict[str, Any] = {"signatures": {}, "exact": {}, "pairs": {}, "filter": {}}
    for r in order(list(range(n))):
        stats["signatures"][r] = write_signatures(kept[r], where["signatures"][r], cfg, partitions)
    for p in order(list(range(partitions))):
        stats["exact"][p] = find_exact_duplicates(where["signatures"], p, where["exact"][p], cfg, partitions)
        stats["pairs"][p] = find_candidate_pairs(where["signatures"], p, where["pairs"][p], cfg, partitions)
    stats["clusters"] = resolve_clusters(where["signatures"], order(list(where["pairs"])), where["clusters"], cfg,
                                         partitions, rule=rule)
    for r in order(list(range(n))):
        stats["filter"][r] = filter_unit(kept[r], where["signatures"][r], r, order(list(where["exact"])),
                                         where["clusters"], where["filtered"][r], cfg, partitions)
    return {"stats": stats, "folders": where}
