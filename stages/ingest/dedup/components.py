"""Connected components of the verified pairs as rounds of partitioned units, so that no unit holds a group's pairs.

Why: step 3 (clusters.py) reads every verified pair of a dedup group into one process, hundreds of GB for
English. Here the pairs are edges spread over `partitions` by node (a hash of the order key), and each round is a
wave of units, one per partition, that reads only the edges of its own nodes: the large-star and small-star
operations of Kiveris et al. ("Connected Components in MapReduce and Beyond", 2014), alternated until the graph is
a forest of stars, each centred on its component's smallest node. Both operations are defined on the whole edge
set, node by node, so every round's edge set, the rounds needed and the final labels are the same for any number
of partitions and workers; each unit sorts and deduplicates what it reads, so its output does not depend on the
order in which the previous round's units finished.

    round 0   scatter_pairs   a pairs source     -> its edges, both directions, grouped by partition of their first node
    round r   star_round      partition p of the previous round's folders -> the next edges; its nodes' labels;
                              whether its part of the graph is already a star forest (violations = 0)
    between   merge_round_folders  runs of at most fan_in folders of a round -> one (a group of more partitions
                              than fan_in: then a round unit opens at most fan_in folders of the one before)

A round whose units all report no violation read a star forest: its labels (node -> the smallest node of its
component, for every node that is not the smallest) are the components, and no later round is needed.

The ingest stage runs these rounds for a group whose verified pairs exceed [ingest.dedup] cluster_unit_pairs
(step components-000 scatters each buckets unit's pairs, then components-001, -002, ... until a round finds a
star forest; stages/ingest/stage.py), and clusters.py's single unit for the others.

Folder of a round unit: edges.bin + edges-index.npy (files.PartitionedWriter; EDGE_RECORD), labels.npy
(LABEL_RECORD, sorted by node), stats.json (RoundStats).
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable, Literal, Sequence

import numpy as np

from stages.ingest.dedup import files, keys
from stages.ingest.units import RoundStats

EDGE_RECORD = np.dtype([("u", "<u8"), ("v", "<u8")])  # a directed edge, stored with the partition of u
LABEL_RECORD = np.dtype([("node", "<u8"), ("label", "<u8")])
EDGES, EDGE_INDEX, LABELS = "edges.bin", "edges-index.npy", "labels.npy"


def node_partition(nodes: np.ndarray, partitions: int) -> np.ndarray:
    """The partition of each node: a hash of its order key, so consecutive documents spread evenly."""
    return (keys.mix64(nodes.astype(np.uint64)) % np.uint64(partitions)).astype(np.int64)


def kind_of(rnd: int) -> Literal["large", "small"]:
    """Odd rounds are large-star, even rounds small-star."""
    return "large" if rnd % 2 else "small"


def scatter_pairs(pairs: Iterable[tuple[np.ndarray, np.ndarray]], out_dir: Path, partitions: int, *,
                  partition: int = 0, buffer_rows: int = 262_144) -> RoundStats:
    """Round 0: chunks of pairs (a, b) as directed edges in both directions, grouped by partition; `partition`
    names the source of the pairs in the statistics (the buckets partition they were found in)."""
    if partitions < 1:
        raise ValueError("partitions must be >= 1")

    def body(folder: Path) -> RoundStats:
        writer = files.PartitionedWriter(folder / EDGES, EDGE_RECORD, partitions, buffer_rows)
        n = 0
        for a, b in pairs:
            a, b = np.asarray(a, np.uint64), np.asarray(b, np.uint64)
            keep = a != b
            n += int(keep.sum())
            _write_both_ways(writer, a[keep], b[keep], partitions)
        writer.close(folder / EDGE_INDEX)
        np.save(folder / LABELS, np.empty(0, LABEL_RECORD))
        return RoundStats(round=0, kind="scatter", partition=partition, partitions=partitions, edges_in=n, nodes=0,
                          violations=0, edges_out=n, largest_degree=0)

    return files.run_step(out_dir, body)


def _write_both_ways(writer: files.PartitionedWriter, x: np.ndarray, y: np.ndarray, partitions: int) -> None:
    u, v = np.concatenate((x, y)), np.concatenate((y, x))
    writer.add(node_partition(u, partitions), {"u": u, "v": v})


def read_edges(inputs: Sequence[Path], partition: int, partitions: int,
               chunk: int = 1 << 20) -> tuple[np.ndarray, np.ndarray]:
    """The distinct directed edges (u, v), u in `partition`, of the previous round's folders, sorted by (u, v).

    Deduplicated as they are read, `chunk` records at a time: after a large-star round, every neighbour of a
    hub node may send it the same edge from its own partition (a cluster of 10^6 near copies with a few dozen
    bucket leaders gave ~50 copies of each), so memory follows the distinct edges, not the copies."""
    held_u, held_v = np.empty(0, np.uint64), np.empty(0, np.uint64)
    us, vs, pending = [], [], 0
    for folder in inputs:
        stats = files.finished(folder, RoundStats)
        if stats is None:
            raise FileNotFoundError(f"round folder {folder} is not finished (no {files.STATS}): run that round first")
        if stats.partitions != partitions:
            raise ValueError(f"round folder {folder} has {stats.partitions} partitions, not {partitions}: rerun it")
        for rec in files.iter_partition(folder, EDGES, EDGE_INDEX, EDGE_RECORD, partition, chunk):
            us.append(rec["u"].copy())
            vs.append(rec["v"].copy())
            pending += len(rec)
            if pending >= max(chunk, len(held_u)):  # amortized: each compaction at least doubles what it sorts
                held_u, held_v = _distinct_sorted(np.concatenate([held_u, *us]), np.concatenate([held_v, *vs]))
                us, vs, pending = [], [], 0
    return _distinct_sorted(np.concatenate([held_u, *us]), np.concatenate([held_v, *vs]))


def _distinct_sorted(u: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    order = np.lexsort((v, u))
    u, v = u[order], v[order]
    distinct = np.ones(len(u), dtype=bool)
    distinct[1:] = (u[1:] != u[:-1]) | (v[1:] != v[:-1])
    return u[distinct], v[distinct]


def merge_round_folders(inputs: Sequence[Path], out_dir: Path, partitions: int, rnd: int, index: int, *,
                        buffer_rows: int = 1 << 20) -> RoundStats:
    """Round `rnd`'s edges of a run of at most fan_in of its folders (or of a lower merge level's) as one folder,
    each partition in one span, so that a unit of the next round opens at most fan_in folders (dedup/merge.py
    has why). `index`: the run's position, named in the statistics. Labels are not carried: the clusters step
    reads them from the round's own units."""
    from stages.ingest.dedup.merge import merge_records

    def body(folder: Path) -> RoundStats:
        edges_in = 0
        for d in inputs:
            stats = files.finished(d, RoundStats)
            if stats is None:
                raise FileNotFoundError(f"round folder {d} is not finished (no {files.STATS}): run that round first")
            if stats.partitions != partitions or stats.round != rnd:
                raise ValueError(f"round folder {d} is round {stats.round} of {stats.partitions} partitions, not round "
                                 f"{rnd} of {partitions}: rerun it")
            edges_in += stats.edges_out
        edges = merge_records(list(inputs), EDGES, EDGE_INDEX, EDGE_RECORD, partitions, folder, buffer_rows)
        if edges != 2 * edges_in:  # each undirected edge is stored both ways
            raise ValueError(f"round {rnd}: the folders merged into {folder} hold {edges} directed edges, their "
                             f"statistics say {2 * edges_in}: rerun that round")
        return RoundStats(round=rnd, kind="merge", partition=index, partitions=partitions, edges_in=edges_in, nodes=0,
                          violations=0, edges_out=edges_in, largest_degree=0)

    return files.run_step(out_dir, body)


