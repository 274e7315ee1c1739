"""Vectorised expressions: evaluation against an independent per-row Python model, names,
refused constructs and type errors."""

import math
import re

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tmqgate.broker.sql.ast import SqlError
from tmqgate.broker.sql.expr import check_topic_query, compile_filter, compile_projection
from tmqgate.broker.sql.parser import parse

SCHEMA = parse(
    "CREATE STABLE meters (ts TIMESTAMP, current FLOAT, voltage INT, phase DOUBLE, note VARCHAR(16)) "
    "TAGS (location VARCHAR(64), groupId INT)"
).schema()

ROWS = [
    {"tbname": "d1", "ts": 1538548685000, "current": 10.5, "voltage": 219, "phase": 0.31, "note": "ok",
     "location": "California.SF", "groupid": 2},
    {"tbname": "d2", "ts": 1538548686000, "current": None, "voltage": 218, "phase": 0.33, "note": None,
     "location": "California.LA", "groupid": 3},
    {"tbname": "d3", "ts": 1538548687000, "current": 12.25, "voltage": None, "phase": None, "note": "日本",
     "location": None, "groupid": 2},
]  # fmt: skip


def table(rows=ROWS):
    return pa.Table.from_pylist(rows, schema=SCHEMA.arrow_schema())


def project(sql, rows=ROWS, now_ms=0):
    s = parse(sql)
    return compile_projection(s.select, SCHEMA).apply(table(rows), now_ms=now_ms)


def where(cond, rows=ROWS, now_ms=0):
    s = parse(f"SELECT ts FROM meters WHERE {cond}")
    return compile_projection(s.select, SCHEMA).where.mask(table(rows), now_ms=now_ms).to_pylist()


# --- examples -----------------------------------------------------------------------------


def test_select_star_is_columns_then_tags():
    out = project("SELECT * FROM meters")
    assert out.column_names == ["ts", "current", "voltage", "phase", "note", "location", "groupid"]
    assert out.schema.field("current").type == pa.float32()
    assert out.column("voltage").to_pylist() == [219, 218, None]


def test_output_names_as_tdengine():
    p = compile_projection(
        parse("SELECT ts, VOLTAGE, voltage*2, current AS c, tbname, `groupId`, ABS( phase ) FROM meters").select,
        SCHEMA,
    )
    assert p.names == ["ts", "voltage", "voltage*2", "c", "tbname", "groupid", "ABS( phase )"]
    assert [str(t) for t in p.types] == ["TIMESTAMP", "INT", "DOUBLE", "FLOAT", "VARCHAR(192)", "INT", "DOUBLE"]
    assert p.columns == ["ts", "voltage", "current", "tbname", "groupid", "phase"]


def test_long_expression_name_is_cut_to_64():
    sql = "SELECT " + " + ".join(["voltage"] * 12) + " FROM meters"
    assert len(compile_projection(parse(sql).select, SCHEMA).names[0]) == 64


def test_arithmetic_is_double_and_division_by_zero_is_null():
    out = project("SELECT voltage / 2, voltage % 0, voltage / 0, -voltage, voltage + 1 FROM meters").to_pylist()
    assert [list(r.values()) for r in out] == [
        [109.5, None, None, -219.0, 220.0],
        [109.0, None, None, -218.0, 219.0],
        [None, None, None, None, None],
    ]
    assert project("SELECT -7 % 3, 7.5 % 2 FROM meters").to_pylist()[0] == {"-7 % 3": -1.0, "7.5 % 2": 1.5}


def test_timestamps():
    assert where("ts > '2018-10-03 06:38:05'") == [False, True, True]
    assert where("ts >= 1538548686000") == [False, True, True]
    assert where("ts BETWEEN '2018-10-03 06:38:05.500' AND '2018-10-03T06:38:06Z'") == [False, True, False]
    assert where("ts > now - 1s", now_ms=1538548687000) == [False, False, True]
    assert where("ts IN ('2018-10-03 06:38:06', 1538548687000)") == [False, True, True]
    out = project("SELECT ts + 1s, ts - 10a, cast(ts as varchar(23)) FROM meters").to_pylist()[0]
    assert list(out.values()) == [1538548686000, 1538548684990, "2018-10-03 06:38:05.000"]


