"""broker.tsdb.encode against the reference codecs: protocol.records, kafka-python's and
aiokafka's record readers (the parsers those consumers run on Fetch responses), and
json.dumps / json.loads for the JSON values."""

from __future__ import annotations

import json
import math
import struct
from decimal import Decimal

import pyarrow as pa
import pytest
from aiokafka.record.default_records import DefaultRecordBatch as AioBatch
from aiokafka.record.memory_records import MemoryRecords as AioMemoryRecords
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.record import MemoryRecords
from kafka.record.default_records import DefaultRecordBatch

from tmqgate.broker.tsdb.encode import json_objects, records_batch
from tmqgate.protocol.records import Record, build_batch, decode_records, parse_header, verify_crc

SETTINGS = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# ---------------------------------------------------------------------------- record batches


def _batch(base, last, rows, headers):
    """records_batch over Python rows (offset, ts, key, value); headers as in the API."""
    cols = list(zip(*rows, strict=True)) if rows else [[], [], [], []]
    return records_batch(
        base_offset=base,
        last_offset=last,
        offsets=pa.array(cols[0], pa.int64()),
        timestamps=pa.array(cols[1], pa.int64()),
        keys=pa.array(cols[2], pa.binary()),
        values=pa.array(cols[3], pa.binary()),
        headers=headers,
    )


def _expected(rows, headers):
    out = []
    for i, (off, ts, k, v) in enumerate(rows):
        hs = [(name, hv if isinstance(hv, bytes) else hv[i]) for name, hv in headers]
        out.append(Record(off, ts, k, v, hs))
    return out


def _api_headers(headers):
    return [(name, hv if isinstance(hv, bytes) else pa.array(hv, pa.binary())) for name, hv in headers]


def _check_batch(batch, base, last, rows, headers):
    """Everything a consumer sees, through three independent parsers."""
    expected = _expected(rows, headers)
    assert verify_crc(batch)
    h = parse_header(batch)
    assert h.size == len(batch)
    assert (h.base_offset, h.last_offset_delta, h.record_count) == (base, last - base, len(rows))
    assert (h.magic, h.attributes, h.partition_leader_epoch) == (2, 0, -1)
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (-1, -1, -1)
    assert h.base_timestamp == (rows[0][1] if rows else -1)
    assert h.max_timestamp == (max(r[1] for r in rows) if rows else -1)
    assert decode_records(batch) == expected

    kb = DefaultRecordBatch(batch)
    assert kb.validate_crc()
    assert kb.next_offset == last + 1
    got = [(r.offset, r.timestamp, r.key, r.value, [(k, v) for k, v in r.headers]) for r in kb]
    assert got == [tuple(r) for r in expected]

    ab = AioBatch(batch)
    assert ab.validate_crc()
    assert ab.next_offset == last + 1
    got = [(r.offset, r.timestamp, r.key, r.value, [(k, v) for k, v in r.headers]) for r in ab]
    assert got == [tuple(r) for r in expected]


@st.composite
def batches(draw):
    n = draw(st.integers(0, 25))
    base = draw(st.one_of(st.just(0), st.integers(0, 1 << 50)))
    gaps = draw(st.lists(st.one_of(st.just(1), st.integers(1, 70), st.integers(1, 1 << 20)), min_size=n, max_size=n))
    first = base + draw(st.integers(0, 3))
    offsets = []
    o = first
    for i, g in enumerate(gaps):
        o = o + (g if i else 0)
        offsets.append(o)
    last = (offsets[-1] if offsets else base) + draw(st.one_of(st.just(0), st.integers(0, 100)))
    t0 = draw(st.one_of(st.just(1_700_000_000_000), st.integers(-(1 << 40), 1 << 45)))
    ts = draw(st.lists(st.one_of(st.integers(-5, 5000), st.integers(-(1 << 33), 1 << 33)), min_size=n, max_size=n))
    blob = st.one_of(st.none(), st.binary(max_size=20), st.binary(min_size=60, max_size=300))
    keys = draw(st.lists(blob, min_size=n, max_size=n))
    values = draw(st.lists(blob, min_size=n, max_size=n))
    rows = [(o, t0 + d, k, v) for o, d, k, v in zip(offsets, ts, keys, values, strict=True)]
    headers = draw(
        st.lists(
            st.tuples(
                st.text(max_size=12),
                st.one_of(st.binary(max_size=80),
                          st.lists(st.one_of(st.none(), st.binary(max_size=70)), min_size=n, max_size=n)),
            ),
            max_size=4,
        )
    )
    return base, last, rows, headers


