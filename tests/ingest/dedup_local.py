"""All four dedup waves for one language in this process: the reference wiring, for tests and benchmarks.

It is the smallest complete statement of what an executor must pass to each step (which folders, in which
order, which rank). Each step's folder is published whole (pipeline.fsutil.atomic_dir) and a finished one is
not redone, as the stage's executor does with unit folders. `order` lets a test run the units of a wave in any
order: the outputs must not change.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence, TypeVar

from pipeline.fsutil import atomic_dir
from stages.ingest.dedup import files
from stages.ingest.dedup.buckets import find_candidate_pairs
from stages.ingest.dedup.clusters import Rule, resolve_clusters
from stages.ingest.dedup.exact import find_exact_duplicates
from stages.ingest.dedup.filter import filter_unit
from stages.ingest.dedup.gather import gather_drops
from stages.ingest.dedup.merge import merge_key_folders, merge_levels
from stages.ingest.dedup.signatures import write_signatures
from stages.ingest.minhash import DedupConfig
from stages.ingest.units import (ClusterStats, ExactStats, FilterStats, GatherStats, MergeStats, PairStats,
                                 SignatureStats, StepStats)

S = TypeVar("S", bound=StepStats)


@dataclass(frozen=True)
class Layout:
    """Where each wave's folders are under a work directory, in unit and partition order."""

    signatures: list[Path]
    merged: list[list[Path]]  # per merge level (none at fan_in >= units): the folders of its runs
    exact: list[Path]
    pairs: list[Path]
    clusters: Path
    gathered: list[list[Path]]  # per gather level (none at fan_in >= partitions): the folders of its runs
    filtered: list[Path]


@dataclass
class WaveStats:
    """Each wave's statistics, by unit rank or partition."""

    signatures: dict[int, SignatureStats] = field(default_factory=dict)
    merged: list[list[MergeStats]] = field(default_factory=list)
    exact: dict[int, ExactStats] = field(default_factory=dict)
    pairs: dict[int, PairStats] = field(default_factory=dict)
    clusters: ClusterStats | None = None
    filter: dict[int, FilterStats] = field(default_factory=dict)


@dataclass(frozen=True)
class LocalDedup:
    stats: WaveStats
    folders: Layout


def layout(work: Path, n_units: int, partitions: int, fan_in: int | None = None) -> Layout:
    work = Path(work)
    levels = merge_levels(n_units, fan_in) if fan_in else []
    return Layout(signatures=[work / "1-signatures" / f"{r:05d}" for r in range(n_units)],
                  merged=[[work / f"1b-merge-{k + 1}" / f"{i:05d}" for i in range(n)] for k, n in enumerate(levels)],
                  exact=[work / "2a-exact" / f"{p:05d}" for p in range(partitions)],
                  pairs=[work / "2b-pairs" / f"{p:05d}" for p in range(partitions)],
                  clusters=work / "3-clusters",
                  gathered=[[work / f"3b-gather-{k + 1}" / f"{i:05d}" for i in range(n)]
                            for k, n in enumerate(merge_levels(partitions, fan_in) if fan_in else [])],
                  filtered=[work / "4-filter" / f"{r:05d}" for r in range(n_units)])


def once(out_dir: Path, model: type[S], step: Callable[[Path], S]) -> S:
    """`step(folder)` into a temporary sibling of `out_dir` renamed into place when it returns; a finished
    `out_dir` is not redone (its recorded statistics are returned)."""
    done = files.finished(out_dir, model)
    if done is not None:
        return done
    with atomic_dir(out_dir) as tmp:
        return step(tmp)


def dedup_language(kept: Sequence[Path], work: Path, cfg: DedupConfig, partitions: int, *, rule: Rule = "greedy",
                   order: Callable[[list], list] = list, fan_in: int | None = None) -> LocalDedup:
    """`kept`: the units' kept.parquet files in unit order; `fan_in`: merge the keys folders in levels of runs of
    at most this many (the stage's [ingest.dedup] fan_in). Returns each wave's statistics and the folders."""
    n = len(kept)
    where = layout(work, n, partitions, fan_in)
    stats = WaveStats()
    for r in order(list(range(n))):
        stats.signatures[r] = once(where.signatures[r], SignatureStats,
                                   lambda d: write_signatures(kept[r], d, cfg, partitions))
    key_dirs = where.signatures
    for level, folders in enumerate(where.merged, start=1):
        assert fan_in is not None
        level_stats: dict[int, MergeStats] = {}
        for i in order(list(range(len(folders)))):
            run = key_dirs[i * fan_in:(i + 1) * fan_in]
            level_stats[i] = once(folders[i], MergeStats,
                                  lambda d: merge_key_folders(run, i * fan_in ** level, d, cfg, partitions))
        stats.merged.append([level_stats[i] for i in range(len(folders))])
        key_dirs = folders
    for p in order(list(range(partitions))):
        stats.exact[p] = once(where.exact[p], ExactStats,
                              lambda d: find_exact_duplicates(key_dirs, p, d, cfg, partitions))
        stats.pairs[p] = once(where.pairs[p], PairStats,
                              lambda d: find_candidate_pairs(key_dirs, p, d, cfg, partitions))
    pair_dirs = order(list(where.pairs))
    stats.clusters = once(where.clusters, ClusterStats,
                          lambda d: resolve_clusters(key_dirs, pair_dirs, d, cfg, partitions, rule=rule))
    drops = list(where.exact)
    for level, folders in enumerate(where.gathered if cfg.exact else [], start=1):
        assert fan_in is not None
        for i in order(list(range(len(folders)))):
            run = drops[i * fan_in:(i + 1) * fan_in]
            once(folders[i], GatherStats, lambda d: gather_drops(run, [], i * fan_in ** level, d, cfg, partitions))
        drops = folders
    for r in order(list(range(n))):
        exact_dirs = order(list(drops))
        stats.filter[r] = once(where.filtered[r], FilterStats,
                               lambda d: filter_unit(kept[r], where.signatures[r], r, exact_dirs, where.clusters, d, cfg,
                                                     partitions))
    return LocalDedup(stats, where)
