"""Connected components as rounds of partitioned units (stages/ingest/dedup/components.py): the labels of a
single-process union-find, for any number of partitions, in the same number of rounds, on planted structures
(pairs, long chains, stars, one large cluster) with order keys of several units, in shuffled order."""

from __future__ import annotations

import numpy as np
import pytest

from stages.ingest.dedup import components, keys
from stages.ingest.dedup.clusters import connected_components


def planted_graph(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Edges (a, b), a < b, between order keys of 4 units; each structure on its own nodes."""
    rng = np.random.default_rng(seed)
    nodes = np.unique(np.concatenate([keys.order_keys(r, rng.choice(2**20, 3000, replace=False).astype(np.uint32))
                                      for r in range(4)]))
    rng.shuffle(nodes)
    edges, at = [], 0

    def take(n):
        nonlocal at
        at += n
        return nodes[at - n:at]

    for _ in range(200):  # pairs
        x, y = take(2)
        edges.append((x, y))
    for length in (2, 17, 500, 1500):  # chains, their nodes in random key order
        c = take(length)
        edges += list(zip(c[:-1], c[1:]))
    for size in (3, 50, 400):  # stars around a node that is not the smallest
        s = take(size)
        edges += [(s[size // 2], t) for i, t in enumerate(s) if i != size // 2]
    big = take(3000)  # one large cluster: a random tree plus extra edges
    parent = rng.integers(0, np.arange(1, len(big)))
    edges += list(zip(big[1:], big[parent]))
    edges += list(zip(big[rng.integers(0, 3000, 2000)], big[rng.integers(0, 3000, 2000)]))
    a = np.array([min(x, y) for x, y in edges], np.uint64)
    b = np.array([max(x, y) for x, y in edges], np.uint64)
    keep = a != b
    return a[keep], b[keep]


def reference_labels(a: np.ndarray, b: np.ndarray) -> dict[int, int]:
    nodes = np.unique(np.concatenate((a, b)))
    label = connected_components(np.searchsorted(nodes, a), np.searchsorted(nodes, b), len(nodes))
    return {int(nodes[i]): int(nodes[label[i]]) for i in range(len(nodes)) if label[i] != i}


@pytest.mark.parametrize("partitions, fan_in", [(5, 2), (16, 3)])
def test_rounds_reading_merged_folders_give_the_same_labels_and_edges(tmp_path, partitions, fan_in):
    """Each round's folders merged in levels of at most fan_in before the next round reads them: the same
    labels, rounds and next-round edges, byte for byte."""
    a, b = planted_graph(1)
    plain = components.components_in_rounds(a, b, tmp_path / "plain", partitions)
    merged = components.components_in_rounds(a, b, tmp_path / "merged", partitions, fan_in=fan_in)
    assert all(np.array_equal(x, y) for x, y in zip(plain[:2], merged[:2])) and plain[2] == merged[2]
    assert (tmp_path / "merged" / "r001-m1").is_dir() and not (tmp_path / "plain" / "r001-m1").exists()
    for rnd in range(2, plain[2] + 1):
        for p in range(partitions):
            x, y = (tmp_path / w / f"r{rnd:03d}" / f"p{p:05d}" / components.EDGES for w in ("plain", "merged"))
            assert x.read_bytes() == y.read_bytes()
    top = sorted((tmp_path / "merged").glob("r001-m*"))[-1]
    assert len(list(top.iterdir())) <= fan_in
    with pytest.raises(ValueError, match="not round 2"):
        components.merge_round_folders([tmp_path / "merged" / "r001" / "p00000"], tmp_path / "x", partitions, 2, 0)


@pytest.mark.parametrize("partitions", [1, 2, 5, 16])
def test_rounds_give_the_components_of_union_find_for_any_partition_count(tmp_path, partitions):
    a, b = planted_graph()
    node, label, rounds = components.components_in_rounds(a, b, tmp_path, partitions)
    assert dict(zip(node.tolist(), label.tolist())) == reference_labels(a, b)
    assert rounds == components.components_in_rounds(a, b, tmp_path / "again", 3)[2]  # the same rounds at 3
    assert rounds < 40
    sizes = [components.files.finished(d, components.RoundStats).nodes
             for d in sorted((tmp_path / "r001").iterdir())]
    assert len(sizes) == partitions and sum(sizes) == len(np.unique(np.concatenate((a, b))))


def test_a_round_does_not_depend_on_the_order_of_its_inputs(tmp_path):
    """A unit sorts and deduplicates what it reads: the previous round's folders in any order (as the engine
    finished them) give byte-identical files."""
    a, b = planted_graph(1)
    half = len(a) // 2
    components.scatter_pairs([(a[:half], b[:half])], tmp_path / "s0", 4)
    components.scatter_pairs([(b[half:], a[half:])], tmp_path / "s1", 4)  # reversed pairs too
    for p in range(4):
        components.star_round([tmp_path / "s0", tmp_path / "s1"], p, 4, tmp_path / "x" / str(p), 1)
        components.star_round([tmp_path / "s1", tmp_path / "s0"], p, 4, tmp_path / "y" / str(p), 1)
        for name in (components.EDGES, components.EDGE_INDEX, components.LABELS, components.files.STATS):
            assert (tmp_path / "x" / str(p) / name).read_bytes() == (tmp_path / "y" / str(p) / name).read_bytes()


def test_no_pairs_is_one_round_and_no_labels(tmp_path):
    empty = np.empty(0, np.uint64)
    node, label, rounds = components.components_in_rounds(empty, empty, tmp_path, 3)
    assert (len(node), len(label), rounds) == (0, 0, 1)


def test_a_round_refuses_folders_of_another_partition_count(tmp_path):
    a, b = planted_graph(2)
    components.scatter_pairs([(a, b)], tmp_path / "s", 4)
    with pytest.raises(ValueError, match="has 4 partitions, not 5: rerun it"):
        components.star_round([tmp_path / "s"], 0, 5, tmp_path / "r", 1)
    with pytest.raises(FileNotFoundError, match="is not finished"):
        components.star_round([tmp_path / "missing"], 0, 4, tmp_path / "r2", 1)


def test_edges_sent_by_many_partitions_are_held_once(tmp_path):
    """A hub's edges arrive once per folder that found them: read_edges keeps the distinct ones as it reads."""
    rng = np.random.default_rng(5)
    a = rng.integers(0, 500, 3000).astype(np.uint64)
    b = rng.integers(0, 500, 3000).astype(np.uint64)
    folders = []
    for i in range(4):  # the same pairs from four sources, in other orders
        order = rng.permutation(len(a))
        folders.append(tmp_path / f"s{i}")
        components.scatter_pairs([(a[order], b[order])], folders[-1], 3)
    for p in range(3):
        whole = components.read_edges(folders, p, 3, chunk=1 << 30)
        small = components.read_edges(folders, p, 3, chunk=7)
        assert all(np.array_equal(x, y) for x, y in zip(whole, small))
        u, v = small
        assert len(set(zip(u.tolist(), v.tolist()))) == len(u)  # distinct
        assert np.all(components.node_partition(u, 3) == p)
        keep = a != b
        both = {(int(x), int(y)) for x, y in zip(np.concatenate((a[keep], b[keep])), np.concatenate((b[keep], a[keep])))}
        assert set(zip(u.tolist(), v.tolist())) == {e for e in both if components.node_partition(
            np.array([e[0]], np.uint64), 3)[0] == p}
