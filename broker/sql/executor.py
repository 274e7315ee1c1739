"""Runs SQL statements against the catalog and the vnode WALs.

Every statement either completes or changes nothing: checks run first, and each catalog change
is written in one storage transaction together with the meta entries TDengine would log for it
(create/alter supertable on every vnode, create child table on its vnode), so the WAL order of
meta and data is the order a WITH META topic delivers.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

import pyarrow as pa

from tmqgate.broker.sql import ast
from tmqgate.broker.sql.access import PERMISSION_DENIED, Access, Caller, Visibility, refusal
from tmqgate.broker.sql.ast import SqlError
from tmqgate.broker.sql.parser import parse, parse_script
from tmqgate.broker.sql.views import TopicDef
from tmqgate.broker.sql.worker import ParseWorker
from tmqgate.broker.tsdb.catalog import STABLE_METADATA_KEY, home_vnode, meta_payload, schema_to_json
from tmqgate.broker.tsdb.limits import schema_problem
from tmqgate.broker.tsdb.rows import RowsError, build_rows_table, encode_rows
from tmqgate.broker.tsdb.types import StableSchema, TypeError_, check_value
from tmqgate.protocol import clock
from tmqgate.storage import RowsEntry

if TYPE_CHECKING:
    from tmqgate.broker.tsdb.catalog import TsdbCatalog
    from tmqgate.storage import ProducerAppend, Store

DEFAULT_VGROUPS = 2  # TDengine's default
# Texts this long or longer are parsed in the parsing process (execute_async, broker/sql/
# worker.py); shorter ones parse in place in a few ms at most (~10 ms/KiB for the slowest
# shape, a long select list; ~3 ms/KiB for an INSERT), so they keep their order and latency.
PARSE_IN_WORKER_CHARS = 1024
# An INSERT run by execute_async checks its rows in steps of this many (~2 ms), yielding to the
# event loop between steps (a 1 MiB INSERT has ~70,000 rows: ~0.3 s of checks in one go).
CHECK_ROWS_PER_STEP = 500


@dataclass
class Result:
    """A statement's answer in the shape of TDengine's REST API."""

    columns: list[tuple[str, str, int]] = field(default_factory=lambda: [("affected_rows", "INT", 4)])
    rows: list[list[Any]] = field(default_factory=lambda: [[0]])

    @classmethod
    def affected(cls, n: int) -> Result:
        return cls(rows=[[n]])

    def to_json(self) -> dict[str, Any]:
        return {"code": 0, "column_meta": [list(c) for c in self.columns], "data": self.rows,
                "rows": len(self.rows)}



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


class TopicNames(Protocol):
    """What SQL needs of the Kafka topic registry: databases and TDengine topics share the
    Kafka topic namespace, and DDL changes the topics and views the registry holds."""

    def get(self, name: str | None) -> Any: ...

    def reload(self) -> None: ...

    def invalidate_views(self, db: str) -> None: ...

    def capacity_error(self, new_partitions: int, new_databases: int = 0) -> str | None: ...

    def make_database(self, name: str, vgroups: int, options: dict[str, Any]) -> None: ...

    def make_view(self, name: str, definition: dict[str, Any]) -> None: ...

    def drop_sql(self, topic: Any) -> None: ...


@dataclass(frozen=True)
class GroupQueries:
    """What SQL asks of the consumer groups (the broker answers from its coordinator)."""

    subscribed_to: Callable[[str], Collection[str]]  # groups with live members subscribed to a topic
    group_ids: Callable[[], Collection[str]]  # every known group
    members: Callable[[], list[dict[str, Any]]]  # live members (SHOW CONSUMERS / SUBSCRIPTIONS)
    now_ms: Callable[[], int]  # the clock the members' joined_ms is on


@dataclass(frozen=True)
class PlacementQueries:
    """What SHOW DNODES and SHOW VGROUPS ask of the broker: its nodes, and which node holds each
    replica of a vnode and in what role — one node's, or a cluster's as etcd has it."""

    dnodes: Callable[[], list[list[Any]]]  # SHOW DNODES' rows, in DNODE_COLUMNS' order
    replicas: Callable[[str, int], list[tuple[int, str]]]  # (db, vnode) → (dnode, status) each, preferred first


class SqlCluster(Protocol):
    """What SQL asks of a cluster (broker/cluster/sql.py). A SQL database made on a cluster is
    placed in etcd and led by one broker (its REPLICA copies follow it), which runs every
    statement about it (its DDL, INSERT, SELECT, SHOW of its tables, CREATE TOPIC over it);
    any other broker sends such statements there. CREATE / DROP DATABASE and DROP TOPIC go
    through etcd from any broker."""

    node_id: int

    def leader(self, db: str) -> int | None:
        """The broker leading SQL database ``db`` (-1: none live now); None: not shared."""

    async def refresh(self) -> None:
        """Read etcd now (a database or topic another broker just made or dropped)."""

    async def forward(self, node: int, text: str, db: str | None, caller: Caller) -> Result:
        """Run ``text`` on broker ``node`` as ``caller`` (its answer, or its SqlError)."""

    def check_writable(self, dbs: set[str]) -> None:
        """SqlError if this broker may not write the replicated databases ``dbs`` it leads now
        (cut off from etcd; fewer in-sync replicas than min.insync.replicas)."""

    async def settle(self, dbs: set[str]) -> None:
        """Wait until the in-sync replicas of the databases ``dbs`` this broker leads have what
        it wrote (acks=all); SqlError when they do not in time."""

    def stable_changed(self, db: str, name: str, schema: dict[str, Any] | None) -> None:
        """A supertable of ``db`` made, altered (its schema) or dropped (None) here, its leader:
        recorded in etcd with the database (in the background, in order)."""

    async def create_database(self, name: str, vgroups: int, options: dict[str, Any]) -> None:
        """Place a new SQL database, led by this broker, with ``options["replica"]`` copies of
        each vnode (SqlError if the name is taken)."""

    async def create_topic(self, definition: TopicDef) -> None:
        """Place a TDengine topic over a shared database this broker leads."""

    async def drop(self, name: str) -> None:
        """Remove a shared SQL database or TDengine topic from the cluster."""


def _databases_of(stmt: ast.Statement, db: str | None) -> set[str]:
    """The SQL databases whose leader must run `stmt` (session database `db`): those it reads
    or writes the tables of, or makes a topic over. CREATE / DROP DATABASE and DROP TOPIC
    run anywhere (through etcd), and SHOW of databases, topics and nodes is every broker's."""
    names: set[str | None]
    if isinstance(stmt, ast.Insert | ast.CreateTables):
        names = {t.db or db for t in stmt.tables}
    elif isinstance(stmt, ast.Show):
        names = {stmt.db or db} if stmt.what in ("stables", "tables", "vgroups") else set()
    elif isinstance(stmt, ast.Select | ast.Describe | ast.CreateStable | ast.CreateTable | ast.AlterStableAddColumn
                    | ast.AlterStableAddTag | ast.DropStable | ast.DropTable | ast.CreateTopic):
        names = {stmt.db or db}
    else:
        names = set()
    return {n for n in names if n}


