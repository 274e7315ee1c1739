"""TDengine schemaless parsing: line protocol, OpenTSDB JSON, naming, schema changes, fuzz."""

from __future__ import annotations

import hashlib
import json
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tmqgate.broker.tsdb.child_tables import child_table_name
from tmqgate.broker.tsdb.ingest_rules import TAG_NULL, SchemalessError, SchemalessRow, string_length
from tmqgate.broker.tsdb.line_protocol import parse_line_protocol
from tmqgate.broker.tsdb.opentsdb import parse_opentsdb_json
from tmqgate.broker.tsdb.rows import decode_rows, encode_rows
from tmqgate.broker.tsdb.schema_plan import child_table_tags, group_rows, plan_schema, schema_delta
from tmqgate.broker.tsdb.types import Column, StableSchema, parse_type

NOW = 1_700_000_000_123
T = parse_type


def one(line: str, **kw) -> SchemalessRow:
    rows = parse_line_protocol(line, now_ms=NOW, **kw)
    assert len(rows) == 1
    return rows[0]


def ref_name(stable: str, tags: list[tuple[str, bytes]]) -> str:
    """Independent TDengine child-table name: md5(stable + ',k=v' sorted case-insensitively)."""
    h = hashlib.md5(stable.encode())
    for k, v in sorted(tags, key=lambda kv: kv[0].lower()):
        h.update(b"," + k.encode() + b"=" + v)
    return "t_" + h.hexdigest()


# --- line protocol: exact results -------------------------------------------------------


def test_tdengine_doc_example() -> None:
    r = one('st,t1=3,t2=4,t3=t3 c1=3i64,c3="passit",c2=false,c4=4f64 1626006833639000000')
    assert r.stable == "st"
    assert r.tags == {"t1": (T("NCHAR(2)"), "3"), "t2": (T("NCHAR(2)"), "4"), "t3": (T("NCHAR(4)"), "t3")}
    assert r.columns == {
        "c1": (T("BIGINT"), 3),
        "c3": (T("VARCHAR(8)"), "passit"),
        "c2": (T("BOOL"), False),
        "c4": (T("DOUBLE"), 4.0),
    }
    assert list(r.columns) == ["c1", "c3", "c2", "c4"]  # field order kept
    assert r.ts == 1626006833639
    assert r.line == 1
    assert r.tbname == ref_name("st", [("t1", b"3"), ("t2", b"4"), ("t3", b"t3")])


@pytest.mark.parametrize(
    "raw, type_text, value",
    [
        ("1", "DOUBLE", 1.0),
        ("-1.5", "DOUBLE", -1.5),
        ("+2", "DOUBLE", 2.0),
        ("1e3", "DOUBLE", 1000.0),
        ("1.5E-2", "DOUBLE", 0.015),
        (".5", "DOUBLE", 0.5),
        ("5.", "DOUBLE", 5.0),
        ("1.5f64", "DOUBLE", 1.5),
        ("2F64", "DOUBLE", 2.0),
        ("1.5f32", "FLOAT", 1.5),
        ("-3e2F32", "FLOAT", -300.0),
        ("1i8", "TINYINT", 1),
        ("-128i8", "TINYINT", -128),
        ("127I8", "TINYINT", 127),
        ("-32768i16", "SMALLINT", -32768),
        ("2147483647i32", "INT", 2147483647),
        ("-9223372036854775808i64", "BIGINT", -(2**63)),
        ("9223372036854775807i64", "BIGINT", 2**63 - 1),
        ("7i", "BIGINT", 7),
        ("-7I", "BIGINT", -7),
        ("+7i", "BIGINT", 7),
        ("0u8", "TINYINT UNSIGNED", 0),
        ("255u8", "TINYINT UNSIGNED", 255),
        ("65535u16", "SMALLINT UNSIGNED", 65535),
        ("4294967295U32", "INT UNSIGNED", 4294967295),
        ("18446744073709551615u64", "BIGINT UNSIGNED", 2**64 - 1),
        ("5u", "BIGINT UNSIGNED", 5),
        ("t", "BOOL", True),
        ("T", "BOOL", True),
        ("true", "BOOL", True),
        ("True", "BOOL", True),
        ("TRUE", "BOOL", True),
        ("f", "BOOL", False),
        ("F", "BOOL", False),
        ("false", "BOOL", False),
        ("False", "BOOL", False),
        ("FALSE", "BOOL", False),
        ('"abc"', "VARCHAR(4)", "abc"),
        ('""', "VARCHAR(1)", ""),
        ('"a b,c=d"', "VARCHAR(8)", "a b,c=d"),
        ('"héé"', "VARCHAR(8)", "héé"),  # 5 bytes of UTF-8
        ('L"abc"', "NCHAR(4)", "abc"),
        ('l"héé"', "NCHAR(4)", "héé"),  # 3 characters
        ('"' + "x" * 1000 + '"', "VARCHAR(1024)", "x" * 1000),
        ('"' + "x" * 2000 + '"', "VARCHAR(2000)", "x" * 2000),
    ],
)
def test_field_types(raw: str, type_text: str, value: object) -> None:
    r = one(f"m,t=1 f={raw} 1000000")
    assert r.columns["f"] == (T(type_text), value)
    # same answer on the general (escaped) path as on the fast path
    r2 = one(f"m\\,x,t=1 f={raw} 1000000")
    assert r2.columns["f"] == (T(type_text), value)


