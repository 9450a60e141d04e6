"""A safetensors file written front to back while the tensors arrive, hashing as it goes.

Why not `safetensors.torch.save_file`: it needs every tensor of the file in memory at once, which for a
5 GB shard next to a 21 GB expert tensor doubles the export's footprint. The format is a little-endian u64
header length, a JSON header (dtype, shape, byte range of every tensor; padded with spaces to 8 bytes, as
the reference writer does), then the raw bytes; knowing the shapes in advance, we write the header first
and each tensor's bytes as soon as it is converted. The files are read back with the real `safetensors`
library and transformers in tests/export.
"""

from __future__ import annotations

import hashlib
import json
import struct
import sys
from pathlib import Path

import torch

__all__ = ["SAFETENSORS_DTYPES", "StreamingShard"]

SAFETENSORS_DTYPES = {torch.float32: "F32", torch.bfloat16: "BF16", torch.float16: "F16"}


class StreamingShard:
    """One shard: `entries` (name, dtype, shape) fix the layout; `write` must then be called in that order."""

    def __init__(self, path: Path, entries: list[tuple[str, torch.dtype, tuple[int, ...]]]) -> None:
        if sys.byteorder != "little":
            raise RuntimeError("safetensors stores little-endian bytes; this writer copies memory as is")
        self.path = path
        self._entries = entries
        header: dict = {"__metadata__": {"format": "pt"}}
        offset = 0
        for name, dtype, shape in entries:
            nbytes = dtype.itemsize
            for d in shape:
                nbytes *= d
            header[name] = {"dtype": SAFETENSORS_DTYPES[dtype], "shape": list(shape),
                            "data_offsets": [offset, offset + nbytes]}
            offset += nbytes
        raw = json.dumps(header, separators=(",", ":")).encode()
        raw += b" " * (-len(raw) % 8)
        self.size = 8 + len(raw) + offset
        self._sha = hashlib.sha256()
        self._file = open(path, "wb")  # noqa: SIM115 - closed in close()
        self._emit(struct.pack("<Q", len(raw)) + raw)
        self._next = 0

    def _emit(self, data) -> None:
        self._file.write(data)
        self._sha.update(data)

    def write(self, name: str, tensor: torch.Tensor) -> None:
        exp_name, exp_dtype, exp_shape = self._entries[self._next]
        if (name, tensor.dtype, tuple(tensor.shape)) != (exp_name, exp_dtype, exp_shape):
            raise AssertionError(f"{self.path.name}: got {name} {tensor.dtype} {tuple(tensor.shape)}, "
                                 f"planned {exp_name} {exp_dtype} {exp_shape}")
        t = tensor.detach().contiguous()
        if t.numel():
            self._emit(memoryview(t.reshape(-1).view(torch.uint8).numpy()))
        self._next += 1

    def close(self) -> str:
        """Finish the file; returns its sha256 (hex)."""
        if self._next != len(self._entries):
            raise AssertionError(f"{self.path.name}: {len(self._entries) - self._next} planned tensors never written")
        self._file.close()
        if self.path.stat().st_size != self.size:
            raise OSError(f"{self.path}: wrote {self.path.stat().st_size} bytes, planned {self.size}")
        return self._sha.hexdigest()

    def abort(self) -> None:
        self._file.close()