def test_null_is_false_in_filters():
    assert where("voltage > 0") == [True, True, False]
    assert where("NOT (voltage > 0)") == [False, False, False]
    assert where("voltage > 0 OR location LIKE 'C%'") == [True, True, False]
    assert where("voltage IS NULL") == [False, False, True]
    assert where("location IS NOT NULL AND note IS NULL") == [False, True, False]
    assert where("NULL") == [False, False, False]
    assert where("voltage = NULL") == [False, False, False]


def test_in_not_in_with_nulls():
    assert where("groupId IN (2, 5)") == [True, False, True]
    assert where("groupId NOT IN (2, 5)") == [False, True, False]
    assert where("groupId IN (3, NULL)") == [False, True, False]
    assert where("groupId NOT IN (3, NULL)") == [False, False, False]
    assert where("voltage IN (219.0, 1.5)") == [True, False, False]
    assert where("tbname IN ('d1', 'd3')") == [True, False, True]


def test_like_match():
    assert where("location LIKE 'California._A'") == [False, True, False]
    assert where("location NOT LIKE '%SF'") == [False, True, False]
    assert where("location MATCH 'S.$'") == [True, False, False]
    assert where("location NMATCH 'S.$'") == [False, True, False]
    assert where("tbname MATCH '^d[12]'") == [True, True, False]
    assert where("note LIKE '日_'") == [False, False, True]


def test_case_cast_and_functions():
    out = project(
        "SELECT CASE WHEN voltage > 218 THEN 'high' WHEN voltage IS NULL THEN 'none' ELSE 'low' END AS k, "
        "CASE groupId WHEN 2 THEN 1.5 ELSE 0 END AS g, cast(voltage AS BIGINT) AS b, cast('12.5' AS DOUBLE) AS d, "
        "cast(note AS INT) AS n, cast(voltage AS VARCHAR(2)) AS v, cast(voltage AS BOOL) AS t "
        "FROM meters"
    ).to_pylist()
    assert out == [
        {"k": "high", "g": 1.5, "b": 219, "d": 12.5, "n": None, "v": "21", "t": True},
        {"k": "low", "g": 0.0, "b": 218, "d": 12.5, "n": None, "v": "21", "t": True},
        {"k": "none", "g": 1.5, "b": None, "d": 12.5, "n": None, "v": None, "t": None},
    ]
    r = project(
        "SELECT abs(-3), ceil(current), floor(current), round(2.5), round(phase, 1), sqrt(16), pow(2, 10), log(8, 2), "
        "exp(0), sin(0), cos(0), tan(0), lower(location), upper(note), length(note), char_length(note), "
        "concat(tbname, '-', location), concat_ws('/', tbname, note), substr(location, 1, 3), substr(location, -2), "
        "ltrim('  x '), rtrim(' x  '), trim('  x  '), trim(leading 'x' from 'xxyx') FROM meters"
    ).to_pylist()
    assert list(r[0].values()) == [
        3, 11.0, 10.0, 3.0, 0.3, 4.0, 1024.0, 3.0, 1.0, 0.0, 1.0, 0.0, "california.sf", "OK", 2, 2,
        "d1-California.SF", "d1/ok", "Cal", "SF", "x ", " x", "x", "yx",
    ]  # fmt: skip
    assert list(r[2].values())[14:18] == [6, 2, None, "d3/日本"]


def test_stable_topic_filter_tags_only():
    t = parse("CREATE TOPIC t AS STABLE meters WHERE groupId = 2 AND tbname != 'd3'")
    f = compile_filter(t.where, SCHEMA, tags_only=True)
    assert f.mask(table()).to_pylist() == [True, False, False]
    assert f.columns == ["groupid", "tbname"]
    t = parse("CREATE TOPIC t AS STABLE meters WHERE groupId = 2 AND voltage > 1")
    with pytest.raises(SqlError, match="only tags and tbname, not column 'voltage'") as ei:
        compile_filter(t.where, SCHEMA, tags_only=True)
    assert ei.value.position == t.statement.index("voltage")
    assert compile_filter(parse("CREATE TOPIC t AS STABLE meters WHERE 2 > 1").where,
                          SCHEMA).mask(table()).to_pylist() == [True] * 3


def test_missing_column_reads_as_null():
    rows = [{k: v for k, v in r.items() if k != "note"} for r in ROWS]
    tbl = pa.Table.from_pylist(rows)
    p = compile_projection(parse("SELECT note FROM meters WHERE note IS NULL").select, SCHEMA)
    assert p.apply(tbl).column("note").to_pylist() == [None, None, None]


