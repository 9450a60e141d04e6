"""Read a torchtitan DCP checkpoint one tensor at a time, so memory is bounded by the largest tensor and
not by the model (europa-1t is ~3.8 TB in fp32; its biggest tensor, one layer's grouped expert weight,
~21 GB).

Two ways to read a tensor, same bytes (tests/export compare them on one- and two-rank saves):
- directly (`_read_direct`): DCP's FileSystemWriter stores each chunk as a `torch.save` archive at a known
  offset of a .distcp file, uncompressed; `torch.load(map_location="meta")` reads only the archive's
  pickle and says where the chunk's raw bytes are (the storage's `_checkpoint_offset`), and we read them
  with `readinto` straight into the output buffer (same dtype) or through a 16 MB slab (casting). Peak:
  the output tensor plus one slab, i.e. ~1x the tensor for an fp32 export and ~0.5x for bf16.
- through `torch.distributed.checkpoint.load` (no process group), for anything the direct path does not
  recognise (storage transforms such as compression, a non-contiguous stored chunk, big-endian data):
  DCP loads each stored chunk whole and copies it into the buffer, so the peak is the buffer plus one
  stored chunk (fp32 export 2x, bf16 1.5x for a one-process save).
The metadata is read once (DCP's reader would re-read it for every `load`).
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import torch
from torch.distributed.checkpoint import FileSystemReader
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.metadata import TensorStorageMetadata

__all__ = ["CheckpointError", "DCPCheckpoint"]

SLAB_BYTES = 16 << 20  # the scratch buffer of a casting or non-contiguous direct read


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
        self._metadata = metadata
        self._files: dict[str, set[str]] = {}
        for index, info in (metadata.storage_data or {}).items():
            self._files.setdefault(index.fqn, set()).add(info.relative_path)
        entries = metadata.state_dict_metadata
        self.tensors: dict[str, tuple[tuple[int, ...], torch.dtype]] = {
            k: (tuple(v.size), v.properties.dtype) for k, v in entries.items() if isinstance(v, TensorStorageMetadata)}
        self.other_keys: list[str] = [k for k in entries if k not in self.tensors]

    def load(self, key: str, dtype: torch.dtype) -> torch.Tensor:
        """The whole tensor `key`, cast to `dtype`."""
        shape, _ = self.tensors[key]
        try:
            direct = self._read_direct(key, shape, dtype)
            return direct if direct is not None else self._read_dcp(key, shape, dtype)
        except (Exception, CheckpointException) as e:  # noqa: BLE001 - DCP's CheckpointException is a BaseException
            lines = [ln for ln in str(e).strip().splitlines() if ln.strip()]
            cause = lines[-1].strip() if lines else type(e).__name__
            files = ", ".join(sorted(self._files.get(key, ()))) or "?"
            raise CheckpointError(f"checkpoint {self.path}: tensor {key!r} cannot be read from {files} ({cause[:160]}); "
                                  "the files are damaged or incomplete: copy the checkpoint again or export another step"
                                  ) from None

    def _read_dcp(self, key: str, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        import torch.distributed.checkpoint as dcp

        buffer = torch.empty(shape, dtype=dtype)
        with warnings.catch_warnings():  # "assuming the intent is to load in a single process": it is
            warnings.filterwarnings("ignore", message="torch.distributed is disabled", category=UserWarning)
            dcp.load({key: buffer}, storage_reader=self._reader, no_dist=True)
        return buffer

    def _read_direct(self, key: str, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor | None:
        """`key` read chunk by chunk from the .distcp files into one buffer, or None (nothing read) when a
        chunk is stored in a way this reader does not handle: then DCP's own reader does it."""
        from torch.distributed.checkpoint.metadata import MetadataIndex

        if sys.byteorder != "little":
            return None
        chunks = self._metadata.state_dict_metadata[key].chunks
        located = []
        for chunk in chunks:
            info = self._metadata.storage_data.get(MetadataIndex(key, chunk.offsets))
            if info is None or info.transform_descriptors:
                return None
            where = _raw_location(self.path / info.relative_path, info.offset, info.length, tuple(chunk.sizes))
            if where is None:
                return None
            located.append((chunk, info.relative_path, *where))
        out = torch.empty(shape, dtype=dtype)
        for chunk, relative_path, start, stored_dtype in located:
            dest = out
            for dim, (o, n) in enumerate(zip(chunk.offsets, chunk.sizes, strict=True)):
                dest = dest.narrow(dim, o, n)
            with open(self.path / relative_path, "rb", buffering=0) as f:
                f.seek(start)
                _read_into(f, dest, stored_dtype)
        return out


def _raw_location(path: Path, offset: int, length: int, sizes: tuple[int, ...]) -> tuple[int, torch.dtype] | None:
    """Where the raw little-endian bytes of a stored chunk start in `path` (and their dtype), read from its
    torch.save archive without loading the data; None if the archive is not a plain contiguous chunk."""
    from torch.distributed.checkpoint.utils import _create_file_view

    with open(path, "rb") as f:
        view = _create_file_view(f, offset, length)
        reader = torch._C.PyTorchFileReader(view)
        order = [r for r in reader.get_all_records() if r.rsplit("/", 1)[-1] == "byteorder"]
        if len(order) != 1 or reader.get_record(order[0]).strip() != b"little":
            return None
        view.seek(0)
        t = torch.load(view, map_location="meta", weights_only=True)
    if not isinstance(t, torch.Tensor) or tuple(t.shape) != sizes or not t.is_contiguous():
        return None
    base = getattr(t.untyped_storage(), "_checkpoint_offset", None)
    if not isinstance(base, int):
        return None
    start = base + t.storage_offset() * t.element_size()
    if start + t.numel() * t.element_size() > length:
        return None
    return offset + start, t.dtype


def _read_into(f, dest: torch.Tensor, stored: torch.dtype) -> None:
    """Fill `dest` (a view of the output, maybe non-contiguous) with `dest.numel()` values of dtype `stored`
    read from `f` in row-major order: straight into its memory when it can, else through a slab."""
    if dest.numel() == 0:
        return
    if dest.dtype == stored and dest.is_contiguous():
        _readinto(f, dest.reshape(-1).view(torch.uint8))
        return
    rows = dest.reshape(1, *dest.shape) if dest.dim() == 0 else dest
    row_bytes = stored.itemsize * rows[0].numel()
    step = max(1, SLAB_BYTES // max(row_bytes, 1))
    for a in range(0, rows.shape[0], step):
        part = rows[a:a + step]
        slab = torch.empty(part.shape, dtype=stored)
        _readinto(f, slab.reshape(-1).view(torch.uint8))
        part.copy_(slab)


def _readinto(f, flat_bytes: torch.Tensor) -> None:
    view = memoryview(flat_bytes.numpy())
    done = 0
    while done < len(view):
        n = f.readinto(view[done:])
        if not n:
            raise OSError(f"{f.name}: ends {len(view) - done} bytes early")
        done += n
