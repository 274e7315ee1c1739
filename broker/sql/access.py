"""Who may run a statement: what each SQL statement needs, in Kafka's ACL terms.

The SQL front runs as a principal (`Caller`: the HTTP front's authenticated user, or
`User:ANONYMOUS`), and databases and TDengine topics are Kafka topics, so a statement needs
what the matching Kafka request needs on the same topics — nobody reads or writes through SQL
what they may not through Kafka:

| statement                         | needs (each row: any one of)                          |
|-----------------------------------|-------------------------------------------------------|
| SELECT / DESCRIBE … FROM db.x     | READ / DESCRIBE on topic db                           |
| SHOW db.VGROUPS                   | DESCRIBE on topic db (as Metadata's placement)        |
| INSERT into db.x                  | WRITE on topic db                                     |
| CREATE DATABASE db                | CREATE on the cluster, or CREATE on topic db          |
| DROP DATABASE db                  | DELETE on the cluster, or DELETE on topic db          |
| CREATE / ALTER / DROP STABLE/TABLE| ALTER on topic db                                     |
| CREATE TOPIC t AS … db …          | CREATE on the cluster or on topic t; and READ on topic |
|                                   | db (a view shows nothing its source would not)        |
| DROP TOPIC t                      | DELETE on the cluster, or DELETE on topic t           |
| GRANT / REVOKE, CREATE/ALTER USER | ALTER on the cluster (as CreateAcls / user changes)   |

The decision is the broker's authorizer's (`Access.allows`); this module only names the needs,
so the TDengine subsystem stays free of the Kafka core. With no authorizer there is no
`Access` and nothing is checked.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from tmqgate.broker.sql import ast

ANONYMOUS = "User:ANONYMOUS"
#: the HTTP header of a statement one broker of a cluster sent another (broker/cluster/sql.py)
FORWARDED = "X-Tmqgate-Forwarded"
PERMISSION_DENIED = 0x2644  # TDengine's TSDB_CODE_PAR_PERMISSION_DENIED
CLUSTER = ("CLUSTER", "kafka-cluster")

# (operation, resource type, resource name) in Kafka's names (AclOperation, ResourceType)
Need = tuple[str, str, str]


@dataclass(frozen=True)
class Caller:
    """Who runs the statement: a Kafka principal and the client's address. On a cluster,
    ``credentials`` (the HTTP front's Authorization header) go along with a statement sent to
    the broker leading its database, and ``forwarded`` marks one that was sent: it is never
    sent on again."""

    principal: str = ANONYMOUS
    host: str = ""
    forwarded: bool = False
    credentials: str | None = field(default=None, repr=False)


class Access(Protocol):
    """What the broker gives the executor when an authorizer is on."""

    def allows(self, caller: Caller, operation: str, resource_type: str, name: str) -> bool: ...

    def grant(self, privilege: str, db: str, user: str, revoke: bool) -> None:
        """GRANT / REVOKE as ACLs: ALLOW `privilege` on topic `db` for User:`user`."""

    def set_password(self, user: str, password: str, create: bool) -> None:
        """CREATE USER / ALTER USER … PASS (the SASL credentials store's)."""


def _db(stmt_db: str | None, session_db: str | None) -> str:
    return stmt_db or session_db or ""


def needs(stmt: ast.Statement, db: str | None) -> list[tuple[Need, ...]]:
    """What `stmt` needs, run with session database `db` (see the module docstring)."""
    if isinstance(stmt, ast.Select):
        return [(("READ", "TOPIC", _db(stmt.db, db)),)]
    if isinstance(stmt, ast.Describe) or isinstance(stmt, ast.Show) and stmt.what == "vgroups":
        return [(("DESCRIBE", "TOPIC", _db(stmt.db, db)),)]
    if isinstance(stmt, ast.Insert):
        return [(("WRITE", "TOPIC", d),) for d in sorted({_db(t.db, db) for t in stmt.tables})]
    if isinstance(stmt, ast.CreateDatabase):
        return [(("CREATE", *CLUSTER), ("CREATE", "TOPIC", stmt.name))]
    if isinstance(stmt, ast.DropDatabase):
        return [(("DELETE", *CLUSTER), ("DELETE", "TOPIC", stmt.name))]
    if isinstance(stmt, ast.CreateTables):
        return [(("ALTER", "TOPIC", d),) for d in sorted({_db(t.db, db) for t in stmt.tables})]
    if isinstance(stmt, ast.CreateStable | ast.CreateTable | ast.AlterStableAddColumn | ast.AlterStableAddTag
                  | ast.DropStable | ast.DropTable):
        return [(("ALTER", "TOPIC", _db(stmt.db, db)),)]
    if isinstance(stmt, ast.CreateTopic):
        return [(("CREATE", *CLUSTER), ("CREATE", "TOPIC", stmt.name)),
                (("READ", "TOPIC", _db(stmt.db, db)),)]
    if isinstance(stmt, ast.DropTopic):
        return [(("DELETE", *CLUSTER), ("DELETE", "TOPIC", stmt.name))]
    if isinstance(stmt, ast.Grant | ast.UserPassword):
        return [(("ALTER", *CLUSTER),)]
    return []


def refusal(access: Access, caller: Caller, stmt: ast.Statement, db: str | None) -> str | None:
    """Why `caller` may not run `stmt` (TDengine's "Permission denied" message), or None."""
    for alternatives in needs(stmt, db):
        if not any(access.allows(caller, op, rt, name) for op, rt, name in alternatives):
            op, rt, name = alternatives[-1]
            return (f"Permission denied: {caller.principal} may not {op} "
                    f"{rt.lower().replace('_', ' ')} {name!r}")
    return None