@pytest.mark.parametrize(
    "raw, message",
    [
        ("128i8", "out of range for TINYINT"),
        ("-129i8", "out of range"),
        ("-1u8", "out of range"),
        ("256u8", "out of range"),
        ("-1u", "out of range"),
        ("9223372036854775808i64", "out of range"),
        ("1.5i32", "invalid field value"),
        ("1e3i", "invalid field value"),
        ("abc", "invalid field value"),
        ("nan", "invalid field value"),
        ("inf", "invalid field value"),
        ("-inf", "invalid field value"),
        ("1e999", "out of range for DOUBLE"),
        ("1e39f32", "out of range for FLOAT"),
        ("0x10", "invalid field value"),
        ("1_000", "invalid field value"),
        ("1i128", "invalid field value"),
        ("1f", "invalid field value"),
        ("1f16", "invalid field value"),
        ("tru", "invalid field value"),
        ("yes", "invalid field value"),
        ("١٢", "invalid field value"),
        ("1.2.3", "invalid field value"),
        ('G"POINT(1 2)"', "GEOMETRY"),
        ('B"abc"', "VARBINARY"),
        ('X"abc"', "invalid string field value"),
        ('"abc', "invalid value"),
        ('a"b', "invalid field value"),
    ],
)
def test_field_value_errors(raw: str, message: str) -> None:
    with pytest.raises(SchemalessError, match=message) as e:
        parse_line_protocol(f"# comment\nm,t=1 f=1 1\nm,t=1 f={raw} 1", now_ms=NOW)
    assert e.value.line_number == 3
    assert "line 3" in str(e.value)


def test_escapes() -> None:
    r = one(
        'me\\ as\\,ure=x,t\\=k\\ 1=v\\ 1\\,2\\=3 f\\ 1\\,\\==1,s="he said \\"hi\\" \\\\ back \\n" 1000000'
    )
    assert r.stable == "me as,ure=x"
    assert r.tags == {"t=k 1": (T("NCHAR(8)"), "v 1,2=3")}
    assert r.columns["f 1,="] == (T("DOUBLE"), 1.0)
    assert r.columns["s"][1] == 'he said "hi" \\ back \\n'


@pytest.mark.parametrize("n, kept", [(1, 1), (2, 1), (3, 2), (4, 2), (5, 3), (6, 3)])
def test_backslash_table(n: int, kept: int) -> None:
    """TDengine's table: two contiguous backslashes are one; a lone one stays."""
    bs = "\\" * n
    r = one(f"a{bs}b,t=x{bs}y f={'1'} 1000000")
    assert r.stable == "a" + "\\" * kept + "b"
    assert r.tags["t"][1] == "x" + "\\" * kept + "y"
    r = one(f'm f="q{bs}x" 1000000')
    assert r.columns["f"][1] == "q" + "\\" * kept + "x"


def test_dots_become_underscores_in_stable() -> None:
    r = one("meters.current,location=a.b v=1 1000000")
    assert r.stable == "meters_current"
    assert r.tags["location"][1] == "a.b"  # tag values untouched
    assert r.tbname == ref_name("meters_current", [("location", b"a.b")])


def test_comments_blank_lines_whitespace() -> None:
    text = "\n".join(
        [
            "# a comment",
            "",
            "   ",
            "  # indented comment",
            "m,t=1 f=1 1000000\r",
            "  m,t=1   f=2    2000000  ",
            "m,t=1 f=3\t",
        ]
    )
    rows = parse_line_protocol(text, now_ms=NOW)
    assert [(r.columns["f"][1], r.ts, r.line) for r in rows] == [(1.0, 1, 5), (2.0, 2, 6), (3.0, NOW, 7)]


def test_missing_and_zero_timestamp_mean_now() -> None:
    assert one("m f=1").ts == NOW
    assert one("m f=1 0").ts == NOW
    rows = parse_line_protocol("m f=1\nm f=2")  # real clock, read once per call
    assert rows[0].ts == rows[1].ts > 1_600_000_000_000