# --- errors -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sql", "fragment", "at"),
    [
        ("SELECT location > 5 FROM meters", "cannot compare location (VARCHAR(64)) with 5", "location"),
        ("SELECT ts FROM meters WHERE 5 < location", "cannot compare location (VARCHAR(64)) with 5", "5"),
        ("SELECT voltage + 'abc' FROM meters", "invalid operand 'abc' (VARCHAR(3)) for '+'", "'abc'"),
        ("SELECT nosuch FROM meters", "unknown column or tag 'nosuch'", "nosuch"),
        ("SELECT foo(voltage) FROM meters", "unknown function FOO", "foo"),
        ("SELECT lower(voltage) FROM meters", "function LOWER needs a string argument, got voltage (INT)", "voltage"),
        ("SELECT sqrt(note) FROM meters", "function SQRT needs a numeric argument", "note"),
        ("SELECT ts FROM meters WHERE location", "expected a condition, got location", "location"),
        ("SELECT ts FROM meters WHERE voltage LIKE 'a%'", "LIKE needs a string operand", "voltage"),
        ("SELECT ts FROM meters WHERE note LIKE location", "string constant pattern", "location"),
        ("SELECT ts FROM meters WHERE note MATCH '('", "invalid regular expression", "'('"),
        ("SELECT ts FROM meters WHERE ts > 'yesterday'", "invalid timestamp 'yesterday'", "ts >"),
        ("SELECT ts FROM meters WHERE voltage IN (1, 'a')", "type mismatch", "'a'"),
        ("SELECT ts FROM meters WHERE voltage IN (voltage)", "IN needs constant values", "voltage)"),
        ("SELECT ts + ts FROM meters", "cannot add two timestamps", "ts + ts"),
        ("SELECT ts + 1.5 FROM meters", "shifted by an integer", "ts + 1.5"),
        ("SELECT CASE WHEN voltage > 1 THEN 'a' ELSE 1 END FROM meters", "incompatible types", "CASE"),
        ("SELECT cast(voltage AS VARCHAR) FROM meters", "needs a length", "cast"),
        ("SELECT concat(note) FROM meters", "CONCAT takes 2 to 8 arguments", "concat"),
        ("SELECT substr(note, voltage) FROM meters", "must be an integer constant", "voltage)"),
        ("SELECT other.voltage FROM meters", "unknown table 'other'", "other"),
        ("SELECT avg(voltage) FROM meters", "not allowed in a topic: aggregate function AVG", "avg"),
        ("SELECT spread(voltage) FROM meters", "not allowed in a topic: aggregate function SPREAD", "spread"),
        ("SELECT _wstart FROM meters", "window pseudo-column", "_wstart"),
    ],
)
def test_compile_errors_name_the_culprit(sql, fragment, at):
    with pytest.raises(SqlError) as ei:
        compile_projection(parse(sql).select, SCHEMA)
    assert fragment in ei.value.message
    assert ei.value.position == sql.index(at), ei.value.message


@pytest.mark.parametrize(
    ("sql", "what", "at"),
    [
        ("SELECT count(*) FROM meters", "aggregate function COUNT", "count"),
        ("SELECT ts, max(voltage) FROM meters", "aggregate function MAX", "max"),
        ("SELECT last(voltage) FROM meters", "aggregate function LAST", "last"),
        ("SELECT twa(voltage) FROM meters", "aggregate function TWA", "twa"),
        ("SELECT ts FROM meters GROUP BY location", "GROUP BY", "location"),
        ("SELECT ts FROM meters ORDER BY ts", "ORDER BY", "ts DESC"[:0] + "ts"[:0] + "BY ts"[3:]),
        ("SELECT ts FROM meters LIMIT 10", "LIMIT", "10"),
        ("SELECT DISTINCT location FROM meters", "DISTINCT", None),
        ("SELECT ts FROM meters WHERE voltage IN (SELECT 1)", "subquery", "SELECT 1"),
        ("SELECT ts, row_number() OVER (ORDER BY ts) FROM meters", "window function", "row_number"),
    ],
)
def test_check_topic_query_refuses(sql, what, at):
    with pytest.raises(SqlError) as ei:
        check_topic_query(parse(sql).select)
    assert f"not allowed in a topic: {what}" in ei.value.message
    if at is not None:
        assert ei.value.position == sql.rindex(at) if what == "ORDER BY" else ei.value.position == sql.index(at)