@SETTINGS
@given(batches())
def test_records_batch_decodes_everywhere(case):
    base, last, rows, headers = case
    batch = _batch(base, last, rows, _api_headers(headers))
    _check_batch(batch, base, last, rows, headers)
    if rows and last == rows[-1][0]:  # then protocol.records.build_batch writes the same bytes
        assert batch == build_batch(_expected(rows, headers), base_offset=base)


def test_wide_varints_and_big_values():
    """Fields whose varints take 3..10 bytes: big values, far timestamps, big offset deltas."""
    base = 10
    big = b"v" * 70_000
    rows = [
        (10, 0, None, big),
        (11, -(1 << 62), b"k" * 9000, b""),
        (2**31 - 2, (1 << 62), big[:20000], None),
        (2**31 + 9, 1, b"", b"x"),
    ]
    headers = [("tmq.table", [b"a" * 300, None, b"", b"b" * 20000]), ("tmq.db", b"d" * 200)]
    batch = _batch(base, 2**31 + 9, rows, _api_headers(headers))
    _check_batch(batch, base, 2**31 + 9, rows, headers)
    assert batch == build_batch(_expected(rows, headers), base_offset=base)


def test_extreme_timestamps():
    rows = [(0, -(2**63) + 1, b"a", b"b"), (1, -(2**63) + 2, b"a", b"b")]
    _check_batch(_batch(0, 1, rows, []), 0, 1, rows, [])
    rows = [(0, 2**63 - 1, None, None), (5, 2**63 - 1000, None, None)]
    _check_batch(_batch(0, 5, rows, []), 0, 5, rows, [])
    with pytest.raises(ValueError, match="overflow"):
        _batch(0, 1, [(0, -(2**63), None, None), (1, 2**63 - 1, None, None)], [])


def test_empty_batch_moves_consumers_on():
    """Zero records: header only; kafka-python's and aiokafka's consumers read no record
    and continue at lastOffset + 1, the way their fetchers do after any v2 batch."""
    batch = _batch(100, 141, [], [("tmq.db", b"db")])
    _check_batch(batch, 100, 141, [], [])
    assert len(batch) == 61
    rows = [(142, 5, b"t1", b"{}"), (150, 4, b"t2", b"{}")]
    blob = batch + _batch(142, 160, rows, []) + _batch(161, 170, [], [])
    for records_cls in (MemoryRecords, AioMemoryRecords):
        mr = records_cls(blob)
        seen, next_offset = [], None
        while (b := mr.next_batch()) is not None:
            assert b.validate_crc()
            seen += [(r.offset, r.timestamp, r.key) for r in b]
            next_offset = b.next_offset
        assert seen == [(142, 5, b"t1"), (150, 4, b"t2")]
        assert next_offset == 171