def star_round(inputs: Sequence[Path], partition: int, partitions: int, out_dir: Path, rnd: int, *,
               buffer_rows: int = 262_144) -> RoundStats:
    """Round `rnd` >= 1 for the nodes of `partition`: read their edges from every folder of round rnd - 1."""
    if not 0 <= partition < partitions:
        raise ValueError(f"partition {partition} not in 0..{partitions - 1}")
    if rnd < 1:
        raise ValueError("star rounds count from 1 (round 0 scatters the pairs)")

    def body(folder: Path) -> RoundStats:
        u, v = read_edges(inputs, partition, partitions)
        nodes, starts, degree = _groups(u)
        smaller = v < u
        has_smaller = np.zeros(len(nodes), dtype=bool)
        np.logical_or.at(has_smaller, np.repeat(np.arange(len(nodes)), degree), smaller)
        violations = int((has_smaller & (degree > 1)).sum())
        _write_labels(folder, nodes, starts, v, has_smaller)  # the components, if this round read a star forest

        writer = files.PartitionedWriter(folder / EDGES, EDGE_RECORD, partitions, buffer_rows)
        x, y = (_large_star if kind_of(rnd) == "large" else _small_star)(u, v, nodes, starts, degree)
        x, y = _distinct_undirected(x, y)
        _write_both_ways(writer, x, y, partitions)
        writer.close(folder / EDGE_INDEX)
        return RoundStats(round=rnd, kind=kind_of(rnd), partition=partition, partitions=partitions,
                          edges_in=int((v > u).sum()), nodes=len(nodes), violations=violations, edges_out=len(x),
                          largest_degree=int(degree.max(initial=0)))

    return files.run_step(out_dir, body)


