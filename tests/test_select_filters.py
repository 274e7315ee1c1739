"""Query topics and SELECT agree on every filter (issue 29): the same generated WHERE
expressions (tests/test_sql_expr.py's grammar and its per-row Python model of TDengine's
rules) evaluated by a query topic's vectorised evaluator (broker/sql/expr.py) and by SELECT
on DuckDB (broker/sql/translate.py, broker/sql/select.py) select the same rows."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.test_sql_expr import _ROW, BOOL, NUM, PSCHEMA, STR, _same
from tmqgate.broker.sql.expr import compile_projection
from tmqgate.broker.sql.parser import parse
from tmqgate.broker.sql.select import run
from tmqgate.broker.sql.translate import translate
from tmqgate.broker.tsdb.catalog import STABLE_METADATA_KEY
from tmqgate.broker.tsdb.rows import encode_rows

TAGS = [t.name for t in PSCHEMA.tags]


def _consistent(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows with ts = their index, and each child table's tags those of its first row (tags
    belong to the child table, as stored)."""
    first: dict[str, dict[str, Any]] = {}
    out = []
    for i, r in enumerate(rows):
        tags = first.setdefault(r["tbname"], {t: r[t] for t in TAGS})
        out.append({**r, **tags, "ts": i})
    return out


def _stored(rows: list[dict[str, Any]]) -> tuple[list[bytes], pa.Table]:
    """The rows as one rows entry, and the supertable's tag table."""
    schema = PSCHEMA.arrow_schema(with_tags=False)
    table = pa.Table.from_pylist([{k: r[k] for k in schema.names} for r in rows], schema=schema)
    payload = encode_rows(table.replace_schema_metadata({STABLE_METADATA_KEY: b"st"}))
    children = {r["tbname"]: r for r in rows}
    tags = pa.Table.from_pylist([{"tbname": n, **{t: r[t] for t in TAGS}} for n, r in children.items()],
                                schema=pa.schema([pa.field("tbname", pa.string())]
                                                 + [pa.field(t.name, t.type.arrow) for t in PSCHEMA.tags]))
    return [payload], tags


def _selected(rows: list[dict[str, Any]], sql: str) -> list[list[Any]]:
    payloads, tags = _stored(rows)
    plan = translate(parse(sql), PSCHEMA, None, now_ms=0)  # type: ignore[arg-type]
    return run(plan, PSCHEMA, payloads, tags if plan.needs_tags else None).rows


@settings(max_examples=150, deadline=None)
@given(st.lists(_ROW, max_size=8), BOOL)
def test_select_and_a_query_topic_pick_the_same_rows(rows: list[dict[str, Any]], cond: tuple[str, Any]) -> None:
    text, model = cond
    rows = _consistent(rows)
    table = pa.Table.from_pylist(rows, schema=PSCHEMA.arrow_schema())
    topic = compile_projection(parse(f"SELECT ts FROM st WHERE {text}").select, PSCHEMA).where.mask(table).to_pylist()
    expected = [i for i, r in enumerate(rows) if model(r) is True]
    assert [i for i, m in enumerate(topic) if m] == expected, text
    got = [r[0] for r in _selected(rows, f"SELECT ts FROM st WHERE {text} ORDER BY ts")]
    assert got == expected, text


@settings(max_examples=100, deadline=None)
@given(st.lists(_ROW, min_size=1, max_size=8), NUM, STR)
def test_select_computes_what_a_query_topic_delivers(rows: list[dict[str, Any]], num: tuple[str, Any],
                                                     s: tuple[str, Any]) -> None:
    rows = _consistent(rows)
    table = pa.Table.from_pylist(rows, schema=PSCHEMA.arrow_schema())
    sql = f"SELECT ts, {num[0]} AS n, {s[0]} AS s FROM st"
    topic = compile_projection(parse(sql).select, PSCHEMA).evaluate(table).to_pylist()
    got = _selected(rows, sql + " ORDER BY ts")
    for r, t, g in zip(rows, topic, got, strict=True):
        assert _same(t["n"], num[1](r)) and t["s"] == s[1](r), (sql, r, t)
        assert g[0] == r["ts"] and _same(g[1], None if t["n"] is None else float(t["n"])) and g[2] == t["s"], \
            (sql, r, g, t)


@pytest.mark.parametrize(("cond", "picked"), [
    ("i > 1", [1, 2]),
    ("s LIKE 'a%'", [0]),
    ("t1 = 7 OR s IS NULL", [2]),
    ("i + f > 3", [2]),
    ("i % 0 IS NULL", [0, 1, 2]),
    ("CONCAT(s, 'x') IS NULL", [2]),
    ("tbname IN ('d1', 'd3') AND NOT (i BETWEEN 2 AND 3)", [0]),
    ("s MATCH '^a' OR t2 = 'q'", [0]),
])
def test_the_shared_table_of_filters(cond: str, picked: list[int]) -> None:
    rows = [{"tbname": "d1", "ts": 0, "i": 1, "f": 0.5, "s": "ab", "t1": 1, "t2": "p"},
            {"tbname": "d2", "ts": 1, "i": 2, "f": 0.5, "s": "bb", "t1": 2, "t2": "p"},
            {"tbname": "d3", "ts": 2, "i": 3, "f": 1.5, "s": None, "t1": 3, "t2": "r"}]
    table = pa.Table.from_pylist(rows, schema=PSCHEMA.arrow_schema())
    topic = compile_projection(parse(f"SELECT ts FROM st WHERE {cond}").select, PSCHEMA).where.mask(table)
    assert [i for i, m in enumerate(topic.to_pylist()) if m] == picked
    assert [r[0] for r in _selected(rows, f"SELECT ts FROM st WHERE {cond} ORDER BY ts")] == picked