@pytest.mark.parametrize(
    "precision, raw, ms",
    [
        ("ns", "1626006833639000000", 1626006833639),
        ("ns", "1626006833639999999", 1626006833639),
        ("us", "1626006833639000", 1626006833639),
        ("u", "1626006833639999", 1626006833639),
        ("ms", "1626006833639", 1626006833639),
        ("s", "1626006833", 1626006833000),
        ("m", "27100113", 1626006780000),
        ("h", "451668", 1626004800000),
    ],
)
def test_precisions(precision: str, raw: str, ms: int) -> None:
    assert one(f"m f=1 {raw}", precision=precision).ts == ms
    assert one(f"m\\ x f=1 {raw}", precision=precision).ts == ms


def test_timestamp_errors() -> None:
    with pytest.raises(SchemalessError, match="unknown timestamp precision"):
        parse_line_protocol("m f=1", precision="fortnights")
    with pytest.raises(SchemalessError, match="out of range"):
        parse_line_protocol("m f=1 9999999999999999999")
    with pytest.raises(SchemalessError, match="out of range in milliseconds"):
        parse_line_protocol("m f=1 9000000000000000000", precision="h")
    with pytest.raises(SchemalessError, match="negative"):
        parse_line_protocol("m f=1 -5")
    with pytest.raises(SchemalessError, match="invalid timestamp"):
        parse_line_protocol("m f=1 12a")
    with pytest.raises(SchemalessError, match="invalid timestamp"):
        parse_line_protocol("m f=1 1.5")


@pytest.mark.parametrize(
    "line, message",
    [
        ("meters", "missing field set"),
        ("meters,t=1", "missing field set"),
        ("meters,t=1 ", "missing field set"),
        ("meters,t1 c=1", "has no '='"),
        ("meters,t1= c=1", "empty value"),
        ("meters,=v c=1", "empty key"),
        ("meters,t=a=b c=1", "unescaped '='"),
        ("meters,t\\ x=a=b c=1", "unescaped '='"),
        ("meters,t=1,t=2 c=1", "duplicate tag 't'"),
        ("meters c=1,c=2", "duplicate field 'c'"),
        ('meters c=1,c="x"', "duplicate field 'c'"),
        ("meters,c=1 c=2", "both a tag and a field"),
        ("meters c=1 123 456", "unexpected text after the timestamp"),
        ('meters c="a" 123 456', "unexpected text after the timestamp"),
        ("meters c= 1", "empty value"),
        ("meters c=1,", "stray ','"),
        ("meters c=1,=2", "empty key"),
        ("meters c", "has no '='"),
        ('meters c="abc 1', "invalid value"),
        ('meters c="x"y', "unexpected 'y'"),
        ("meters c=1\\", "unexpected"),
        ("meters\\", "dangling backslash"),
        (",t=1 c=1", "missing measurement"),
        ("m" * 193 + " c=1", r"table name too long \(at most 192 bytes"),
        ("m " + "k" * 65 + "=1", r"column name too long \(at most 64 bytes"),
        ("m,s=" + "v" * 16380 + " c=1", "longer than NCHAR allows"),
    ],
)
def test_line_errors_name_line_and_fault(line: str, message: str) -> None:
    text = f"ok,t=1 f=1 1\n# comment\n\n{line}\nok f=2"
    with pytest.raises(SchemalessError, match=message) as e:
        parse_line_protocol(text, now_ms=NOW)
    assert e.value.line_number == 4
    assert str(e.value).startswith("line 4: ")


def test_bytes_input() -> None:
    assert parse_line_protocol("m,t=é f=1 1".encode(), now_ms=NOW)[0].tags["t"][1] == "é"
    with pytest.raises(SchemalessError, match="not UTF-8"):
        parse_line_protocol(b"m f=1 \xff")


def test_many_lines_many_tables() -> None:
    lines = [f"cpu,host=h{i % 3},dc=x usage={i}.5,n={i}i 1{i:06d}000000" for i in range(30)]
    rows = parse_line_protocol("\n".join(lines), now_ms=NOW)
    assert len(rows) == 30
    assert len({r.tbname for r in rows}) == 3
    assert [r.ts for r in rows[:3]] == [1000000, 1000001, 1000002]
    assert rows[4].columns == {"usage": (T("DOUBLE"), 4.5), "n": (T("BIGINT"), 4)}


# --- child table naming ---------------------------------------------------------------


def test_child_name_ignores_tag_order_and_sorts_case_insensitively() -> None:
    a = one("st,b=2,A=1,c=3 f=1 1")
    b = one("st,c=3,b=2,A=1 f=1 1")
    assert a.tbname == b.tbname == ref_name("st", [("A", b"1"), ("b", b"2"), ("c", b"3")])
    # case-insensitive order: A < b < c (a byte-wise sort would give A, b, c too; use Z vs a)
    c = one("st,Z=1,a=2 f=1 1")
    assert c.tbname == "t_" + hashlib.md5(b"st,a=2,Z=1").hexdigest()


