"""Who may run a statement: what each SQL statement needs, in Kafka's ACL terms.

The SQL front runs as a principal (`Caller`: the HTTP front's authenticated user, or
`User:ANONYMOUS`), and databases and TDengine topics are Kafka topics, so a statement needs
what the matching Kafka request needs on the same topics and groups — nobody reads, writes,
deletes or even sees through SQL what they may not through Kafka. `STATEMENTS` holds one entry
per statement class of broker/sql/ast.py and `SHOWS` one per SHOW kind (tests/test_sql_access.py
fails when one is missing, and a statement with no entry is refused, never let through):

| statement                         | needs (each row: any one of)  | as Kafka's                  |
|-----------------------------------|-------------------------------|-----------------------------|
| SELECT … FROM db.x                | READ on topic db              | Fetch                       |
| DESCRIBE db.x                     | DESCRIBE on topic db          | Metadata of topic db        |
| USE db                            | DESCRIBE on topic db          | Metadata of topic db        |
| INSERT into db.x                  | WRITE on topic db             | Produce                     |
| CREATE DATABASE db                | CREATE on the cluster, or     | CreateTopics                |
|                                   | CREATE on topic db            |                             |
| DROP DATABASE db                  | DELETE on the cluster, or     | DeleteTopics                |
|                                   | DELETE on topic db            |                             |
| CREATE / ALTER / DROP STABLE/TABLE| ALTER on topic db             | CreatePartitions (a change  |
|                                   |                               | of the topic's layout)      |
| CREATE TOPIC t AS … db …          | CREATE on the cluster or on   | CreateTopics; a view shows  |
|                                   | topic t; and READ on topic db | nothing its source would not|
| DROP TOPIC t                      | DELETE on the cluster, or     | DeleteTopics                |
|                                   | DELETE on topic t             |                             |
| DROP CONSUMER GROUP g ON t        | DELETE on group g; and READ   | OffsetDelete (it erases g's |
|                                   | on topic t                    | offsets of t)               |
| GRANT / REVOKE, CREATE/ALTER USER | ALTER on the cluster          | CreateAcls / DeleteAcls,    |
|                                   |                               | AlterUserScramCredentials   |
| SHOW db.STABLES / TABLES / VGROUPS| DESCRIBE on topic db          | Metadata of topic db        |
| SHOW DATABASES                    | nothing; rows filtered: those | Metadata of all topics      |
|                                   | with DESCRIBE on topic db     |                             |
| SHOW TOPICS                       | nothing; rows (their SELECT   | Metadata of all topics      |
|                                   | texts) filtered by DESCRIBE   |                             |
|                                   | on topic t                    |                             |
| SHOW CONSUMERS                    | nothing; rows filtered by     | ListGroups / DescribeGroups |
|                                   | DESCRIBE on the group (all    |                             |
|                                   | with DESCRIBE on the cluster),|                             |
|                                   | their topics by DESCRIBE      |                             |
| SHOW SUBSCRIPTIONS                | nothing; rows filtered by     | ListGroups + OffsetFetch    |
|                                   | DESCRIBE on the group (or the |                             |
|                                   | cluster) and on the topic     |                             |
| SHOW DNODES                       | nothing (the brokers, as      | Metadata's broker list      |
|                                   | Metadata gives anyone)        |                             |

`Visibility(access, caller)` is the row filter of the SHOWs above (and of /log-history and
/metrics). The
HTTP paths' needs are in broker/network/http.py's `PATH_NEEDS`, next to the routes.

A TDengine topic (a view) records its owner, the principal who made it (`TopicDef.owner`):
a Fetch of the view needs, besides READ on the view's topic, the owner's READ on the database
it reads (broker/handlers/fetch.py), so revoking it stops the view.

The decision is the broker's authorizer's (`Access.allows`); this module only names the needs,
so the TDengine subsystem stays free of the Kafka core. With no authorizer there is no
`Access` and nothing is checked or filtered.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

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


Needs = list[tuple[Need, ...]]
#: what a statement of this class needs, run with session database `db`
NeedsOf = Callable[[Any, str | None], Needs]


def _nothing(_stmt: Any, _db: str | None) -> Needs:
    return []


def _describe_db(stmt: Any, db: str | None) -> Needs:
    return [(("DESCRIBE", "TOPIC", _db(stmt.db, db)),)]


def _alter_db(stmt: Any, db: str | None) -> Needs:
    return [(("ALTER", "TOPIC", _db(stmt.db, db)),)]


def _create_topic(stmt: ast.CreateTopic, db: str | None) -> Needs:
    return [(("CREATE", *CLUSTER), ("CREATE", "TOPIC", stmt.name)), (("READ", "TOPIC", _db(stmt.db, db)),)]


#: SHOW kind → what it needs; the ones that need nothing filter their rows (`filtered`)
SHOWS: dict[str, NeedsOf] = {
    "databases": _nothing,  # rows: DESCRIBE on each database's topic, as Metadata of all topics
    "topics": _nothing,  # rows: DESCRIBE on each topic
    "consumers": _nothing,  # rows: DESCRIBE on the group (or the cluster), as ListGroups
    "subscriptions": _nothing,  # rows: DESCRIBE on the group (or the cluster) and the topic
    "dnodes": _nothing,  # the brokers: Metadata's broker list is anyone's
    "stables": _describe_db,
    "tables": _describe_db,
    "vgroups": _describe_db,  # as Metadata's placement
}

#: statement class → what it needs (see the module docstring's table)
STATEMENTS: dict[type[ast.Statement], NeedsOf] = {
    ast.Select: lambda s, db: [(("READ", "TOPIC", _db(s.db, db)),)],
    ast.Describe: _describe_db,
    ast.UseDatabase: lambda s, _db: [(("DESCRIBE", "TOPIC", s.name),)],
    ast.Insert: lambda s, db: [(("WRITE", "TOPIC", d),) for d in sorted({_db(t.db, db) for t in s.tables})],
    ast.CreateDatabase: lambda s, _db: [(("CREATE", *CLUSTER), ("CREATE", "TOPIC", s.name))],
    ast.DropDatabase: lambda s, _db: [(("DELETE", *CLUSTER), ("DELETE", "TOPIC", s.name))],
    ast.CreateTables: lambda s, db: [(("ALTER", "TOPIC", d),) for d in sorted({_db(t.db, db) for t in s.tables})],
    ast.CreateStable: _alter_db,
    ast.CreateTable: _alter_db,
    ast.AlterStableAddColumn: _alter_db,
    ast.AlterStableAddTag: _alter_db,
    ast.AlterStableChange: _alter_db,
    # as IncrementalAlterConfigs of the database's topic (its retention)
    ast.AlterDatabase: lambda s, _db: [(("ALTER_CONFIGS", "TOPIC", s.name),)],
    ast.DropStable: _alter_db,
    ast.DropTable: _alter_db,
    ast.CreateTopic: _create_topic,
    ast.DropTopic: lambda s, _db: [(("DELETE", *CLUSTER), ("DELETE", "TOPIC", s.name))],
    # OffsetDelete: DELETE on the group, READ on the topic whose offsets go
    ast.DropConsumerGroup: lambda s, _db: [(("DELETE", "GROUP", s.group),), (("READ", "TOPIC", s.topic),)],
    ast.Grant: lambda _s, _db: [(("ALTER", *CLUSTER),)],
    ast.UserPassword: lambda _s, _db: [(("ALTER", *CLUSTER),)],
    ast.Show: lambda s, db: SHOWS[s.what](s, db),
}


class NoEntry(Exception):
    """A statement class (or SHOW kind) with no entry in `STATEMENTS` / `SHOWS`."""


def needs(stmt: ast.Statement, db: str | None) -> Needs:
    """What `stmt` needs, run with session database `db` (see the module docstring);
    NoEntry if the table has no entry for it (it is then refused, never let through)."""
    try:
        return STATEMENTS[type(stmt)](stmt, db)
    except KeyError:
        raise NoEntry(f"{type(stmt).__name__}{' ' + stmt.what if isinstance(stmt, ast.Show) else ''}") from None


def refusal(access: Access, caller: Caller, stmt: ast.Statement, db: str | None) -> str | None:
    """Why `caller` may not run `stmt` (TDengine's "Permission denied" message), or None."""
    try:
        required = needs(stmt, db)
    except NoEntry as exc:
        return f"Permission denied: no access rule for the statement {exc}"
    for alternatives in required:
        if not any(access.allows(caller, op, rt, name) for op, rt, name in alternatives):
            op, rt, name = alternatives[-1]
            return (f"Permission denied: {caller.principal} may not {op} "
                    f"{rt.lower().replace('_', ' ')} {name!r}")
    return None


class Visibility:
    """What `caller` may see in a listing (SHOW, /log-history, /metrics): the names of a
    resource type it may DESCRIBE, as Metadata and ListGroups hide the rest — every group with
    DESCRIBE on the cluster, as ListGroups; everything with no authorizer. Decisions are kept
    for the one listing (the authorizer caches them across listings)."""

    def __init__(self, access: Access | None, caller: Caller) -> None:
        self.access = access
        self.caller = caller
        self._seen: dict[tuple[str, str], bool] = {}
        self._all_groups: bool | None = None

    def __call__(self, resource_type: str, name: str) -> bool:
        access = self.access
        if access is None:
            return True
        if resource_type == "GROUP":
            if self._all_groups is None:
                self._all_groups = access.allows(self.caller, "DESCRIBE", *CLUSTER)
            if self._all_groups:
                return True
        key = (resource_type, name)
        ok = self._seen.get(key)
        if ok is None:
            ok = self._seen[key] = access.allows(self.caller, "DESCRIBE", resource_type, name)
        return ok

    def of(self, resource_type: str, names: Iterable[str]) -> set[str]:
        """Those of `names` the caller may see."""
        return {n for n in names if self(resource_type, n)}
