"""TDengine topics: CREATE / DROP TOPIC and DROP CONSUMER GROUP, and the checked definition
of a topic (`define_topic`, `topic_definition`) that CreateTopics' tmq.as config shares.

Rules: a topic is checked against the catalog and its view compiled once, when it is made
(errors now, not at the first Fetch); a database, a Kafka topic and a TDengine topic never
share a name; a topic being consumed is dropped only with FORCE, and a group's offsets only
while none of its members consumes the topic (or with FORCE). A topic over a database the
cluster shares is made and dropped through the cluster by `execute_async` (the `*_async`
handlers), one over a database of this node's on this node.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tmqgate.broker.sql import ast
from tmqgate.broker.sql.access import Caller
from tmqgate.broker.sql.ast import SqlError
from tmqgate.broker.sql.context import SqlContext, find_database, find_stable
from tmqgate.broker.sql.parser import parse
from tmqgate.broker.sql.result import Result
from tmqgate.broker.sql.views import TopicDef

if TYPE_CHECKING:
    from tmqgate.broker.tsdb.catalog import TsdbCatalog
    from tmqgate.storage import Store


def define_topic(store: Store, catalog: TsdbCatalog, stmt: ast.CreateTopic, db: str | None,
                 owner: Caller | None = None) -> TopicDef:
    """Check a CREATE TOPIC against the catalog and compile its view once (errors now,
    not at the first Fetch); `owner`: who makes it (its READ on the database is checked at
    every Fetch of the view while an authorizer is on)."""
    from tmqgate.broker.sql.expr import compile_filter, compile_projection

    info = find_database(store, stmt.db or db)
    stable = None
    if stmt.kind != "database":
        schema = find_stable(catalog, info.name, stmt.stable or "")
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


def create_topic(sql: SqlContext, stmt: ast.CreateTopic, db: str | None, caller: Caller) -> Result:
    definition = _plan_topic(sql, stmt, db, caller)
    if definition is not None:
        sql.local.make_topic(definition)
    return Result.affected(0)


async def create_topic_async(sql: SqlContext, stmt: ast.CreateTopic, db: str | None, caller: Caller) -> Result:
    """Checked here, then made by whoever holds its database (placed by the cluster, or here)."""
    definition = _plan_topic(sql, stmt, db, caller)
    if definition is not None:
        await sql.cluster_of(definition.db).create_topic(definition)
    return Result.affected(0)


def _plan_topic(sql: SqlContext, stmt: ast.CreateTopic, db: str | None, owner: Caller) -> TopicDef | None:
    """A new TDengine topic's checked definition, made by `owner` (None: it exists, IF NOT EXISTS)."""
    if sql.store.tmq_topic(stmt.name) is not None:
        if stmt.if_not_exists:
            return None
        raise SqlError(f"Topic already exists: {stmt.name}")
    sql.name_free(stmt.name)
    return define_topic(sql.store, sql.catalog, stmt, db, owner)


def drop_topic(sql: SqlContext, stmt: ast.DropTopic, _db: str | None, _caller: Caller) -> Result:
    if _droppable_topic(sql, stmt) is not None:
        sql.local.drop_here(stmt.name)
    return Result.affected(0)


async def drop_topic_async(sql: SqlContext, stmt: ast.DropTopic, _db: str | None, _caller: Caller) -> Result:
    """Checked here, then removed by whoever holds its database (the cluster, or this node)."""
    if _droppable_topic(sql, stmt) is not None:
        await sql.cluster_of(sql.store.tmq_topics()[stmt.name].definition["db"]).drop(stmt.name)
    return Result.affected(0)


def _droppable_topic(sql: SqlContext, stmt: ast.DropTopic) -> str | None:
    """The TDengine topic to drop, checked (None: there is none, IF EXISTS)."""
    if sql.store.tmq_topic(stmt.name) is None:
        if stmt.if_exists:
            return None
        raise SqlError(f"Topic not exist: {stmt.name}")
    groups = sql.groups.subscribed_to(stmt.name)
    if groups and not stmt.force:
        raise SqlError(f"Topic being consumed by group(s) {', '.join(sorted(groups))}; "
                       "unsubscribe first or use DROP TOPIC ... FORCE")
    return stmt.name


def drop_consumer_group(sql: SqlContext, stmt: ast.DropConsumerGroup, _db: str | None, _caller: Caller) -> Result:
    if sql.topics.get(stmt.topic) is None:
        raise SqlError(f"Topic not exist: {stmt.topic}")
    if stmt.group not in sql.store.offset_groups() and stmt.group not in sql.groups.group_ids():
        if stmt.if_exists:
            return Result.affected(0)
        raise SqlError(f"Consumer group not exist: {stmt.group}")
    if stmt.group in sql.groups.subscribed_to(stmt.topic) and not stmt.force:
        raise SqlError(f"Consumer group {stmt.group} is being used by active consumers of {stmt.topic}")
    sql.store.delete_offsets(stmt.group, stmt.topic)
    return Result.affected(0)
