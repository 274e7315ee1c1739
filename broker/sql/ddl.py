"""DDL: CREATE / DROP DATABASE, CREATE / ALTER / DROP STABLE, CREATE / DROP TABLE.

Every statement either completes or changes nothing: checks run first, and each catalog change
is written in one storage transaction together with the meta entries TDengine would log for it
(create/alter/drop supertable on every vnode, create/drop child table on its vnode), so the
WAL order of meta and data is the order a WITH META topic delivers. A supertable's schema past
TDengine's limits (tsdb/limits.py) is refused with its code, whichever statement or schemaless
write (broker/sql/ingest.py: `write_stable_change`, `create_child`) made it.

A database is made and dropped through the cluster by `execute_async` (the `*_async`
handlers: etcd on a cluster, this node's registry on one) and on this node by `execute`.
"""

from __future__ import annotations

from typing import Any

from tmqgate.broker.sql import ast
from tmqgate.broker.sql.access import Caller
from tmqgate.broker.sql.ast import SqlError
from tmqgate.broker.sql.context import SqlContext, find_database, find_stable
from tmqgate.broker.sql.ports import DNODE_STATUS
from tmqgate.broker.sql.result import DB_ALREADY_EXIST, OUT_OF_DNODES, Result
from tmqgate.broker.tsdb.catalog import home_vnode, meta_payload, rename_child_tag, schema_to_json
from tmqgate.broker.tsdb.limits import schema_problem
from tmqgate.broker.tsdb.types import Column, StableSchema
from tmqgate.protocol import clock

DEFAULT_VGROUPS = 2  # TDengine's default

# -- databases ----------------------------------------------------------------------------


def create_database(sql: SqlContext, stmt: ast.CreateDatabase, _db: str | None, _caller: Caller) -> Result:
    planned = plan_database(sql, stmt)
    if planned is not None:
        sql.local.make_database(stmt.name, *planned)
    return Result.affected(0)


async def create_database_async(sql: SqlContext, stmt: ast.CreateDatabase, _db: str | None,
                                _caller: Caller) -> Result:
    """Checked here, then placed by the cluster (in etcd, which every broker applies)."""
    planned = plan_database(sql, stmt)
    if planned is not None:
        await sql.cluster.create_database(stmt.name, *planned)
    return Result.affected(0)


def plan_database(sql: SqlContext, stmt: ast.CreateDatabase) -> tuple[int, dict[str, Any]] | None:
    """A new database's vnodes and options, checked (None: it exists, IF NOT EXISTS)."""
    if sql.store.get_database(stmt.name) is not None or sql.topics.get(stmt.name) is not None:
        if stmt.if_not_exists and sql.store.get_database(stmt.name) is not None:
            return None
        raise SqlError(f"Database already exists: {stmt.name}", code=DB_ALREADY_EXIST)
    vgroups = stmt.vgroups if stmt.vgroups is not None else DEFAULT_VGROUPS
    if not 1 <= vgroups <= 1024:
        raise SqlError(f"Invalid option vgroups: {vgroups} (must be in 1..1024)")
    refused = sql.topics.capacity_error(vgroups, 1)  # the broker's max_databases / max_partitions
    if refused is not None:
        raise SqlError(refused)
    replica = stmt.options.get("replica", 1)
    if replica > 1:  # never a silent single copy: as many dnodes as copies, or refused
        ready = sum(1 for row in sql.placement_queries().dnodes() if row[DNODE_STATUS] == "ready")
        if replica > ready:
            raise SqlError("Out of dnodes", code=OUT_OF_DNODES)
    options = dict(stmt.options)
    options.update(precision=stmt.precision,
                   wal_retention_period=-1 if stmt.wal_retention_period is None else stmt.wal_retention_period,
                   wal_retention_size=-1 if stmt.wal_retention_size is None else stmt.wal_retention_size)
    return vgroups, options


def alter_database(sql: SqlContext, stmt: ast.AlterDatabase, _db: str | None, _caller: Caller) -> Result:
    """WAL_RETENTION_PERIOD / WAL_RETENTION_SIZE: kept with the database (retention reads them
    on its next pass) and, on a cluster, in its placement for every broker."""
    info = find_database(sql.store, stmt.name)
    updated = sql.store.set_options(info.name, dict(stmt.options), merge=True)
    sql.cluster.options_changed(info.name, dict(updated.options))
    return Result.affected(0)


