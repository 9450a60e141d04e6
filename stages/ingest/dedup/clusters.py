"""Step 3, per language: which documents in verified pairs are dropped, and whose duplicate each one is.

The LSH index's rule (`minhash.NearDuplicateIndex`, documents in unit order) is greedy, not transitive: a
document is a near duplicate of the *first kept* earlier document it is verified-similar to, and a dropped
document is never a representative. With A~B and B~C but not A~C it drops B (for A) and keeps C; a connected
component {A, B, C} would drop C too. That decision depends only on the graph of verified pairs, so it is
reproduced here exactly, in vectorised rounds over the pairs (`greedy_first_kept`); connected components are
computed too, for the statistics and as the optional `rule="components"`. Either way the choice depends only on
order keys, never on which worker or partition finished first.

Output (`out_dir`): near-drops.parquet (doc, rep, rep_id) sorted by doc, near-copies.parquet (rep, copies) sorted
by rep (the documents dropped for each kept one: its cluster size - 1), and stats.json.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from stages.ingest.dedup import files
from stages.ingest.minhash import DedupConfig
from stages.ingest.units import ClusterStats, DedupSettings, PairStats

Rule = Literal["greedy", "components"]
_UNDECIDED, _KEPT, _DROPPED = 0, 1, 2


def resolve_clusters(units: Sequence[Path], pair_dirs: Sequence[Path], out_dir: Path, cfg: DedupConfig,
                     partitions: int, *, rule: Rule = "greedy") -> ClusterStats:
    """`units`: the keys folders in rank order (for the representatives' ids); `pair_dirs`: all P step-2b folders."""
    if rule not in ("greedy", "components"):
        raise ValueError(f"rule must be greedy or components, not {rule!r}")
    return files.run_step(out_dir, lambda folder: _resolve(list(map(Path, units)), list(map(Path, pair_dirs)), folder,
                                                           cfg, partitions, rule))


def resolve_from_rounds(units: Sequence[Path], labels_dir: Path, first_round_dir: Path, out_dir: Path,
                        cfg: DedupConfig, partitions: int, rounds: int) -> ClusterStats:
    """Step 3 for a group clustered in rounds, one unit per partition of its nodes: the converged round's labels
    of the partition (node -> its component's smallest node) as near drops, rule "components"."""
    return files.run_step(out_dir, lambda folder: _from_rounds(list(map(Path, units)), Path(labels_dir),
                                                               Path(first_round_dir), folder, cfg, partitions, rounds))


def _from_rounds(units: list[Path], labels_dir: Path, first_round_dir: Path, tmp: Path, cfg: DedupConfig,
                 partitions: int, rounds: int) -> ClusterStats:
    from stages.ingest.dedup.components import read_labels
    from stages.ingest.units import RoundStats

    settings = files.settings_record(cfg, partitions)
    final, first = files.finished(labels_dir, RoundStats), files.finished(first_round_dir, RoundStats)
    if final is None or first is None or final.violations or final.partitions != partitions:
        raise ValueError(f"{labels_dir} is not a finished round that found a star forest of {partitions} partitions: "
                         "rerun the components rounds")
    doc, rep = read_labels([labels_dir])
    rep_ids = files.resolve_ids(files.key_folders(units), rep)
    table = pa.table({"doc": doc, "rep": rep, "rep_id": rep_ids}, schema=files.DROP_SCHEMA)
    files.write_sorted(tmp / files.NEAR_DROPS, table)
    files.write_copies(tmp / files.NEAR_COPIES, rep)  # this partition's share: step 4 sums the partitions'
    return ClusterStats(settings=settings, rule="components", pairs_read=first.edges_in, pairs=first.edges_in,
                        docs_in_pairs=final.nodes, components=final.nodes - len(doc),
                        largest_component=final.largest_degree + 1 if final.nodes else 0, dropped=len(doc),
                        rounds=rounds, kept_by_greedy_not_by_components=None)


def greedy_first_kept(lo: np.ndarray, hi: np.ndarray, n: int) -> tuple[np.ndarray, int]:
    """Over nodes 0..n-1 in order and edges lo < hi: (duplicate_of per node, -1 if kept; rounds needed)."""
    status = np.full(n, _UNDECIDED, dtype=np.int8)
    has_earlier = np.zeros(n, dtype=bool)
    has_earlier[hi] = True
    status[~has_earlier] = _KEPT
    e_lo, e_hi, rounds = lo, hi, 0
    while True:
        open_ = status[e_hi] == _UNDECIDED
        e_lo, e_hi = e_lo[open_], e_hi[open_]
        if not len(e_hi):
            break
        rounds += 1
        s = status[e_lo]
        dropped = np.zeros(n, dtype=bool)
        dropped[e_hi[s == _KEPT]] = True
        waiting = np.zeros(n, dtype=bool)
        waiting[e_hi[s == _UNDECIDED]] = True
        touched = np.zeros(n, dtype=bool)
        touched[e_hi] = True
        status[dropped] = _DROPPED
        status[touched & ~dropped & ~waiting] = _KEPT
    dup_of = np.full(n, -1, dtype=np.int64)
    use = (status[lo] == _KEPT) & (status[hi] == _DROPPED)
    a, b = lo[use], hi[use]
    idx = np.lexsort((a, b))
    a, b = a[idx], b[idx]
    first = np.ones(len(b), dtype=bool)
    first[1:] = b[1:] != b[:-1]
    dup_of[b[first]] = a[first]
    return dup_of, rounds


def connected_components(lo: np.ndarray, hi: np.ndarray, n: int) -> np.ndarray:
    """Label of each node = the smallest node of its component (hooking roots + pointer jumping)."""
    label = np.arange(n, dtype=np.int64)
    while True:
        l_lo, l_hi = label[lo], label[hi]
        m = np.minimum(l_lo, l_hi)
        new = label.copy()
        np.minimum.at(new, l_lo, m)
        np.minimum.at(new, l_hi, m)
        while True:
            jumped = new[new]
            if np.array_equal(jumped, new):
                break
            new = jumped
        if np.array_equal(new, label):
            return label
        label = new


def _read_pairs(pair_dirs: list[Path], settings: DedupSettings, partitions: int) -> tuple[np.ndarray, np.ndarray]:
    seen = []
    a_parts, b_parts = [], []
    for d in pair_dirs:
        seen.append(files.read_finished(d, "step-2b folder", PairStats, settings).partition)
        t = pq.read_table(d / files.PAIRS)
        a_parts.append(t.column("a").to_numpy())
        b_parts.append(t.column("b").to_numpy())
    if sorted(seen) != list(range(partitions)):
        raise ValueError(f"step 3 needs the pairs of each of the {partitions} partitions once; got {sorted(seen)}")
    a = np.concatenate(a_parts) if a_parts else np.empty(0, np.uint64)
    b = np.concatenate(b_parts) if b_parts else np.empty(0, np.uint64)
    return a, b


def _resolve(units: list[Path], pair_dirs: list[Path], tmp: Path, cfg: DedupConfig, partitions: int,
             rule: Rule) -> ClusterStats:
    settings = files.settings_record(cfg, partitions)
    folders = files.key_folders(units)
    files.check_key_folders(folders, settings)
    a, b = _read_pairs(pair_dirs, settings, partitions)
    n_pairs_read = len(a)
    idx = np.lexsort((b, a))
    a, b = a[idx], b[idx]
    distinct = np.ones(len(a), dtype=bool)
    distinct[1:] = (a[1:] != a[:-1]) | (b[1:] != b[:-1])
    a, b = a[distinct], b[distinct]
    nodes = np.unique(np.concatenate((a, b)))
    lo, hi = np.searchsorted(nodes, a), np.searchsorted(nodes, b)
    n = len(nodes)

    dup_of, rounds = greedy_first_kept(lo, hi, n)
    label = connected_components(lo, hi, n)
    n_components = int((label == np.arange(n)).sum())
    largest = int(np.bincount(label).max()) if n else 0
    greedy_kept = n - int((dup_of >= 0).sum())
    if rule == "components":
        dup_of = np.where(label == np.arange(n), -1, label)

    dropped = np.flatnonzero(dup_of >= 0)
    doc, rep = nodes[dropped], nodes[dup_of[dropped]]
    table = pa.table({"doc": doc, "rep": rep, "rep_id": files.resolve_ids(folders, rep)}, schema=files.DROP_SCHEMA)
    files.write_sorted(tmp / files.NEAR_DROPS, table)
    files.write_copies(tmp / files.NEAR_COPIES, rep)
    return ClusterStats(settings=settings, rule=rule, pairs_read=int(n_pairs_read), pairs=int(len(a)), docs_in_pairs=n,
                        components=n_components, largest_component=largest, dropped=int(len(dropped)), rounds=rounds,
                        kept_by_greedy_not_by_components=greedy_kept - n_components)