def test_child_name_depends_on_stable_and_values() -> None:
    names = {one(line).tbname for line in ["st,t=1 f=1", "st,t=2 f=1", "su,t=1 f=1", "st,u=1 f=1", "st f=1"]}
    assert len(names) == 5
    assert one("st f=1").tbname == "t_" + hashlib.md5(b"st").hexdigest()
    assert all(n.startswith("t_") and len(n) == 34 for n in names)
    # deterministic across calls and processes (no salt)
    assert one("st,t=1 f=1").tbname == child_table_name("st", {"t": (T("NCHAR(2)"), "1")})


def test_child_table_tag_option() -> None:
    r = one("st,tname=cpu1,t1=4 c1=3 1626006833639000000", child_table_tag="tname")
    assert r.tbname == "cpu1"
    assert r.tags == {"t1": (T("NCHAR(2)"), "4")}  # the naming tag is dropped (TDengine 3.x)
    assert one("st,tname=cpu.1,t1=4 c1=3", child_table_tag="tname").tbname == "cpu_1"
    assert one("st,t1=4 c1=3", child_table_tag="tname").tbname == ref_name("st", [("t1", b"4")])
    long = one("st,tname=" + "x" * 300 + " c1=3", child_table_tag="tname")
    assert long.tbname == "x" * 192


def test_child_table_delimiter_option() -> None:
    assert one("st,t0=cpu1,t1=4 c1=3", child_table_delimiter="-").tbname == "cpu1-4"
    assert one("st,t0=a.b,t1=4 c1=3", child_table_delimiter="-").tbname == "a_b-4"
    too_long = one("st,t0=" + "x" * 200 + " c1=3", child_table_delimiter="-")
    assert too_long.tbname.startswith("t_")


# --- OpenTSDB JSON --------------------------------------------------------------------


def test_json_doc_example() -> None:
    text = json.dumps(
        [
            {
                "metric": "meters.current",
                "timestamp": 1648432611249,
                "value": 10.3,
                "tags": {"location": "California.SanFrancisco", "groupid": 2},
            },
            {"metric": "meters.voltage", "timestamp": 1648432611, "value": 219, "tags": {"groupid": 2}},
        ]
    )
    a, b = parse_opentsdb_json(text, now_ms=NOW)
    assert a.stable == "meters_current"
    assert a.columns == {"_value": (T("DOUBLE"), 10.3)}
    assert a.tags == {
        "location": (T("NCHAR(32)"), "California.SanFrancisco"),
        "groupid": (T("DOUBLE"), 2.0),
    }
    assert a.ts == 1648432611249 and a.line == 1
    assert a.tbname == ref_name(
        "meters_current", [("location", b"California.SanFrancisco"), ("groupid", struct.pack("<d", 2.0))]
    )
    assert b.stable == "meters_voltage" and b.ts == 1648432611000 and b.line == 2
    assert b.columns["_value"] == (T("DOUBLE"), 219.0)


@pytest.mark.parametrize(
    "value, type_text, expected",
    [
        (True, "BOOL", True),
        (1.5, "DOUBLE", 1.5),
        ("abc", "NCHAR(4)", "abc"),
        ({"value": True, "type": "bool"}, "BOOL", True),
        ({"value": 3, "type": "i8"}, "TINYINT", 3),
        ({"value": -3, "type": "TinyInt"}, "TINYINT", -3),
        ({"value": 300, "type": "smallint"}, "SMALLINT", 300),
        ({"value": 2.9, "type": "int"}, "INT", 2),
        ({"value": 1e30, "type": "bigint"}, "BIGINT", 2**63 - 1),
        ({"value": 1.5, "type": "f32"}, "FLOAT", 1.5),
        ({"value": 1, "type": "double"}, "DOUBLE", 1.0),
        ({"value": "ab", "type": "binary"}, "VARCHAR(4)", "ab"),
        ({"value": "ab", "type": "varchar"}, "VARCHAR(4)", "ab"),
        ({"value": "ab", "type": "nchar"}, "NCHAR(4)", "ab"),
    ],
)
def test_json_values(value: object, type_text: str, expected: object) -> None:
    point = {"metric": "m", "timestamp": 1648432611249, "value": value, "tags": {"t": "x"}}
    (r,) = parse_opentsdb_json(json.dumps(point))
    assert r.columns["_value"] == (T(type_text), expected)