def test_input_variants():
    """Strings, dictionary keys (tbname), chunked and large arrays, Arrow timestamps."""
    tb = pa.array(["d1", "d2", None, "d1"]).dictionary_encode()
    vals = pa.chunked_array([pa.array(['{"a":1}', None], pa.large_string()), pa.array(["ü", ""], pa.large_string())])
    ts = pa.array([1, 2, 3, 4], pa.timestamp("ms"))
    batch = records_batch(
        base_offset=7, last_offset=20, offsets=pa.chunked_array([[7, 8], [15, 20]]), timestamps=ts,
        keys=tb, values=vals, headers=[("tmq.table", tb), ("tmq.type", b"data"), ("x", pa.nulls(4))],
    )
    got = decode_records(batch)
    assert [r.offset for r in got] == [7, 8, 15, 20]
    assert [r.key for r in got] == [b"d1", b"d2", None, b"d1"]
    assert [r.value for r in got] == [b'{"a":1}', None, "ü".encode(), b""]
    assert got[2].headers == [("tmq.table", None), ("tmq.type", b"data"), ("x", None)]
    assert got[3].timestamp == 4 and verify_crc(batch)

    # slices (non-zero Arrow offsets) of every column, as a Fetch takes a window of an entry
    big = pa.table({"o": list(range(100)), "t": list(range(100, 200)), "k": [f"k{i}" for i in range(100)],
                    "v": [f"{i / 3}" for i in range(100)]}).slice(37, 5)
    batch = records_batch(base_offset=30, last_offset=60, offsets=big["o"], timestamps=big["t"], keys=big["k"],
                          values=big["v"], headers=[("k", big["k"].chunk(0))])
    assert decode_records(batch) == [
        Record(i, 100 + i, f"k{i}".encode(), f"{i / 3}".encode(), [("k", f"k{i}".encode())]) for i in range(37, 42)
    ]
    assert json_objects(pa.table({"f": [0.5, float("nan"), 1.0, 2.0]}).slice(1, 3)).to_pylist() == [
        '{"f":null}', '{"f":1.0}', '{"f":2.0}'
    ]


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"offsets": [3, 3]}, "increasing"),
        ({"offsets": [4, 2]}, "increasing"),
        ({"offsets": [0, 5]}, "outside"),
        ({"offsets": [5, 99]}, "outside"),
        ({"last_offset": (1 << 31) + 1}, r"2\*\*31"),
        ({"timestamps": [1]}, "timestamps"),
        ({"values": [b"x"]}, "values"),
        ({"headers": [("h", pa.array([b"x"]))]}, "header"),
        ({"timestamps": [1, None]}, "null"),
    ],
)
def test_refuses_bad_input(kwargs, message):
    args = {
        "base_offset": 1, "last_offset": 50, "offsets": [5, 9], "timestamps": [1, 2],
        "keys": [b"a", b"b"], "values": [b"a", b"b"], "headers": [],
    }
    args.update(kwargs)
    for k in ("offsets", "timestamps", "keys", "values"):
        args[k] = pa.array(args[k])
    with pytest.raises(ValueError, match=message):
        records_batch(**args)


# ---------------------------------------------------------------------------- JSON values


def _f32(x: float) -> float:
    return struct.unpack("<f", struct.pack("<f", x))[0]


def _f32_neighbours(x: float) -> tuple[Decimal, Decimal]:
    """Exact bounds of the decimals that read back as float32 ``x`` (x > 0, finite)."""
    bits = struct.unpack("<I", struct.pack("<f", x))[0]
    down = Decimal(struct.unpack("<f", struct.pack("<I", bits - 1))[0] if bits else 0.0)
    # above the largest float32 the next step (to infinity) is as wide as the one below it
    up = Decimal(struct.unpack("<f", struct.pack("<I", bits + 1))[0]) if bits < 0x7F7FFFFF else 2 * Decimal(x) - down
    return (Decimal(x) + down) / 2, (Decimal(x) + up) / 2


def _f32_shortest_text(x: float) -> str:
    """The fewest-digit decimal that reads back as float32 ``x`` (closest one on a tie in
    length), written as Python's repr writes that decimal."""
    if x == 0:
        return repr(x)
    sign, ax = ("-" if x < 0 else ""), abs(x)
    lo, hi = _f32_neighbours(ax)
    even = struct.unpack("<I", struct.pack("<f", ax))[0] % 2 == 0
    for p in range(1, 10):
        d = Decimal(f"{ax:.{p - 1}e}")
        unit = Decimal(1).scaleb(d.adjusted() - (p - 1))
        cands = [c for c in (d, d - unit, d + unit) if lo < c < hi or (even and c in (lo, hi))]
        if cands:
            best = min(cands, key=lambda c: abs(c - Decimal(ax)))
            return sign + repr(float(best))
    raise AssertionError(x)


