"""Rows entries: Arrow IPC round trips, zero-copy decoding, schema evolution, sizes."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tmqgate.broker.tsdb.rows import (
    TBNAME,
    RowsError,
    arrow_schema,
    build_rows_table,
    conform,
    decode_rows,
    decode_run,
    encode_rows,
    schema_message,
)
from tmqgate.broker.tsdb.types import Column, StableSchema, parse_type


def meters(*extra: tuple[str, str]) -> StableSchema:
    cols = [
        Column("ts", parse_type("TIMESTAMP")),
        Column("current", parse_type("FLOAT")),
        Column("voltage", parse_type("INT")),
        Column("phase", parse_type("DOUBLE")),
    ]
    cols += [Column(n, parse_type(t)) for n, t in extra]
    tags = [Column("location", parse_type("VARCHAR(64)")), Column("groupid", parse_type("INT"))]
    return StableSchema("meters", cols, tags)


def sample(n: int = 3) -> tuple[StableSchema, pa.Table]:
    s = meters()
    t = build_rows_table(
        s,
        [f"d{i % 2}" for i in range(n)],
        {
            "ts": [1_700_000_000_000 + i for i in range(n)],
            "current": [10.5 + i for i in range(n)],
            "voltage": [220 + i for i in range(n)],
            "phase": [0.25 * i for i in range(n)],
        },
    )
    return s, t


def test_build_orders_columns_and_types() -> None:
    s, t = sample()
    assert t.column_names == [TBNAME, "ts", "current", "voltage", "phase"]
    assert t.schema.types == [pa.string(), pa.int64(), pa.float32(), pa.int32(), pa.float64()]
    assert t.column("voltage").to_pylist() == [220, 221, 222]
    assert t.column(TBNAME).to_pylist() == ["d0", "d1", "d0"]
    assert t.schema == arrow_schema(s)


def test_build_missing_columns_are_null() -> None:
    s = meters(("note", "NCHAR(8)"), ("ok", "BOOL"))
    t = build_rows_table(s, ["a", "b"], {"ts": [1, 2], "ok": [True, None]})
    assert t.column("current").to_pylist() == [None, None]
    assert t.column("note").type == pa.string()
    assert t.column("note").null_count == 2
    assert t.column("ok").to_pylist() == [True, None]


def test_build_accepts_arrow_arrays_and_casts() -> None:
    s = meters()
    t = build_rows_table(
        s, pa.array(["a"]), {"ts": pa.array([5], pa.int32()), "phase": pa.array([1], pa.int64())}
    )
    assert t.column("ts").type == pa.int64()
    assert t.column("phase").to_pylist() == [1.0]


@pytest.mark.parametrize(
    "columns, message",
    [
        ({"ts": [1], "nope": [1]}, "no column 'nope'"),
        ({"ts": [1, 2]}, "2 values for 1 rows"),
        ({"ts": [1], "voltage": ["x"]}, "'voltage'"),
        ({"ts": [1], "voltage": [2**40]}, "'voltage'"),
    ],
)
def test_build_rejects(columns: dict, message: str) -> None:
    with pytest.raises(RowsError, match=message):
        build_rows_table(meters(), ["a"], columns)


def test_round_trip() -> None:
    _, t = sample(100)
    data = encode_rows(t)
    back = decode_rows(data)
    assert back.equals(t)
    assert back.schema == t.schema


def test_round_trip_empty_and_chunked() -> None:
    s, t = sample(4)
    empty = t.slice(0, 0)
    assert decode_rows(encode_rows(empty)).equals(empty)
    chunked = pa.concat_tables([t.slice(0, 2), t.slice(2)])
    assert chunked.column(1).num_chunks == 2
    back = decode_rows(encode_rows(chunked))
    assert back.equals(t)
    assert back.column(1).num_chunks == 1


def test_one_record_batch() -> None:
    _, t = sample(10)
    with pa.ipc.open_stream(encode_rows(pa.concat_tables([t, t]))) as reader:
        batches = list(reader)
    assert len(batches) == 1 and batches[0].num_rows == 20


def test_decode_is_zero_copy() -> None:
    _, t = sample(1000)
    data = encode_rows(t)
    src = pa.py_buffer(data)
    lo, hi = src.address, src.address + src.size
    back = decode_rows(data)
    for col in back.columns:
        for chunk in col.chunks:
            for buf in chunk.buffers():
                if buf is not None and buf.size:
                    assert lo <= buf.address < hi, "buffer was copied"


def test_decode_rejects_garbage() -> None:
    with pytest.raises((pa.ArrowInvalid, OSError)):
        decode_rows(b"not arrow at all")


def test_schema_message_is_the_same_for_one_schema_only() -> None:
    """An entry's schema message (the bytes readers key on): equal for entries of one schema
    whatever their rows, different for another schema or other metadata, and None for bytes
    not framed as encode_rows frames an entry."""
    _, t = sample(3)
    a, b = encode_rows(t), encode_rows(sample(50)[1])
    head = schema_message(a)
    assert head is not None and head == schema_message(b) and a.startswith(head) and len(head) % 8 == 0
    assert pa.ipc.read_schema(pa.py_buffer(head)).equals(t.schema)
    assert schema_message(encode_rows(conform(t, meters(("note", "VARCHAR(16)"))))) != head
    assert schema_message(encode_rows(t.replace_schema_metadata({b"tmq.stable": b"meters"}))) != head
    for bad in (b"", b"not arrow at all", a[:-8], a[:12] + a[-8:], b"\xff\xff\xff\xff\xf0\xff\x00\x00" + a[8:]):
        assert schema_message(bad) is None, bad[:16]


def test_decode_run_reads_many_entries_as_one_stream_zero_copy() -> None:
    """Entries of one schema read together give each entry's rows, as decoding it alone does,
    one batch per entry pointing into one buffer; an entry of two batches is refused."""
    entries = [encode_rows(sample(n)[1]) for n in (1, 7, 0, 300, 2)]
    head = schema_message(entries[0])
    assert head is not None
    batches = decode_run(entries, head)
    assert [b.num_rows for b in batches] == [1, 7, 0, 300, 2]
    for batch, data in zip(batches, entries, strict=True):
        assert pa.Table.from_batches([batch]).equals(decode_rows(data))
    big = batches[3]
    addresses = {buf.address for col in big.columns for buf in col.buffers() if buf is not None and buf.size}
    assert max(addresses) - min(addresses) < sum(map(len, entries)), "one buffer"
    _, t = sample(4)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, t.schema) as writer:
        writer.write_table(t.slice(0, 2))
        writer.write_table(t.slice(2))
    two = sink.getvalue().to_pybytes()
    assert schema_message(two) == head
    with pytest.raises(pa.ArrowInvalid, match="3 record batches in 2 rows entries"):
        decode_run([entries[0], two], head)


def test_conform_adds_nulls_and_drops() -> None:
    s, t = sample(3)
    newer = meters(("note", "VARCHAR(16)"))
    c = conform(t, newer)
    assert c.column_names == [TBNAME, "ts", "current", "voltage", "phase", "note"]
    assert c.column("note").to_pylist() == [None] * 3
    assert c.column("voltage").to_pylist() == t.column("voltage").to_pylist()
    # unchanged schema: the same object back
    assert conform(t, s) is t
    # a column dropped from the schema disappears
    fewer = StableSchema("meters", s.columns[:2], s.tags)
    assert conform(t, fewer).column_names == [TBNAME, "ts", "current"]


def test_conform_through_encode() -> None:
    _, t = sample(5)
    newer = meters(("note", "NCHAR(4)"), ("flag", "BOOL"))
    back = conform(decode_rows(encode_rows(t)), newer)
    assert back.schema == arrow_schema(newer)
    assert back.num_rows == 5


def _size_table(n: int) -> pa.Table:
    rng = random.Random(7)
    s = meters(("status", "VARCHAR(16)"))
    return build_rows_table(
        s,
        [f"t_{rng.randrange(50):032x}" for _ in range(n)],
        {
            "ts": [1_700_000_000_000 + i * 1000 for i in range(n)],
            "current": [round(rng.uniform(9, 12), 2) for _ in range(n)],
            "voltage": [rng.randrange(215, 225) for _ in range(n)],
            "phase": [rng.random() for _ in range(n)],
            "status": [rng.choice(["ok", "warn", "fail"]) for _ in range(n)],
        },
    )


def test_sizes_uncompressed_is_reasonable() -> None:
    """Per-row cost stays near the raw column widths; LZ4/ZSTD are measured, not used.

    Rows entries are stored uncompressed so decode is zero-copy; LevelDB compresses blocks.
    """
    sizes = {}
    for n in (1, 100, 10_000):
        t = _size_table(n)
        raw = encode_rows(t)
        lz4 = encode_rows(t, compression="lz4")
        zstd = encode_rows(t, compression="zstd")
        sizes[n] = (len(raw), len(lz4), len(zstd))
        assert decode_rows(lz4).equals(t) and decode_rows(zstd).equals(t)
    one = sizes[1][0]
    assert one < 1200, sizes  # schema message dominates a 1-row entry
    per_row = (sizes[10_000][0] - one) / 9_999
    # tbname 34 + offsets 4 + ts 8 + f32 4 + i32 4 + f64 8 + status ~4 + offsets 4 ≈ 70 bytes
    assert per_row < 80, sizes
    # compression only pays on large entries, and not for the tiny ones
    assert sizes[1][1] >= sizes[1][0] - 64
    print("entry sizes (raw, lz4, zstd):", sizes)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.tuples(
            st.text(max_size=12),
            st.integers(-(2**63), 2**63 - 1),
            st.one_of(st.none(), st.floats(width=32, allow_nan=False)),
            st.one_of(st.none(), st.integers(-(2**31), 2**31 - 1)),
            st.one_of(st.none(), st.floats(allow_nan=True)),
            st.one_of(st.none(), st.text(max_size=20)),
            st.one_of(st.none(), st.booleans()),
        ),
        max_size=30,
    )
)
def test_round_trip_property(rows: list[tuple]) -> None:
    s = meters(("note", "NCHAR(20)"), ("ok", "BOOL"))
    names = ["ts", "current", "voltage", "phase", "note", "ok"]
    cols = {name: [r[i + 1] for r in rows] for i, name in enumerate(names)}
    t = build_rows_table(s, [r[0] for r in rows], cols)
    data = encode_rows(t)
    back = decode_rows(data)
    assert back.schema == t.schema and back.num_rows == t.num_rows
    assert encode_rows(back) == data  # byte-identical; Table.equals would trip over NaN != NaN
