"""INSERT, and the rows appends schemaless ingestion shares (`append_rows_many`).

Rules: everything is checked, then the rows are built into Arrow tables, then written — a
failed INSERT writes nothing. Each VALUES clause's table and columns are resolved and every
value checked in statement order (the first error is the one reported); the child tables
the USING clauses create are logged (their meta entries) before their rows, as a WITH META
topic delivers them; a supertable's rows go to a vnode's WAL as one entry, whichever child
tables and clauses they came from. `insert_async` does the same in bounded steps, yielding to
the event loop between them, and starts over if a concurrent statement changed a table it
uses.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, NamedTuple

import pyarrow as pa

from tmqgate.broker.sql import ast
from tmqgate.broker.sql.access import Caller
from tmqgate.broker.sql.ast import SqlError
from tmqgate.broker.sql.context import SqlContext, find_database, find_stable
from tmqgate.broker.sql.ddl import create_child
from tmqgate.broker.sql.result import Result
from tmqgate.broker.tsdb.catalog import STABLE_METADATA_KEY, home_vnode
from tmqgate.broker.tsdb.rows import RowsError, build_rows_table, encode_rows
from tmqgate.broker.tsdb.types import StableSchema, TypeError_, check_value
from tmqgate.protocol import clock
from tmqgate.storage import RowsEntry

if TYPE_CHECKING:
    from tmqgate.storage import ProducerAppend

# An INSERT run by execute_async checks its rows in steps of this many (~2 ms), yielding to the
# event loop between steps (a 1 MiB INSERT has ~70,000 rows: ~0.3 s of checks in one go).
CHECK_ROWS_PER_STEP = 500

# A child table an INSERT creates (USING ... TAGS): database info, name, supertable, tags.
_ChildCreate = tuple[Any, str, StableSchema, dict[str, Any]]


class _CheckedRows(NamedTuple):
    """One VALUES clause of an INSERT after its checks: where its rows go, and each row's
    values by column name."""

    db: str
    schema: StableSchema
    vnode: int
    table: str
    rows: list[dict[str, Any]]


# Rows grouped per (database, supertable, vnode): the schema, each row's table, the values by column.
_Groups = dict[tuple[str, str, int], tuple[StableSchema, list[str], dict[str, list[Any]]]]


class _Steps:
    """Yields to the event loop once every CHECK_ROWS_PER_STEP rows done (however the rows
    are split among VALUES clauses)."""

    def __init__(self) -> None:
        self._left = CHECK_ROWS_PER_STEP

    async def done(self, rows: int) -> None:
        self._left -= rows
        if self._left <= 0:
            self._left = CHECK_ROWS_PER_STEP
            await asyncio.sleep(0)


def insert(sql: SqlContext, stmt: ast.Insert, db: str | None, _caller: Caller) -> Result:
    """Check everything, then build the tables, then write: a failed INSERT writes nothing."""
    now = clock.now_ms()
    creates, checked = _check_insert(sql, stmt, db, now)
    tables = _group_insert(checked)
    _write_insert(sql, creates, tables)
    return Result.affected(sum(len(entry.rows) for entry in checked))


def _check_insert(sql: SqlContext, stmt: ast.Insert, db: str | None,
                  now: int) -> tuple[list[_ChildCreate], list[_CheckedRows]]:
    """Resolve each VALUES clause's table and columns and check every value, in statement
    order (so the first error is the one reported), before anything is written; returns the
    child tables the USING clauses create, and each clause's rows as checked values."""
    creates, targets = _plan_insert(sql, stmt, db, now)
    checked = [_CheckedRows(info.name, schema, vnode, rows.table,
                            [_check_row(schema, cols, row, now) for row in rows.values])
               for rows, (info, schema, vnode, cols) in zip(stmt.tables, targets, strict=True)]
    return creates, checked


