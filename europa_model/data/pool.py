"""How many shards a reader keeps open: at most `max_open`, the least recently read closed first.

A rank at full scale reads tens of thousands of shards over a run but only a few at any time (about one per
language it draws from), while each open shard costs a file descriptor, a mapping and page-cache residency:
opening all of them fails at `ulimit -n` 1024 long before Linux's 65,530 mappings. An LRU keeps what is read
now open and closes the rest, so the cost per rank is bounded by the setting, not by the corpus.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Protocol

DEFAULT_MAX_OPEN = 64


class Shard(Protocol):
    """What the pool manages (europa_model/data/format.py Shard): opening is costly, closing gives it all back."""

    def open(self) -> None: ...
    def close(self) -> None: ...


class ShardPool:
    def __init__(self, max_open: int = DEFAULT_MAX_OPEN):
        if max_open < 1:
            raise ValueError(f"max_open_shards must be at least 1, not {max_open}")
        self.max_open = max_open
        self._open: OrderedDict[int, Shard] = OrderedDict()
        self.opened = 0  # shards opened so far (reopening after eviction counts again)
        self.peak = 0  # most shards open at once

    def use(self, shard: Shard) -> None:
        """Make `shard` open and the most recently used, closing the least recently used beyond the bound."""
        key = id(shard)
        if key in self._open:
            self._open.move_to_end(key)
            return
        shard.open()
        self._open[key] = shard
        self.opened += 1
        while len(self._open) > self.max_open:
            next(iter(self._open.values())).close()  # closing discards it
        self.peak = max(self.peak, len(self._open))

    def discard(self, shard: Shard) -> None:
        """`shard` was closed (by the pool or by its owner): no longer counted as open."""
        self._open.pop(id(shard), None)

    def close_all(self) -> None:
        while self._open:
            next(iter(self._open.values())).close()

    def __getstate__(self) -> dict[str, Any]:  # a copy in another process starts with nothing open
        return {**self.__dict__, "_open": OrderedDict()}
