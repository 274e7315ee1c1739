"""The SQL parser: every statement form to its exact dataclass, errors with positions, fuzz."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlglot import exp

from tmqgate.broker.sql.ast import (
    AlterStableAddColumn,
    AlterStableAddTag,
    CreateDatabase,
    CreateStable,
    CreateTable,
    CreateTables,
    CreateTopic,
    Describe,
    DropConsumerGroup,
    DropDatabase,
    DropStable,
    DropTable,
    DropTopic,
    Insert,
    InsertRows,
    NowValue,
    Select,
    Show,
    SqlError,
    Statement,
    UseDatabase,
)
from tmqgate.broker.sql.parser import parse, parse_script
from tmqgate.broker.tsdb.types import Column, parse_type


def C(name, t):
    return Column(name, parse_type(t))


METERS = (
    "CREATE STABLE power.meters (ts TIMESTAMP, current FLOAT, voltage INT, phase FLOAT) "
    "TAGS (location VARCHAR(64), groupId INT)"
)


@pytest.mark.parametrize(
    ("sql", "expected"),
    [
        ("CREATE DATABASE power", CreateDatabase("power")),
        ("create database if not exists Power vgroups 4;", CreateDatabase("power", True, 4)),
        (
            "CREATE DATABASE db VGROUPS 2 WAL_RETENTION_PERIOD 3600 WAL_RETENTION_SIZE -1 PRECISION 'ms'",
            CreateDatabase("db", False, 2, 3600, -1, "ms"),
        ),
        (
            "CREATE DATABASE db KEEP 3650 DURATION 10d BUFFER 256 CACHEMODEL 'both' KEEP_TIME_OFFSET 2",
            CreateDatabase(
                "db",
                options={"keep": 3650, "duration": "10d", "buffer": 256, "cachemodel": "both", "keep_time_offset": 2}
            ),
        ),
        ("CREATE DATABASE db KEEP 100h,100d,3650d", CreateDatabase("db", options={"keep": ["100h", "100d", "3650d"]})),
        ("CREATE DATABASE db REPLICA 3", CreateDatabase("db", options={"replica": 3})),
        ("DROP DATABASE db", DropDatabase("db")),
        ("drop database if exists `Db`", DropDatabase("Db", True)),
        ("USE power", UseDatabase("power")),
        (
            METERS,
            CreateStable(
                "power",
                "meters",
                [C("ts", "TIMESTAMP"), C("current", "FLOAT"), C("voltage", "INT"), C("phase", "FLOAT")],
                [C("location", "VARCHAR(64)"), C("groupid", "INT")],
            ),
        ),
        (
            "create stable if not exists `St` (`Ts` timestamp, v binary(8), n nchar(2), u bigint unsigned) "
            "tags (t bool)",
            CreateStable(
                None,
                "St",
                [C("Ts", "TIMESTAMP"), C("v", "VARCHAR(8)"), C("n", "NCHAR(2)"), C("u", "BIGINT UNSIGNED")],
                [C("t", "BOOL")],
                True,
            ),
        ),
        (
            "CREATE TABLE st (ts TIMESTAMP, a INT) TAGS (t INT)",
            CreateStable(None, "st", [C("ts", "TIMESTAMP"), C("a", "INT")], [C("t", "INT")]),
        ),
        ("CREATE TABLE d1001 USING meters TAGS ('California.SF', 2)",
         CreateTable(None, "d1001", "meters", ["California.SF", 2])),
        (
            "CREATE TABLE IF NOT EXISTS power.d1 USING power.meters (location) TAGS ('x')",
            CreateTable("power", "d1", "meters", ["x"], True, ["location"]),
        ),
        ("CREATE TABLE d1 USING power.meters TAGS (NULL, -3)", CreateTable("power", "d1", "meters", [None, -3])),
        (
            "CREATE TABLE d1 USING meters TAGS ('a', 1) IF NOT EXISTS d2 USING meters TAGS ('b', 2)",
            CreateTables(
                [
                    CreateTable(None, "d1", "meters", ["a", 1]),
                    CreateTable(None, "d2", "meters", ["b", 2], True),
                ]
            ),
        ),
        ("ALTER STABLE meters ADD COLUMN c5 NCHAR(10)", AlterStableAddColumn(None, "meters", C("c5", "NCHAR(10)"))),
        ("alter stable power.meters add tag t3 bool", AlterStableAddTag("power", "meters", C("t3", "BOOL"))),
        ("DROP STABLE IF EXISTS power.meters", DropStable("power", "meters", True)),
        ("DROP TABLE d1001", DropTable(None, "d1001")),
        (
            "INSERT INTO d1001 VALUES (1538548685000, 10.3, 219, 0.31) (1538548695000, 12.6, 218, 0.33)",
            Insert([InsertRows(None, "d1001",
                               values=[[1538548685000, 10.3, 219, 0.31], [1538548695000, 12.6, 218, 0.33]])]),
        ),
        (
            "INSERT INTO d1001 (ts, current) VALUES ('2018-10-03 14:38:05.000', -1e3), (NOW, NULL)",
            Insert([InsertRows(None, "d1001", columns=["ts", "current"],
                               values=[["2018-10-03 14:38:05.000", -1000.0], [NowValue(), None]])]),
        ),
        (
            "insert into power.d1 values (now - 1h + 10s, true, false, \"dq\", 'it''s', 0x10) "
            "d2 values (now(), 1, 2, 3, 4, 5)",
            Insert(
                [
                    InsertRows("power", "d1", values=[[NowValue(-3_590_000), True, False, "dq", "it's", 16]]),
                    InsertRows(None, "d2", values=[[NowValue(), 1, 2, 3, 4, 5]]),
                ]
            ),
        ),
        (
            "INSERT INTO d21001 USING meters TAGS ('California.SF', 2) VALUES (NOW, 10.3, 219, 0.31) "
            "d21002 USING power.meters (groupId) TAGS (3) (ts, current) VALUES (today(), 1)",
            Insert(
                [
                    InsertRows(None, "d21001", "meters", ["California.SF", 2], None, [[NowValue(), 10.3, 219, 0.31]]),
                    InsertRows("power", "d21002", "meters", [3], ["ts", "current"],
                               [[NowValue(day=True), 1]], ["groupid"]),
                ]
            ),
        ),
        ("CREATE TOPIC t1 AS DATABASE power",
         CreateTopic("t1", kind="database", db="power", statement="CREATE TOPIC t1 AS DATABASE power")),
        (
            "create topic if not exists t2 with meta as database power;",
            CreateTopic("t2", True, "with", "database", db="power",
                        statement="create topic if not exists t2 with meta as database power"),
        ),
        (
            "CREATE TOPIC t3 ONLY META AS STABLE power.meters",
            CreateTopic("t3", False, "only", "stable", db="power", stable="meters",
                        statement="CREATE TOPIC t3 ONLY META AS STABLE power.meters"),
        ),
        (
            "CREATE TOPIC t4 AS STABLE meters WHERE groupId = 2 AND location LIKE 'Cal%'",
            CreateTopic(
                "t4",
                kind="stable",
                stable="meters",
                sql="groupId = 2 AND location LIKE 'Cal%'",
                statement="CREATE TOPIC t4 AS STABLE meters WHERE groupId = 2 AND location LIKE 'Cal%'",
            ),
        ),
        (
            "CREATE TOPIC t5 AS SELECT ts, voltage*2 FROM power.meters WHERE voltage > 200",
            CreateTopic(
                "t5",
                kind="select",
                db="power",
                stable="meters",
                sql="SELECT ts, voltage*2 FROM power.meters WHERE voltage > 200",
                statement="CREATE TOPIC t5 AS SELECT ts, voltage*2 FROM power.meters WHERE voltage > 200",
            ),
        ),
        ("DROP TOPIC t1", DropTopic("t1")),
        ("DROP TOPIC IF EXISTS t1 FORCE", DropTopic("t1", True, True)),
        ("DROP TOPIC IF EXISTS FORCE t1", DropTopic("t1", True, True)),
        ("DROP TOPIC force", DropTopic("force")),
        ("DROP CONSUMER GROUP g1 ON t1", DropConsumerGroup("g1", "t1")),
        ("drop consumer group if exists force g1 on t1", DropConsumerGroup("g1", "t1", True, True)),
        ("SHOW DATABASES", Show("databases")),
        ("show stables", Show("stables")),
        ("SHOW power.STABLES", Show("stables", "power")),
        ("SHOW power.tables LIKE 'd%'", Show("tables", "power", "d%")),
        ("SHOW TABLES", Show("tables")),
        ("SHOW TOPICS", Show("topics")),
        ("SHOW CONSUMERS", Show("consumers")),
        ("SHOW SUBSCRIPTIONS;", Show("subscriptions")),
        ("SHOW DNODES", Show("dnodes")),
        ("show vgroups", Show("vgroups")),
        ("SHOW power.VGROUPS", Show("vgroups", "power")),
        ("DESCRIBE power.d1001", Describe("power", "d1001")),
        ("desc meters", Describe(None, "meters")),
        ("SELECT * FROM meters WHERE voltage > 1 LIMIT 5",
         Select(None, "meters", None, "SELECT * FROM meters WHERE voltage > 1 LIMIT 5")),
    ],
)
def test_statement_forms(sql, expected):
    got = parse(sql)
    assert got == expected
    assert isinstance(got, Statement)


def test_topic_select_tree_and_names():
    t = parse("CREATE TOPIC t AS SELECT ts, voltage*2, current AS c FROM `Power`.meters WHERE ts > now - 1h")
    assert isinstance(t.select, exp.Select)
    assert t.db == "Power" and t.stable == "meters"
    assert t.select.meta["tmq_texts"] == [("ts", 25), ("voltage*2", 29), ("current AS c", 40)]
    # the duration was handed to sqlglot as milliseconds
    assert "3600000" in t.select.sql()


@pytest.mark.parametrize(
    ("sql", "fragment", "at"),
    [
        ("CREATE TOPIC t AS SELECT avg(voltage) FROM meters", "aggregate function AVG", "avg"),
        ("CREATE TOPIC t AS SELECT ts FROM meters ORDER BY ts", "ORDER BY", "ts FROM"),
        ("CREATE TOPIC t AS SELECT ts FROM meters LIMIT 3", "LIMIT", "3"),
        ("CREATE TOPIC t AS SELECT ts FROM meters GROUP BY tbname", "GROUP BY", "tbname"),
    ],
)
def test_topic_query_checked_at_parse(sql, fragment, at):
    with pytest.raises(SqlError, match=f"not allowed in a topic: {fragment}"):
        parse(sql)


def test_stable_topic_where_is_an_expression():
    t = parse("create topic t as stable meters where location match '^Cal' and tbname nmatch 'x'")
    assert isinstance(t.where, exp.And)
    assert isinstance(t.where.this, exp.RegexpLike)
    assert isinstance(t.where.expression, exp.Not)


def test_names_case():
    s = parse("CREATE STABLE Meters (TS TIMESTAMP, `Volt` INT) TAGS (Loc INT)")
    assert s.name == "meters"
    assert [c.name for c in s.columns] == ["ts", "Volt"]
    assert s.tags[0].name == "loc"


def test_parse_script():
    stmts = parse_script("CREATE DATABASE d; USE d;;\n" + METERS + "; SHOW TOPICS;")
    assert [type(s).__name__ for s in stmts] == ["CreateDatabase", "UseDatabase", "CreateStable", "Show"]
    assert parse_script("  ;  ") == []
    assert parse_script("INSERT INTO t VALUES (1, 'a;b')")[0].tables[0].values == [[1, "a;b"]]


def test_comments_and_escapes():
    s = parse("-- hello\nINSERT INTO t /* c */ VALUES (1, 'a\\'b\\n', \"x\"\"y\")")
    assert s.tables[0].values == [[1, "a'b\n", 'x"y']]


@pytest.mark.parametrize(
    ("sql", "position", "fragment"),
    [
        ("SELECT a FROMM st", 9, "near 'FROMM' at position 9: expected FROM"),
        ("SELECT a, b", 11, "end of input"),
        ("creat database x", 0, "near 'creat'"),
        ("CREATE DATABASE db FOO 1", 19, "unknown database option 'FOO'"),
        ("CREATE DATABASE db VGROUPS 0", 27, "VGROUPS 0 out of range"),
        ("CREATE DATABASE db REPLICA 4", 27, "REPLICA needs 1, 2 or 3, got 4"),
        ("CREATE DATABASE db REPLICA '3'", 27, "REPLICA needs 1, 2 or 3, got '3'"),
        ("CREATE DATABASE db VGROUPS 2 VGROUPS 3", 29, "given twice"),
        ("CREATE DATABASE db PRECISION 'us'", 29, "only PRECISION 'ms'"),
        ("CREATE STABLE st (c1 INT, ts TIMESTAMP) TAGS (t INT)", 18, "first column must be TIMESTAMP"),
        ("CREATE STABLE st (ts TIMESTAMP, c1 INT)", 39, "TAGS"),
        ("CREATE STABLE st (ts TIMESTAMP, a INT, A FLOAT) TAGS (t INT)", 39, "duplicate column or tag name 'a'"),
        ("CREATE STABLE st (ts TIMESTAMP, a INT) TAGS (A INT)", 45, "duplicate column or tag name 'a'"),
        ("CREATE STABLE st (ts TIMESTAMP, tbname INT) TAGS (t INT)", 32, "reserved"),
        ("CREATE STABLE st (ts TIMESTAMP, " + "x" * 65 + " INT) TAGS (t INT)", 32, "too long"),
        ("CREATE STABLE st (ts TIMESTAMP, a VARCHAR) TAGS (t INT)", 34, "needs a length"),
        ("CREATE STABLE st (ts TIMESTAMP, a JSONB) TAGS (t INT)", 34, "unknown data type"),
        ("CREATE TABLE t (ts TIMESTAMP, a INT)", 13, "normal tables are not supported"),
        ("CREATE TABLE t USING st TAGS (1", 31, "expected ')'"),
        ("CREATE TABLE t USING st (a, b) TAGS (1)", 36, "2 tag names but 1 tag values"),
        ("CREATE TABLE a.t USING b.st TAGS (1)", 13, "same database"),
        ("INSERT INTO t VALUES (1, 'abc", 25, "unterminated string"),
        ("INSERT INTO t (a, b) VALUES (1)", 28, "row has 1 values but 2 columns"),
        ("INSERT INTO t VALUES (now - 1n)", 28, "unsupported duration unit"),
        ("INSERT INTO t VALUES (1 2)", 24, "expected ')'"),
        ("INSERT INTO t VALUES", 20, "end of input"),
        ("INSERT INTO t FILE '/tmp/x.csv'", 14, "FILE is not supported"),
        ("DROP TABLE a, b", 12, "one table per statement"),
        ("ALTER STABLE st SET TAG c = 1", 16, "SET is not supported"),
        ("ALTER STABLE st MODIFY TAG c INT", 27, "MODIFY TAG is not supported"),
        ("CREATE TOPIC t WITH META AS SELECT * FROM st", 15, "WITH META is only for"),
        ("CREATE TOPIC t AS SELECT avg(v) FROM st INTERVAL(10s)", 40, "not allowed in a topic: window clause INTERVAL"),
        ("CREATE TOPIC t AS SELECT v FROM st PARTITION BY tbname", 35, "not allowed in a topic: PARTITION BY"),
        ("CREATE TOPIC t AS SELECT * FROM (SELECT * FROM st)", 32, "subquery"),
        ("CREATE TOPIC t AS SELECT * FROM a JOIN b ON a.ts = b.ts", 34, "JOIN"),
        ("CREATE TOPIC t AS SELECT 1 UNION SELECT 2", 27, "not allowed in a topic: UNION"),
        ("CREATE TOPIC t AS STABLE st WHERE", 33, "expected a condition"),
        ("CREATE TOPIC t AS STABLE st WHERE a >", 36, "syntax error"),
        ("SHOW db.TOPICS", 8, "expected STABLES or TABLES"),
        ("SHOW NOTHING", 5, "expected"),
        ("USE", 3, "a database name"),
        ("USE a b", 6, "end of statement"),
        ("SELECT 1; SELECT 2", 10, "more than one statement"),
        ("", 0, "empty statement"),
        ("SELECT $ FROM st", 7, "unexpected character"),
        ("INSERT INTO t VALUES (1abc)", 22, "invalid number"),
    ],
)
def test_errors_with_positions(sql, position, fragment):
    with pytest.raises(SqlError) as ei:
        parse(sql)
    assert fragment in ei.value.message
    assert ei.value.position == position, ei.value.message
    assert f"position {position}" in ei.value.message


_WORDS = [
    "CREATE", "DROP", "DATABASE", "STABLE", "TABLE", "TOPIC", "INSERT", "INTO", "VALUES", "USING", "TAGS",
    "SELECT", "FROM", "WHERE", "AS", "SHOW", "IF", "NOT", "EXISTS", "WITH", "META", "ONLY", "AND", "OR",
    "LIKE", "IN", "BETWEEN", "NULL", "NOW", "CASE", "WHEN", "THEN", "END", "CAST", "INT", "VARCHAR",
    "TIMESTAMP", "st", "db", "t1", "ts", "v", "1h", "42", "-7", "1.5e3", "'s'", '"d"', "`q`",
    "(", ")", ",", ".", ";", "*", "+", "-", "/", "%", "=", "<", ">=", "!=", "<>", "'", "`", "\\", "/*", "--",
    "INTERVAL", "GROUP", "BY", "ORDER", "LIMIT", "MATCH", "NMATCH", "CONSUMER", "ON", "ALTER", "ADD", "COLUMN",
]  # fmt: skip


@settings(max_examples=250, deadline=None)
@given(st.lists(st.sampled_from(_WORDS), max_size=18).map(" ".join))
def test_fuzz_token_soup_only_sqlerror(text):
    for fn in (parse, parse_script):
        try:
            fn(text)
        except SqlError as e:
            assert e.position is None or 0 <= e.position <= len(text)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=60))
def test_fuzz_any_text_only_sqlerror(text):
    try:
        parse(text)
    except SqlError as e:
        assert e.position is None or 0 <= e.position <= len(text)


@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from(
        [
            "CREATE TOPIC t AS SELECT ts, v FROM st WHERE v > 1",
            "INSERT INTO d1 USING st TAGS ('a', 1) VALUES (now, 1.5, 'x')",
            "CREATE STABLE st (ts TIMESTAMP, v INT) TAGS (t VARCHAR(8))",
            "CREATE DATABASE db VGROUPS 4 WAL_RETENTION_PERIOD 60",
        ]
    ),
    st.integers(min_value=0, max_value=80),
    st.integers(min_value=0, max_value=5),
    st.text(alphabet="(),;'\"`xX 0.-*", max_size=3),
)
def test_fuzz_mutations_only_sqlerror(base, at, cut, insert):
    at = min(at, len(base))
    text = base[:at] + insert + base[at + cut :]
    try:
        parse(text)
    except SqlError as e:
        assert e.position is None or 0 <= e.position <= len(text)
