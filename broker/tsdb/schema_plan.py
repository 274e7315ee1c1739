"""Schemaless rows → what their supertables need: rows grouped per supertable, column-wise
(`group_rows`), the columns and tags to add or lengthen (`plan_schema`, `schema_delta`), and a
child table's tag values under the supertable's types (`child_table_tags`).

Rules (TDengine's schemaless writer; `ingest_rules` for the shared ones):

* A field whose type differs from the column's (inside a batch or against the supertable) is
  an error, as is a name used as a field and as a tag; strings only widen.
* A batch whose lines add up past TDengine's schema limits (``tsdb/limits.py``: 4,096 columns
  and tags, 128 tags) is refused; the byte lengths of a row and of the tags are checked by the
  caller (broker/sql/ingest.py) on the supertable the write would make.
* Every name the rows would create passes `tsdb.names`' rule before anything is written.

Deviation: the values of tags that already exist with another type (e.g. a tag created by SQL
as INT) are converted when they can be, instead of refusing the write.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import pyarrow as pa

from tmqgate.broker.tsdb.ingest_rules import (
    TAG_NULL,
    TS_COLUMN,
    SchemalessError,
    SchemalessRow,
    check_new,
    len_in,
    string_type,
)
from tmqgate.broker.tsdb.limits import MAX_COLUMNS, MAX_TAGS, too_many_columns, too_many_tags
from tmqgate.broker.tsdb.rows import build_rows_table
from tmqgate.broker.tsdb.types import (
    TIMESTAMP,
    Column,
    StableSchema,
    TDType,
    TypeError_,
    check_value,
    type_from_name,
)

__all__ = [
    "SchemaPlan",
    "StableBatch",
    "add_table",
    "child_table_tags",
    "group_rows",
    "plan_schema",
    "schema_delta",
]


def _kind(t: TDType) -> str:
    return "VARCHAR" if t.name == "BINARY" else t.name


@dataclass(slots=True)
class StableBatch:
    """Rows of one supertable, column-wise, ready for ``plan_schema`` and ``to_table``.

    ``columns`` holds one list per field (None where a row lacks it) and ``column_types`` the
    type each field would create (strings sized for the batch's longest value). ``tables``
    holds each child table's tags, from its first row as TDengine does. The ``*_lines`` maps
    say where a name first appeared; ``*_max_len`` the longest string value seen. From the
    column-wise parser (line_columns.py) the per-row lists are Arrow arrays.
    """

    stable: str
    tbnames: list[str] | pa.Array = field(default_factory=list)
    ts: list[int] | pa.Array = field(default_factory=list)
    columns: dict[str, list[Any] | pa.Array] = field(default_factory=dict)
    column_types: dict[str, TDType] = field(default_factory=dict)
    tables: dict[str, dict[str, tuple[TDType, Any]]] = field(default_factory=dict)
    table_lines: dict[str, int] = field(default_factory=dict)
    tag_types: dict[str, TDType] = field(default_factory=dict)
    column_lines: dict[str, int] = field(default_factory=dict)
    tag_lines: dict[str, int] = field(default_factory=dict)
    column_max_len: dict[str, int] = field(default_factory=dict)
    tag_max_len: dict[str, int] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.tbnames)

    def to_table(self, schema: StableSchema) -> pa.Table:
        """The rows-entry table under ``schema`` (apply the plan's columns first)."""
        cols: dict[str, Any] = dict(self.columns)
        cols[schema.columns[0].name] = self.ts
        return build_rows_table(schema, self.tbnames, cols)


def _merge_type(
    types: dict[str, TDType], lines: dict[str, int], key: str, t: TDType, what: str, line: int
) -> None:
    """Record ``t`` for ``key``: a string type widens, any other difference is a conflict."""
    prev = types.get(key)
    if prev is None:
        types[key] = t
        lines[key] = line
    elif prev != t:
        if prev.name != t.name or prev.length is None:
            raise SchemalessError(f"{what} {key[:40]!r} is {t} here but {prev} on line {lines[key]}", line)
        if t.length is not None and t.length > prev.length:
            types[key] = t


def group_rows(rows: Iterable[SchemalessRow]) -> dict[str, StableBatch]:
    """Group rows per supertable into column lists; raises when a field changes type."""
    out: dict[str, StableBatch] = {}
    for r in rows:
        b = out.get(r.stable)
        if b is None:
            b = out[r.stable] = StableBatch(r.stable)
        i = len(b.tbnames)
        b.tbnames.append(r.tbname)
        b.ts.append(r.ts)
        cols, types, max_len = b.columns, b.column_types, b.column_max_len
        for k, (t, v) in r.columns.items():
            lst = cols.get(k)
            if lst is None:
                if k in b.tag_types:
                    raise SchemalessError(f"{k[:40]!r} is a tag on line {b.tag_lines[k]}", r.line)
                if len(cols) + len(b.tag_types) + 1 >= MAX_COLUMNS:  # the lines' union of names
                    raise SchemalessError.limit(too_many_columns(len(cols) + len(b.tag_types) + 2), r.line)
                lst = cols[k] = [None] * i
            elif len(lst) < i:
                lst.extend([None] * (i - len(lst)))
            lst.append(v)
            if types.get(k) is not t:
                _merge_type(types, b.column_lines, k, t, "field", r.line)
            if t.length is not None:
                n = len_in(t.name, v)
                if n > max_len.get(k, -1):
                    max_len[k] = n
        if r.tbname not in b.tables:
            add_table(b, r)
    for b in out.values():
        n = len(b.tbnames)
        for lst in b.columns.values():
            if len(lst) < n:
                lst.extend([None] * (n - len(lst)))
    return out


def add_table(b: StableBatch, r: SchemalessRow) -> None:
    """The first row of a child table in the batch: its tags join the supertable's (once per
    table, where the fields are merged once per row)."""
    cols = b.columns
    b.tables[r.tbname] = r.tags
    b.table_lines[r.tbname] = r.line
    for k, (t, v) in r.tags.items():
        if k in cols:
            raise SchemalessError(f"{k[:40]!r} is a field on line {b.column_lines[k]}", r.line)
        if k not in b.tag_types:
            if len(b.tag_types) >= MAX_TAGS:
                raise SchemalessError.limit(too_many_tags(len(b.tag_types) + 1), r.line)
            if len(cols) + len(b.tag_types) + 1 >= MAX_COLUMNS:
                raise SchemalessError.limit(too_many_columns(len(cols) + len(b.tag_types) + 2), r.line)
        if b.tag_types.get(k) is not t:
            _merge_type(b.tag_types, b.tag_lines, k, t, "tag", r.line)
        if t.length is not None:
            n = len_in(t.name, v)
            if n > b.tag_max_len.get(k, -1):
                b.tag_max_len[k] = n


class SchemaPlan(NamedTuple):
    """What a batch needs from its supertable: columns/tags to add, strings to lengthen."""

    new_columns: list[Column]
    new_tags: list[Column]
    widen_columns: list[Column]
    widen_tags: list[Column]

    @property
    def empty(self) -> bool:
        return not (self.new_columns or self.new_tags or self.widen_columns or self.widen_tags)


def _sized(t: TDType, n: int) -> TDType:
    return string_type(_kind(t), n) if t.length is not None else t


def _as_batch(current: StableSchema | None, rows: StableBatch | Iterable[SchemalessRow]) -> StableBatch:
    if isinstance(rows, StableBatch):
        return rows
    groups = group_rows(rows)
    if len(groups) > 1:
        raise ValueError(f"rows of several supertables: {sorted(groups)[:3]}")
    if not groups:
        return StableBatch(current.name if current is not None else "")
    (b,) = groups.values()
    if current is not None and b.stable != current.name:
        raise ValueError(f"rows of {b.stable!r} against the schema of {current.name!r}")
    return b


def _convertible(t: TDType, v: Any) -> bool:
    try:
        check_value(t, v)
    except (TypeError_, ValueError, TypeError, OverflowError):
        return False
    return True


def plan_schema(current: StableSchema | None, rows: StableBatch | Iterable[SchemalessRow]) -> SchemaPlan:
    """The schema changes TDengine's schemaless writer would make for these rows.

    With no supertable yet, ``new_columns`` starts with ``_ts TIMESTAMP`` and ``new_tags``
    is ``_tag_null NCHAR(1)`` when the rows have no tags, so the plan creates it whole.
    Raises SchemalessError when a field's type differs from its column's or a name is a
    field in the rows and a tag of the supertable (or the other way round). Deviation: an
    existing tag of another type (say INT, made by SQL) takes values convertible to it
    where TDengine refuses the write; a string tag takes NCHAR and VARCHAR values alike.
    """
    b = _as_batch(current, rows)
    _check_new_names(current, b)
    if current is None:
        return _plan_new_stable(b)
    col_of = {c.name: c for c in current.columns}
    tag_of = {c.name: c for c in current.tags}
    ts_name = current.columns[0].name
    new_cols: list[Column] = []
    widen_cols: list[Column] = []
    for k, t in b.column_types.items():
        line = b.column_lines[k]
        if k == ts_name:
            raise SchemalessError(f"field {k!r} is the timestamp column of {current.name}", line)
        if k in tag_of:
            raise SchemalessError(f"field {k[:40]!r} is a tag of {current.name}", line)
        c = col_of.get(k)
        if c is None:
            new_cols.append(Column(k, _sized(t, b.column_max_len.get(k, 0))))
        elif _kind(c.type) != _kind(t):
            raise SchemalessError(
                f"field {k[:40]!r} is {t.name} but column {k} of {current.name} is {c.type}", line
            )
        elif c.type.length is not None and b.column_max_len.get(k, 0) > c.type.length:
            widen_cols.append(Column(k, _sized(c.type, b.column_max_len[k])))
    new_tags: list[Column] = []
    widen_tags: list[Column] = []
    for k, t in b.tag_types.items():
        line = b.tag_lines[k]
        if k in col_of:
            raise SchemalessError(f"tag {k[:40]!r} is a column of {current.name}", line)
        c = tag_of.get(k)
        if c is None:
            new_tags.append(Column(k, _sized(t, b.tag_max_len.get(k, 0))))
        elif c.type.length is not None and t.length is not None:  # strings, NCHAR or VARCHAR
            kind = _kind(c.type)
            need = max((len_in(kind, tags[k][1]) for tags in b.tables.values() if k in tags), default=0)
            if need > c.type.length:
                widen_tags.append(Column(k, _sized(c.type, need)))
        elif _kind(c.type) != _kind(t):
            for tags in b.tables.values():
                if k in tags and not _convertible(c.type, tags[k][1]):
                    raise SchemalessError(
                        f"tag {k[:40]!r} value {str(tags[k][1])[:40]!r} does not fit tag {k} {c.type}", line
                    )
    return SchemaPlan(new_cols, new_tags, widen_cols, widen_tags)


def _plan_new_stable(b: StableBatch) -> SchemaPlan:
    """The whole supertable: ``_ts``, the rows' fields, and their tags (or ``_tag_null``)."""
    for k in b.column_types:
        if k == TS_COLUMN:
            raise SchemalessError(f"field {k!r} is the timestamp column", b.column_lines[k])
    for k in b.tag_types:
        if k == TS_COLUMN:
            raise SchemalessError(f"tag {k!r} is the timestamp column", b.tag_lines[k])
    new_cols: list[Column] = [Column(TS_COLUMN, TIMESTAMP)]
    new_cols += [Column(k, _sized(t, b.column_max_len.get(k, 0))) for k, t in b.column_types.items()]
    new_tags: list[Column] = [Column(k, _sized(t, b.tag_max_len.get(k, 0))) for k, t in b.tag_types.items()]
    if not new_tags:
        new_tags = [Column(TAG_NULL, type_from_name("NCHAR", 1))]
    return SchemaPlan(new_cols, new_tags, [], [])


def _check_new_names(current: StableSchema | None, b: StableBatch) -> None:
    """Every name these rows would create passes `tsdb.names`' rule: the supertable, its new
    columns and tags, and the child tables (named by a tag, the tag values or the record key)."""
    if current is None:
        check_new(b.stable, "table", "measurement", next(iter(b.table_lines.values()), 0))
    known = set() if current is None else {c.name for c in (*current.columns, *current.tags)}
    for k in b.column_types:
        if k not in known:
            check_new(k, "column", "field key", b.column_lines[k])
    for k in b.tag_types:
        if k not in known:
            check_new(k, "tag", "tag key", b.tag_lines[k])
    for tbname in b.tables:
        if not tbname.startswith("t_") or len(tbname) != 34:  # generated names are always legal
            check_new(tbname, "table", "child table", b.table_lines[tbname])


def schema_delta(
    current: StableSchema | None, rows: StableBatch | Iterable[SchemalessRow]
) -> tuple[list[Column], list[Column]]:
    """Columns and tags to add to ``current`` (None: to create) before writing ``rows``.

    Lengthening existing strings is in ``plan_schema(...).widen_columns/widen_tags``.
    """
    plan = plan_schema(current, rows)
    return plan.new_columns, plan.new_tags


def child_table_tags(schema: StableSchema, tags: dict[str, tuple[TDType, Any]]) -> dict[str, Any]:
    """A child table's tag values converted to ``schema``'s tag types (absent tags: None)."""
    out: dict[str, Any] = {}
    for c in schema.tags:
        got = tags.get(c.name)
        if got is None:
            out[c.name] = None
            continue
        try:
            out[c.name] = check_value(c.type, got[1])
        except (TypeError_, ValueError, TypeError, OverflowError) as e:
            raise SchemalessError(f"tag {c.name!r}: {e}", 0) from None
    return out
