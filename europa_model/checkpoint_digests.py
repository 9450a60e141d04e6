"""Checkpoint digests computed on the ranks while DCP writes, so nobody reads a checkpoint again to hash it.

A europa-1t checkpoint with its optimizer state is terabytes; hashing every kept checkpoint when the stage
publishes would read them all back from the parallel file system. Instead every rank hashes the bytes of its own
files as torch.distributed.checkpoint writes them (`HashingFileSystem`: the stream DCP writes into updates a
sha256 on the way), and after the save writes `checksums-rank<R>.json` into the step folder: its files (DCP
names them `__<R>_<i>.distcp`), their sha256 and sizes; rank 0's also covers `.metadata`, which DCP's
coordinator writes. `EuropaCheckpointManager` is torchtitan's CheckpointManager with that storage writer; its
checkpoints are ordinary DCP folders that any DCP reader loads.

`europa_model.checkpoints.recorded_digests` reads them back for the pretrain stage (without torch).

Only the synchronous save path hashes (torchtitan's default, what the pretrain stage configures); async modes
and the Hugging Face format save as torchtitan does, without rank checksums.
"""

from __future__ import annotations

import hashlib
import json
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from europa_model import cpu_compat

cpu_compat.apply()  # before torchtitan is imported

import torch.distributed as dist  # noqa: E402
from torch.distributed.checkpoint import FileSystemWriter  # noqa: E402
from torch.distributed.checkpoint.filesystem import FileSystem  # noqa: E402
from torchtitan.components.checkpoint import AsyncMode, CheckpointManager  # noqa: E402

from europa_model.checkpoints import rank_checksums_name  # noqa: E402
from pipeline.fsutil import atomic_write_text  # noqa: E402


class _HashingStream:
    """A write stream that feeds every byte to a sha256 before passing it on; anything else is the file's."""

    def __init__(self, raw):
        self._raw, self.sha, self.size, self.valid = raw, hashlib.sha256(), 0, True

    def write(self, data) -> int:
        view = memoryview(data).cast("B")
        self.sha.update(view)
        self.size += view.nbytes
        return self._raw.write(view)

    def seek(self, *args):  # a rewrite would make the running digest wrong: give it up, the stage re-hashes
        self.valid = False
        return self._raw.seek(*args)

    def __getattr__(self, name):
        return getattr(self._raw, name)


class HashingFileSystem(FileSystem):
    """DCP's local file system, recording sha256 and size of every file it writes (path -> (sha256, bytes))."""

    def __init__(self) -> None:
        super().__init__()
        self.written: dict[Path, tuple[str, int] | None] = {}
        self._lock = threading.Lock()

    @contextmanager
    def create_stream(self, path, mode: str):
        if "w" not in mode:
            with super().create_stream(path, mode) as stream:
                yield stream
            return
        with super().create_stream(path, mode) as raw:
            stream = _HashingStream(raw)
            yield stream
        with self._lock:
            self.written[Path(path)] = (stream.sha.hexdigest(), stream.size) if stream.valid else None

    def rename(self, path, new_path) -> None:
        super().rename(path, new_path)
        with self._lock:
            if Path(path) in self.written:
                self.written[Path(new_path)] = self.written.pop(Path(path))


class HashingFileSystemWriter(FileSystemWriter):
    """torch's FileSystemWriter (same defaults as `dcp.save` uses) over a HashingFileSystem."""

    def __init__(self, path, **kwargs) -> None:
        super().__init__(path, **kwargs)
        self.fs = HashingFileSystem()


def write_rank_checksums(folder: Path, rank: int, written: dict[Path, tuple[str, int] | None]) -> Path:
    files = {}
    for path, digest in sorted(written.items()):
        path = Path(path)
        if digest is None or path.parent.resolve() != folder.resolve():
            continue
        files[path.name] = {"sha256": digest[0], "bytes": digest[1]}
    out = folder / rank_checksums_name(rank)
    atomic_write_text(out, json.dumps({"rank": rank, "algorithm": "sha256", "files": files}, indent=1) + "\n")
    return out


class EuropaCheckpointManager(CheckpointManager):
    """torchtitan's CheckpointManager whose synchronous DCP saves hash on the ranks (module docstring)."""

    @dataclass(kw_only=True, slots=True)
    class Config(CheckpointManager.Config):
        pass

    def dcp_save(self, state_dict: dict[str, Any], checkpoint_id: str, async_mode: AsyncMode,
                 enable_garbage_collection: bool = False, to_hf: bool = False):
        if to_hf or async_mode != AsyncMode.DISABLED:
            return super().dcp_save(state_dict, checkpoint_id, async_mode, enable_garbage_collection, to_hf)
        import torch.distributed.checkpoint as dcp
        from torchtitan.tools.utils import GarbageCollection

        writer = HashingFileSystemWriter(checkpoint_id)
        dcp.save(state_dict, storage_writer=writer, checkpoint_id=checkpoint_id)
        rank = dist.get_rank() if dist.is_initialized() else 0
        write_rank_checksums(Path(checkpoint_id), rank, writer.fs.written)
        if enable_garbage_collection:
            GarbageCollection.collect("GC collection invoked by checkpointer.")
        return None