@pytest.mark.parametrize(
    "ts, ms",
    [
        (1648432611, 1648432611000),
        (1648432611249, 1648432611249),
        (1648432611.9, 1648432611000),
        (0, NOW),
        ({"value": 1648432611, "type": "s"}, 1648432611000),
        ({"value": 1648432611249, "type": "ms"}, 1648432611249),
        ({"value": 1648432611249123, "type": "us"}, 1648432611249),
        ({"value": 1648432611249123456, "type": "ns"}, 1648432611249),
        ({"value": 0, "type": "ns"}, NOW),
    ],
)
def test_json_timestamps(ts: object, ms: int) -> None:
    point = {"metric": "m", "timestamp": ts, "value": 1, "tags": {"t": "x"}}
    assert parse_opentsdb_json(json.dumps(point), now_ms=NOW)[0].ts == ms


@pytest.mark.parametrize(
    "point, message",
    [
        ({"metric": "m", "timestamp": 1648432611249, "value": 1}, "exactly the keys"),
        ({"metric": "m", "timestamp": 1648432611249, "value": 1, "tags": {"t": 1}, "x": 1}, "exactly the keys"),
        ({"metric": 5, "timestamp": 1648432611249, "value": 1, "tags": {"t": 1}}, "metric must be a string"),
        ({"metric": "", "timestamp": 1648432611249, "value": 1, "tags": {"t": 1}},
         "metric: Invalid identifier name: empty"),
        ({"metric": "m", "timestamp": 1648432611249, "value": 1, "tags": {}}, "non-empty object"),
        ({"metric": "m", "timestamp": 1648432611249, "value": 1, "tags": [1]}, "non-empty object"),
        ({"metric": "m", "timestamp": 16484326112, "value": 1, "tags": {"t": 1}}, "11 digits"),
        ({"metric": "m", "timestamp": -1648432611249, "value": 1, "tags": {"t": 1}}, "negative"),
        ({"metric": "m", "timestamp": "1648432611249", "value": 1, "tags": {"t": 1}}, "must be a number"),
        ({"metric": "m", "timestamp": {"value": 1, "type": "d"}, "value": 1, "tags": {"t": 1}}, "use s, ms"),
        ({"metric": "m", "timestamp": 1648432611249, "value": None, "tags": {"t": 1}}, "unsupported value"),
        ({"metric": "m", "timestamp": 1648432611249, "value": [1], "tags": {"t": 1}}, "unsupported value"),
        ({"metric": "m", "timestamp": 1648432611249, "value": {"value": 300, "type": "i8"}, "tags": {"t": 1}},
         "out of range"),
        ({"metric": "m", "timestamp": 1648432611249, "value": {"value": 1, "type": "u8"}, "tags": {"t": 1}},
         "does not fit a number"),
        ({"metric": "m", "timestamp": 1648432611249, "value": {"value": "x", "type": "int"}, "tags": {"t": 1}},
         "does not fit a string"),
        ({"metric": "m", "timestamp": 1648432611249, "value": {"value": 1}, "tags": {"t": 1}}, "typed value"),
        ({"metric": "m", "timestamp": 1648432611249, "value": 1, "tags": {"t": None}}, "tag 't'"),
        ({"metric": "m", "timestamp": 1648432611249, "value": 1, "tags": {"_value": 1}}, "clashes"),
        ({"metric": "m", "timestamp": 1648432611249, "value": 1, "tags": {"k" * 65: 1}},
         r"tag name too long \(at most 64"),
    ],
)  # fmt: skip
def test_json_errors(point: dict, message: str) -> None:
    good = {"metric": "m", "timestamp": 1648432611249, "value": 1, "tags": {"t": "x"}}
    with pytest.raises(SchemalessError, match=message) as e:
        parse_opentsdb_json(json.dumps([good, point]), now_ms=NOW)
    assert e.value.line_number == 2


def test_json_forms() -> None:
    single = '{"Metric": "m", "TIMESTAMP": 1648432611249, "value": 1, "tags": {"t": "x"}}'
    (r,) = parse_opentsdb_json(single)
    assert r.stable == "m"
    assert parse_opentsdb_json(single.encode())[0] == r
    assert parse_opentsdb_json("[]") == []
    with pytest.raises(SchemalessError, match="invalid JSON"):
        parse_opentsdb_json("{nope")
    with pytest.raises(SchemalessError, match="JSON object"):
        parse_opentsdb_json("[1]")
    with pytest.raises(SchemalessError, match="number out of range"):
        parse_opentsdb_json('{"metric": "m", "timestamp": 1648432611249, "value": NaN, "tags": {"t": 1}}')


def test_json_typed_tags_hash_as_binary() -> None:
    p = {
        "metric": "m",
        "timestamp": 1648432611249,
        "value": 1,
        "tags": {"b": True, "i": {"value": 7, "type": "int"}},
    }
    (r,) = parse_opentsdb_json(json.dumps(p))
    assert r.tags == {"b": (T("BOOL"), True), "i": (T("INT"), 7)}
    assert r.tbname == ref_name("m", [("b", b"\x01"), ("i", struct.pack("<i", 7))])
    # True and 1 are different tag values (a cache keyed on == alone would mix them up)
    p2 = dict(p, tags={"b": 1, "i": {"value": 7, "type": "int"}})
    rows = parse_opentsdb_json(json.dumps([p, p2]))
    assert rows[0].tbname != rows[1].tbname and rows[1].tags["b"] == (T("DOUBLE"), 1.0)


