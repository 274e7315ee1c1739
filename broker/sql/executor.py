"""Runs SQL texts: the entry points (`execute`, `execute_async`), the per-statement loop, the
access checks, and the tables that send each statement to its handler.

Rules: a text's statements run in order, each checked for its caller first (with an
authorizer on, broker/sql/access.py); one a table has no handler for is refused ("statement
not supported"). `execute_async` runs a text on the broker leading its databases (routing.py;
on one node, `LocalSql`, always here), refuses a write the cluster cannot take before
anything is written, makes and drops databases and topics through the cluster, and answers
once the in-sync replicas have what it wrote. The handlers: ddl.py (databases, supertables,
child tables), insert.py, show.py (SHOW, DESCRIBE), users.py (GRANT, users), tmq_topics.py
(TDengine topics, their groups).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from tmqgate.broker.sql import ast, ddl, insert, select, show, tmq_topics, users
from tmqgate.broker.sql.access import PERMISSION_DENIED, Access, Caller, refusal
from tmqgate.broker.sql.ast import SqlError
from tmqgate.broker.sql.context import SelectLimits, SqlContext, find_database
from tmqgate.broker.sql.parser import parse_script
from tmqgate.broker.sql.ports import GroupQueries, PlacementQueries, SqlCluster, TopicNames
from tmqgate.broker.sql.result import SYN_NOT_LEADER, Result
from tmqgate.broker.sql.routing import databases_in, led_elsewhere
from tmqgate.broker.sql.worker import ParseWorker
from tmqgate.broker.tsdb.types import StableSchema

if TYPE_CHECKING:
    from tmqgate.broker.tsdb.catalog import TsdbCatalog
    from tmqgate.storage import ProducerAppend, Store

# Texts this long or longer are parsed in the parsing process (execute_async, broker/sql/
# worker.py); shorter ones parse in place in a few ms at most (~10 ms/KiB for the slowest
# shape, a long select list; ~3 ms/KiB for an INSERT), so they keep their order and latency.
PARSE_IN_WORKER_CHARS = 1024

Handler = Callable[[SqlContext, Any, str | None, Caller], Result]
AsyncHandler = Callable[[SqlContext, Any, str | None, Caller], Awaitable[Result]]

#: statement class → its handler (USE is the loop's own: it changes the session's database)
HANDLERS: dict[type[ast.Statement], Handler] = {
    ast.CreateDatabase: ddl.create_database, ast.DropDatabase: ddl.drop_database,
    ast.CreateStable: ddl.create_stable, ast.AlterStableAddColumn: ddl.alter_stable_add_column,
    ast.AlterStableAddTag: ddl.alter_stable_add_tag, ast.AlterStableChange: ddl.alter_stable_change,
    ast.AlterDatabase: ddl.alter_database, ast.DropStable: ddl.drop_stable,
    ast.CreateTable: ddl.create_table, ast.CreateTables: ddl.create_tables, ast.DropTable: ddl.drop_table,
    ast.Insert: insert.insert, ast.Select: select.select,
    ast.Show: show.show, ast.Describe: show.describe,
    ast.Grant: users.grant, ast.UserPassword: users.user_password,
    ast.CreateTopic: tmq_topics.create_topic, ast.DropTopic: tmq_topics.drop_topic,
    ast.DropConsumerGroup: tmq_topics.drop_consumer_group,
}

#: the statements `execute_async` runs through the cluster (etcd on a cluster), and their handlers
THROUGH_CLUSTER: dict[type[ast.Statement], AsyncHandler] = {
    ast.CreateDatabase: ddl.create_database_async, ast.DropDatabase: ddl.drop_database_async,
    ast.CreateTopic: tmq_topics.create_topic_async, ast.DropTopic: tmq_topics.drop_topic_async,
}


class Executor(SqlContext):
    """Executes statements; `db` is the session's current database (USE).

    It holds only its collaborators (`SqlContext`) and the parsing process, never a
    statement's or session's state (that is passed along in each call), so the broker's one
    Executor serves every caller. The broker sets `access` (its authorizer) and, on a
    cluster, `cluster` (broker/cluster/sql.py) after making it."""

    def __init__(self, store: Store, catalog: TsdbCatalog, topics: TopicNames,
                 notify: Callable[[str, int], None], groups: GroupQueries,
                 parse_timeout_ms: int = 30_000, access: Access | None = None,
                 placement: PlacementQueries | None = None, cluster: SqlCluster | None = None,
                 select_limits: SelectLimits | None = None) -> None:
        super().__init__(store, catalog, topics, notify, groups, access, placement, cluster)
        if select_limits is not None:
            self.select_limits = select_limits
        # Long texts are parsed here, one at a time; started on the first one (worker.py).
        self.parser = ParseWorker(parse_timeout_ms / 1000)

    def close(self) -> None:
        """Stop the parsing process (the broker's stop)."""
        self.parser.close()

    def execute(self, text: str, db: str | None = None, caller: Caller | None = None) -> Result:
        """Run every statement of `text` as `caller` (default: User:ANONYMOUS) on this node;
        returns the last one's result."""
        return self._execute(parse_script(text), db, caller)

    async def execute_async(self, text: str, db: str | None = None, caller: Caller | None = None) -> Result:
        """`execute` for the event loop, which it never holds for long: a long text is parsed
        in the parsing process (parsing is pure, text to statements; 1 MiB of SQL takes
        seconds of pure Python, which a thread would not take off the loop: it holds the GIL);
        raises SqlError, or the worker's ParseTimeout / ParseWorkerDied. The statements run
        here, on the loop, which alone uses the store; an INSERT's rows are checked in steps
        (`insert.insert_async`). A short text does not yield to the loop on one node (its
        cluster, `LocalSql`, never waits)."""
        short = len(text) < PARSE_IN_WORKER_CHARS
        statements = parse_script(text) if short else await self.parser.parse(text)
        if not statements:
            raise SqlError("empty statement", 0)
        caller = caller or Caller()
        if any(type(stmt) in THROUGH_CLUSTER for stmt in statements) or any(
                self.topics.get(name) is None for name in databases_in(statements, db)):
            await self.cluster.refresh()  # what another broker just did is seen here
        leader = led_elsewhere(self.cluster, statements, db)
        if leader is not None:
            if caller.forwarded:  # sent here as the leader, which this broker is no longer
                raise SqlError(f"dnode {leader} leads the database now, not this one; send the statement again",
                               code=SYN_NOT_LEADER)
            return await self.cluster.forward(leader, text, db, caller)
        written = databases_in(statements, db, written=True)
        self.cluster.check_writable(written)
        result = Result.affected(0)
        for stmt in statements:
            through = THROUGH_CLUSTER.get(type(stmt))
            if isinstance(stmt, ast.Insert) and not short:
                self._check(stmt, db, caller)
                result = await insert.insert_async(self, stmt, db)
            elif through is not None:
                self._check(stmt, db, caller)
                result = await through(self, stmt, db, caller)
            elif isinstance(stmt, ast.Select):  # read in chunks, run off the loop
                self._check(stmt, db, caller)
                result = await select.select_async(self, stmt, db, caller)
            else:
                result, db = self._step(stmt, db, caller)
        if written:
            await self.cluster.settle(written)  # answered once the in-sync replicas have it
        return result

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
            find_database(self.store, stmt.name)
            return Result.affected(0), stmt.name
        handler = HANDLERS.get(type(stmt))
        if handler is None:
            raise SqlError(f"statement not supported: {type(stmt).__name__}")
        return handler(self, stmt, db, caller or Caller()), db

    # -- the writes of schemaless ingestion (broker/sql/ingest.py) -------------------------

    def write_stable_change(self, info: Any, current: StableSchema | None, schema: StableSchema) -> None:
        """ddl.write_stable_change: create `schema`, or alter `current` into it."""
        ddl.write_stable_change(self, info, current, schema)

    def create_child(self, info: Any, name: str, schema: StableSchema, tags: dict[str, Any],
                     vnode: int | None = None) -> int:
        """ddl.create_child: a child table with its meta entry on `vnode` (default: its home vnode)."""
        return ddl.create_child(self, info, name, schema, tags, vnode)

    def append_rows_many(self, db: str, vnode: int, tables: Iterable[tuple[str, pa.Table]],
                         producer: ProducerAppend | None = None,
                         txn_producer: tuple[int, int] | None = None) -> int:
        """insert.append_rows_many: supertables' rows to a vnode's WAL; returns the first version."""
        return insert.append_rows_many(self, db, vnode, tables, producer, txn_producer)