def led_elsewhere(cluster: SqlCluster, statements: list[ast.Statement], db: str | None) -> int | None:
    """The one other broker that leads the databases of `statements` (None: they are led
    here, or not shared); SqlError when they are led by several, or one has no leader."""
    here: set[str] = set()
    there: dict[int, set[str]] = {}
    for stmt in statements:
        if isinstance(stmt, ast.UseDatabase):
            db = stmt.name
            continue
        for name in _databases_of(stmt, db):
            leader = cluster.leader(name)
            if leader is not None and leader < 0:
                raise SqlError(f"Database {name} has no live leader now (its dnode is offline)", code=SYN_NOT_LEADER)
            if leader is None or leader == cluster.node_id:
                here.add(name)
            else:
                there.setdefault(leader, set()).add(name)
    if not there:
        return None
    if len(there) > 1 or here:
        led = "; ".join(f"{', '.join(sorted(names))} on dnode {node}" for node, names in sorted(there.items()))
        raise SqlError(f"The statements use databases led by different dnodes ({led}"
                       f"{'; ' + ', '.join(sorted(here)) + ' here' if here else ''}): send them separately")
    return next(iter(there))


#: the statements that write a database's vnodes (rows, or DDL's meta entries)
_WRITES = (ast.Insert, ast.CreateTables, ast.CreateStable, ast.CreateTable, ast.AlterStableAddColumn,
           ast.AlterStableAddTag, ast.DropStable, ast.DropTable)

#: the statements whose handlers take the caller: SHOW filters its rows by what the caller may
#: DESCRIBE; a TDengine topic records its owner
_FOR_CALLER = (ast.Show, ast.CreateTopic)

#: the statements a cluster runs through etcd (`Executor._through_etcd`)
_THROUGH_ETCD = (ast.CreateDatabase, ast.DropDatabase, ast.CreateTopic, ast.DropTopic)

#: SHOW DNODES' columns (TDengine's ins_dnodes)
DNODE_COLUMNS = [("id", "INT", 4), ("endpoint", "VARCHAR", 134), ("vnodes", "SMALLINT", 2),
                 ("support_vnodes", "SMALLINT", 2), ("status", "VARCHAR", 10), ("create_time", "TIMESTAMP", 8),
                 ("reboot_time", "TIMESTAMP", 8), ("note", "VARCHAR", 256)]
_DNODE_STATUS = [name for name, _, _ in DNODE_COLUMNS].index("status")
OUT_OF_DNODES = 0x0334  # TDengine's TSDB_CODE_MND_NO_ENOUGH_DNODES: more replicas than dnodes
DB_ALREADY_EXIST = 0x0382  # TDengine's TSDB_CODE_MND_DB_ALREADY_EXIST
SYN_NOT_LEADER = 0x090C  # TDengine's TSDB_CODE_SYN_NOT_LEADER ("Sync leader is unreachable")
#: SHOW VGROUPS shows the first four replicas of a vnode, as TDengine's ins_vgroups
_VGROUP_REPLICAS = 4


def _database(store: Store, name: str | None) -> Any:
    if name is None:
        raise SqlError("Database not specified or available (USE db, or qualify the name as db.table)")
    info = store.get_database(name)
    if info is None or info.kind != "tsdb":
        raise SqlError(f"Database not exist: {name}")
    return info


def _stable(catalog: TsdbCatalog, db: str, name: str) -> StableSchema:
    found = catalog.find_stable(db, name)
    if found is None:
        raise SqlError(f"STable not exist: {db}.{name}")
    schema = catalog.schema(db, found)
    assert schema is not None
    return schema


def define_topic(store: Store, catalog: TsdbCatalog, stmt: ast.CreateTopic, db: str | None,
                 owner: Caller | None = None) -> TopicDef:
    """Check a CREATE TOPIC against the catalog and compile its view once (errors now,
    not at the first Fetch); `owner`: who makes it (its READ on the database is checked at
    every Fetch of the view while an authorizer is on)."""
    from tmqgate.broker.sql.expr import compile_filter, compile_projection

    info = _database(store, stmt.db or db)
    stable = None
    if stmt.kind != "database":
        schema = _stable(catalog, info.name, stmt.stable or "")
        stable = schema.name
        if stmt.kind == "select":
            if stmt.meta is not None:
                raise SqlError("WITH META / ONLY META is only for database and supertable topics")
            assert stmt.select is not None
            compile_projection(stmt.select, schema)
        elif stmt.where is not None:
            compile_filter(stmt.where, schema, tags_only=True)
    # The statement is kept as written; the view needs only its SELECT or WHERE, and the
    # database is stored beside it.
    return TopicDef(stmt.name, stmt.kind, info.name, stable, stmt.meta, stmt.statement,
                    owner.principal if owner is not None else None, owner.host if owner is not None else "")


def topic_definition(store: Store, catalog: TsdbCatalog, text: str, db: str | None,
                     owner: Caller | None = None) -> TopicDef:
    """The definition of the TDengine topic a `CREATE TOPIC …` statement text makes (as the
    tmq.as topic config does) for `owner`, checked against the catalog; SqlError if it cannot
    be made."""
    stmt = parse(text)
    assert isinstance(stmt, ast.CreateTopic)
    return define_topic(store, catalog, stmt, db, owner)


