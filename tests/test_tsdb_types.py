"""TDengine types: names, Arrow mapping, and the literal checks INSERT/TAGS values go through."""

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tmqgate.broker.tsdb.types import (
    INTEGER_RANGES,
    Column,
    NowValue,
    StableSchema,
    TypeError_,
    check_value,
    duration_ms,
    parse_timestamp,
    parse_type,
)


@pytest.mark.parametrize(
    ("text", "name", "arrow", "length"),
    [
        ("TIMESTAMP", "TIMESTAMP", pa.int64(), None),
        ("bool", "BOOL", pa.bool_(), None),
        ("BOOLEAN", "BOOL", pa.bool_(), None),
        ("tinyint", "TINYINT", pa.int8(), None),
        ("SMALLINT", "SMALLINT", pa.int16(), None),
        ("int", "INT", pa.int32(), None),
        ("INTEGER", "INT", pa.int32(), None),
        ("BIGINT", "BIGINT", pa.int64(), None),
        ("tinyint unsigned", "TINYINT UNSIGNED", pa.uint8(), None),
        ("SMALLINT  UNSIGNED", "SMALLINT UNSIGNED", pa.uint16(), None),
        ("INT UNSIGNED", "INT UNSIGNED", pa.uint32(), None),
        ("BIGINT UNSIGNED", "BIGINT UNSIGNED", pa.uint64(), None),
        ("FLOAT", "FLOAT", pa.float32(), None),
        ("double", "DOUBLE", pa.float64(), None),
        ("VARCHAR(64)", "VARCHAR", pa.string(), 64),
        ("binary( 8 )", "VARCHAR", pa.string(), 8),
        ("NCHAR(10)", "NCHAR", pa.string(), 10),
    ],
)
def test_parse_type(text, name, arrow, length):
    t = parse_type(text)
    assert (t.name, t.arrow, t.length) == (name, arrow, length)


def test_type_str_and_predicates():
    assert str(parse_type("varchar(3)")) == "VARCHAR(3)"
    assert str(parse_type("int unsigned")) == "INT UNSIGNED"
    assert parse_type("INT UNSIGNED").is_unsigned and parse_type("INT UNSIGNED").is_integer
    assert parse_type("float").is_float and not parse_type("float").is_integer
    assert parse_type("nchar(2)").is_string and parse_type("timestamp").is_timestamp


@pytest.mark.parametrize("text",
                         ["VARCHAR", "NCHAR", "INT(4)", "VARCHAR(0)", "VARCHAR(65518)", "NCHAR(16380)",
                          "JSON", "x y z", ""])
def test_parse_type_refused(text):
    with pytest.raises(TypeError_):
        parse_type(text)


def test_schema_find_case_insensitive_and_arrow_schema():
    s = StableSchema(
        "meters",
        [Column("ts", parse_type("TIMESTAMP")), Column("Voltage", parse_type("INT"))],
        [Column("location", parse_type("VARCHAR(8)"))],
    )
    assert s.find("voltage").name == "Voltage"
    assert s.find("LOCATION").name == "location"
    assert s.find("nope") is None
    assert s.is_tag("location") and not s.is_tag("voltage")
    assert s.arrow_schema().names == ["tbname", "ts", "Voltage", "location"]
    assert s.arrow_schema(with_tags=False).names == ["tbname", "ts", "Voltage"]


@pytest.mark.parametrize("name", sorted(INTEGER_RANGES))
def test_integer_ranges(name):
    t = parse_type(name)
    lo, hi = INTEGER_RANGES[name]
    assert check_value(t, lo) == lo
    assert check_value(t, hi) == hi
    assert check_value(t, str(hi)) == hi
    with pytest.raises(TypeError_, match="out of range"):
        check_value(t, hi + 1)
    with pytest.raises(TypeError_, match="out of range"):
        check_value(t, lo - 1)
    # the range matches the Arrow type's
    pa.array([lo, hi], t.arrow)


