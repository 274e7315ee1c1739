"""SQL as a cluster of one: the `SqlCluster` of a broker that is in no cluster, and of the
databases a cluster's broker holds alone (those etcd does not place).

Rules: no database is shared (`leader` is None), so this node runs every statement and sends
none elsewhere; there is no etcd to read; a write has no replicas to wait for or to be cut off
from; a supertable change is the catalog's alone. CREATE DATABASE and CREATE TOPIC make them
in the topic registry, DROP removes them there and wakes any Fetch waiting on their vnodes
(it answers at once). `Executor.execute`, the synchronous entry point, makes and drops through
the same methods (`make_database`, `make_topic`, `drop_here`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tmqgate.broker.sql.access import Caller
from tmqgate.broker.sql.ast import SqlError
from tmqgate.broker.sql.ports import TopicNames
from tmqgate.broker.sql.result import SYN_NOT_LEADER, Result
from tmqgate.broker.sql.views import TopicDef


class LocalSql:
    """See the module docstring."""

    #: never compared: `leader` names no node
    node_id = 0

    def __init__(self, topics: TopicNames, notify: Callable[[str, int], None]) -> None:
        self._topics = topics
        self._notify = notify

    def leader(self, db: str) -> int | None:
        return None

    async def refresh(self) -> None:
        return None

    async def forward(self, node: int, text: str, db: str | None, caller: Caller) -> Result:
        raise SqlError(f"dnode {node} is not reachable: this broker is in no cluster", code=SYN_NOT_LEADER)

    def check_writable(self, dbs: set[str]) -> None:
        return None

    async def settle(self, dbs: set[str]) -> None:
        return None

    def stable_changed(self, db: str, name: str, schema: dict[str, Any] | None) -> None:
        return None

    def options_changed(self, db: str, options: dict[str, Any]) -> None:
        return None

    async def create_database(self, name: str, vgroups: int, options: dict[str, Any]) -> None:
        self.make_database(name, vgroups, options)

    async def create_topic(self, definition: TopicDef) -> None:
        self.make_topic(definition)

    async def drop(self, name: str) -> None:
        self.drop_here(name)

    def make_database(self, name: str, vgroups: int, options: dict[str, Any]) -> None:
        self._topics.make_database(name, vgroups, options)

    def make_topic(self, definition: TopicDef) -> None:
        self._topics.make_view(definition.name, definition.to_json())

    def drop_here(self, name: str) -> None:
        dropped = self._topics.get(name)
        self._topics.drop_sql(dropped)
        for vnode in range(dropped.partitions):  # a Fetch waiting on it answers at once
            self._notify(dropped.db, vnode)