class Executor:
    """Executes statements; `db` is the session's current database (USE).

    It holds only its collaborators — the store, the catalog, the topic registry, the data
    notifier's `notify` and the group queries — never a statement's or session's state (that
    is passed along in each call), so the broker's one Executor serves every caller."""

    def __init__(self, store: Store, catalog: TsdbCatalog, topics: TopicNames,
                 notify: Callable[[str, int], None], groups: GroupQueries,
                 parse_timeout_ms: int = 30_000, access: Access | None = None,
                 placement: PlacementQueries | None = None, cluster: SqlCluster | None = None) -> None:
        self.store = store
        self.catalog = catalog
        self.topics = topics
        self.notify = notify
        self.groups = groups
        # SHOW DNODES / SHOW VGROUPS ask the broker (broker/dnodes.py); None: not answered
        self.placement = placement
        # Long texts are parsed here, one at a time; started on the first one (worker.py).
        self.parser = ParseWorker(parse_timeout_ms / 1000)
        # The broker's authorizer when one is on (broker/sql/access.py): every statement is
        # checked for its caller; None: nothing is checked.
        self.access = access
        # On a cluster: where each database is led, and the DDL that goes through etcd.
        self.cluster = cluster

    def close(self) -> None:
        """Stop the parsing process (the broker's stop)."""
        self.parser.close()

    def execute(self, text: str, db: str | None = None, caller: Caller | None = None) -> Result:
        """Run every statement of `text` as `caller` (default: User:ANONYMOUS); returns the
        last one's result."""
        return self._execute(parse_script(text), db, caller)

    async def execute_async(self, text: str, db: str | None = None, caller: Caller | None = None) -> Result:
        """`execute` for the event loop, which it never holds for long: a long text is parsed
        in the parsing process (parsing is pure, text to statements; 1 MiB of SQL takes
        seconds of pure Python, which a thread would not take off the loop: it holds the GIL);
        raises SqlError, or the worker's ParseTimeout / ParseWorkerDied. The statements run
        here, on the loop, which alone uses the store; an INSERT's rows are checked in steps
        (`_insert_async`)."""
        short = len(text) < PARSE_IN_WORKER_CHARS
        if short and self.cluster is None:
            return self.execute(text, db, caller)
        statements = parse_script(text) if short else await self.parser.parse(text)
        if not statements:
            raise SqlError("empty statement", 0)
        caller = caller or Caller()
        if self.cluster is not None:
            if any(isinstance(stmt, _THROUGH_ETCD) for stmt in statements) or any(
                    self.topics.get(name) is None for name in self._databases_in(statements, db)):
                await self.cluster.refresh()  # what another broker just did is seen here
            leader = led_elsewhere(self.cluster, statements, db)
            if leader is not None:
                if caller.forwarded:  # sent here as the leader, which this broker is no longer
                    raise SqlError(f"dnode {leader} leads the database now, not this one; send the statement again",
                                   code=SYN_NOT_LEADER)
                return await self.cluster.forward(leader, text, db, caller)
        written = self._databases_in(statements, db, written=True) if self.cluster is not None else set()
        if self.cluster is not None:
            self.cluster.check_writable(written)
        result = Result.affected(0)
        for stmt in statements:
            if isinstance(stmt, ast.Insert) and not short:
                self._check(stmt, db, caller)
                result = await self._insert_async(stmt, db)
            elif self.cluster is not None and isinstance(stmt, _THROUGH_ETCD):
                self._check(stmt, db, caller)
                result = await self._through_etcd(self.cluster, stmt, db, caller)
            else:
                result, db = self._step(stmt, db, caller)
        if self.cluster is not None and written:
            await self.cluster.settle(written)  # answered once the in-sync replicas have it
        return result

    @staticmethod
    def _databases_in(statements: list[ast.Statement], db: str | None, *, written: bool = False) -> set[str]:
        """The databases `statements` use (`_databases_of`, and those USE names) — with
        `written`, only those whose vnodes they write (rows, or the meta of DDL)."""
        names: set[str] = set()
        for stmt in statements:
            if isinstance(stmt, ast.UseDatabase):
                db = stmt.name
                if not written:
                    names.add(db)
            elif not written or isinstance(stmt, _WRITES):
                names |= _databases_of(stmt, db)
        return names

    async def _through_etcd(self, cluster: SqlCluster, stmt: ast.Statement, db: str | None,
                            caller: Caller) -> Result:
        """CREATE / DROP DATABASE and CREATE / DROP TOPIC on a cluster: checked here as on one
        node, then placed in (or removed from) etcd, which every broker applies."""
        if isinstance(stmt, ast.CreateDatabase):
            planned = self._plan_database(stmt)
            if planned is not None:
                await cluster.create_database(stmt.name, *planned)
                self.topics.reload()
            return Result.affected(0)
        if isinstance(stmt, ast.DropDatabase):
            info = self._droppable_database(stmt)
            if info is not None:
                if cluster.leader(info.name) is None:  # a database of this node alone
                    self._drop_database(info)
                else:
                    await cluster.drop(info.name)
                    self.topics.reload()
            return Result.affected(0)
        if isinstance(stmt, ast.CreateTopic):
            definition = self._plan_topic(stmt, db, caller)
            if definition is not None:
                if cluster.leader(definition.db) is None:  # over a database of this node alone
                    self.topics.make_view(stmt.name, definition.to_json())
                else:
                    await cluster.create_topic(definition)
                    self.topics.reload()
            return Result.affected(0)
        assert isinstance(stmt, ast.DropTopic)
        dropped = self._droppable_topic(stmt)
        if dropped is not None:
            if cluster.leader(self.store.tmq_topics()[stmt.name].definition["db"]) is None:
                self._drop_topic(stmt.name)
            else:
                await cluster.drop(stmt.name)
                self.topics.reload()
        return Result.affected(0)

    def _execute(self, statements: list[ast.Statement], db: str | None, caller: Caller | None = None) -> Result:
        if not statements:
            raise SqlError("empty statement", 0)
        result = Result.affected(0)
        for stmt in statements:
            result, db = self._step(stmt, db, caller)
        return result

    def _check(self, stmt: ast.Statement, db: str | None, caller: Caller | None) -> None:
        """Refuse `stmt` if the caller may not run it (with an authorizer on)."""
        if self.access is not None:
            why = refusal(self.access, caller or Caller(), stmt, db)
            if why is not None:
                raise SqlError(why, code=PERMISSION_DENIED)

    def _step(self, stmt: ast.Statement, db: str | None, caller: Caller | None = None) -> tuple[Result, str | None]:
        """Run one statement of a script as `caller`: its result and the current database after it."""
        self._check(stmt, db, caller)
        if isinstance(stmt, ast.UseDatabase):
            self._database(stmt.name)
            return Result.affected(0), stmt.name
        return self._run(stmt, db, caller or Caller()), db

    # -- helpers --------------------------------------------------------------------------

    def _database(self, name: str | None) -> Any:
        return _database(self.store, name)

    def _stable(self, db: str, name: str) -> StableSchema:
        return _stable(self.catalog, db, name)

    def _name_free(self, name: str) -> None:
        """Databases are Kafka topics too, so a database, a Kafka topic and a TDengine topic
        may not share a name."""
        if self.topics.get(name) is not None:
            raise SqlError(f"Name already used by a topic or database: {name}")

    def _changed(self, db: str, stable: str | None = None) -> None:
        self.catalog.invalidate(db, stable)
        self.topics.invalidate_views(db)

    def _run(self, stmt: ast.Statement, db: str | None, caller: Caller) -> Result:
        handler: Callable[..., Result] | None = getattr(self, "_" + type(stmt).__name__, None)
        if handler is None:
            raise SqlError(f"statement not supported: {type(stmt).__name__}")
        if isinstance(stmt, _FOR_CALLER):
            return handler(stmt, db, caller)
        return handler(stmt, db)

    # -- databases ------------------------------------------------------------------------

    def _CreateDatabase(self, stmt: ast.CreateDatabase, _db: str | None) -> Result:
        planned = self._plan_database(stmt)
        if planned is not None:
            self.topics.make_database(stmt.name, *planned)
        return Result.affected(0)

    def _plan_database(self, stmt: ast.CreateDatabase) -> tuple[int, dict[str, Any]] | None:
        """A new database's vnodes and options, checked (None: it exists, IF NOT EXISTS)."""
        if self.store.get_database(stmt.name) is not None or self.topics.get(stmt.name) is not None:
            if stmt.if_not_exists and self.store.get_database(stmt.name) is not None:
                return None
            raise SqlError(f"Database already exists: {stmt.name}", code=DB_ALREADY_EXIST)
        vgroups = stmt.vgroups if stmt.vgroups is not None else DEFAULT_VGROUPS
        if not 1 <= vgroups <= 1024:
            raise SqlError(f"Invalid option vgroups: {vgroups} (must be in 1..1024)")
        refused = self.topics.capacity_error(vgroups, 1)  # the broker's max_databases / max_partitions
        if refused is not None:
            raise SqlError(refused)
        replica = stmt.options.get("replica", 1)
        if replica > 1:  # never a silent single copy: as many dnodes as copies, or refused
            ready = sum(1 for row in self._placement().dnodes() if row[_DNODE_STATUS] == "ready")
            if replica > ready:
                raise SqlError("Out of dnodes", code=OUT_OF_DNODES)
        options = dict(stmt.options)
        options.update(precision=stmt.precision,
                       wal_retention_period=-1 if stmt.wal_retention_period is None else stmt.wal_retention_period,
                       wal_retention_size=-1 if stmt.wal_retention_size is None else stmt.wal_retention_size)
        return vgroups, options

    def _DropDatabase(self, stmt: ast.DropDatabase, _db: str | None) -> Result:
        info = self._droppable_database(stmt)
        if info is not None:
            self._drop_database(info)
        return Result.affected(0)

    def _droppable_database(self, stmt: ast.DropDatabase) -> Any:
        """The database to drop, checked (None: there is none, IF EXISTS)."""
        info = self.store.get_database(stmt.name)
        if info is None or info.kind != "tsdb":
            if stmt.if_exists:
                return None
            raise SqlError(f"Database not exist: {stmt.name}")
        users = [name for name, t in self.store.tmq_topics().items() if t.definition["db"] == stmt.name]
        if users:
            raise SqlError(f"Topic must be dropped first: {', '.join(sorted(users))}")
        return info

    def _drop_database(self, info: Any) -> None:
        self.topics.drop_sql(self.topics.get(info.name))
        for vnode in range(info.vgroups):  # a Fetch waiting on it answers at once
            self.notify(info.name, vnode)

    # -- supertables and child tables -----------------------------------------------------

    def _CreateStable(self, stmt: ast.CreateStable, db: str | None) -> Result:
        info = self._database(stmt.db or db)
        if self.catalog.find_stable(info.name, stmt.name) is not None:
            if stmt.if_not_exists:
                return Result.affected(0)
            raise SqlError(f"STable already exists: {stmt.name}")
        if stmt.name in self.store.child_tables(info.name):
            raise SqlError(f"Table already exists: {stmt.name}")
        self.write_stable_change(info, None, stmt.schema())
        return Result.affected(0)

    def _write_stable(self, info: Any, schema: StableSchema, *, create: bool, details: dict[str, Any]) -> None:
        """Store the supertable's schema and log the change on every vnode, atomically; a
        schema past TDengine's limits (tsdb/limits.py) is refused with its code, whichever
        statement or schemaless write made it."""
        problem = schema_problem(schema)
        if problem is not None:
            raise SqlError(problem.message, code=problem.code)
        payload = meta_payload("create" if create else "alter", "super", schema.name, stable=schema.name, **details)
        with self.store.transaction() as tx:
            if create:
                tx.create_stable(info.name, schema.name, schema_to_json(schema))
            else:
                tx.alter_stable(info.name, schema.name, schema_to_json(schema))
            for vnode in range(info.vgroups):
                tx.append_meta(info.name, vnode, payload)
        if self.cluster is not None:
            self.cluster.stable_changed(info.name, schema.name, schema_to_json(schema))
        self._changed(info.name, schema.name)
        for vnode in range(info.vgroups):
            self.notify(info.name, vnode)

    def write_stable_change(self, info: Any, current: StableSchema | None, schema: StableSchema) -> None:
        """Create `schema`, or alter `current` into it (schemaless writes add and widen columns
        and tags), logging it as TDengine would."""
        if current is None:
            self._write_stable(info, schema, create=True, details={
                "columns": [{"name": c.name, "type": str(c.type)} for c in schema.columns],
                "tags": [{"name": t.name, "type": str(t.type)} for t in schema.tags]})
            return
        before = {c.name: c for c in (*current.columns, *current.tags)}
        changes = [{"name": c.name, "type": str(c.type), "tag": c in schema.tags,
                    "change": "add" if c.name not in before else "modify"}
                   for c in (*schema.columns, *schema.tags) if before.get(c.name) != c]
        self._write_stable(info, schema, create=False, details={"alterType": "schemaless", "changes": changes})

    def _AlterStableAddColumn(self, stmt: ast.AlterStableAddColumn, db: str | None) -> Result:
        return self._alter_add(stmt.db or db, stmt.stable, stmt.column, tag=False)

    def _AlterStableAddTag(self, stmt: ast.AlterStableAddTag, db: str | None) -> Result:
        return self._alter_add(stmt.db or db, stmt.stable, stmt.tag, tag=True)

    def _alter_add(self, db: str | None, stable: str, column: Any, *, tag: bool) -> Result:
        info = self._database(db)
        schema = self._stable(info.name, stable)
        if schema.find(column.name) is not None:
            raise SqlError(f"Duplicated column names: {column.name}")
        new = StableSchema(schema.name, list(schema.columns) + ([] if tag else [column]),
                           list(schema.tags) + ([column] if tag else []))
        self._write_stable(info, new, create=False, details={
            "alterType": "add_tag" if tag else "add_column", "colName": column.name, "colType": str(column.type)})
        return Result.affected(0)

    def _CreateTable(self, stmt: ast.CreateTable, db: str | None) -> Result:
        info = self._database(stmt.db or db)
        if stmt.name in self.store.child_tables(info.name):
            if stmt.if_not_exists:
                return Result.affected(0)
            raise SqlError(f"Table already exists: {stmt.name}")
        schema = self._stable(info.name, stmt.stable)
        self.create_child(info, stmt.name, schema, stmt.resolve_tags(schema, now_ms=clock.now_ms()))
        return Result.affected(0)

    def _CreateTables(self, stmt: ast.CreateTables, db: str | None) -> Result:
        for table in stmt.tables:
            self._CreateTable(table, db)
        return Result.affected(0)

    def create_child(self, info: Any, name: str, schema: StableSchema, tags: dict[str, Any],
                     vnode: int | None = None) -> int:
        """Create a child table with its meta entry on `vnode` (by default its home vnode, where
        SQL writes its rows; schemaless writes pass the partition the producer chose)."""
        if self.catalog.find_stable(info.name, name) is not None:
            raise SqlError(f"Table already exists: {name} is a supertable")
        if vnode is None:
            vnode = home_vnode(name, info.vgroups)
        payload = meta_payload("create", "child", name, stable=schema.name, using=schema.name,
                               tags=[{"name": t.name, "type": str(t.type), "value": tags.get(t.name)}
                                     for t in schema.tags])
        with self.store.transaction() as tx:
            tx.create_child_table(info.name, name, schema.name, tags, vnode)
            tx.append_meta(info.name, vnode, payload)
        self.catalog.invalidate(info.name, schema.name)
        self.notify(info.name, vnode)
        return vnode

    def _DropStable(self, stmt: ast.DropStable, db: str | None) -> Result:
        info = self._database(stmt.db or db)
        name = self.catalog.find_stable(info.name, stmt.name)
        if name is None:
            if stmt.if_exists:
                return Result.affected(0)
            raise SqlError(f"STable not exist: {stmt.name}")
        users = [t for t, d in self.store.tmq_topics().items()
                 if d.definition["db"] == info.name and d.definition.get("stable") == name]
        if users:
            raise SqlError(f"Topic must be dropped first: {', '.join(sorted(users))}")
        payload = meta_payload("drop", "super", name, stable=name)
        with self.store.transaction() as tx:  # logged on every vnode, as TDengine's (a replica applies it)
            tx.drop_stable(info.name, name)
            for vnode in range(info.vgroups):
                tx.append_meta(info.name, vnode, payload)
        if self.cluster is not None:
            self.cluster.stable_changed(info.name, name, None)
        self._changed(info.name, name)
        for vnode in range(info.vgroups):
            self.notify(info.name, vnode)
        return Result.affected(0)

    def _DropTable(self, stmt: ast.DropTable, db: str | None) -> Result:
        info = self._database(stmt.db or db)
        if stmt.name not in self.store.child_tables(info.name):
            if stmt.if_exists:
                return Result.affected(0)
            raise SqlError(f"Table does not exist: {stmt.name}")
        child = self.store.child_tables(info.name)[stmt.name]
        payload = meta_payload("drop", "child", stmt.name, stable=child.stable, tableNameList=[stmt.name])
        with self.store.transaction() as tx:  # logged on its vnode, as TDengine's
            tx.drop_child_table(info.name, stmt.name)
            tx.append_meta(info.name, child.vnode, payload)
        self.catalog.invalidate(info.name, child.stable)
        self.notify(info.name, child.vnode)
        return Result.affected(0)

    # -- writes ---------------------------------------------------------------------------

    def _Insert(self, stmt: ast.Insert, db: str | None) -> Result:
        """Check everything, then build the tables, then write: a failed INSERT writes nothing."""
        now = clock.now_ms()
        creates, checked = self._check_insert(stmt, db, now)
        tables = self._group_insert(checked)
        self._write_insert(creates, tables)
        return Result.affected(sum(len(entry.rows) for entry in checked))

    def _check_insert(self, stmt: ast.Insert, db: str | None,
                      now: int) -> tuple[list[_ChildCreate], list[_CheckedRows]]:
        """Resolve each VALUES clause's table and columns and check every value, in statement
        order (so the first error is the one reported), before anything is written; returns the
        child tables the USING clauses create, and each clause's rows as checked values."""
        creates, targets = self._plan_insert(stmt, db, now)
        checked = [_CheckedRows(info.name, schema, vnode, rows.table,
                                [self._check_row(schema, cols, row, now) for row in rows.values])
                   for rows, (info, schema, vnode, cols) in zip(stmt.tables, targets, strict=True)]
        return creates, checked

    def _plan_insert(self, stmt: ast.Insert, db: str | None,
                     now: int) -> tuple[list[_ChildCreate], list[tuple[Any, StableSchema, int, list[Any]]]]:
        """Each VALUES clause's (database, supertable, vnode, columns), resolved and checked in
        statement order, and the child tables the USING clauses create; no row is looked at."""
        creates: dict[tuple[str, str], _ChildCreate] = {}  # by (database, table), in order
        targets = []
        for rows in stmt.tables:
            info, schema, vnode = self._insert_target(rows, db, creates, now)
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

    async def _insert_async(self, stmt: ast.Insert, db: str | None) -> Result:
        """`_Insert` in bounded steps: the rows are checked, then grouped and built into Arrow
        tables, CHECK_ROWS_PER_STEP at a time with the loop free in between; then, with no
        yield between the last look at the catalog and the writes, the plan is resolved again
        and, if a concurrent statement
        changed a table it uses (a supertable altered or dropped, a child table created), the
        checks start over (twice at most, then the INSERT is refused, nothing written). The
        writes themselves are `_write_insert`'s, on the loop like every store write."""
        for _ in range(3):
            now = clock.now_ms()
            creates, targets = self._plan_insert(stmt, db, now)
            checked: list[_CheckedRows] = []
            step = _Steps()
            for rows, (info, schema, vnode, cols) in zip(stmt.tables, targets, strict=True):
                values = []
                for start in range(0, len(rows.values), CHECK_ROWS_PER_STEP):
                    chunk = rows.values[start:start + CHECK_ROWS_PER_STEP]
                    values += [self._check_row(schema, cols, row, now) for row in chunk]
                    await step.done(len(chunk))
                checked.append(_CheckedRows(info.name, schema, vnode, rows.table, values))
            tables = await self._build_insert_async(checked)
            again_creates, again = self._plan_insert(stmt, db, now)
            same = len(again_creates) == len(creates) and all(
                a[0] is b[0] and a[1] is b[1] and a[2] == b[2] for a, b in zip(again, targets, strict=True))
            if same:
                self._write_insert(creates, tables)
                return Result.affected(sum(len(entry.rows) for entry in checked))
        raise SqlError("the tables of this INSERT kept changing while it was checked; nothing written")

    def _insert_target(self, rows: ast.InsertRows, db: str | None, creates: dict[tuple[str, str], _ChildCreate],
                       now: int) -> tuple[Any, StableSchema, int]:
        """The database, supertable and vnode of a VALUES clause's table: an existing child
        table, one an earlier clause creates, or a new one its USING clause adds to `creates`."""
        info = self._database(rows.db or db)
        child = self.store.child_tables(info.name).get(rows.table)
        if child is not None:
            return info, self._stable(info.name, child.stable), child.vnode
        planned = creates.get((info.name, rows.table))
        if planned is not None:
            schema = planned[2]
        elif rows.stable is None:
            raise SqlError(f"Table does not exist: {rows.table}")
        else:
            schema = self._stable(info.name, rows.stable)
            creates[(info.name, rows.table)] = (info, rows.table, schema, rows.resolve_tags(schema, now_ms=now))
        return info, schema, home_vnode(rows.table, info.vgroups)

    @staticmethod
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

    @staticmethod
    def _group_insert(checked: list[_CheckedRows]) -> dict[tuple[str, str, int], pa.Table]:
        """One rows table per (database, supertable, vnode), whichever child tables and VALUES
        clauses its rows came from, since the WAL takes a supertable's rows as one entry per
        vnode. Building it may still refuse a value, and nothing has been written yet."""
        groups: _Groups = {}
        for entry in checked:
            Executor._group_rows(groups, entry, entry.rows)
        return Executor._build_groups(groups)

    @staticmethod
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
                Executor._group_rows(groups, entry, chunk)
                for key, table in Executor._build_groups(groups).items():
                    parts.setdefault(key, []).append(table)
                await step.done(len(chunk))
        return {key: tables[0] if len(tables) == 1 else pa.concat_tables(tables).combine_chunks()
                for key, tables in parts.items()}

    @staticmethod
    def _group_rows(groups: _Groups, entry: _CheckedRows, rows: list[dict[str, Any]]) -> None:
        key = (entry.db, entry.schema.name, entry.vnode)
        _, tbnames, values = groups.setdefault(key, (entry.schema, [], defaultdict(list)))
        for given in rows:
            tbnames.append(entry.table)
            for c in entry.schema.columns:
                values[c.name].append(given.get(c.name))

    @staticmethod
    def _build_groups(groups: _Groups) -> dict[tuple[str, str, int], pa.Table]:
        tables = {}
        for key, (schema, tbnames, values) in groups.items():
            try:
                tables[key] = build_rows_table(schema, tbnames, values)
            except RowsError as exc:
                raise SqlError(str(exc)) from None
        return tables

    def _write_insert(self, creates: list[_ChildCreate], tables: dict[tuple[str, str, int], pa.Table]) -> None:
        """Create the USING clauses' child tables (their meta entries come before their rows in
        the WAL, as a WITH META topic delivers them), then append each group's rows."""
        for info, name, schema, tags in creates:
            self.create_child(info, name, schema, tags)
        for (dbname, stable, vnode), table in tables.items():
            self.append_rows(dbname, stable, vnode, table)

    def append_rows(self, db: str, stable: str, vnode: int, table: pa.Table) -> int:
        """Append one supertable's rows to a vnode's WAL (one version per row); wake fetches."""
        return self.append_rows_many(db, vnode, ((stable, table),))

    def append_rows_many(self, db: str, vnode: int, tables: Iterable[tuple[str, pa.Table]],
                         producer: ProducerAppend | None = None,
                         txn_producer: tuple[int, int] | None = None) -> int:
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
        base = self.store.append_rows_many(db, vnode, entries, producer=producer, txn_producer=txn_producer)
        self.notify(db, vnode)
        return base

    # -- topics ---------------------------------------------------------------------------

    def _CreateTopic(self, stmt: ast.CreateTopic, db: str | None, caller: Caller) -> Result:
        definition = self._plan_topic(stmt, db, caller)
        if definition is not None:
            self.topics.make_view(stmt.name, definition.to_json())
        return Result.affected(0)

    def _plan_topic(self, stmt: ast.CreateTopic, db: str | None, owner: Caller) -> TopicDef | None:
        """A new TDengine topic's checked definition, made by `owner` (None: it exists, IF NOT EXISTS)."""
        if self.store.tmq_topic(stmt.name) is not None:
            if stmt.if_not_exists:
                return None
            raise SqlError(f"Topic already exists: {stmt.name}")
        self._name_free(stmt.name)
        return self.define_topic(stmt, db, owner)

    def define_topic(self, stmt: ast.CreateTopic, db: str | None, owner: Caller | None = None) -> TopicDef:
        return define_topic(self.store, self.catalog, stmt, db, owner)

    def _DropTopic(self, stmt: ast.DropTopic, _db: str | None) -> Result:
        if self._droppable_topic(stmt) is not None:
            self._drop_topic(stmt.name)
        return Result.affected(0)

    def _droppable_topic(self, stmt: ast.DropTopic) -> str | None:
        """The TDengine topic to drop, checked (None: there is none, IF EXISTS)."""
        if self.store.tmq_topic(stmt.name) is None:
            if stmt.if_exists:
                return None
            raise SqlError(f"Topic not exist: {stmt.name}")
        groups = self.groups.subscribed_to(stmt.name)
        if groups and not stmt.force:
            raise SqlError(f"Topic being consumed by group(s) {', '.join(sorted(groups))}; "
                           "unsubscribe first or use DROP TOPIC ... FORCE")
        return stmt.name

    def _drop_topic(self, name: str) -> None:
        dropped = self.topics.get(name)
        self.topics.drop_sql(dropped)
        for vnode in range(dropped.partitions):  # a Fetch waiting on it answers at once
            self.notify(dropped.db, vnode)

    # -- users and privileges (the broker's SASL users and Kafka ACLs) -------------------------

    def _Grant(self, stmt: ast.Grant, _db: str | None) -> Result:
        if self.access is None:
            raise SqlError('GRANT and REVOKE need the broker\'s authorizer (authorizer = "acl")')
        if self.topics.get(stmt.db) is None:
            raise SqlError(f"Database not exist: {stmt.db}")
        self.access.grant(stmt.privilege, stmt.db, stmt.user, stmt.revoke)
        return Result.affected(0)

    def _UserPassword(self, stmt: ast.UserPassword, _db: str | None) -> Result:
        if self.access is None:
            raise SqlError('CREATE USER and ALTER USER need the broker\'s authorizer (authorizer = "acl")')
        self.access.set_password(stmt.user, stmt.password, stmt.create)
        return Result.affected(0)

    def _DropConsumerGroup(self, stmt: ast.DropConsumerGroup, _db: str | None) -> Result:
        if self.topics.get(stmt.topic) is None:
            raise SqlError(f"Topic not exist: {stmt.topic}")
        if stmt.group not in self.store.offset_groups() and stmt.group not in self.groups.group_ids():
            if stmt.if_exists:
                return Result.affected(0)
            raise SqlError(f"Consumer group not exist: {stmt.group}")
        if stmt.group in self.groups.subscribed_to(stmt.topic) and not stmt.force:
            raise SqlError(f"Consumer group {stmt.group} is being used by active consumers of {stmt.topic}")
        self.store.delete_offsets(stmt.group, stmt.topic)
        return Result.affected(0)

    # -- SHOW and DESCRIBE ----------------------------------------------------------------

    def _Show(self, stmt: ast.Show, db: str | None, caller: Caller) -> Result:
        show: Callable[[ast.Show, str | None, Caller], Result] = getattr(self, "_show_" + stmt.what)
        return show(stmt, db, caller)

    def _show_databases(self, _stmt: ast.Show, _db: str | None, caller: Caller) -> Result:
        dbs = [d for d in self.store.databases() if d.kind == "tsdb"]
        shown = Visibility(self.access, caller).of("TOPIC", (d.name for d in dbs))
        rows = [[d.name, d.created_ms, d.vgroups, d.options.get("wal_retention_period", -1),
                 d.options.get("wal_retention_size", -1)]
                for d in dbs if d.name in shown]
        return Result([("name", "VARCHAR", 64), ("create_time", "TIMESTAMP", 8), ("vgroups", "INT", 4),
                       ("wal_retention_period", "INT", 4), ("wal_retention_size", "BIGINT", 8)],
                      sorted(rows))

    def _show_stables(self, stmt: ast.Show, db: str | None, _caller: Caller) -> Result:
        info = self._database(stmt.db or db)
        rows = []
        for name in self.catalog.stable_names(info.name):
            schema = self.catalog.schema(info.name, name)
            assert schema is not None
            rows.append([name, info.name, len(schema.columns), len(schema.tags)])
        return Result([("stable_name", "VARCHAR", 192), ("db_name", "VARCHAR", 64), ("columns", "INT", 4),
                       ("tags", "INT", 4)], rows)

    def _show_tables(self, stmt: ast.Show, db: str | None, _caller: Caller) -> Result:
        info = self._database(stmt.db or db)
        rows = [[c.name, info.name, c.stable, c.vnode] for c in self.store.child_tables(info.name).values()]
        return Result([("table_name", "VARCHAR", 192), ("db_name", "VARCHAR", 64),
                       ("stable_name", "VARCHAR", 192), ("vgroup_id", "INT", 4)], sorted(rows))

    def _show_topics(self, _stmt: ast.Show, _db: str | None, caller: Caller) -> Result:
        rows = []
        topics = self.store.tmq_topics()
        shown = Visibility(self.access, caller).of("TOPIC", topics)
        for name, t in sorted(topics.items()):
            if name not in shown:
                continue
            d = t.definition
            rows.append([name, d["db"], t.created_ms, d["statement"], d["kind"], d.get("meta") or "none"])
        return Result([("topic_name", "VARCHAR", 192), ("db_name", "VARCHAR", 64),
                       ("create_time", "TIMESTAMP", 8), ("sql", "VARCHAR", 16384), ("type", "VARCHAR", 16),
                       ("meta", "VARCHAR", 8)], rows)

    def _show_consumers(self, _stmt: ast.Show, _db: str | None, caller: Caller) -> Result:
        """A row per live member of a group the caller may describe, listing the topics of its
        subscription the caller may describe."""
        wall, group_now = clock.now_ms(), self.groups.now_ms()
        members = self.groups.members()
        visible = Visibility(self.access, caller)
        groups = visible.of("GROUP", {m["group"] for m in members})
        topics = visible.of("TOPIC", {t for m in members for t in m["topics"]})
        rows = [[m["member_id"], m["group"], m["client_id"], m["state"],
                 ",".join(t for t in m["topics"] if t in topics),
                 (group_now - m["joined_ms"]) // 1000, wall - (group_now - m["joined_ms"])]
                for m in members if m["group"] in groups]
        return Result([("consumer_id", "VARCHAR", 192), ("consumer_group", "VARCHAR", 192),
                       ("client_id", "VARCHAR", 192), ("status", "VARCHAR", 20), ("topics", "VARCHAR", 1024),
                       ("up_time", "BIGINT", 8), ("subscribe_time", "TIMESTAMP", 8)], rows)

    def _show_subscriptions(self, _stmt: ast.Show, _db: str | None, caller: Caller) -> Result:
        """One row per (topic, group, vnode): the owning consumer, the committed offset, and
        the versions consumed (committed offset minus the log start); only of the groups and
        topics the caller may describe (as ListGroups and OffsetFetch)."""
        owners: dict[tuple[str, str, int], str] = {}
        for m in self.groups.members():
            for topic, partitions in m["assignment"].items():
                for p in partitions:
                    owners[(m["group"], topic, p)] = m["member_id"]
        tmq = self.store.tmq_topics()
        visible = Visibility(self.access, caller)
        topics = visible.of("TOPIC", tmq)
        rows = []
        for group in sorted(visible.of("GROUP", set(self.store.offset_groups()) | {k[0] for k in owners})):
            committed = self.store.fetch_offsets(group)
            keys = set(committed) | {(t, p) for g, t, p in owners if g == group}
            for topic, vnode in sorted(keys):
                if topic not in topics:
                    continue
                db = tmq[topic].definition["db"]
                offset = committed[(topic, vnode)].offset if (topic, vnode) in committed else -1
                consumed = max(0, offset - self.store.log_start(db, vnode)) if offset >= 0 else 0
                rows.append([topic, group, vnode, owners.get((group, topic, vnode)), offset, consumed])
        return Result([("topic_name", "VARCHAR", 192), ("consumer_group", "VARCHAR", 192),
                       ("vgroup_id", "INT", 4), ("consumer_id", "VARCHAR", 192), ("offset", "BIGINT", 8),
                       ("rows", "BIGINT", 8)], rows)

    def _placement(self) -> PlacementQueries:
        if self.placement is None:
            raise SqlError("This executor does not know the broker's nodes")
        return self.placement

    def _show_dnodes(self, _stmt: ast.Show, _db: str | None, _caller: Caller) -> Result:
        return Result(list(DNODE_COLUMNS), self._placement().dnodes())

    def _show_vgroups(self, stmt: ast.Show, db: str | None, _caller: Caller) -> Result:
        """One row per vnode of the database (a SQL database's, or a Kafka topic's): its child
        tables, and each replica's node and role — leader, follower (in sync), learner (catching
        up, out of the ISR), candidate (no leader now), offline (its node is down)."""
        name = stmt.db or db
        if name is None:
            raise SqlError("Database not specified or available (USE db, or SHOW db.VGROUPS)")
        info = self.store.get_database(name)
        if info is None:
            raise SqlError(f"Database not exist: {name}")
        tables = [0] * info.vgroups
        if info.kind == "tsdb":
            for child in self.store.child_tables(info.name).values():
                tables[child.vnode] += 1
        replicas = self._placement().replicas
        rows = []
        for vnode in range(info.vgroups):
            cells: list[Any] = [None] * (2 * _VGROUP_REPLICAS)
            for i, (node, status) in enumerate(replicas(info.name, vnode)[:_VGROUP_REPLICAS]):
                cells[2 * i:2 * i + 2] = [node, status]
            rows.append([vnode, info.name, tables[vnode], *cells, 0, 0, 0])
        columns = [("vgroup_id", "INT", 4), ("db_name", "VARCHAR", 64), ("tables", "INT", 4)]
        for i in range(1, _VGROUP_REPLICAS + 1):
            columns += [(f"v{i}_dnode", "SMALLINT", 2), (f"v{i}_status", "VARCHAR", 9)]
        columns += [("cacheload", "INT", 4), ("cacheelements", "INT", 4), ("tsma", "TINYINT", 1)]
        return Result(columns, rows)

    def _Describe(self, stmt: ast.Describe, db: str | None) -> Result:
        info = self._database(stmt.db or db)
        child = self.store.child_tables(info.name).get(stmt.table)
        schema = self._stable(info.name, child.stable if child else stmt.table)
        rows = [[c.name, c.type.name, c.type.length or c.type.bytes, ""] for c in schema.columns]
        rows += [[t.name, t.type.name, t.type.length or t.type.bytes, "TAG"] for t in schema.tags]
        return Result([("field", "VARCHAR", 64), ("type", "VARCHAR", 32), ("length", "INT", 4),
                       ("note", "VARCHAR", 8)], rows)
