"""SQL on a cluster (issue 16, step 5): the executor's ``SqlCluster`` (one node's is broker/sql/local.py).

Rules:
- ``CREATE DATABASE … REPLICA r`` on any broker places the database in etcd
  (``metadata.view``: KIND ``tsdb``), each vnode's replicas that broker — which leads
  them all — and the next r - 1 live brokers by node id (fewer live brokers than r: TDengine's
  "Out of dnodes"); the controller elects a new leader for all the vnodes together
  (``metadata.view.elect``) and followers copy each vnode's WAL with its catalog changes
  (broker/cluster/replication.py); every broker makes the database with the cluster's topic id
  (``ClusterTopics.apply``), so SHOW DATABASES, Metadata and SHOW VGROUPS agree everywhere
  and a Kafka client finds each vnode's leader from any broker.
- A statement about the database's tables (``broker/sql/routing.py`` ``databases_of``) runs on its leader:
  any other broker sends the SQL text to the leader's HTTP front (registered in etcd), with the
  caller's credentials, and answers what the leader answered. A sent statement carries
  ``FORWARDED`` and is never sent on: a broker that no longer leads the database refuses it.
- A statement that writes a replicated database (INSERT, its DDL) is refused before anything
  is written when the leader is cut off from etcd or has fewer in-sync replicas than
  ``min.insync.replicas``, and answered once every in-sync replica has what it wrote (acks=all;
  TDengine's "Sync timeout" after ``replica_lag_time_max_ms``: it may or may not be kept).
- A supertable made, altered or dropped on the database's leader (by SQL, or by schemaless rows)
  is logged on every vnode as on one node — its replicas apply it from there, in order with
  the rows — and recorded in the database's placement in etcd (``stables``: name → schema) by a
  compare-and-swap right after, in order; every broker's copy of the database takes them
  (``ClusterTopics.apply``), so the cluster's catalog in etcd has every supertable.
- ``CREATE TOPIC … AS`` over a shared database is checked by its leader and placed (KIND
  ``tmq``); its partitions are the database's vnodes, so its view is evaluated on their
  leader. ``DROP DATABASE`` and ``DROP TOPIC`` remove the placement from any broker.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import aiohttp

from tmqgate.broker.cluster.outbox import Outbox
from tmqgate.broker.metadata.view import TMQ_KIND, TSDB_KIND, PartitionState
from tmqgate.broker.tdengine import (
    DB_ALREADY_EXIST,
    FORWARDED,
    OUT_OF_DNODES,
    SYN_NOT_LEADER,
    Caller,
    Result,
    SqlError,
    TopicDef,
)
from tmqgate.broker.topics import TSDB, TopicError
from tmqgate.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from tmqgate.broker.cluster.membership import Membership
    from tmqgate.broker.cluster.replication import Replication
    from tmqgate.broker.cluster.topics import ClusterTopics
    from tmqgate.broker.topics import TopicRegistry
    from tmqgate.storage import Store

log = logging.getLogger("tmqgate.cluster")

#: TDengine's "Sync timeout" (TSDB_CODE_SYN_TIMEOUT): the replicas did not confirm a write in time
SYN_TIMEOUT = 0x0903


class ClusterSql:
    """See the module docstring."""

    def __init__(self, node_id: int, membership: Membership, cluster_topics: ClusterTopics, registry: TopicRegistry,
                 store: Store, replication: Replication, tls: ssl.SSLContext | None, timeout_s: float,
                 replicated_timeout_s: float) -> None:
        self.node_id = node_id
        self._store = store
        self._replication = replication
        self._timeout_s = replicated_timeout_s  # acks=all: how long a write waits for the in-sync replicas
        #: changes made here to databases' definitions in etcd, in order: each (db, its topic
        #: id, the change to the definition) — a supertable made, altered or dropped, options
        self._stables: Outbox[tuple[str, bytes, Callable[[dict[str, Any]], None]]] = Outbox(
            self._record_stables, "supertable and database changes", into=membership.outboxes)
        self._membership = membership
        self._cluster_topics = cluster_topics
        self._registry = registry
        self._tls = tls  # the HTTP fronts speak TLS (http_tls): how this broker checks theirs
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)

    def retry(self) -> None:
        """After each read of etcd: the supertable changes etcd could not take, tried again."""
        self._stables.kick()

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
            raise SqlError(f"dnode {node}, which leads the database, is not reachable (no live registration)",
                           code=SYN_NOT_LEADER)
        url = f"{'https' if self._tls else 'http'}://{info.http}/rest/sql" + (f"/{quote(db, safe='')}" if db else "")
        headers = {FORWARDED: "1", "Content-Type": "text/plain; charset=utf-8"}
        if caller.credentials:
            headers["Authorization"] = caller.credentials
        try:
            async with aiohttp.ClientSession(timeout=self._timeout) as session, \
                    session.post(url, data=text.encode(), headers=headers, ssl=self._tls or False) as answer:
                body: Any = await answer.json(content_type=None)
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            raise SqlError(f"dnode {node}, which leads the database, did not answer: {exc or type(exc).__name__}",
                           code=SYN_NOT_LEADER) from None
        malformed = SqlError(f"dnode {node} answered something that is not TDengine's REST shape")
        if not isinstance(body, dict) or not isinstance(body.get("code"), int):
            raise malformed
        if body["code"] != 0:
            raise SqlError(str(body.get("desc", "")), code=body["code"])
        try:
            return Result(columns=[(str(c[0]), str(c[1]), int(c[2])) for c in body["column_meta"]],
                          rows=list(body["data"]))
        except (KeyError, IndexError, TypeError, ValueError):
            raise malformed from None

    def check_writable(self, dbs: set[str]) -> None:
        replication = self._replication
        for db in dbs:
            topic = self._registry.get(db)
            if topic is None or topic.kind != TSDB or replication.led_state(topic, 0) is None:
                continue
            if replication.cut_off():
                raise SqlError(f"This dnode lost the cluster's etcd; it takes no writes to {db} until it is back",
                               code=SYN_NOT_LEADER)
            if any(replication.not_enough_replicas(topic, v) for v in range(topic.partitions)):
                raise SqlError(f"Database {db} has fewer in-sync replicas than min.insync.replicas "
                               "(Kafka's NOT_ENOUGH_REPLICAS): nothing was written")

    async def settle(self, dbs: set[str]) -> None:
        replication = self._replication
        waits = []
        for db in dbs:
            topic = self._registry.get(db)
            if topic is None or topic.kind != TSDB:
                continue
            for v in range(topic.partitions):
                if replication.led_state(topic, v) is not None:
                    replication.appended(topic, v)
                    waits.append(replication.wait_replicated(topic, v, self._store.next_version(db, v),
                                                             self._timeout_s))
        if not all(await asyncio.gather(*waits)):
            raise SqlError(f"The in-sync replicas did not confirm the write within {self._timeout_s:g} s (or this "
                           "dnode stopped leading the database): it may or may not be kept", code=SYN_TIMEOUT)

    def stable_changed(self, db: str, name: str, schema: dict[str, Any] | None) -> None:
        topic = self._registry.get(db)
        if topic is None or self.leader(db) is None:
            return  # a database of this node alone

        def change(definition: dict[str, Any]) -> None:
            stables = definition.setdefault("stables", {})
            if schema is None:
                stables.pop(name, None)
            else:
                stables[name] = schema

        self._stables.add([(db, topic.topic_id, change)])

    def options_changed(self, db: str, options: dict[str, Any]) -> None:
        topic = self._registry.get(db)
        if topic is None or self.leader(db) is None:
            return  # a database of this node alone

        def change(definition: dict[str, Any]) -> None:
            definition["options"] = dict(options)

        self._stables.add([(db, topic.topic_id, change)])

    async def _record_stables(self, changes: list[tuple[str, bytes, Callable[[dict[str, Any]], None]]]) -> None:
        """Changes made here to databases' definitions, into their placements (a
        compare-and-swap each)."""
        for db, topic_id, change in changes:
            await self._cluster_topics.change_definition(db, topic_id, change)

    async def create_database(self, name: str, vgroups: int, options: dict[str, Any]) -> None:
        me = self.node_id
        live = sorted(self._membership.view.brokers)
        copies = int(options.get("replica", 1))
        if len(live) < copies or me not in live:
            raise SqlError("Out of dnodes", code=OUT_OF_DNODES)
        # this broker first (it leads every vnode), then the next brokers by node id
        at = live.index(me)
        replicas = tuple(live[(at + i) % len(live)] for i in range(copies))
        states = tuple(PartitionState(replicas, me, 0, replicas) for _ in range(vgroups))
        try:
            await self._cluster_topics.create_placed(name, TSDB_KIND, {"options": options}, states)
        except TopicError as exc:
            if exc.code == ErrorCode.TOPIC_ALREADY_EXISTS:
                raise SqlError(f"Database already exists: {name}", code=DB_ALREADY_EXIST) from None
            raise SqlError(exc.message or str(exc)) from None
        self._registry.reload()

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
        self._registry.reload()

    async def drop(self, name: str) -> None:
        topic = self._registry.get(name)
        if topic is not None:
            try:
                await self._cluster_topics.delete_placed(topic)
            except TopicError as exc:
                raise SqlError(exc.message or str(exc)) from None
        self._registry.reload()
