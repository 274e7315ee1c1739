"""Statement objects produced by `broker.sql.parser` (plain dataclasses, compared by value).

Names follow TDengine: unquoted identifiers are lower-cased, back-quoted ones keep their
case. `db` is None when a name was not qualified (the executor applies the USE database).
Literal values are Python values: int, float, str, bool, None, or `NowValue` for NOW[±dur].
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from sqlglot import exp

from tmqgate.broker.tsdb.types import Column, NowValue, StableSchema, TypeError_, check_value

__all__ = [
    "SqlError",
    "Statement",
    "CreateDatabase",
    "DropDatabase",
    "UseDatabase",
    "CreateStable",
    "CreateTable",
    "CreateTables",
    "AlterStableAddColumn",
    "AlterStableAddTag",
    "DropStable",
    "DropTable",
    "InsertRows",
    "Insert",
    "CreateTopic",
    "DropTopic",
    "Show",
    "DropConsumerGroup",
    "Select",
    "Describe",
    "NowValue",
    "resolve_tags",
]


# An error quotes at most this much of the statement: a 1 MiB literal is not echoed back.
MAX_ERROR_MESSAGE = 300


def clip_message(message: str) -> str:
    """`message` if short, else its head and tail (the position is at the end) around a mark."""
    if len(message) <= MAX_ERROR_MESSAGE:
        return message
    return f"{message[:180]}…({len(message) - 280} characters)…{message[-100:]}"


class SqlError(Exception):
    """A statement TDengine would refuse; `position` is a 0-based offset into the SQL text;
    `code` TDengine's error code when the refusal has a specific one (e.g. 0x2617, an invalid
    identifier name), else None (the HTTP front then says syntax or statement error)."""

    def __init__(self, message: str, position: int | None = None, code: int | None = None) -> None:
        message = clip_message(message)
        super().__init__(message)
        self.message = message
        self.position = position
        self.code = code

    def __str__(self) -> str:
        return self.message


class Statement:
    """Base of every statement."""


@dataclass
class CreateDatabase(Statement):
    name: str
    if_not_exists: bool = False
    vgroups: int | None = None  # None: not given (TDengine's default is 2)
    wal_retention_period: int | None = None  # seconds; None: not given
    wal_retention_size: int | None = None  # KB; None: not given
    precision: str = "ms"
    options: dict[str, Any] = field(default_factory=dict)  # other TDengine options, lower-case keys


@dataclass
class DropDatabase(Statement):
    name: str
    if_exists: bool = False


@dataclass
class UseDatabase(Statement):
    name: str


@dataclass
class CreateStable(Statement):
    db: str | None
    name: str
    columns: list[Column]
    tags: list[Column]
    if_not_exists: bool = False

    def schema(self) -> StableSchema:
        return StableSchema(self.name, list(self.columns), list(self.tags))


def resolve_tags(
    schema: StableSchema, tag_names: list[str] | None, tags: list[Any], *, now_ms: int | None = None
) -> dict[str, Any]:
    """Map TAGS (...) values onto the supertable's tags and check them; raises SqlError.

    Without tag names the values are positional and must cover every tag; with names, the
    tags not named are NULL.
    """
    if tag_names is None:
        if len(tags) != len(schema.tags):
            raise SqlError(f"TAGS gives {len(tags)} values but {schema.name} has {len(schema.tags)} tags")
        pairs = list(zip(schema.tags, tags, strict=True))
    else:
        if len(tag_names) != len(tags):
            raise SqlError(f"{len(tag_names)} tag names but {len(tags)} tag values")
        pairs = []
        for name, value in zip(tag_names, tags, strict=True):
            col = next((t for t in schema.tags if t.name.lower() == name.lower()), None)
            if col is None:
                raise SqlError(f"unknown tag {name!r} of {schema.name}")
            pairs.append((col, value))
    out: dict[str, Any] = {t.name: None for t in schema.tags}
    for col, value in pairs:
        try:
            out[col.name] = check_value(col.type, value, now_ms=now_ms)
        except TypeError_ as e:
            raise SqlError(f"tag {col.name}: {e}") from None
    return out


@dataclass
class CreateTable(Statement):
    """CREATE TABLE t USING st [(tag names)] TAGS (values): a child table.

    `tags` holds the literal values in the order written; `tag_names` the names when given.
    Use `resolve_tags(schema)` to get {tag name: checked value}.
    """

    db: str | None
    name: str
    stable: str
    tags: list[Any]
    if_not_exists: bool = False
    tag_names: list[str] | None = None

    def resolve_tags(self, schema: StableSchema, *, now_ms: int | None = None) -> dict[str, Any]:
        return resolve_tags(schema, self.tag_names, self.tags, now_ms=now_ms)


@dataclass
class CreateTables(Statement):
    """The batch form: CREATE TABLE t1 USING st TAGS (...) t2 USING st TAGS (...)."""

    tables: list[CreateTable]


@dataclass
class AlterDatabase(Statement):
    """ALTER DATABASE name WAL_RETENTION_PERIOD n | WAL_RETENTION_SIZE n (lower-case keys)."""

    name: str
    options: dict[str, int] = field(default_factory=dict)


@dataclass
class AlterStableChange(Statement):
    """ALTER STABLE … DROP COLUMN c | MODIFY COLUMN c type | DROP TAG t | RENAME TAG t new."""

    db: str | None
    stable: str
    action: Literal["drop_column", "modify_column", "drop_tag", "rename_tag"]
    name: str
    column: Column | None = None  # MODIFY COLUMN's new type
    new_name: str | None = None  # RENAME TAG's


@dataclass
class AlterStableAddColumn(Statement):
    db: str | None
    stable: str
    column: Column


@dataclass
class AlterStableAddTag(Statement):
    db: str | None
    stable: str
    tag: Column


@dataclass
class DropStable(Statement):
    db: str | None
    name: str
    if_exists: bool = False


@dataclass
class DropTable(Statement):
    db: str | None
    name: str
    if_exists: bool = False


@dataclass
class InsertRows:
    """The rows for one table in an INSERT: `values` are rows of literals, in `columns` order
    (None: every column of the table, in schema order). `stable`/`tags` are set by the
    `INSERT INTO t USING st [(tag names)] TAGS (...)` form (create on first sight)."""

    db: str | None
    table: str
    stable: str | None = None
    tags: list[Any] | None = None
    columns: list[str] | None = None
    values: list[list[Any]] = field(default_factory=list)
    tag_names: list[str] | None = None

    def resolve_tags(self, schema: StableSchema, *, now_ms: int | None = None) -> dict[str, Any]:
        return resolve_tags(schema, self.tag_names, self.tags or [], now_ms=now_ms)


@dataclass
class Insert(Statement):
    tables: list[InsertRows]


@dataclass
class CreateTopic(Statement):
    """CREATE TOPIC: kind 'database' (db), 'stable' (db, stable, optional tag `where`) or
    'select' (db, stable, `select` tree). `sql` is the query text as written (the SELECT, or
    the WHERE condition of a stable topic); `statement` is the whole statement text."""

    name: str
    if_not_exists: bool = False
    meta: Literal["with", "only"] | None = None
    kind: Literal["database", "stable", "select"] = "database"
    db: str | None = None
    stable: str | None = None
    where: exp.Expr | None = field(default=None, compare=False)
    select: exp.Select | None = field(default=None, compare=False)
    sql: str | None = None
    statement: str = ""


@dataclass
class DropTopic(Statement):
    name: str
    force: bool = False
    if_exists: bool = False


@dataclass
class Grant(Statement):
    """GRANT / REVOKE {READ | WRITE | ALL} ON db.* {TO | FROM} user (TDengine's privileges;
    the broker maps them onto Kafka ACLs on the database's topic)."""

    privilege: Literal["read", "write", "all"]
    db: str
    user: str
    revoke: bool = False


@dataclass
class UserPassword(Statement):
    """CREATE USER name PASS 'password' / ALTER USER name PASS 'password'."""

    user: str
    password: str = field(repr=False)
    create: bool = True


@dataclass
class Show(Statement):
    what: Literal["databases", "stables", "tables", "topics", "consumers", "subscriptions", "dnodes", "vgroups"]
    db: str | None = None
    like: str | None = None


@dataclass
class DropConsumerGroup(Statement):
    group: str
    topic: str
    if_exists: bool = False
    force: bool = False


@dataclass(frozen=True)
class Window:
    """A SELECT's TDengine window clause: INTERVAL(interval[, offset]) [SLIDING(sliding)],
    STATE_WINDOW(expr) or SESSION(ts, gap); durations in ms."""

    kind: Literal["interval", "state", "session"]
    interval: int = 0
    offset: int = 0
    sliding: int = 0
    expr: exp.Expr | None = field(default=None, compare=False)  # STATE_WINDOW's expression
    gap: int = 0
    pos: int = 0  # where the clause starts in the text


@dataclass(frozen=True)
class Fill:
    """FILL(mode[, values]) of an INTERVAL query."""

    mode: Literal["none", "null", "value", "prev", "next", "linear"]
    values: tuple[Any, ...] = ()


@dataclass
class Select(Statement):
    """An ad-hoc SELECT over one table; TDengine's clauses beside standard SQL's are kept
    apart from `select` (sqlglot's tree): PARTITION BY, the window, FILL, SLIMIT/SOFFSET."""

    db: str | None
    table: str
    select: exp.Select = field(compare=False)
    sql: str = ""
    partition: list[exp.Expr] = field(default_factory=list, compare=False)
    window: Window | None = None
    fill: Fill | None = None
    slimit: int | None = None
    soffset: int = 0


@dataclass
class Describe(Statement):
    db: str | None
    table: str
