"""WAL *rows entries*: one supertable's rows written to one vnode, as Arrow IPC bytes.

An entry is an Arrow IPC stream holding exactly one record batch: column ``tbname``
(string) first, then the supertable's columns in schema order as of the write (tags are
not stored here; they live with the child table in the catalog). Row i of an entry takes
WAL version ``base + i``.

Entries are written uncompressed on purpose: ``decode_rows`` then hands out Arrow arrays
that point straight into the stored bytes (no copy, no decompression on the Fetch path),
and LevelDB already compresses its blocks with Snappy. ``tests/test_tsdb_rows.py``
measures LZ4/ZSTD against this choice.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa

from tmqgate.broker.tsdb.types import StableSchema

__all__ = [
    "TBNAME",
    "RowsError",
    "arrow_schema",
    "build_rows_table",
    "conform",
    "decode_rows",
    "decode_run",
    "encode_rows",
    "schema_message",
]

TBNAME = "tbname"

_WRITE_OPTIONS = pa.ipc.IpcWriteOptions(compression=None)
#: An IPC message opens with this marker, then its metadata's length (int32, little-endian).
_CONTINUATION = b"\xff\xff\xff\xff"
#: The end of an IPC stream: the marker and a zero length.
_END = _CONTINUATION + b"\x00\x00\x00\x00"


class RowsError(ValueError):
    """Values that do not fit the supertable's schema (message names the column)."""


def arrow_schema(schema: StableSchema) -> pa.Schema:
    """The Arrow schema of a rows entry for ``schema``: tbname, then its columns."""
    return pa.schema(
        [pa.field(TBNAME, pa.string())] + [pa.field(c.name, c.type.arrow) for c in schema.columns]
    )


def encode_rows(table: pa.Table | pa.RecordBatch, compression: str | None = None) -> bytes:
    """Serialise ``table`` as an IPC stream of exactly one record batch.

    Chunked columns are concatenated so the entry is always one batch (even with 0 rows).
    ``compression`` ('lz4' / 'zstd') exists for measurements; WAL entries use None.
    """
    if isinstance(table, pa.Table):
        batch = pa.RecordBatch.from_arrays(
            [col.combine_chunks() for col in table.columns], schema=table.schema
        )
    else:
        batch = table
    options = _WRITE_OPTIONS if compression is None else pa.ipc.IpcWriteOptions(compression=compression)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema, options=options) as writer:
        writer.write_batch(batch)
    data: bytes = sink.getvalue().to_pybytes()
    return data


def decode_rows(data: bytes | bytearray | memoryview | pa.Buffer) -> pa.Table:
    """Read an entry back; the arrays reference ``data``'s memory (zero-copy).

    Zero-copy needs the input 8-byte aligned (a ``bytes`` object is); Arrow copies
    misaligned buffers rather than fail. Raises ``pa.ArrowInvalid`` on corrupt input.
    """
    buf = data if isinstance(data, pa.Buffer) else pa.py_buffer(data)
    with pa.ipc.open_stream(buf) as reader:
        return reader.read_all()


def schema_message(data: bytes) -> bytes | None:
    """The IPC schema message a rows entry opens with: the same bytes for every entry of one
    supertable's schema version, so readers key on them (what the schema says is read once
    per key). None where the entry is not framed as :func:`encode_rows` frames it: the
    schema, one batch, the end of the stream."""
    if len(data) < 16 or not data.startswith(_CONTINUATION) or not data.endswith(_END):
        return None
    size = 8 + int.from_bytes(data[4:8], "little")
    if size % 8 or size > len(data) - 8:
        return None
    return data[:size]


def decode_run(entries: Sequence[bytes], head: bytes) -> list[pa.RecordBatch]:
    """The record batches of rows entries that all open with the schema message `head`, one
    per entry, zero-copy over one buffer.

    Read alone, an entry costs a stream reader and its schema (about 10 µs, most of the
    decoding of a 100-row entry); here the entries' batch messages are laid one after the
    other behind one schema message and read as one stream (about 3 µs an entry). IPC
    messages are padded to 8 bytes, so the batches stay aligned. Raises ``pa.ArrowInvalid``
    on corrupt input, or where an entry does not hold exactly one batch."""
    cut = len(head)
    buf = b"".join([head, *(memoryview(e)[cut:len(e) - 8] for e in entries), _END])
    with pa.ipc.open_stream(pa.py_buffer(buf)) as reader:
        batches = list(reader)
    if len(batches) != len(entries):
        raise pa.ArrowInvalid(f"{len(batches)} record batches in {len(entries)} rows entries")
    return batches


def _to_array(name: str, values: Any, arrow_type: pa.DataType, n: int) -> pa.Array | pa.ChunkedArray:
    """``values`` as an Arrow array of ``arrow_type`` with ``n`` entries, or RowsError."""
    if isinstance(values, pa.Array | pa.ChunkedArray):
        arr = values
        if arr.type != arrow_type:
            try:
                arr = arr.cast(arrow_type)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
                raise RowsError(
                    f"column {name!r}: cannot convert {values.type} to {arrow_type}: {e}"
                ) from None
    else:
        try:
            arr = pa.array(values, type=arrow_type)
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError, ValueError) as e:
            raise RowsError(f"column {name!r}: values do not fit {arrow_type}: {e}") from None
    if len(arr) != n:
        raise RowsError(f"column {name!r} has {len(arr)} values for {n} rows")
    return arr


def build_rows_table(
    schema: StableSchema, tbnames: Sequence[str] | pa.Array, columns: Mapping[str, Any]
) -> pa.Table:
    """A rows table for ``schema``: tbname first, then every column in schema order.

    ``columns`` maps column names (the timestamp column included) to per-row values (Python
    lists or Arrow arrays); a column it lacks is all null; values are converted to the
    column's Arrow type. A name the schema does not have raises RowsError: the caller adds
    columns (ALTER) before building rows that use them.
    """
    n = len(tbnames)
    known = {c.name for c in schema.columns}
    unknown = [k for k in columns if k not in known]
    if unknown:
        raise RowsError(f"supertable {schema.name} has no column {unknown[0]!r}")
    arrays = [_to_array(TBNAME, tbnames, pa.string(), n)]
    for col in schema.columns:
        values = columns.get(col.name)
        if values is None:
            arrays.append(pa.nulls(n, col.type.arrow))
        else:
            arrays.append(_to_array(col.name, values, col.type.arrow, n))
    return pa.Table.from_arrays(arrays, schema=arrow_schema(schema))


def conform(table: pa.Table, schema: StableSchema, target: pa.Schema | None = None) -> pa.Table:
    """Adapt an entry written under an older schema to ``schema``.

    Columns added since read as null, columns no longer in the schema are left out, and a
    column whose Arrow type changed is cast. Unchanged entries come back as they are.
    ``target``: ``arrow_schema(schema)`` when the caller keeps it (its cost grows with the
    columns).
    """
    target = target if target is not None else arrow_schema(schema)
    if table.schema.equals(target):
        return table
    n = table.num_rows
    names = set(table.column_names)
    arrays: list[pa.Array | pa.ChunkedArray] = []
    for f in target:
        if f.name in names:
            arrays.append(_to_array(f.name, table.column(f.name), f.type, n))
        else:
            arrays.append(pa.nulls(n, f.type))
    return pa.Table.from_arrays(arrays, schema=target)
