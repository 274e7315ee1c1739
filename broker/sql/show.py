"""SHOW and DESCRIBE: answered from the catalog, the groups and the placement, never written.

Rules: each SHOW kind has one handler in `SHOWS` (the parser names the kinds, broker/sql/
ast.py `Show.what`); a listing of databases, topics, consumers or subscriptions shows only
the rows the caller may DESCRIBE (`Visibility`, as Kafka's Metadata, ListGroups and
OffsetFetch), and SHOW of a database's stables, tables and vgroups needs DESCRIBE on it
(checked before, broker/sql/access.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tmqgate.broker.sql import ast
from tmqgate.broker.sql.access import Caller, Visibility
from tmqgate.broker.sql.ast import SqlError
from tmqgate.broker.sql.context import SqlContext, find_database, find_stable
from tmqgate.broker.sql.ports import DNODE_COLUMNS
from tmqgate.broker.sql.result import Result
from tmqgate.protocol import clock

#: SHOW VGROUPS shows the first four replicas of a vnode, as TDengine's ins_vgroups
_VGROUP_REPLICAS = 4


def show(sql: SqlContext, stmt: ast.Show, db: str | None, caller: Caller) -> Result:
    return SHOWS[stmt.what](sql, stmt, db, caller)


def _show_databases(sql: SqlContext, _stmt: ast.Show, _db: str | None, caller: Caller) -> Result:
    dbs = [d for d in sql.store.databases() if d.kind == "tsdb"]
    shown = Visibility(sql.access, caller).of("TOPIC", (d.name for d in dbs))
    rows = [[d.name, d.created_ms, d.vgroups, d.options.get("wal_retention_period", -1),
             d.options.get("wal_retention_size", -1)]
            for d in dbs if d.name in shown]
    return Result([("name", "VARCHAR", 64), ("create_time", "TIMESTAMP", 8), ("vgroups", "INT", 4),
                   ("wal_retention_period", "INT", 4), ("wal_retention_size", "BIGINT", 8)],
                  sorted(rows))


def _show_stables(sql: SqlContext, stmt: ast.Show, db: str | None, _caller: Caller) -> Result:
    info = find_database(sql.store, stmt.db or db)
    rows = []
    for name in sql.catalog.stable_names(info.name):
        schema = sql.catalog.schema(info.name, name)
        assert schema is not None
        rows.append([name, info.name, len(schema.columns), len(schema.tags)])
    return Result([("stable_name", "VARCHAR", 192), ("db_name", "VARCHAR", 64), ("columns", "INT", 4),
                   ("tags", "INT", 4)], rows)


def _show_tables(sql: SqlContext, stmt: ast.Show, db: str | None, _caller: Caller) -> Result:
    info = find_database(sql.store, stmt.db or db)
    rows = [[c.name, info.name, c.stable, c.vnode] for c in sql.store.child_tables(info.name).values()]
    return Result([("table_name", "VARCHAR", 192), ("db_name", "VARCHAR", 64),
                   ("stable_name", "VARCHAR", 192), ("vgroup_id", "INT", 4)], sorted(rows))


def _show_topics(sql: SqlContext, _stmt: ast.Show, _db: str | None, caller: Caller) -> Result:
    rows = []
    topics = sql.store.tmq_topics()
    shown = Visibility(sql.access, caller).of("TOPIC", topics)
    for name, t in sorted(topics.items()):
        if name not in shown:
            continue
        d = t.definition
        rows.append([name, d["db"], t.created_ms, d["statement"], d["kind"], d.get("meta") or "none"])
    return Result([("topic_name", "VARCHAR", 192), ("db_name", "VARCHAR", 64),
                   ("create_time", "TIMESTAMP", 8), ("sql", "VARCHAR", 16384), ("type", "VARCHAR", 16),
                   ("meta", "VARCHAR", 8)], rows)


def _show_consumers(sql: SqlContext, _stmt: ast.Show, _db: str | None, caller: Caller) -> Result:
    """A row per live member of a group the caller may describe, listing the topics of its
    subscription the caller may describe."""
    wall, group_now = clock.now_ms(), sql.groups.now_ms()
    members = sql.groups.members()
    visible = Visibility(sql.access, caller)
    groups = visible.of("GROUP", {m["group"] for m in members})
    topics = visible.of("TOPIC", {t for m in members for t in m["topics"]})
    rows = [[m["member_id"], m["group"], m["client_id"], m["state"],
             ",".join(t for t in m["topics"] if t in topics),
             (group_now - m["joined_ms"]) // 1000, wall - (group_now - m["joined_ms"])]
            for m in members if m["group"] in groups]
    return Result([("consumer_id", "VARCHAR", 192), ("consumer_group", "VARCHAR", 192),
                   ("client_id", "VARCHAR", 192), ("status", "VARCHAR", 20), ("topics", "VARCHAR", 1024),
                   ("up_time", "BIGINT", 8), ("subscribe_time", "TIMESTAMP", 8)], rows)


def _show_subscriptions(sql: SqlContext, _stmt: ast.Show, _db: str | None, caller: Caller) -> Result:
    """One row per (topic, group, vnode): the owning consumer, the committed offset, and
    the versions consumed (committed offset minus the log start); only of the groups and
    topics the caller may describe (as ListGroups and OffsetFetch)."""
    owners: dict[tuple[str, str, int], str] = {}
    for m in sql.groups.members():
        for topic, partitions in m["assignment"].items():
            for p in partitions:
                owners[(m["group"], topic, p)] = m["member_id"]
    tmq = sql.store.tmq_topics()
    visible = Visibility(sql.access, caller)
    topics = visible.of("TOPIC", tmq)
    rows = []
    for group in sorted(visible.of("GROUP", set(sql.store.offset_groups()) | {k[0] for k in owners})):
        committed = sql.store.fetch_offsets(group)
        keys = set(committed) | {(t, p) for g, t, p in owners if g == group}
        for topic, vnode in sorted(keys):
            if topic not in topics:
                continue
            db = tmq[topic].definition["db"]
            offset = committed[(topic, vnode)].offset if (topic, vnode) in committed else -1
            consumed = max(0, offset - sql.store.log_start(db, vnode)) if offset >= 0 else 0
            rows.append([topic, group, vnode, owners.get((group, topic, vnode)), offset, consumed])
    return Result([("topic_name", "VARCHAR", 192), ("consumer_group", "VARCHAR", 192),
                   ("vgroup_id", "INT", 4), ("consumer_id", "VARCHAR", 192), ("offset", "BIGINT", 8),
                   ("rows", "BIGINT", 8)], rows)


def _show_dnodes(sql: SqlContext, _stmt: ast.Show, _db: str | None, _caller: Caller) -> Result:
    return Result(list(DNODE_COLUMNS), sql.placement_queries().dnodes())


def _show_vgroups(sql: SqlContext, stmt: ast.Show, db: str | None, _caller: Caller) -> Result:
    """One row per vnode of the database (a SQL database's, or a Kafka topic's): its child
    tables, and each replica's node and role — leader, follower (in sync), learner (catching
    up, out of the ISR), candidate (no leader now), offline (its node is down)."""
    name = stmt.db or db
    if name is None:
        raise SqlError("Database not specified or available (USE db, or SHOW db.VGROUPS)")
    info = sql.store.get_database(name)
    if info is None:
        raise SqlError(f"Database not exist: {name}")
    tables = [0] * info.vgroups
    if info.kind == "tsdb":
        for child in sql.store.child_tables(info.name).values():
            tables[child.vnode] += 1
    replicas = sql.placement_queries().replicas
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


#: SHOW kind → its handler, one per kind of `ast.Show.what`
SHOWS: dict[str, Callable[[SqlContext, ast.Show, str | None, Caller], Result]] = {
    "databases": _show_databases, "stables": _show_stables, "tables": _show_tables, "topics": _show_topics,
    "consumers": _show_consumers, "subscriptions": _show_subscriptions, "dnodes": _show_dnodes,
    "vgroups": _show_vgroups,
}


def describe(sql: SqlContext, stmt: ast.Describe, db: str | None, _caller: Caller) -> Result:
    info = find_database(sql.store, stmt.db or db)
    child = sql.store.child_tables(info.name).get(stmt.table)
    schema = find_stable(sql.catalog, info.name, child.stable if child else stmt.table)
    rows = [[c.name, c.type.name, c.type.length or c.type.bytes, ""] for c in schema.columns]
    rows += [[t.name, t.type.name, t.type.length or t.type.bytes, "TAG"] for t in schema.tags]
    return Result([("field", "VARCHAR", 64), ("type", "VARCHAR", 32), ("length", "INT", 4),
                   ("note", "VARCHAR", 8)], rows)