def test_check_topic_query_accepts_projection_and_filter():
    check_topic_query(
        parse("SELECT ts, abs(voltage), tbname FROM meters WHERE location LIKE 'C%' AND voltage > 1").select)
    check_topic_query(parse("CREATE TOPIC t AS SELECT * FROM power.meters").select)


# --- property: vectorised == per-row Python ----------------------------------------------

PSCHEMA = parse("CREATE STABLE st (ts TIMESTAMP, i INT, f DOUBLE, s VARCHAR(8)) TAGS (t1 INT, t2 VARCHAR(8))").schema()
_STRS = st.one_of(st.none(), st.text(alphabet="ab_%c", max_size=4))
_ROW = st.fixed_dictionaries(
    {
        "tbname": st.sampled_from(["d1", "d2", "x9"]),
        "ts": st.integers(min_value=0, max_value=10**12),
        "i": st.one_of(st.none(), st.integers(min_value=-1000, max_value=1000)),
        "f": st.one_of(st.none(), st.integers(min_value=-400, max_value=400).map(lambda k: k / 4)),
        "s": _STRS,
        "t1": st.one_of(st.none(), st.integers(min_value=-5, max_value=5)),
        "t2": _STRS,
    }
)


def _nn(fn):
    """SQL null propagation for a numeric op."""
    return lambda *xs: None if any(x is None for x in xs) else fn(*xs)


def _div(x, y):
    return None if y == 0 else float(x) / float(y)


def _mod(x, y):
    if y == 0:
        return None
    x, y = float(x), float(y)
    return x - y * float(math.trunc(x / y))


_ARITH = {
    "+": _nn(lambda x, y: float(x) + float(y)),
    "-": _nn(lambda x, y: float(x) - float(y)),
    "*": _nn(lambda x, y: float(x) * float(y)),
    "/": _nn(_div),
    "%": _nn(_mod),
}
_CMP = {
    "=": lambda x, y: x == y,
    "!=": lambda x, y: x != y,
    "<>": lambda x, y: x != y,
    "<": lambda x, y: x < y,
    "<=": lambda x, y: x <= y,
    ">": lambda x, y: x > y,
    ">=": lambda x, y: x >= y,
}


def _col(name):
    return st.just((name, lambda r: r[name]))


_NUM_LEAF = st.one_of(
    _col("i"),
    _col("f"),
    _col("t1"),
    st.integers(min_value=0, max_value=9).map(lambda k: (str(k), lambda r, k=k: k)),
    st.sampled_from([0.5, 2.25]).map(lambda v: (repr(v), lambda r, v=v: v)),
)


def _num_extend(children):
    binop = st.tuples(children, st.sampled_from(sorted(_ARITH)), children).map(
        lambda t: (f"({t[0][0]} {t[1]} {t[2][0]})", lambda r, t=t: _ARITH[t[1]](t[0][1](r), t[2][1](r)))
    )
    unary = st.tuples(st.sampled_from(["ABS", "CEIL", "FLOOR", "-"]), children).map(
        lambda t: (
            f"(-{t[1][0]})" if t[0] == "-" else f"{t[0]}({t[1][0]})",
            lambda r, t=t: _nn({"ABS": abs, "CEIL": math.ceil, "FLOOR": math.floor,
                                "-": lambda x: -x}[t[0]])(t[1][1](r)),
        )
    )
    return st.one_of(binop, unary)


NUM = st.recursive(_NUM_LEAF, _num_extend, max_leaves=5)

_STR_LEAF = st.one_of(
    _col("s"),
    _col("t2"),
    _col("tbname"),
    st.text(alphabet="abc", max_size=3).map(lambda v: (f"'{v}'", lambda r, v=v: v)),
)


def _substr(x, pos, n):
    if pos > 0:
        return x[pos - 1 : pos - 1 + n]
    end = pos + n
    return x[pos : end if end < 0 else None]