def _plan_insert(sql: SqlContext, stmt: ast.Insert, db: str | None,
                 now: int) -> tuple[list[_ChildCreate], list[tuple[Any, StableSchema, int, list[Any]]]]:
    """Each VALUES clause's (database, supertable, vnode, columns), resolved and checked in
    statement order, and the child tables the USING clauses create; no row is looked at."""
    creates: dict[tuple[str, str], _ChildCreate] = {}  # by (database, table), in order
    targets = []
    for rows in stmt.tables:
        info, schema, vnode = _insert_target(sql, rows, db, creates, now)
        names = [c.name for c in schema.columns] if rows.columns is None else rows.columns
        cols = []
        for name in names:
            col = schema.find(name)
            if col is None or schema.is_tag(name):
                raise SqlError(f"Invalid column name: {name}")
            cols.append(col)
        if cols[0] is not schema.columns[0] and schema.columns[0] not in cols:
            raise SqlError(f"Primary timestamp column {schema.columns[0].name} can not be null")
        targets.append((info, schema, vnode, cols))
    return list(creates.values()), targets


async def insert_async(sql: SqlContext, stmt: ast.Insert, db: str | None) -> Result:
    """`insert` in bounded steps: the rows are checked, then grouped and built into Arrow
    tables, CHECK_ROWS_PER_STEP at a time with the loop free in between; then, with no
    yield between the last look at the catalog and the writes, the plan is resolved again
    and, if a concurrent statement
    changed a table it uses (a supertable altered or dropped, a child table created), the
    checks start over (twice at most, then the INSERT is refused, nothing written). The
    writes themselves are `_write_insert`'s, on the loop like every store write."""
    for _ in range(3):
        now = clock.now_ms()
        creates, targets = _plan_insert(sql, stmt, db, now)
        checked: list[_CheckedRows] = []
        step = _Steps()
        for rows, (info, schema, vnode, cols) in zip(stmt.tables, targets, strict=True):
            values = []
            for start in range(0, len(rows.values), CHECK_ROWS_PER_STEP):
                chunk = rows.values[start:start + CHECK_ROWS_PER_STEP]
                values += [_check_row(schema, cols, row, now) for row in chunk]
                await step.done(len(chunk))
            checked.append(_CheckedRows(info.name, schema, vnode, rows.table, values))
        tables = await _build_insert_async(checked)
        again_creates, again = _plan_insert(sql, stmt, db, now)
        same = len(again_creates) == len(creates) and all(
            a[0] is b[0] and a[1] is b[1] and a[2] == b[2] for a, b in zip(again, targets, strict=True))
        if same:
            _write_insert(sql, creates, tables)
            return Result.affected(sum(len(entry.rows) for entry in checked))
    raise SqlError("the tables of this INSERT kept changing while it was checked; nothing written")


def _insert_target(sql: SqlContext, rows: ast.InsertRows, db: str | None,
                   creates: dict[tuple[str, str], _ChildCreate], now: int) -> tuple[Any, StableSchema, int]:
    """The database, supertable and vnode of a VALUES clause's table: an existing child
    table, one an earlier clause creates, or a new one its USING clause adds to `creates`."""
    info = find_database(sql.store, rows.db or db)
    child = sql.store.child_tables(info.name).get(rows.table)
    if child is not None:
        return info, find_stable(sql.catalog, info.name, child.stable), child.vnode
    planned = creates.get((info.name, rows.table))
    if planned is not None:
        schema = planned[2]
    elif rows.stable is None:
        raise SqlError(f"Table does not exist: {rows.table}")
    else:
        schema = find_stable(sql.catalog, info.name, rows.stable)
        creates[(info.name, rows.table)] = (info, rows.table, schema, rows.resolve_tags(schema, now_ms=now))
    return info, schema, home_vnode(rows.table, info.vgroups)


def _check_row(schema: StableSchema, cols: list[Any], row: list[Any], now: int) -> dict[str, Any]:
    """One row of literals as checked values by column name (NOW and friends at `now`)."""
    if len(row) != len(cols):
        raise SqlError(f"Illegal number of columns: {len(row)} values for {len(cols)} columns")
    given = {}
    for col, value in zip(cols, row, strict=True):
        try:
            given[col.name] = check_value(col.type, value, now_ms=now)
        except TypeError_ as exc:
            raise SqlError(f"Invalid value for column {col.name}: {exc}") from None
    if given.get(schema.columns[0].name) is None:
        raise SqlError(f"Primary timestamp column {schema.columns[0].name} can not be null")
    return given


