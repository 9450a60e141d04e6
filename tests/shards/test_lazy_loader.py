"""The training dataloader opens shards lazily and keeps at most N open, yet yields the batches of a reader that
loads every shard whole up front."""

from __future__ import annotations

import gc
import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch

from europa_model.data.loader import EuropaShardsDataLoader
from europa_model.data.packing import PackedSequences
from europa_model.data.streams import MixtureStream

SEQ_LEN, BATCH = 48, 3


class EagerShard:
    """The reference: a shard read whole into memory at start-up (what the loader did before it was lazy)."""

    def __init__(self, prefix: Path):
        self.offsets = np.fromfile(prefix.with_suffix(".idx"), dtype="<i8")
        self.tokens = np.fromfile(prefix.with_suffix(".bin"), dtype="<u2")

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def doc(self, i: int) -> np.ndarray:
        return self.tokens[self.offsets[i] : self.offsets[i + 1]]


def eager_batches(shards_dir: Path, seed: int, rank: int, world: int, n: int) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    index = json.loads((shards_dir / "index.json").read_text())
    by_lang: dict[str, list[EagerShard]] = {}
    for rec in index["shards"]:
        if rec["split"] == "train":
            by_lang.setdefault(rec["lang"], []).append(EagerShard(shards_dir / rec["path"]))
    weights = {k: v["weight"] for k, v in json.loads((shards_dir / "mixture.json").read_text())["languages"].items()}
    packer = PackedSequences(MixtureStream(by_lang, weights, seed, rank, world), SEQ_LEN, index["bos_id"])
    rows = [packer.next_row() for _ in range(n * BATCH)]
    return [tuple(np.stack([r[k] for r in rows[b * BATCH : (b + 1) * BATCH]]) for k in range(3)) for b in range(n)]


def open_shard_files(shards_dir: Path) -> tuple[set[str], set[str]]:
    """(shards with an open file descriptor, shards with a mapping) of this process, by path without suffix."""
    root = str(shards_dir.resolve())
    fds = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(root):
            fds.add(target.rsplit(".", 1)[0])
    maps = {line.split()[-1].rsplit(".", 1)[0] for line in Path("/proc/self/maps").read_text().splitlines()
            if line.split()[-1].startswith(root)}
    return fds, maps


@pytest.mark.parametrize("order,rank,world", [("global", 0, 1), ("per_rank", 1, 2)])
def test_lazy_loader_keeps_n_shards_open_and_yields_the_eager_batches(run, order, rank, world):
    shards_dir = run / "shards"
    n_shards = sum(1 for s in json.loads((shards_dir / "index.json").read_text())["shards"] if s["split"] == "train")
    max_open = 2
    assert n_shards > 3 * max_open  # the bound is exercised: shards are opened, closed and reopened
    gc.collect()  # loaders of earlier tests close their shards
    cfg = EuropaShardsDataLoader.Config(dataset_path=str(shards_dir), seed=5, order=order, max_open_shards=max_open)
    dl = cfg.build(dp_world_size=world, dp_rank=rank, tokenizer=None, seq_len=SEQ_LEN, local_batch_size=BATCH)
    assert open_shard_files(shards_dir) == (set(), set())  # start-up opens nothing
    n = 40
    expected = eager_batches(shards_dir, 5, rank if order == "per_rank" else 0, world if order == "per_rank" else 1,
                             n * (world if order == "global" else 1))
    if order == "global":  # rank r of W keeps local batches r, r + W, ...
        expected = expected[rank::world]
    most_open = 0
    for (inputs, labels), (e_in, e_lab, e_pos) in zip(dl, expected):
        assert torch.equal(inputs["input"], torch.from_numpy(e_in))
        assert torch.equal(labels, torch.from_numpy(e_lab))
        assert torch.equal(inputs["positions"], torch.from_numpy(e_pos))
        fds, maps = open_shard_files(shards_dir)
        assert len(fds) <= max_open and len(maps) <= max_open
        most_open = max(most_open, len(fds))
    pool = dl.dataset.pool
    assert most_open == max_open and pool.peak == max_open
    assert pool.opened > n_shards // 2  # many different shards were read through the bound of 2
    pool.close_all()
    assert open_shard_files(shards_dir) == (set(), set())