def drop_database(sql: SqlContext, stmt: ast.DropDatabase, _db: str | None, _caller: Caller) -> Result:
    info = droppable_database(sql, stmt)
    if info is not None:
        sql.local.drop_here(info.name)
    return Result.affected(0)


async def drop_database_async(sql: SqlContext, stmt: ast.DropDatabase, _db: str | None, _caller: Caller) -> Result:
    """Checked here, then removed by whoever holds the database (the cluster, or this node)."""
    info = droppable_database(sql, stmt)
    if info is not None:
        await sql.cluster_of(info.name).drop(info.name)
    return Result.affected(0)


def droppable_database(sql: SqlContext, stmt: ast.DropDatabase) -> Any:
    """The database to drop, checked (None: there is none, IF EXISTS)."""
    info = sql.store.get_database(stmt.name)
    if info is None or info.kind != "tsdb":
        if stmt.if_exists:
            return None
        raise SqlError(f"Database not exist: {stmt.name}")
    users = [name for name, t in sql.store.tmq_topics().items() if t.definition["db"] == stmt.name]
    if users:
        raise SqlError(f"Topic must be dropped first: {', '.join(sorted(users))}")
    return info

# -- supertables --------------------------------------------------------------------------


def create_stable(sql: SqlContext, stmt: ast.CreateStable, db: str | None, _caller: Caller) -> Result:
    info = find_database(sql.store, stmt.db or db)
    if sql.catalog.find_stable(info.name, stmt.name) is not None:
        if stmt.if_not_exists:
            return Result.affected(0)
        raise SqlError(f"STable already exists: {stmt.name}")
    if stmt.name in sql.store.child_tables(info.name):
        raise SqlError(f"Table already exists: {stmt.name}")
    write_stable_change(sql, info, None, stmt.schema())
    return Result.affected(0)


def _write_stable(sql: SqlContext, info: Any, schema: StableSchema, *, create: bool, details: dict[str, Any],
                  renamed_tag: tuple[str, str | None] | None = None) -> None:
    """Store the supertable's schema and log the change on every vnode, atomically; a
    schema past TDengine's limits (tsdb/limits.py) is refused with its code, whichever
    statement or schemaless write made it. `renamed_tag` (old, new): each child table's
    tag value moves to the new name (None: is dropped) in the same write."""
    problem = schema_problem(schema)
    if problem is not None:
        raise SqlError(problem.message, code=problem.code)
    payload = meta_payload("create" if create else "alter", "super", schema.name, stable=schema.name, **details)
    with sql.store.transaction() as tx:
        if create:
            tx.create_stable(info.name, schema.name, schema_to_json(schema))
        else:
            tx.alter_stable(info.name, schema.name, schema_to_json(schema))
        if renamed_tag is not None:
            rename_child_tag(tx, sql.store.child_tables(info.name).values(), info.name, schema.name, *renamed_tag)
        for vnode in range(info.vgroups):
            tx.append_meta(info.name, vnode, payload)
    sql.cluster.stable_changed(info.name, schema.name, schema_to_json(schema))
    sql.changed(info.name, schema.name)
    for vnode in range(info.vgroups):
        sql.notify(info.name, vnode)


def write_stable_change(sql: SqlContext, info: Any, current: StableSchema | None, schema: StableSchema) -> None:
    """Create `schema`, or alter `current` into it (schemaless writes add and widen columns
    and tags), logging it as TDengine would."""
    if current is None:
        _write_stable(sql, info, schema, create=True, details={
            "columns": [{"name": c.name, "type": str(c.type)} for c in schema.columns],
            "tags": [{"name": t.name, "type": str(t.type)} for t in schema.tags]})
        return
    before = {c.name: c for c in (*current.columns, *current.tags)}
    changes = [{"name": c.name, "type": str(c.type), "tag": c in schema.tags,
                "change": "add" if c.name not in before else "modify"}
               for c in (*schema.columns, *schema.tags) if before.get(c.name) != c]
    _write_stable(sql, info, schema, create=False, details={"alterType": "schemaless", "changes": changes})