def _value_text(v, typ) -> str:
    if v is None:
        return "null"
    if pa.types.is_floating(typ):
        if not math.isfinite(v):
            return "null"
        return _f32_shortest_text(v) if typ == pa.float32() else repr(v)
    return json.dumps(v, ensure_ascii=False)


def _expected_rows(table: pa.Table, names: list[str]) -> list[str]:
    cols = [(c.type, c.to_pylist()) for c in table.columns]
    return [
        "{" + ",".join(
            json.dumps(name, ensure_ascii=False) + ":" + _value_text(vals[i], typ)
            for name, (typ, vals) in zip(names, cols, strict=True)
        ) + "}"
        for i in range(table.num_rows)
    ]


_INT_TYPES = [pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.uint8(), pa.uint16(), pa.uint32(), pa.uint64()]
_TEXT = st.text(st.characters(exclude_categories=("Cs",)), max_size=12) | st.sampled_from(
    ['"', "\\", "\\\"", "\x00", "\x1f\x7f", "a\nb\tc\r\x08\x0c", "\u2028", "ü€😀", "", "null", '{"a":"b"}']
)


@st.composite
def tables(draw):
    n = draw(st.integers(0, 12))
    ncols = draw(st.integers(1, 6))
    cols, names = [], []
    for _ in range(ncols):
        kind = draw(st.sampled_from(["int", "bool", "f32", "f64", "str"]))
        if kind == "int":
            t = draw(st.sampled_from(_INT_TYPES))
            bits = t.bit_width
            lo, hi = (0, 2**bits - 1) if pa.types.is_unsigned_integer(t) else (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)
            elem = st.integers(lo, hi) | st.sampled_from([lo, hi, 0])
        elif kind == "bool":
            t, elem = pa.bool_(), st.booleans()
        elif kind == "f32":
            t, elem = pa.float32(), st.floats(width=32) | st.sampled_from([10.3, 1e10, 1e-5, 16777216.0, -0.0])
        elif kind == "f64":
            t, elem = pa.float64(), st.floats() | st.sampled_from([1e16, 1e15, 0.0001, 1e-5, 1e-7, 2.0**53, -0.0])
        else:
            t, elem = pa.string(), _TEXT
        cols.append(pa.array(draw(st.lists(st.none() | elem, min_size=n, max_size=n)), t))
        names.append(draw(_TEXT))
    return pa.Table.from_arrays(cols, names=[f"c{i}" for i in range(ncols)]), names


@SETTINGS
@given(tables())
def test_json_objects_match_json_dumps(case):
    table, names = case
    out = json_objects(table, names)
    assert isinstance(out, pa.StringArray) and out.null_count == 0
    texts = out.to_pylist()
    assert texts == _expected_rows(table, names)
    for text, row in zip(texts, zip(*(c.to_pylist() for c in table.columns), strict=True), strict=True):
        parsed = json.loads(text, object_pairs_hook=list)
        assert [k for k, _ in parsed] == names
        for (_, got), want, col in zip(parsed, row, table.columns, strict=True):
            if want is None or (isinstance(want, float) and not math.isfinite(want)):
                assert got is None
            elif col.type == pa.float32():
                assert _f32(got) == want
            else:
                assert got == want and type(got) is type(want)


