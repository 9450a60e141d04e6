"""torchtitan's dataloader over the shards stage's output.

`EuropaShardsDataLoader` is a `ParallelAwareDataloader` with its own `Config`, so a torchtitan
`Trainer.Config(dataloader=EuropaShardsDataLoader.Config(dataset_path=<run>/shards, ...))` trains on our
shards with the mixture of mixture.json. Batches have torchtitan's text-dataset shape:
`({"input": LongTensor[B, S], "positions": LongTensor[B, S]}, labels LongTensor[B, S])`; positions restart
at every document so attention can be masked per document. Its position is saved in every checkpoint
(torchdata's StatefulDataLoader asks the dataset for `state_dict`) and restored exactly.

Start-up reads index.json and mixture.json and nothing else: the shards' checksums were checked when the
shards stage wrote them (and `europa verify` re-checks them on demand), so a rank neither hashes nor opens the
corpus; it opens a shard when it first reads from it, checks its sizes then and the slice of every document
it reads, and keeps at most `max_open_shards` open.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch.distributed.checkpoint.stateful import Stateful
from torch.utils.data import IterableDataset
from torchtitan.components.dataloader import ParallelAwareDataloader

from europa_model.data.packing import PackedSequences
from europa_model.data.pool import DEFAULT_MAX_OPEN
from europa_model.data.streams import MixtureStream, open_shards


class ShardDataset(IterableDataset, Stateful):
    """Packed rows for one data-parallel rank.

    order "global": every rank packs the same single stream and keeps the rows of its slice of each global
    batch (rank r of W takes local batches r, r + W, ...), so the global batches, and therefore the training,
    do not depend on how many ranks share them: a job can resume on another GPU count, and 1 process with a
    batch of 8 sees what 2 processes with 4 each see. Each rank packs W times the rows it uses (cheap: packing
    runs at tens of millions of tokens per second, and the dataloader's workers overlap it with compute).
    order "per_rank": each rank streams its own disjoint documents; no redundant packing, but the data order
    depends on the world size.
    """

    def __init__(self, shards_dir: Path, split: str, seq_len: int, seed: int, dp_rank: int, dp_world_size: int,
                 order: str = "global", local_batch_size: int = 1, max_open_shards: int = DEFAULT_MAX_OPEN):
        index, by_lang = open_shards(shards_dir, split, max_open=max_open_shards)
        self.pool = next((shards[0].pool for shards in by_lang.values() if shards), None)
        if split == "train":
            mixture = json.loads((Path(shards_dir) / "mixture.json").read_text())
            weights = {lang: m["weight"] for lang, m in mixture["languages"].items()}
        else:  # validation: every language equally, the mixture is a training decision
            weights = {lang: 1.0 for lang in by_lang}
        if order not in ("global", "per_rank"):
            raise ValueError(f"data order must be 'global' or 'per_rank', not {order!r}")
        if order == "global":
            stream = MixtureStream(by_lang, weights, seed, 0, 1)
            self.slice = (dp_rank, dp_world_size, local_batch_size)
        else:
            stream = MixtureStream(by_lang, weights, seed, dp_rank, dp_world_size)
            self.slice = None
        self.packer = PackedSequences(stream, seq_len, index["bos_id"])

    def __iter__(self):
        for inputs, labels, positions in self.packer:
            if self.slice is not None:
                rank, world, batch = self.slice
                if (self.packer.rows - 1) // batch % world != rank:
                    continue
            yield {"input": torch.from_numpy(inputs), "positions": torch.from_numpy(positions)}, torch.from_numpy(labels)

    def state_dict(self) -> dict[str, Any]:
        return self.packer.state_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.packer.load_state_dict(state_dict)


class EuropaShardsDataLoader(ParallelAwareDataloader):
    @dataclass(kw_only=True, slots=True)
    class Config(ParallelAwareDataloader.Config):
        dataset: str = "europa-shards"
        dataset_path: str | None = None
        """The shards stage folder of a run (<run>/shards)."""

        split: str = "train"
        seed: int = 1234
        order: str = "global"
        """"global": the same global batches at any data-parallel size; "per_rank": disjoint streams per rank."""

        max_open_shards: int = DEFAULT_MAX_OPEN
        """Shards open at once per rank (and per dataloader worker), least recently read closed first."""

    def __init__(self, config: Config, *, dp_world_size: int, dp_rank: int, tokenizer=None, seq_len: int,
                 local_batch_size: int, snapshot_every_n_steps: int | None = 1, **kwargs):
        if not config.dataset_path:
            raise ValueError("EuropaShardsDataLoader.Config.dataset_path must point at a run's shards/ folder")
        dataset = ShardDataset(Path(config.dataset_path), config.split, seq_len, config.seed, dp_rank, dp_world_size,
                               order=config.order, local_batch_size=local_batch_size, max_open_shards=config.max_open_shards)
        super().__init__(dataset, dp_rank=dp_rank, dp_world_size=dp_world_size, num_workers=config.num_workers,
                         persistent_workers=config.persistent_workers, pin_memory=config.pin_memory,
                         prefetch_factor=config.prefetch_factor, snapshot_every_n_steps=snapshot_every_n_steps,
                         batch_size=local_batch_size)