def test_integer_literals():
    t = parse_type("INT")
    assert check_value(t, 3.0) == 3
    assert check_value(t, True) == 1
    assert check_value(t, None) is None
    with pytest.raises(TypeError_):
        check_value(t, 1.5)
    with pytest.raises(TypeError_):
        check_value(t, "abc")


def test_float_literals():
    assert check_value(parse_type("FLOAT"), 1) == 1.0
    assert check_value(parse_type("DOUBLE"), "2.5") == 2.5
    assert check_value(parse_type("DOUBLE"), 1e300) == 1e300
    with pytest.raises(TypeError_, match="out of range"):
        check_value(parse_type("FLOAT"), 1e39)
    with pytest.raises(TypeError_):
        check_value(parse_type("DOUBLE"), float("inf"))
    with pytest.raises(TypeError_):
        check_value(parse_type("DOUBLE"), "x")


def test_bool_literals():
    b = parse_type("BOOL")
    assert check_value(b, True) is True
    assert check_value(b, "false") is False
    assert check_value(b, "TRUE") is True
    assert check_value(b, 0) is False
    assert check_value(b, 2.5) is True
    with pytest.raises(TypeError_):
        check_value(b, "maybe")


def test_string_lengths_bytes_vs_chars():
    v = parse_type("VARCHAR(4)")
    n = parse_type("NCHAR(4)")
    assert check_value(v, "abcd") == "abcd"
    assert check_value(n, "日本語だ") == "日本語だ"  # 4 characters, 12 bytes
    with pytest.raises(TypeError_, match="bytes"):
        check_value(v, "日本")  # 6 bytes
    with pytest.raises(TypeError_, match="characters"):
        check_value(n, "abcde")
    assert check_value(v, 12) == "12"
    assert check_value(v, True) == "true"


def test_timestamp_literals():
    t = parse_type("TIMESTAMP")
    assert check_value(t, 1538548685000) == 1538548685000
    assert check_value(t, "1538548685000") == 1538548685000
    assert check_value(t, "2018-10-03 14:38:05") == 1538577485000
    assert check_value(t, "2018-10-03 14:38:05.123") == 1538577485123
    assert check_value(t, "2018-10-03T14:38:05.1239") == 1538577485123
    assert check_value(t, "2018-10-03 14:38:05+08:00") == 1538548685000
    assert check_value(t, "2018-10-03 14:38:05Z") == 1538577485000
    assert check_value(t, "2018-10-03") == 1538524800000
    assert check_value(t, "1969-12-31 23:59:59.999") == -1
    assert check_value(t, NowValue(), now_ms=1000) == 1000
    assert check_value(t, NowValue(-500), now_ms=1000) == 500
    assert check_value(t, NowValue(5, day=True), now_ms=86_400_000 + 77) == 86_400_005
    assert check_value(t, "now", now_ms=7) == 7
    with pytest.raises(TypeError_):
        check_value(t, "2018-13-03 00:00:00")
    with pytest.raises(TypeError_):
        check_value(t, "yesterday")
    with pytest.raises(TypeError_):
        check_value(t, True)
    with pytest.raises(TypeError_):
        check_value(parse_type("VARCHAR(8)"), NowValue())


def test_durations():
    assert duration_ms("10a") == 10
    assert duration_ms("5s") == 5000
    assert duration_ms("3m") == 180_000
    assert duration_ms("2h") == 7_200_000
    assert duration_ms("1d") == 86_400_000
    assert duration_ms("1w") == 604_800_000
    for bad in ("1n", "1y", "1u", "1b", "h", "1.5h"):
        with pytest.raises(TypeError_):
            duration_ms(bad)


@given(st.integers(min_value=-(10**12), max_value=10**13))
def test_timestamp_string_roundtrip(ms):
    import datetime as dt

    d = dt.datetime(1970, 1, 1) + dt.timedelta(milliseconds=ms)
    assert parse_timestamp(d.strftime("%Y-%m-%d %H:%M:%S.") + f"{d.microsecond // 1000:03d}") == ms