def _str_extend(children):
    return st.one_of(
        st.tuples(st.sampled_from(["LOWER", "UPPER"]), children).map(
            lambda t: (f"{t[0]}({t[1][0]})",
                       lambda r, t=t: _nn(str.lower if t[0] == "LOWER" else str.upper)(t[1][1](r)))
        ),
        st.tuples(children, children).map(
            lambda t: (f"CONCAT({t[0][0]}, {t[1][0]})", lambda r, t=t: _nn(lambda a, b: a + b)(t[0][1](r), t[1][1](r)))
        ),
        st.tuples(children, st.sampled_from([1, 2, -1, -3]), st.integers(min_value=0, max_value=3)).map(
            lambda t: (f"SUBSTR({t[0][0]}, {t[1]}, {t[2]})",
                       lambda r, t=t: _nn(lambda a: _substr(a, t[1], t[2]))(t[0][1](r)))
        ),
    )


STR = st.recursive(_STR_LEAF, _str_extend, max_leaves=3)


def _like_re(p):
    return "".join(".*" if ch == "%" else "." if ch == "_" else re.escape(ch) for ch in p)


def _and(x, y):
    if x is False or y is False:
        return False
    return None if x is None or y is None else True


def _or(x, y):
    if x is True or y is True:
        return True
    return None if x is None or y is None else False


_BOOL_LEAF = st.one_of(
    st.tuples(NUM, st.sampled_from(sorted(_CMP)), NUM).map(
        lambda t: (f"{t[0][0]} {t[1]} {t[2][0]}", lambda r, t=t: _nn(_CMP[t[1]])(t[0][1](r), t[2][1](r)))
    ),
    st.tuples(STR, st.sampled_from(["=", "<", ">="]), STR).map(
        lambda t: (f"{t[0][0]} {t[1]} {t[2][0]}", lambda r, t=t: _nn(_CMP[t[1]])(t[0][1](r), t[2][1](r)))
    ),
    st.tuples(STR, st.text(alphabet="ab%_", max_size=4)).map(
        lambda t: (
            f"{t[0][0]} LIKE '{t[1]}'",
            lambda r, t=t: _nn(lambda s: re.fullmatch(_like_re(t[1]), s, re.S) is not None)(t[0][1](r)),
        )
    ),
    st.tuples(STR, st.sampled_from(["^a", "b$", "a.c", "[bc]+", "^$"])).map(
        lambda t: (f"{t[0][0]} MATCH '{t[1]}'",
                   lambda r, t=t: _nn(lambda s: re.search(t[1], s) is not None)(t[0][1](r)))
    ),
    st.tuples(NUM, st.lists(st.integers(min_value=-3, max_value=3), min_size=1, max_size=3), st.booleans()).map(
        lambda t: (
            f"{t[0][0]} IN ({', '.join(map(str, t[1]))}{', NULL' if t[2] else ''})",
            lambda r, t=t: (
                None
                if t[0][1](r) is None
                else True
                if t[0][1](r) in t[1]
                else (None if t[2] else False)
            ),
        )
    ),
    st.tuples(NUM, st.integers(min_value=-5, max_value=5), st.integers(min_value=-5, max_value=5)).map(
        lambda t: (
            f"{t[0][0]} BETWEEN {t[1]} AND {t[2]}",
            lambda r, t=t: _and(_nn(lambda x: x >= t[1])(t[0][1](r)), _nn(lambda x: x <= t[2])(t[0][1](r))),
        )
    ),
    st.tuples(st.one_of(NUM, STR), st.booleans()).map(
        lambda t: (
            f"{t[0][0]} IS {'NOT ' if t[1] else ''}NULL",
            lambda r, t=t: (t[0][1](r) is not None) if t[1] else (t[0][1](r) is None),
        )
    ),
)


def _bool_extend(children):
    return st.one_of(
        st.tuples(children, st.sampled_from(["AND", "OR"]), children).map(
            lambda t: (
                f"({t[0][0]} {t[1]} {t[2][0]})",
                lambda r, t=t: (_and if t[1] == "AND" else _or)(t[0][1](r), t[2][1](r)),
            )
        ),
        children.map(lambda c: (f"NOT ({c[0]})", lambda r, c=c: None if c[1](r) is None else not c[1](r))),
    )


BOOL = st.recursive(_BOOL_LEAF, _bool_extend, max_leaves=4)