def test_json_child_table_tag() -> None:
    p = {"metric": "m", "timestamp": 1648432611249, "value": 1, "tags": {"tname": "d.1", "g": 2}}
    (r,) = parse_opentsdb_json(json.dumps(p), child_table_tag="tname")
    assert r.tbname == "d_1" and list(r.tags) == ["g"]


# --- grouping and schema changes ------------------------------------------------------


def test_string_length_rule() -> None:
    assert [string_length(n) for n in (0, 1, 2, 6, 7, 8, 31, 32, 1023, 1024, 5000)] == [
        1, 2, 4, 8, 8, 16, 32, 64, 1024, 1024, 5000,
    ]  # fmt: skip


def test_group_rows_pads_and_widens() -> None:
    rows = parse_line_protocol(
        'st,t=a c1=1i32 1000000\nst,t=b c2="x" 2000000\nst,t=a c2="longer",c1=2i32 3000000\nsu f=1 4000000',
        now_ms=NOW,
    )
    g = group_rows(rows)
    assert set(g) == {"st", "su"}
    b = g["st"]
    assert len(b) == 3
    assert b.ts == [1, 2, 3] and next(iter(b.table_lines.values())) == 1
    assert b.columns == {"c1": [1, None, 2], "c2": [None, "x", "longer"]}
    assert b.column_types == {"c1": T("INT"), "c2": T("VARCHAR(8)")}
    assert b.column_max_len == {"c2": 6}
    assert set(b.tables) == {rows[0].tbname, rows[1].tbname}
    assert g["su"].columns == {"f": [1.0]}


def test_group_rows_type_conflict_names_lines() -> None:
    text = (
        'st,t1=3,t2=4,t3=t3 c1=3i64,c3="passit",c2=false,c4=4 1626006833639000000\n'
        'st,t1=3,t2=4,t3=t3 c1=3i64,c3="passit",c2=false,c4=4i 1626006833640000000'
    )
    with pytest.raises(SchemalessError, match=r"field 'c4' is BIGINT here but DOUBLE on line 1") as e:
        group_rows(parse_line_protocol(text))
    assert e.value.line_number == 2
    with pytest.raises(SchemalessError, match="NCHAR"):
        group_rows(parse_line_protocol('st s="a" 1\nst s=L"b" 2'))
    with pytest.raises(SchemalessError, match="is a tag on line 1"):
        group_rows(parse_line_protocol("st,k=a f=1 1\nst k=1 2"))
    with pytest.raises(SchemalessError, match="is a field on line 1"):
        group_rows(parse_line_protocol("st k=1 1\nst,k=a f=1 2"))


def test_first_row_tags_win_for_a_named_table() -> None:
    rows = parse_line_protocol("st,tname=d1,g=1 f=1 1\nst,tname=d1,g=2 f=2 2", child_table_tag="tname")
    b = group_rows(rows)["st"]
    assert b.tables == {"d1": {"g": (T("NCHAR(2)"), "1")}}


def test_plan_new_stable() -> None:
    rows = parse_line_protocol('st,t1=3,t2=4,t3=t3 c1=3i64,c3="passit",c2=false,c4=4i64 1626006833639000000')
    cols, tags = schema_delta(None, rows)
    # TDengine: create stable st (_ts timestamp, c1 bigint, c3 binary(..), c2 bool, c4 bigint)
    #           tags (t1 nchar(..), t2 nchar(..), t3 nchar(..)); lengths by its power-of-two rule
    assert cols == [
        Column("_ts", T("TIMESTAMP")),
        Column("c1", T("BIGINT")),
        Column("c3", T("VARCHAR(8)")),
        Column("c2", T("BOOL")),
        Column("c4", T("BIGINT")),
    ]
    assert tags == [Column("t1", T("NCHAR(2)")), Column("t2", T("NCHAR(2)")), Column("t3", T("NCHAR(4)"))]


def test_plan_tagless_stable_gets_tag_null() -> None:
    cols, tags = schema_delta(None, parse_line_protocol("st f=1 1"))
    assert tags == [Column(TAG_NULL, T("NCHAR(1)"))]
    with pytest.raises(SchemalessError, match="timestamp column"):
        schema_delta(None, parse_line_protocol("st _ts=1 1"))


