"""The Parquet schema of the ingest stage's output: what every later stage may rely on.

data/<lang>/part-NNNNN.parquet      kept documents, with `cluster_size`
rejected/<lang>/part-NNNNN.parquet  removed documents, with `reason` (and `duplicate_of` for duplicates)
"""

from __future__ import annotations

from operator import itemgetter

import pyarrow as pa

DOCUMENT_FIELDS = [
    pa.field("id", pa.string(), nullable=False),  # stable: sha1(source, input, position)[:20]
    pa.field("text", pa.string(), nullable=False),  # normalized (NFC), PII redacted
    pa.field("lang", pa.string(), nullable=False),  # declared ISO 639-1 code
    pa.field("lang_detected", pa.string()),  # what language ID said (cld2 code)
    pa.field("lang_score", pa.float32()),  # its confidence, 0..1
    pa.field("source", pa.string(), nullable=False),  # [[ingest.sources]] name
    pa.field("source_doc_id", pa.string()),  # the source's own id, if it has one
    pa.field("url", pa.string()),
    pa.field("domain", pa.string()),  # registrable domain of url (or the source's domain)
    pa.field("licence", pa.string()),
    pa.field("collected", pa.string()),  # collection date of the source
    pa.field("input", pa.string()),  # input file (relative to the source root) or dataset reference
    pa.field("input_index", pa.int64()),  # line / row / paragraph in that input
    pa.field("mojibake_fixed", pa.bool_()),
    pa.field("pii_redactions", pa.int32()),
    pa.field("n_chars", pa.int32()),
    pa.field("n_bytes", pa.int32()),
    pa.field("n_words", pa.int32()),
]

DOCUMENT_FIELD_NAMES = [f.name for f in DOCUMENT_FIELDS]
# Published kept documents only: 1 + the documents dropped as exact or near duplicates of this one (its exact
# copies and the near duplicates it represents; exact copies of those near duplicates are not added). The shards
# stage can upsample by it ([shards.mixture] rehydration).
CLUSTER_SIZE = "cluster_size"
DOCUMENT_SCHEMA = pa.schema(DOCUMENT_FIELDS + [pa.field(CLUSTER_SIZE, pa.int32(), nullable=False)])
REJECTED_SCHEMA = pa.schema(DOCUMENT_FIELDS + [pa.field("reason", pa.string(), nullable=False), pa.field("duplicate_of", pa.string())])
# Between run_unit and finalize only: dedup keys travel with the kept rows.
UNIT_KEPT_SCHEMA = pa.schema(DOCUMENT_FIELDS + [pa.field("exact_key", pa.string()), pa.field("signature", pa.binary())])


# Columns with few distinct values in a file (a language, a source, an input file, a domain, a reason), which
# Parquet's dictionary encoding shrinks. The others (ids, text, URLs, keys, signatures, counts) are nearly all
# distinct: a dictionary there costs CPU until the writer gives up on it at 1 MB, and saves nothing.
DICTIONARY_COLUMNS = frozenset({"lang", "lang_detected", "source", "licence", "collected", "input", "domain", "reason"})


def parquet_options(schema: pa.Schema) -> dict:
    """How the ingest stage writes a Parquet file of `schema`: zstd, dictionaries only where they pay."""
    return {"compression": "zstd", "use_dictionary": [name for name in schema.names if name in DICTIONARY_COLUMNS]}


def to_table(rows: list[dict], schema: pa.Schema) -> pa.Table:
    """Rows (dicts; missing keys are nulls) as a table, built column by column (much faster than from_pylist).

    Why itemgetter: rows that have every key (the documents step's kept rows) are read with one C call per row
    and transposed by zip, instead of a Python-level dict.get per row and column. Rows with a key missing take
    the dict.get path."""
    names = schema.names
    columns: list = []
    if rows and len(names) > 1:
        try:
            columns = list(zip(*map(itemgetter(*names), rows)))
        except KeyError:
            columns = []
    if not columns:
        columns = [[r.get(name) for r in rows] for name in names]
    return pa.Table.from_arrays([pa.array(c, type=f.type) for c, f in zip(columns, schema)], schema=schema)