def _same(a, b):
    if a is None or b is None:
        return a is None and b is None
    if isinstance(a, float) or isinstance(b, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    return a == b


@settings(max_examples=120, deadline=None)
@given(st.lists(_ROW, max_size=8), BOOL)
def test_filter_matches_python(rows, cond):
    text, fn = cond
    tbl = pa.Table.from_pylist(rows, schema=PSCHEMA.arrow_schema())
    stmt = parse(f"SELECT ts FROM st WHERE {text}")
    mask = compile_projection(stmt.select, PSCHEMA).where.mask(tbl).to_pylist()
    assert mask == [fn(r) is True for r in rows], text


@settings(max_examples=80, deadline=None)
@given(st.lists(_ROW, max_size=8), NUM, STR, BOOL)
def test_projection_matches_python(rows, num, s, cond):
    tbl = pa.Table.from_pylist(rows, schema=PSCHEMA.arrow_schema())
    sql = f"SELECT {num[0]} AS n, {s[0]} AS s, CASE WHEN {cond[0]} THEN {num[0]} ELSE 0.5 END AS c FROM st"
    out = compile_projection(parse(sql).select, PSCHEMA).evaluate(tbl).to_pylist()
    for r, o in zip(rows, out, strict=True):
        assert _same(o["n"], num[1](r)), (sql, r, o)
        assert o["s"] == s[1](r), (sql, r, o)
        want = num[1](r) if cond[1](r) is True else 0.5
        assert _same(o["c"], None if want is None else float(want)), (sql, r, o)


_EXPR_WORDS = [
    "voltage", "current", "location", "tbname", "ts", "now", "1", "2.5", "'a'", "NULL", "TRUE", "+", "-", "*",
    "/", "%", "=", "<", "AND", "OR", "NOT", "IN", "(", ")", ",", "LIKE", "MATCH", "IS", "BETWEEN", "CASE", "WHEN",
    "THEN", "ELSE", "END", "CAST", "AS", "INT", "VARCHAR(4)", "abs", "concat", "substr", "lower", "avg", "1h",
]  # fmt: skip


@settings(max_examples=120, deadline=None)
@given(st.lists(st.sampled_from(_EXPR_WORDS), min_size=1, max_size=10).map(" ".join))
def test_fuzz_compile_only_sqlerror(text):
    try:
        stmt = parse(f"SELECT {text} FROM meters WHERE {text}")
        p = compile_projection(stmt.select, SCHEMA)
        p.apply(table())
    except SqlError:
        pass


def test_unsigned_bool_nchar_chunked_and_empty_tables():
    schema = parse("CREATE STABLE s2 (ts TIMESTAMP, u BIGINT UNSIGNED, b BOOL, n NCHAR(4)) TAGS (t1 TINYINT)").schema()
    p = compile_projection(
        parse("SELECT u + 1 AS x, cast(u AS INT) AS y FROM s2 "
              "WHERE u > 5 AND b AND t1 IN (1, 2) AND n LIKE '%'").select,
        schema,
    )
    rows = [
        {"tbname": "a", "ts": 1, "u": 2**64 - 1, "b": True, "n": "äö", "t1": 1},
        {"tbname": "b", "ts": 2, "u": 3, "b": False, "n": None, "t1": 2},
    ]
    tbl = pa.Table.from_pylist(rows, schema=schema.arrow_schema())
    assert p.apply(pa.concat_tables([tbl, tbl])).to_pylist() == [{"x": 2.0**64, "y": -1}] * 2
    assert p.apply(schema.arrow_schema().empty_table()).num_rows == 0


def test_in_matches_negative_zero_as_equal_does():
    """`-0.0 = 0` is true, so `x IN (0)` must hold for -0.0 too (Arrow's is_in alone hashes the bits)."""
    rows = [{"tbname": "d1", "ts": 1, "i": 1, "f": f, "s": "a", "t1": 1, "t2": "a"} for f in (-0.25, 0.0, 0.5)]
    tbl = pa.Table.from_pylist(rows, schema=PSCHEMA.arrow_schema())

    def mask(where: str) -> list[bool]:
        return compile_projection(parse(f"SELECT ts FROM st WHERE {where}").select, PSCHEMA).where.mask(tbl).to_pylist()

    assert mask("(f * 0) IN (0)") == [True, True, True]
    assert mask("(f * 0) = 0") == [True, True, True]
    assert mask("(f * 0) IN (-0.0)") == [True, True, True]
    assert mask("f IN (0.5, 7)") == [False, False, True]
