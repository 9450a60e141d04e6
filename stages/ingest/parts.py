"""Bounded Parquet part files, written as a stream: the shape of every file the ingest stage publishes.

Why here: the units write the published parts themselves (rejected rows in the documents step, kept rows and
duplicates in the filter step), batch by batch, and finalize only links them into data/<lang>/ and
rejected/<lang>/ in unit order: no row of the corpus passes through the process that runs finalize, and no
unit holds more than a batch. Each part's sha256 is taken when it is closed (the file is still in the page
cache), so the manifest does not read the corpus a second time.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.fsutil import sha256_file
from stages.ingest.schema import parquet_options
from stages.ingest.units import PartFile


class PartWriter:
    """`<prefix>-00000.parquet`, ... in `folder`, each at most `max_rows` rows; no file at all without rows."""

    def __init__(self, folder: Path, prefix: str, schema: pa.Schema, max_rows: int, *, enabled: bool = True):
        self.folder, self.prefix, self.schema, self.max_rows, self.enabled = Path(folder), prefix, schema, max_rows, enabled
        self.parts: list[PartFile] = []
        self._writer: pq.ParquetWriter | None = None
        self._name = ""  # of the part being written
        self._rows = 0

    def write(self, table: pa.Table) -> None:
        if not self.enabled or not table.num_rows:
            return
        table = table.select(self.schema.names).cast(self.schema)
        start = 0
        while start < table.num_rows:
            if self._writer is None:
                self._name = f"{self.prefix}-{len(self.parts):05d}.parquet"
                self._writer = pq.ParquetWriter(self.folder / self._name, self.schema, **parquet_options(self.schema))
                self._rows = 0
            n = min(self.max_rows - self._rows, table.num_rows - start)
            self._writer.write_table(table.slice(start, n))
            self._rows += n
            start += n
            if self._rows == self.max_rows:
                self._finish()

    def _finish(self) -> None:
        assert self._writer is not None
        self._writer.close()
        self._writer = None
        self.parts.append(PartFile(file=self._name, rows=self._rows, sha256=sha256_file(self.folder / self._name)))

    def close(self) -> list[PartFile]:
        """The parts written, in order."""
        if self._writer is not None:
            self._finish()
        return self.parts
