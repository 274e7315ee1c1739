"""Which broker runs a SQL text: the one leading the databases its statements use.

Rules: a statement about a database's tables (`databases_of`: its DDL, INSERT, SELECT,
DESCRIBE, SHOW of its tables or vgroups, CREATE TOPIC over it) runs on the database's leader;
CREATE / DROP DATABASE and DROP TOPIC run anywhere (through the cluster), and SHOW of
databases, topics and nodes is every broker's. A text runs whole on one broker: one whose
databases are led by several, or by none live now, is refused (`led_elsewhere`). On one node
(`LocalSql`) no database is shared, so every text runs here.
"""

from __future__ import annotations

from tmqgate.broker.sql import ast
from tmqgate.broker.sql.ast import SqlError
from tmqgate.broker.sql.ports import SqlCluster
from tmqgate.broker.sql.result import SYN_NOT_LEADER

#: the statements that write a database's vnodes (rows, or DDL's meta entries)
WRITES = (ast.Insert, ast.CreateTables, ast.CreateStable, ast.CreateTable, ast.AlterStableAddColumn,
          ast.AlterStableAddTag, ast.AlterStableChange, ast.DropStable, ast.DropTable)


def databases_of(stmt: ast.Statement, db: str | None) -> set[str]:
    """The SQL databases whose leader must run `stmt` (session database `db`): those it reads
    or writes the tables of, or makes a topic over. CREATE / DROP DATABASE and DROP TOPIC
    run anywhere (through etcd), and SHOW of databases, topics and nodes is every broker's."""
    names: set[str | None]
    if isinstance(stmt, ast.Insert | ast.CreateTables):
        names = {t.db or db for t in stmt.tables}
    elif isinstance(stmt, ast.Show):
        names = {stmt.db or db} if stmt.what in ("stables", "tables", "vgroups") else set()
    elif isinstance(stmt, ast.Select | ast.Describe | ast.CreateStable | ast.CreateTable | ast.AlterStableAddColumn
                    | ast.AlterStableAddTag | ast.AlterStableChange | ast.DropStable | ast.DropTable
                    | ast.CreateTopic):
        names = {stmt.db or db}
    elif isinstance(stmt, ast.AlterDatabase):  # its leader keeps it in the cluster's placement
        names = {stmt.name}
    else:
        names = set()
    return {n for n in names if n}


def databases_in(statements: list[ast.Statement], db: str | None, *, written: bool = False) -> set[str]:
    """The databases `statements` use (`databases_of`, and those USE names) — with
    `written`, only those whose vnodes they write (rows, or the meta of DDL)."""
    names: set[str] = set()
    for stmt in statements:
        if isinstance(stmt, ast.UseDatabase):
            db = stmt.name
            if not written:
                names.add(db)
        elif not written or isinstance(stmt, WRITES):
            names |= databases_of(stmt, db)
    return names


def led_elsewhere(cluster: SqlCluster, statements: list[ast.Statement], db: str | None) -> int | None:
    """The one other broker that leads the databases of `statements` (None: they are led
    here, or not shared); SqlError when they are led by several, or one has no leader."""
    here: set[str] = set()
    there: dict[int, set[str]] = {}
    for stmt in statements:
        if isinstance(stmt, ast.UseDatabase):
            db = stmt.name
            continue
        for name in databases_of(stmt, db):
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