def existing() -> StableSchema:
    return StableSchema(
        "st",
        [Column("_ts", T("TIMESTAMP")), Column("c1", T("BIGINT")), Column("c3", T("VARCHAR(4)"))],
        [Column("t1", T("NCHAR(2)")), Column("g", T("INT"))],
    )


def test_plan_against_existing() -> None:
    rows = parse_line_protocol('st,t1=333,t9=x c1=1i64,c3="passit",c6="n" 1', now_ms=NOW)
    plan = plan_schema(existing(), rows)
    assert plan.new_columns == [Column("c6", T("VARCHAR(2)"))]
    assert plan.new_tags == [Column("t9", T("NCHAR(2)"))]
    assert plan.widen_columns == [Column("c3", T("VARCHAR(8)"))]
    assert plan.widen_tags == [Column("t1", T("NCHAR(4)"))]
    assert not plan.empty
    assert plan_schema(existing(), parse_line_protocol('st,t1=3 c1=1i64,c3="ab" 1')).empty


def test_plan_conflicts_against_existing() -> None:
    with pytest.raises(SchemalessError, match=r"field 'c1' is DOUBLE but column c1 of st is BIGINT") as e:
        plan_schema(existing(), parse_line_protocol("# x\nst c1=1 1"))
    assert e.value.line_number == 2
    with pytest.raises(SchemalessError, match="is a tag of st"):
        plan_schema(existing(), parse_line_protocol("st g=1 1"))
    with pytest.raises(SchemalessError, match="is a column of st"):
        plan_schema(existing(), parse_line_protocol("st,c1=x f=1 1"))
    with pytest.raises(SchemalessError, match="timestamp column"):
        plan_schema(existing(), parse_line_protocol("st _ts=1i64 1"))
    with pytest.raises(ValueError, match="several supertables"):
        plan_schema(None, parse_line_protocol("a f=1 1\nb f=1 1"))


def test_plan_tag_of_other_type_converts() -> None:
    """Deviation: a line-protocol (NCHAR) tag value lands in an INT tag when it converts."""
    assert plan_schema(existing(), parse_line_protocol("st,g=42 c1=1i64 1")).empty
    with pytest.raises(SchemalessError, match="does not fit tag g INT"):
        plan_schema(existing(), parse_line_protocol("st,g=x c1=1i64 1"))
    vc = StableSchema("st", existing().columns, [Column("loc", T("VARCHAR(4)"))])
    plan = plan_schema(vc, parse_line_protocol("st,loc=héllo c1=1i64 1"))
    assert plan.widen_tags == [Column("loc", T("VARCHAR(8)"))]  # 6 bytes, VARCHAR kept
    rows = parse_line_protocol("st,t1=ab,g=42 c1=1i64 1")
    assert child_table_tags(existing(), rows[0].tags) == {"t1": "ab", "g": 42}
    assert child_table_tags(existing(), {}) == {"t1": None, "g": None}


def test_batch_to_table_round_trip() -> None:
    text = "\n".join(
        [
            'meters,location=LA,groupid=2 current=10.5f32,voltage=220i32,note="ok" 1648432611249000000',
            "meters,location=SF,groupid=3 current=11.5f32,voltage=221i32 1648432611250000000",
        ]
    )
    batch = group_rows(parse_line_protocol(text))["meters"]
    cols, tags = schema_delta(None, batch)
    schema = StableSchema("meters", cols, tags)
    table = batch.to_table(schema)
    assert table.column_names == ["tbname", "_ts", "current", "voltage", "note"]
    back = decode_rows(encode_rows(table))
    assert back.to_pylist() == [
        {"tbname": batch.tbnames[0], "_ts": 1648432611249, "current": 10.5, "voltage": 220, "note": "ok"},
        {"tbname": batch.tbnames[1], "_ts": 1648432611250, "current": 11.5, "voltage": 221, "note": None},
    ]
    # an SQL-made supertable names its timestamp column differently
    sql = StableSchema("meters", [Column("ts", T("TIMESTAMP"))] + cols[1:], tags)
    assert batch.to_table(sql).column("ts").to_pylist() == [1648432611249, 1648432611250]


# --- fuzz -----------------------------------------------------------------------------