def alter_stable_add_column(sql: SqlContext, stmt: ast.AlterStableAddColumn, db: str | None,
                            _caller: Caller) -> Result:
    return _alter_add(sql, stmt.db or db, stmt.stable, stmt.column, tag=False)


def alter_stable_add_tag(sql: SqlContext, stmt: ast.AlterStableAddTag, db: str | None, _caller: Caller) -> Result:
    return _alter_add(sql, stmt.db or db, stmt.stable, stmt.tag, tag=True)


def _alter_add(sql: SqlContext, db: str | None, stable: str, column: Any, *, tag: bool) -> Result:
    info = find_database(sql.store, db)
    schema = find_stable(sql.catalog, info.name, stable)
    if schema.find(column.name) is not None:
        raise SqlError(f"Duplicated column names: {column.name}")
    new = StableSchema(schema.name, list(schema.columns) + ([] if tag else [column]),
                       list(schema.tags) + ([column] if tag else []))
    _write_stable(sql, info, new, create=False, details={
        "alterType": "add_tag" if tag else "add_column", "colName": column.name, "colType": str(column.type)})
    return Result.affected(0)


def alter_stable_change(sql: SqlContext, stmt: ast.AlterStableChange, db: str | None, _caller: Caller) -> Result:
    """DROP COLUMN, MODIFY COLUMN (a VARCHAR / NCHAR made longer), DROP TAG, RENAME TAG, with
    TDengine's refusals; logged on every vnode for WITH META topics and replicas."""
    info = find_database(sql.store, stmt.db or db)
    schema = find_stable(sql.catalog, info.name, stmt.stable)
    found = schema.find(stmt.name)
    is_tag = found is not None and any(t is found for t in schema.tags)
    want_tag = stmt.action in ("drop_tag", "rename_tag")
    if found is None or is_tag != want_tag:
        raise SqlError(f"Invalid {'tag' if want_tag else 'column'} name: {stmt.name}")
    columns, tags = list(schema.columns), list(schema.tags)
    details: dict[str, Any] = {"alterType": stmt.action, "colName": found.name}
    renamed: tuple[str, str | None] | None = None
    if stmt.action in ("drop_column", "drop_tag"):
        if found is columns[0]:
            raise SqlError("Primary timestamp column cannot be dropped")
        if stmt.action == "drop_column" and len(columns) <= 2:
            raise SqlError("a supertable keeps its timestamp and at least one more column")
        if stmt.action == "drop_tag" and len(tags) <= 1:
            raise SqlError("a supertable keeps at least one tag")
        users = _topics_naming(sql, info.name, schema.name, found.name)
        if users:
            raise SqlError(f"Column referenced by topic: {', '.join(users)} uses {found.name}")
        columns = [c for c in columns if c is not found]
        tags = [t for t in tags if t is not found]
        if stmt.action == "drop_tag":
            renamed = (found.name, None)
    elif stmt.action == "modify_column":
        assert stmt.column is not None
        new_type, old_type = stmt.column.type, found.type
        if not (old_type.is_string and new_type.name == old_type.name):
            raise SqlError("Only the length of a VARCHAR or NCHAR column can be modified")
        if (new_type.length or 0) <= (old_type.length or 0):
            raise SqlError(f"The length of {found.name} can only be increased (now {old_type.length})")
        columns = [Column(found.name, new_type) if c is found else c for c in columns]
        details["colType"] = str(new_type)
    else:
        assert stmt.new_name is not None
        if stmt.new_name.lower() == "tbname" or schema.find(stmt.new_name) is not None:
            raise SqlError(f"Duplicated column names: {stmt.new_name}")
        users = _topics_naming(sql, info.name, schema.name, found.name)
        if users:
            raise SqlError(f"Column referenced by topic: {', '.join(users)} uses {found.name}")
        tags = [Column(stmt.new_name, t.type) if t is found else t for t in tags]
        details["colNewName"] = stmt.new_name
        renamed = (found.name, stmt.new_name)
    _write_stable(sql, info, StableSchema(schema.name, columns, tags), create=False, details=details,
                  renamed_tag=renamed)
    return Result.affected(0)