def _group_insert(checked: list[_CheckedRows]) -> dict[tuple[str, str, int], pa.Table]:
    """One rows table per (database, supertable, vnode), whichever child tables and VALUES
    clauses its rows came from, since the WAL takes a supertable's rows as one entry per
    vnode. Building it may still refuse a value, and nothing has been written yet."""
    groups: _Groups = {}
    for entry in checked:
        _group_rows(groups, entry, entry.rows)
    return _build_groups(groups)


async def _build_insert_async(checked: list[_CheckedRows]) -> dict[tuple[str, str, int], pa.Table]:
    """`_group_insert` in steps: each CHECK_ROWS_PER_STEP rows are grouped and built into
    Arrow tables between yields, and each group's tables are joined at the end (one copy,
    in Arrow). Pure: nothing of the catalog or the store is looked at."""
    parts: dict[tuple[str, str, int], list[pa.Table]] = {}
    step = _Steps()
    for entry in checked:
        for start in range(0, len(entry.rows), CHECK_ROWS_PER_STEP):
            chunk = entry.rows[start:start + CHECK_ROWS_PER_STEP]
            groups: _Groups = {}
            _group_rows(groups, entry, chunk)
            for key, table in _build_groups(groups).items():
                parts.setdefault(key, []).append(table)
            await step.done(len(chunk))
    return {key: tables[0] if len(tables) == 1 else pa.concat_tables(tables).combine_chunks()
            for key, tables in parts.items()}


def _group_rows(groups: _Groups, entry: _CheckedRows, rows: list[dict[str, Any]]) -> None:
    key = (entry.db, entry.schema.name, entry.vnode)
    _, tbnames, values = groups.setdefault(key, (entry.schema, [], defaultdict(list)))
    for given in rows:
        tbnames.append(entry.table)
        for c in entry.schema.columns:
            values[c.name].append(given.get(c.name))


def _build_groups(groups: _Groups) -> dict[tuple[str, str, int], pa.Table]:
    tables = {}
    for key, (schema, tbnames, values) in groups.items():
        try:
            tables[key] = build_rows_table(schema, tbnames, values)
        except RowsError as exc:
            raise SqlError(str(exc)) from None
    return tables


def _write_insert(sql: SqlContext, creates: list[_ChildCreate], tables: dict[tuple[str, str, int], pa.Table]) -> None:
    """Create the USING clauses' child tables (their meta entries come before their rows in
    the WAL, as a WITH META topic delivers them), then append each group's rows."""
    for info, name, schema, tags in creates:
        create_child(sql, info, name, schema, tags)
    for (dbname, stable, vnode), table in tables.items():
        append_rows(sql, dbname, stable, vnode, table)


def append_rows(sql: SqlContext, db: str, stable: str, vnode: int, table: pa.Table) -> int:
    """Append one supertable's rows to a vnode's WAL (one version per row); wake fetches."""
    return append_rows_many(sql, db, vnode, ((stable, table),))


def append_rows_many(sql: SqlContext, db: str, vnode: int, tables: Iterable[tuple[str, pa.Table]],
                     producer: ProducerAppend | None = None, txn_producer: tuple[int, int] | None = None) -> int:
    """Append supertables' rows (one entry per (supertable, table)) to a vnode's WAL at
    consecutive versions, in one WriteBatch with the idempotent `producer`'s window when
    given (the Kafka batch they came from); returns the first version; wakes fetches.
    `txn_producer`: (producer id, epoch) of a transactional producer's rows (storage keeps
    them in its transaction, so a read_committed view never shows them if it aborts)."""
    entries = []
    for stable, table in tables:
        table = table.replace_schema_metadata({STABLE_METADATA_KEY: stable.encode()})
        ts = table.column(1)
        entries.append(RowsEntry(encode_rows(table), table.num_rows,
                                 pa.compute.max(ts).as_py(), pa.compute.min(ts).as_py()))
    base = sql.store.append_rows_many(db, vnode, entries, producer=producer, txn_producer=txn_producer)
    sql.notify(db, vnode)
    return base
