"""SQL on a cluster (issue 16, step 5): the executor's ``SqlCluster``.

Rules:
- ``CREATE DATABASE`` on any broker places the database in etcd (``coordinator.cluster``:
  KIND ``tsdb``) with every vnode on that broker, which leads it (REPLICA 1: a SQL database
  is not replicated yet); every broker makes the database with the cluster's topic id
  (``ClusterTopics.apply``), so SHOW DATABASES, Metadata and SHOW VGROUPS agree everywhere
  and a Kafka client finds each vnode's leader from any broker.
- A statement about the database's tables (``executor._databases_of``) runs on its leader:
  any other broker sends the SQL text to the leader's HTTP front (registered in etcd), with the
  caller's credentials, and answers what the leader answered. A sent statement carries
  ``FORWARDED`` and is never sent on: a broker that no longer leads the database refuses it.
- ``CREATE TOPIC … AS`` over a shared database is checked by its leader and placed (KIND
  ``tmq``); its partitions are the database's vnodes, so its view is evaluated on their
  leader. ``DROP DATABASE`` and ``DROP TOPIC`` remove the placement from any broker.
"""

from __future__ import annotations

import logging
import ssl
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import aiohttp

from tmqgate.broker.tdengine import FORWARDED, Caller, Result, SqlError, TopicDef
from tmqgate.broker.topics import TSDB, TopicError
from tmqgate.coordinator.cluster import TMQ_KIND, TSDB_KIND, PartitionState
from tmqgate.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from tmqgate.broker.cluster.membership import Membership
    from tmqgate.broker.cluster.topics import ClusterTopics
    from tmqgate.broker.topics import TopicRegistry

log = logging.getLogger("tmqgate.cluster")

#: TDengine's "Database already exists" (TSDB_CODE_MND_DB_ALREADY_EXIST)
DB_ALREADY_EXIST = 0x0382


class ClusterSql:
    """See the module docstring."""

    def __init__(self, node_id: int, membership: Membership, cluster_topics: ClusterTopics, registry: TopicRegistry,
                 tls: ssl.SSLContext | None, timeout_s: float) -> None:
        self.node_id = node_id
        self._membership = membership
        self._cluster_topics = cluster_topics
        self._registry = registry
        self._tls = tls  # the HTTP fronts speak TLS (http_tls): how this broker checks theirs
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)

    def leader(self, db: str) -> int | None:
        topic = self._registry.get(db)
        if topic is None or topic.kind != TSDB:
            return None
        state = self._registry.partition_state(topic, 0)
        return None if state is None else state.leader

    async def refresh(self) -> None:
        await self._membership.refresh()

    async def forward(self, node: int, text: str, db: str | None, caller: Caller) -> Result:
        info = self._membership.view.brokers.get(node)
        if info is None or not info.http:
            raise SqlError(f"dnode {node}, which leads the database, is not reachable (no live registration)")
        url = f"{'https' if self._tls else 'http'}://{info.http}/rest/sql" + (f"/{quote(db, safe='')}" if db else "")
        headers = {FORWARDED: "1", "Content-Type": "text/plain; charset=utf-8"}
        if caller.credentials:
            headers["Authorization"] = caller.credentials
        try:
            async with aiohttp.ClientSession(timeout=self._timeout) as session, \
                    session.post(url, data=text.encode(), headers=headers, ssl=self._tls or False) as answer:
                body: Any = await answer.json(content_type=None)
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            raise SqlError(f"dnode {node}, which leads the database, did not answer: {exc or type(exc).__name__}") \
                from None
        if not isinstance(body, dict) or not isinstance(body.get("code"), int):
            raise SqlError(f"dnode {node} answered something that is not TDengine's REST shape")
        if body["code"] != 0:
            raise SqlError(str(body.get("desc", "")), code=body["code"])
        return Result(columns=[(str(c[0]), str(c[1]), int(c[2])) for c in body["column_meta"]],
                      rows=list(body["data"]))

    async def create_database(self, name: str, vgroups: int, options: dict[str, Any]) -> None:
        me = self.node_id
        states = tuple(PartitionState((me,), me, 0, (me,)) for _ in range(vgroups))
        try:
            await self._cluster_topics.create_placed(name, TSDB_KIND, {"options": options}, states)
        except TopicError as exc:
            if exc.code == ErrorCode.TOPIC_ALREADY_EXISTS:
                raise SqlError(f"Database already exists: {name}", code=DB_ALREADY_EXIST) from None
            raise SqlError(exc.message or str(exc)) from None

    async def create_topic(self, definition: TopicDef) -> None:
        placement = self._membership.placements.get(definition.db)
        if placement is None:
            raise SqlError(f"Database not exist: {definition.db}")
        try:
            await self._cluster_topics.create_placed(definition.name, TMQ_KIND, definition.to_json(),
                                                     placement.partitions)
        except TopicError as exc:
            if exc.code == ErrorCode.TOPIC_ALREADY_EXISTS:
                raise SqlError(f"Topic already exists: {definition.name}") from None
            raise SqlError(exc.message or str(exc)) from None

    async def drop(self, name: str) -> None:
        topic = self._registry.get(name)
        if topic is None:
            return
        try:
            await self._cluster_topics.delete_placed(topic)
        except TopicError as exc:
            raise SqlError(exc.message or str(exc)) from None
