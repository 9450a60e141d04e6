"""Read a torchtitan DCP checkpoint one tensor at a time, so memory is bounded by the largest tensor and
not by the model (europa-1t is ~3.8 TB in fp32; its biggest tensor, one layer's grouped expert weight,
~21 GB).

Each tensor is loaded with the public `torch.distributed.checkpoint.load` (no process group) into a
buffer of the dtype we will write, so DCP's own planner handles chunked/resharded saves (FSDP, EP) and its
storage transforms; DCP copies each stored chunk into that buffer, casting on the way. Peak (measured in
bench/export_memory_bench.py): the buffer plus the stored fp32 chunk for a one-process save (bf16 out:
1.5x the fp32 tensor, fp32 out: 2x); for an N-rank save the buffer plus 2/N of the tensor (torch 2.13's
reader holds the previous chunk while it loads the next). The metadata is read once (DCP's reader would re-read it for
every `load`).
"""

from __future__ import annotations

import warnings
from pathlib import Path

import torch
from torch.distributed.checkpoint import FileSystemReader
from torch.distributed.checkpoint.metadata import TensorStorageMetadata

__all__ = ["CheckpointError", "DCPCheckpoint"]


class CheckpointError(ValueError):
    """A checkpoint that cannot be read; the message names it (and the tensor, when one failed)."""


class _OnceReader(FileSystemReader):
    def __init__(self, path: str, metadata) -> None:
        super().__init__(path)
        self._metadata = metadata

    def read_metadata(self, *args, **kwargs):
        return self._metadata


class DCPCheckpoint:
    """A complete DCP checkpoint folder (`.metadata` present: DCP writes it last)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        if not self.path.is_dir():
            raise CheckpointError(f"checkpoint {self.path}: no such folder")
        if not (self.path / ".metadata").is_file():
            raise CheckpointError(f"checkpoint {self.path}: no .metadata, so the save did not finish (DCP writes it "
                                  "last); export a complete step-N folder")
        try:
            metadata = FileSystemReader(str(self.path)).read_metadata()
        except Exception as e:  # noqa: BLE001 - any unreadable metadata is the same problem for the user
            raise CheckpointError(f"checkpoint {self.path}: unreadable .metadata ({type(e).__name__}: {e}); the file "
                                  "is damaged or was not written by torch.distributed.checkpoint") from None
        self._reader = _OnceReader(str(self.path), metadata)
        self._files: dict[str, set[str]] = {}
        for index, info in (metadata.storage_data or {}).items():
            self._files.setdefault(index.fqn, set()).add(info.relative_path)
        entries = metadata.state_dict_metadata
        self.tensors: dict[str, tuple[tuple[int, ...], torch.dtype]] = {
            k: (tuple(v.size), v.properties.dtype) for k, v in entries.items() if isinstance(v, TensorStorageMetadata)}
        self.other_keys: list[str] = [k for k in entries if k not in self.tensors]

    def load(self, key: str, dtype: torch.dtype) -> torch.Tensor:
        """The whole tensor `key`, cast to `dtype`."""
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.api import CheckpointException

        shape, _ = self.tensors[key]
        buffer = torch.empty(shape, dtype=dtype)
        try:
            with warnings.catch_warnings():  # "assuming the intent is to load in a single process": it is
                warnings.filterwarnings("ignore", message="torch.distributed is disabled", category=UserWarning)
                dcp.load({key: buffer}, storage_reader=self._reader, no_dist=True)
        except (Exception, CheckpointException) as e:  # noqa: BLE001 - DCP's CheckpointException is a BaseException
            lines = [ln for ln in str(e).strip().splitlines() if ln.strip()]
            cause = lines[-1].strip() if lines else type(e).__name__
            files = ", ".join(sorted(self._files.get(key, ()))) or "?"
            raise CheckpointError(f"checkpoint {self.path}: tensor {key!r} cannot be read from {files} ({cause[:160]}); "
                                  "the files are damaged or incomplete: copy the checkpoint again or export another step"
                                  ) from None
        return buffer