_FLOATS = [
    *(10.0**k for k in range(-30, 31)),
    *(1.5 * 10.0**k for k in range(-12, 20)),
    *(-1.2345678901234567 * 10.0**k for k in range(-8, 18)),
    0.0, -0.0, 5e-324, 2.2250738585072014e-308, 1.7976931348623157e308, 2.0**53, 2.0**53 + 2, 2.0**63,
    0.1, 0.2 + 0.1, 1 / 3, 9999999999.5, 99999999999.5, 12345678901.25, 123456789012345.6,
    float("nan"), float("inf"), -float("inf"),
]


@pytest.mark.parametrize("typ", [pa.float64(), pa.float32()])
def test_float_texts(typ):
    values = _FLOATS
    if typ == pa.float32():
        values = [v if not math.isfinite(v) else _f32(v) for v in values if not abs(v) > 3.4e38]
    out = json_objects(pa.table({"f": pa.array(values, typ)})).to_pylist()
    assert out == ['{"f":' + _value_text(v, typ) + "}" for v in values]


@SETTINGS
@given(st.lists(st.floats(width=32), max_size=40))
def test_float32_shortest(values):
    texts = [json.loads(t)["f"] for t in json_objects(pa.table({"f": pa.array(values, pa.float32())})).to_pylist()]
    for v, got in zip(values, texts, strict=True):
        if math.isfinite(v):
            assert _f32(got) == v and repr(got) == _f32_shortest_text(v)


def test_json_column_kinds():
    tb = pa.array(["d1", 'q"', None, "d1"]).dictionary_encode()
    table = pa.table({
        "ts": pa.array([0, 1, 2, None], pa.timestamp("ms")),
        "tb": tb,
        "n": pa.nulls(4),
        "ls": pa.chunked_array([pa.array(["a\\", None], pa.large_string()), pa.array(["\n", "x"], pa.large_string())]),
    })
    assert json_objects(table).to_pylist() == [
        '{"ts":0,"tb":"d1","n":null,"ls":"a\\\\"}',
        '{"ts":1,"tb":"q\\"","n":null,"ls":null}',
        '{"ts":2,"tb":null,"n":null,"ls":"\\n"}',
        '{"ts":null,"tb":"d1","n":null,"ls":"x"}',
    ]
    assert json_objects(pa.table({"a": pa.array([], pa.int32())})).to_pylist() == []
    assert json_objects(pa.table({"a": [1, 2]}).select([])).to_pylist() == ["{}", "{}"]
    with pytest.raises(ValueError):
        json_objects(pa.table({"a": [1]}), ["a", "b"])
    with pytest.raises(TypeError):
        json_objects(pa.table({"a": pa.array([[1]])}))


def test_json_into_batch_roundtrip():
    """The query-topic path: JSON values of a rows slice → batch → the rows back."""
    n = 500
    table = pa.table({
        "ts": pa.array([1_700_000_000_000 + 10 * i for i in range(n)], pa.int64()),
        "current": pa.array([i / 7 for i in range(n)], pa.float32()),
        "voltage": pa.array([200 + i % 20 for i in range(n)], pa.int32()),
        "tbname": pa.array([f"d{i % 13}" for i in range(n)]),
    })
    values = json_objects(table.select(["ts", "current", "voltage"]))
    offsets = pa.array([1000 + 3 * i for i in range(n)], pa.int64())
    batch = records_batch(base_offset=1000, last_offset=1000 + 3 * n + 1, offsets=offsets, timestamps=table["ts"],
                          keys=table["tbname"], values=values,
                          headers=[("tmq.db", b"power"), ("tmq.table", table["tbname"])])
    recs = decode_records(batch)
    assert len(recs) == n and verify_crc(batch)
    for i, r in enumerate(recs):
        row = json.loads(r.value)
        assert r.offset == 1000 + 3 * i and r.timestamp == row["ts"] == table["ts"][i].as_py()
        assert _f32(row["current"]) == table["current"][i].as_py() and row["voltage"] == 200 + i % 20
        assert r.headers == [("tmq.db", b"power"),
                             ("tmq.table", f"d{i % 13}".encode())] and r.key == f"d{i % 13}".encode()