def _topics_naming(sql: SqlContext, db: str, stable: str, name: str) -> list[str]:
    """The TDengine topics over `stable` whose query or filter names column or tag `name`."""
    from sqlglot import exp

    from tmqgate.broker.sql.parser import parse

    users = []
    for topic, t in sorted(sql.store.tmq_topics().items()):
        d = t.definition
        if d["db"] != db or d.get("stable") != stable:
            continue
        stmt = parse(d["statement"])
        trees = [x for x in (getattr(stmt, "select", None), getattr(stmt, "where", None)) if x is not None]
        if any(isinstance(n, exp.Column) and n.name.lower() == name.lower() for tree in trees for n in tree.walk()):
            users.append(topic)
    return users


def drop_stable(sql: SqlContext, stmt: ast.DropStable, db: str | None, _caller: Caller) -> Result:
    info = find_database(sql.store, stmt.db or db)
    name = sql.catalog.find_stable(info.name, stmt.name)
    if name is None:
        if stmt.if_exists:
            return Result.affected(0)
        raise SqlError(f"STable not exist: {stmt.name}")
    users = [t for t, d in sql.store.tmq_topics().items()
             if d.definition["db"] == info.name and d.definition.get("stable") == name]
    if users:
        raise SqlError(f"Topic must be dropped first: {', '.join(sorted(users))}")
    payload = meta_payload("drop", "super", name, stable=name)
    with sql.store.transaction() as tx:  # logged on every vnode, as TDengine's (a replica applies it)
        tx.drop_stable(info.name, name)
        for vnode in range(info.vgroups):
            tx.append_meta(info.name, vnode, payload)
    sql.cluster.stable_changed(info.name, name, None)
    sql.changed(info.name, name)
    for vnode in range(info.vgroups):
        sql.notify(info.name, vnode)
    return Result.affected(0)

# -- child tables -------------------------------------------------------------------------


def create_table(sql: SqlContext, stmt: ast.CreateTable, db: str | None, _caller: Caller) -> Result:
    info = find_database(sql.store, stmt.db or db)
    if stmt.name in sql.store.child_tables(info.name):
        if stmt.if_not_exists:
            return Result.affected(0)
        raise SqlError(f"Table already exists: {stmt.name}")
    schema = find_stable(sql.catalog, info.name, stmt.stable)
    create_child(sql, info, stmt.name, schema, stmt.resolve_tags(schema, now_ms=clock.now_ms()))
    return Result.affected(0)


def create_tables(sql: SqlContext, stmt: ast.CreateTables, db: str | None, caller: Caller) -> Result:
    for table in stmt.tables:
        create_table(sql, table, db, caller)
    return Result.affected(0)


def create_child(sql: SqlContext, info: Any, name: str, schema: StableSchema, tags: dict[str, Any],
                 vnode: int | None = None) -> int:
    """Create a child table with its meta entry on `vnode` (by default its home vnode, where
    SQL writes its rows; schemaless writes pass the partition the producer chose)."""
    if sql.catalog.find_stable(info.name, name) is not None:
        raise SqlError(f"Table already exists: {name} is a supertable")
    if vnode is None:
        vnode = home_vnode(name, info.vgroups)
    payload = meta_payload("create", "child", name, stable=schema.name, using=schema.name,
                           tags=[{"name": t.name, "type": str(t.type), "value": tags.get(t.name)}
                                 for t in schema.tags])
    with sql.store.transaction() as tx:
        tx.create_child_table(info.name, name, schema.name, tags, vnode)
        tx.append_meta(info.name, vnode, payload)
    sql.catalog.invalidate(info.name, schema.name)
    sql.notify(info.name, vnode)
    return vnode


def drop_table(sql: SqlContext, stmt: ast.DropTable, db: str | None, _caller: Caller) -> Result:
    info = find_database(sql.store, stmt.db or db)
    if stmt.name not in sql.store.child_tables(info.name):
        if stmt.if_exists:
            return Result.affected(0)
        raise SqlError(f"Table does not exist: {stmt.name}")
    child = sql.store.child_tables(info.name)[stmt.name]
    payload = meta_payload("drop", "child", stmt.name, stable=child.stable, tableNameList=[stmt.name])
    with sql.store.transaction() as tx:  # logged on its vnode, as TDengine's
        tx.drop_child_table(info.name, stmt.name)
        tx.append_meta(info.name, child.vnode, payload)
    sql.catalog.invalidate(info.name, child.stable)
    sql.notify(info.name, child.vnode)
    return Result.affected(0)