ALPHABET = st.sampled_from(list(',= \\"#\n\r\tLlTtfFiIuU0123456789.e-+_xyzé') + ["i32", "u8", "f32", "true"])


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(st.text(max_size=200), st.lists(ALPHABET, max_size=60).map("".join)))
def test_fuzz_line_protocol_only_raises_schemaless_error(text: str) -> None:
    for precision in ("ns", "s"):
        try:
            rows = parse_line_protocol(text, precision=precision, now_ms=NOW)
        except SchemalessError as e:
            assert e.line_number >= 0
            continue
        try:
            groups = group_rows(rows)
            for b in groups.values():
                plan = plan_schema(None, b)
                b.to_table(StableSchema(b.stable, plan.new_columns, plan.new_tags))
        except SchemalessError:
            pass


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=10),
    lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=8), c, max_size=4),
    max_leaves=8,
)
POINT = st.fixed_dictionaries(
    {
        "metric": st.one_of(st.text(max_size=10), JSON),
        "timestamp": st.one_of(st.integers(), st.floats(), JSON),
        "value": JSON,
        "tags": st.one_of(st.dictionaries(st.text(max_size=8), JSON, max_size=3), JSON),
    }
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(JSON, POINT, st.lists(POINT, max_size=4)))
def test_fuzz_json_only_raises_schemaless_error(doc: object) -> None:
    try:
        text = json.dumps(doc)
    except ValueError:
        return
    try:
        rows = parse_opentsdb_json(text, now_ms=NOW)
    except SchemalessError:
        return
    try:
        for b in group_rows(rows).values():
            plan_schema(None, b)
    except SchemalessError:
        pass


TEXT = st.text(
    st.characters(exclude_characters="\n\r\t", exclude_categories=("Cs",)), min_size=1, max_size=12
)
# names follow tsdb.names' rule (printable, no backquote); values may hold any character
NAME = TEXT.filter(lambda s: s.isprintable() and "`" not in s)
KEY = NAME.filter(lambda s: "." not in s)  # a column or tag name holds no '.' (the measurement's become '_')


def esc_name(s: str) -> str:
    return s.replace("\\", "\\\\").replace(",", "\\,").replace("=", "\\=").replace(" ", "\\ ")


def esc_measurement(s: str) -> str:
    return s.replace("\\", "\\\\").replace(",", "\\,").replace(" ", "\\ ")


FIELD = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False).map(lambda v: (repr(v), "DOUBLE", v)),
    st.integers(-(2**31), 2**31 - 1).map(lambda v: (f"{v}i32", "INT", v)),
    st.integers(0, 2**64 - 1).map(lambda v: (f"{v}u64", "BIGINT UNSIGNED", v)),
    st.booleans().map(lambda v: ("true" if v else "F", "BOOL", v)),
    TEXT.map(lambda s: ('"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"', "VARCHAR", s)),
    TEXT.map(lambda s: ('L"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"', "NCHAR", s)),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    NAME.filter(lambda s: not s.startswith(("#", " "))),
    st.dictionaries(KEY, TEXT, max_size=4),
    st.dictionaries(KEY, FIELD, min_size=1, max_size=4),
    st.integers(1, 2**62),
)
def test_escaped_lines_round_trip(measurement: str, tags: dict, fields: dict, ts: int) -> None:
    fields = {k: v for k, v in fields.items() if k not in tags}
    if not fields or measurement.strip(" ") != measurement:
        return
    head = esc_measurement(measurement) + "".join(f",{esc_name(k)}={esc_name(v)}" for k, v in tags.items())
    body = ",".join(f"{esc_name(k)}={raw}" for k, (raw, _, _) in fields.items())
    r = one(f"{head} {body} {ts}")
    assert r.stable == measurement.replace(".", "_")
    assert {k: v for k, (_, v) in r.tags.items()} == tags
    assert {k: (t.name, v) for k, (t, v) in r.columns.items()} == {
        k: (tname, value) for k, (_, tname, value) in fields.items()
    }
    assert r.ts == ts // 1_000_000


# --- throughput sanity ------------------------------------------------------------------


def test_parse_throughput_sanity() -> None:
    """Bound ~50x below an idle machine (~300k+ lines/s) so a loaded box does not flake; -s prints."""
    import time
    import timeit

    n = 5000
    numeric = "\n".join(
        f"meters,location=L{i % 50},groupid={i % 5} current={i * 0.37:.3f},voltage={200 + i % 40}i32,"
        f"phase=0.{i % 97} {1648432611249500000 + i}"
        for i in range(n)
    )
    strings = "\n".join(
        f'meters,location=L{i % 50} current={i}.5,status="ok {i % 7}",on=t {i + 1}' for i in range(n)
    )
    points = json.dumps(
        [
            {"metric": "m", "timestamp": 1648432611249 + i, "value": i + 0.5, "tags": {"l": f"L{i % 50}"}}
            for i in range(n)
        ]
    )
    rates = {}
    for name, fn in [
        ("line protocol, numeric", lambda: parse_line_protocol(numeric)),
        ("line protocol, strings", lambda: parse_line_protocol(strings)),
        ("OpenTSDB JSON", lambda: parse_opentsdb_json(points)),
    ]:
        best = min(timeit.Timer(fn, timer=time.process_time).repeat(number=1, repeat=3))
        rates[name] = n / max(best, 1e-9)
    print({k: f"{v:,.0f}/s" for k, v in rates.items()})
    assert all(v > 5_000 for v in rates.values()), rates