def _groups(u: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(distinct nodes, where each one's edges start, its degree) of edges sorted by u."""
    if not len(u):
        return np.empty(0, np.uint64), np.empty(0, np.int64), np.empty(0, np.int64)
    first = np.ones(len(u), dtype=bool)
    first[1:] = u[1:] != u[:-1]
    starts = np.flatnonzero(first)
    return u[starts], starts, np.diff(np.append(starts, len(u)))


def _large_star(u, v, nodes, starts, degree) -> tuple[np.ndarray, np.ndarray]:
    """Each node u links its larger neighbours to m(u), the smallest of u and its neighbours."""
    if not len(u):
        return u, v
    m = np.minimum(nodes, np.minimum.reduceat(v, starts))
    m_of_edge = np.repeat(m, degree)
    larger = v > u
    return v[larger], m_of_edge[larger]


def _small_star(u, v, nodes, starts, degree) -> tuple[np.ndarray, np.ndarray]:
    """Each node u with smaller neighbours links them and itself to the smallest of them."""
    smaller = v < u
    if not smaller.any():
        return np.empty(0, np.uint64), np.empty(0, np.uint64)
    big = np.iinfo(np.uint64).max
    m = np.minimum.reduceat(np.where(smaller, v, np.uint64(big)), starts)  # per node; big where none is smaller
    m_of_edge = np.repeat(m, degree)
    has = m != big
    x = np.concatenate((v[smaller], nodes[has]))
    y = np.concatenate((m_of_edge[smaller], m[has]))
    return x, y


def _distinct_undirected(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    lo, hi = np.minimum(x, y), np.maximum(x, y)
    keep = lo != hi
    lo, hi = lo[keep], hi[keep]
    order = np.lexsort((hi, lo))
    lo, hi = lo[order], hi[order]
    distinct = np.ones(len(lo), dtype=bool)
    distinct[1:] = (lo[1:] != lo[:-1]) | (hi[1:] != hi[:-1])
    return lo[distinct], hi[distinct]


def _write_labels(folder: Path, nodes, starts, v, has_smaller) -> None:
    """For each node with a smaller neighbour, the smallest one: in a star forest, its centre."""
    labels = np.empty(int(has_smaller.sum()), LABEL_RECORD)
    if len(labels):
        labels["node"] = nodes[has_smaller]
        labels["label"] = np.minimum.reduceat(v, starts)[has_smaller]
    np.save(folder / LABELS, labels)


def converged(round_dirs: Sequence[Path]) -> bool:
    """Whether a round's units, all finished, read a star forest (their labels are the components)."""
    return all(files.finished(d, RoundStats).violations == 0 for d in round_dirs)


def read_labels(round_dirs: Sequence[Path]) -> tuple[np.ndarray, np.ndarray]:
    """(node, label) of every node that is not its component's smallest, sorted by node, from a converged round."""
    parts = [np.load(Path(d) / LABELS) for d in round_dirs]
    labels = np.concatenate(parts) if parts else np.empty(0, LABEL_RECORD)
    labels = labels[np.argsort(labels["node"], kind="stable")]
    return labels["node"], labels["label"]


def components_in_rounds(a: np.ndarray, b: np.ndarray, workdir: Path, partitions: int, *,
                         max_rounds: int = 200, fan_in: int | None = None) -> tuple[np.ndarray, np.ndarray, int]:
    """All rounds in this process, one unit after another (tests, the scale bench): (node, label, rounds).
    `fan_in`: merge each round's folders in levels before the next round reads them, as the stage does."""
    from stages.ingest.dedup.merge import merge_levels

    workdir = Path(workdir)
    scatter_pairs([(a, b)], workdir / "r000", partitions)
    previous = [workdir / "r000"]
    for rnd in range(1, max_rounds + 1):
        current = [workdir / f"r{rnd:03d}" / f"p{p:05d}" for p in range(partitions)]
        for p, folder in enumerate(current):
            star_round(previous, p, partitions, folder, rnd)
        if converged(current):
            node, label = read_labels(current)
            return node, label, rnd
        previous = current
        for level, n in enumerate(merge_levels(partitions, fan_in) if fan_in else [], start=1):
            merged = [workdir / f"r{rnd:03d}-m{level}" / f"{i:05d}" for i in range(n)]
            for i, folder in enumerate(merged):
                merge_round_folders(previous[i * fan_in:(i + 1) * fan_in], folder, partitions, rnd, i)
            previous = merged
    raise RuntimeError(f"connected components did not converge in {max_rounds} rounds")
