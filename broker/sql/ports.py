"""What SQL asks of the rest of the broker, as protocols the broker fills in: the Kafka topic
registry (`TopicNames`), the consumer groups (`GroupQueries`), the nodes and replicas
(`PlacementQueries`) and the cluster (`SqlCluster`).

The TDengine subsystem does not import the Kafka core (pyproject's tdengine-inward contract):
it sees the broker only through these, which broker/server.py builds.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any, Protocol

from tmqgate.broker.sql.access import Caller
from tmqgate.broker.sql.result import Result
from tmqgate.broker.sql.views import TopicDef


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


#: SHOW DNODES' columns (TDengine's ins_dnodes), the order of `PlacementQueries.dnodes`' rows
DNODE_COLUMNS = [("id", "INT", 4), ("endpoint", "VARCHAR", 134), ("vnodes", "SMALLINT", 2),
                 ("support_vnodes", "SMALLINT", 2), ("status", "VARCHAR", 10), ("create_time", "TIMESTAMP", 8),
                 ("reboot_time", "TIMESTAMP", 8), ("note", "VARCHAR", 256)]
DNODE_STATUS = [name for name, _, _ in DNODE_COLUMNS].index("status")


class SqlCluster(Protocol):
    """What SQL asks of a cluster: broker/cluster/sql.py's on a cluster, broker/sql/local.py's
    (a cluster of one) otherwise, and for the databases a cluster's broker holds alone. A SQL
    database made on a cluster is placed in etcd and led by one broker (its REPLICA copies
    follow it), which runs every statement about it (its DDL, INSERT, SELECT, SHOW of its
    tables, CREATE TOPIC over it); any other broker sends such statements there. CREATE / DROP
    DATABASE and DROP TOPIC go through etcd from any broker."""

    node_id: int

    def leader(self, db: str) -> int | None:
        """The broker leading SQL database ``db`` (-1: none live now); None: not shared (this
        node's alone: it runs the statements)."""

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

    def options_changed(self, db: str, options: dict[str, Any]) -> None:
        """``db``'s options changed here, its leader (ALTER DATABASE): recorded in etcd with
        the database (in the background, in order), for every broker to take."""

    async def create_database(self, name: str, vgroups: int, options: dict[str, Any]) -> None:
        """Make a new SQL database, led by this broker, with ``options["replica"]`` copies of
        each vnode (SqlError if the name is taken); the topic registry has it on return."""

    async def create_topic(self, definition: TopicDef) -> None:
        """Make a TDengine topic over a database this broker leads; the registry has it on return."""

    async def drop(self, name: str) -> None:
        """Remove a SQL database or TDengine topic (checked by the caller); gone from the
        registry on return."""
