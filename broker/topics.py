"""Kafka topics over TDengine-style databases.

Three kinds of database-backed topics share the Kafka topic namespace:

- a plain topic made with CreateTopics is a database of its own (one vnode per partition)
  holding opaque Kafka records, read back byte for byte, so it behaves exactly as a Kafka topic;
- a SQL database (`CREATE DATABASE db VGROUPS n`) is a topic named after it: producers write
  rows to it as InfluxDB line protocol or OpenTSDB JSON, and reading it is the database topic
  over it;
- a TDengine topic (`CREATE TOPIC t AS DATABASE | STABLE | SELECT …`) is a view over one
  database's vnodes, evaluated inside Fetch.

Kafka's internal topics are shown too (`INTERNAL`, Metadata's is_internal): `__consumer_offsets`
(offsets_topic_num_partitions partitions) and `__transaction_state`
(transaction_state_log_num_partitions), read from the store's logs in Kafka's record format
(`storage.group_log`). As on
Kafka, which creates them on the first FindCoordinator, they appear once a group (or a
transactional id) has used the broker; nobody produces to, creates, deletes or reconfigures them.
On a cluster (``internal_sources``) each follows the state topic its coordinators lead
(broker/cluster/coordinator_state.py): as many partitions (cluster_state_partitions, so a key's
partition is the same in both), partition p led, replicated and fenced as the state topic's
partition p, shown by every broker once that topic exists. So a reader of ``__consumer_offsets``
fetches each partition from the coordinator of its groups — whose log holds their changes — as
on Kafka, where the coordinator leads its ``__consumer_offsets`` partition. A new coordinator of
a partition ends its log with the state it took over (committed offsets, transactional ids'
states; what it held before superseded or tombstoned), so a reader of the compacted topic sees
what the previous leader's showed; offsets are each broker's own, so a reader whose position is
past the new leader's log end is answered OFFSET_OUT_OF_RANGE and resets, as after a truncation.

The registry caches the catalog so the hot paths never touch LevelDB for it.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from tmqgate.broker.configs.topic_configs import BrokerDefault, effective, validate, validate_together
from tmqgate.broker.errors import KafkaError
from tmqgate.broker.metadata.view import GROUP_STATE_TOPIC, TXN_STATE_TOPIC, PartitionState, reassign
from tmqgate.broker.tdengine import INVALID_IDENTIFIER, Caller, SqlError, TopicDef, View, topic_definition
from tmqgate.protocol.bodies import ZERO_UUID
from tmqgate.protocol.errors import ErrorCode
from tmqgate.protocol.internal_topics import GROUP_METADATA_TOPIC, TRANSACTION_STATE_TOPIC, is_internal
from tmqgate.protocol.names import topic_name_problem

if TYPE_CHECKING:
    from tmqgate.broker.metadata.view import Placement
    from tmqgate.broker.tdengine import TsdbCatalog
    from tmqgate.storage import Store


KAFKA = "kafka"  # a plain Kafka topic
TSDB = "tsdb"  # a SQL database, written with line protocol / JSON
TMQ = "tmq"  # a TDengine topic (read-only view)
INTERNAL = "internal"  # one of Kafka's internal topics (__consumer_offsets, __transaction_state)

# The configs Kafka gives its internal topics at creation (GroupCoordinatorService's
# groupMetadataTopicConfigs, TransactionStateManager's transactionTopicConfigs; segment.bytes
# is offsets.topic.segment.bytes / transaction.state.log.segment.bytes, 100 MiB by default).
INTERNAL_CONFIGS = {
    GROUP_METADATA_TOPIC: {"cleanup.policy": "compact", "compression.type": "producer",
                           "segment.bytes": "104857600"},
    TRANSACTION_STATE_TOPIC: {"cleanup.policy": "compact", "compression.type": "uncompressed",
                              "min.insync.replicas": "1", "segment.bytes": "104857600",
                              "unclean.leader.election.enable": "false"},
}


class InternalLog(Protocol):
    """Where an internal topic's records come from (`storage.group_log.GroupLog`)."""

    def next_offset(self, partition: int) -> int: ...

    def read(self, partition: int, offset: int, max_bytes: int) -> list[bytes]: ...


def internal_topic_id(name: str) -> bytes:
    """A fixed id for an internal topic (the same across restarts; a uuid v4's layout)."""
    raw = bytearray(hashlib.sha256(f"tmqgate internal topic {name}".encode()).digest()[:16])
    raw[6] = raw[6] & 0x0F | 0x40
    raw[8] = raw[8] & 0x3F | 0x80
    return bytes(raw)

# Topic configs through which Kafka tooling creates a TDengine topic:
# kafka-topics --create --topic t --config tmq.as="SELECT ts, current FROM power.meters WHERE …"
TMQ_AS = "tmq.as"
TMQ_META = "tmq.meta"
TMQ_DB = "tmq.db"


# How a TDengine topic's definition is shown as configs (DescribeConfigs, kafka-topics
# --describe): tmq.as is the query as given — the statement's text after its `AS`.
_AS_TEXT = re.compile(r"^CREATE\s+TOPIC\s+(?:IF\s+NOT\s+EXISTS\s+)?(?:`[^`]*`|\S+)\s+"
                      r"(?:(WITH|ONLY)\s+META\s+)?AS\s+", re.IGNORECASE)


def tmq_configs(definition: TopicDef) -> dict[str, str]:
    """The configs a TDengine topic shows: tmq.as (its query as given), tmq.db (the database it
    reads) and tmq.meta when it has meta records — what CreateTopics takes to make it again."""
    match = _AS_TEXT.match(definition.statement)
    configs = {TMQ_AS: definition.statement[match.end():] if match else definition.statement,
               TMQ_DB: definition.db}
    if match and match.group(1):
        configs[TMQ_META] = match.group(1).lower()
    return configs


def _in_config(exc: SqlError, offset: int) -> str:
    """The message of an error in `CREATE TOPIC … AS <tmq.as>` with its position counted in the
    tmq.as text the user gave (the statement around it is the broker's)."""
    if exc.position is None or exc.position < offset:
        return exc.message
    return re.sub(rf"\bposition {exc.position}\b", f"position {exc.position - offset}", exc.message)


class TopicError(KafkaError):
    """A topic operation Kafka refuses, with its error code and message."""


@dataclass
class Topic:
    """What the broker knows of one Kafka topic."""

    name: str
    topic_id: bytes
    db: str
    partitions: int
    configs: dict[str, str] = field(default_factory=dict)
    kind: str = KAFKA
    view: View | None = None
    log: InternalLog | None = None  # an internal topic's records
    #: the broker's defaults of topic configs (the registry's, shared; broker.dynamic_configs.broker_configs)
    broker_defaults: Mapping[str, BrokerDefault] = field(default_factory=dict)
    #: (database, partition) → high watermark of the replicated partitions this broker leads
    #: (the registry's, shared; broker/cluster/replication.py): consumers read below it
    replicated: Mapping[tuple[str, int], int] = field(default_factory=dict)

    def config(self, name: str) -> str:
        return effective(self.configs, name, self.broker_defaults)

    @property
    def is_internal(self) -> bool:
        """Kafka's internal topics, and a cluster's group and transaction state (written by the brokers alone)."""
        return self.kind == INTERNAL or self.name in (GROUP_STATE_TOPIC, TXN_STATE_TOPIC)

    def high_watermark(self, store: Store, partition: int) -> int:
        if self.log is not None:
            return self.log.next_offset(partition)
        hw = self.replicated.get((self.db, partition)) if self.replicated else None
        return store.next_version(self.db, partition) if hw is None else hw

    def log_end(self, store: Store, partition: int) -> int:
        """The log end offset: the high watermark, except on a replicated partition, whose
        log runs ahead of it by what the in-sync replicas have not all fetched yet."""
        if self.replicated and (self.db, partition) in self.replicated:
            return store.next_version(self.db, partition)
        return self.high_watermark(store, partition)

    def log_start(self, store: Store, partition: int) -> int:
        return 0 if self.log is not None else store.log_start(self.db, partition)

    def last_stable_offset(self, store: Store, partition: int) -> int:
        if self.log is not None:  # nothing transactional is written there
            return self.log.next_offset(partition)
        lso = store.last_stable_offset(self.db, partition)
        return min(lso, self.high_watermark(store, partition)) if self.replicated else lso

    @property
    def max_message_bytes(self) -> int:
        return int(self.config("max.message.bytes"))

    def read(self, store: Store, vnode: int, offset: int, max_bytes: int) -> list[bytes]:
        """Record batches from `offset` on: stored bytes for plain topics, the view otherwise."""
        if self.log is not None:
            return self.log.read(vnode, offset, max_bytes)
        if self.view is None:
            return store.read(self.db, vnode, offset, max_bytes)
        return self.view.read(vnode, offset, max_bytes)

    async def read_async(self, store: Store, vnode: int, offset: int, max_bytes: int, end: int,
                         committed: bool = False, gone: Callable[[], bool] | None = None) -> list[bytes]:
        """`read` for Fetch: a view is evaluated in steps off the event loop, up to version
        `end` (the high watermark answered; the last stable offset for read_committed);
        stored bytes are read in place (no evaluation). `committed`: a view drops the rows of
        aborted transactions (stored batches go as they are, with the aborted list); `gone`:
        whether the client has left (a view's evaluation then stops)."""
        if self.log is not None:
            return self.log.read(vnode, offset, max_bytes)
        if self.view is None:
            return store.read(self.db, vnode, offset, max_bytes)
        return await self.view.read_async(vnode, offset, max_bytes, end, committed, gone)


def check_topic_name(name: str | None) -> str:
    """Kafka's topic name rules (INVALID_TOPIC_EXCEPTION otherwise); `protocol.names` holds them."""
    problem = topic_name_problem(name)
    if problem is not None:
        raise TopicError(ErrorCode.INVALID_TOPIC_EXCEPTION, problem)
    assert name is not None
    return name


def validate_configs(configs: dict[str, str | None]) -> dict[str, str]:
    """Validate topic configs (INVALID_CONFIG on an unknown key or a bad value)."""
    out: dict[str, str] = {}
    for key, value in configs.items():
        try:
            out[key] = validate(key, value)
        except ValueError as exc:
            raise TopicError(ErrorCode.INVALID_CONFIG, str(exc)) from None
    try:
        validate_together(out)
    except ValueError as exc:
        raise TopicError(ErrorCode.INVALID_CONFIG, str(exc)) from None
    return out


#: ElectLeaders' and AlterPartitionReassignments' answers: by topic, (partition, error,
#: message) of each partition asked for
Results = dict[str, list[tuple[int, ErrorCode, str | None]]]


class TopicCluster(Protocol):
    """Topic creation, deletion and placement over the brokers: `LocalTopics` (below) on one
    node, through etcd on a cluster (broker/cluster/topics.py), so that every broker has the
    topic and one placement of its partitions."""

    #: True: this broker holds every replica (a cluster of one)
    alone: bool

    async def create(self, name: str, partitions: int, configs: dict[str, str | None],
                     replicas: list[list[int]] | None = None, replication_factor: int = 1,
                     owner: tuple[str, str] | None = None) -> Topic:
        """A new topic (a TDengine topic with the tmq.as config, made by ``owner``: principal,
        host)."""
        ...

    async def delete(self, topic: Topic) -> None: ...

    async def add_partitions(self, topic: Topic, count: int, assignments: list[list[int]] | None,
                             validate_only: bool) -> None: ...

    def configs_changed(self, topic: Topic, configs: dict[str, str]) -> None: ...

    async def reassign(self, wanted: dict[str, dict[int, tuple[int, ...] | None]],
                       allow_factor_change: bool) -> dict[str, list[tuple[int, ErrorCode, str | None]]]: ...

    async def reassignments(self,
                            wanted: dict[str, list[int]] | None) -> dict[str, list[tuple[int, PartitionState]]]: ...

    async def elect_leaders(self, election_type: int,
                            wanted: dict[str, list[int]] | None
                            ) -> dict[str, list[tuple[int, ErrorCode, str | None]]]: ...


class LocalTopics:
    """The `TopicCluster` of a cluster of one (issue 27): of a broker in no cluster, and of the
    topics a cluster's broker holds alone (those etcd does not place). Rules: this node holds
    every replica, so a replication factor above 1 or an assignment naming another broker is
    refused as Kafka refuses it with one broker registered; configs stay here; every leader is
    the preferred one (ELECTION_NOT_NEEDED); no reassignment is ever running (one to this
    broker alone is done at once)."""

    alone = True

    def __init__(self, registry: TopicRegistry) -> None:
        self._registry = registry

    @staticmethod
    def of(registry: TopicRegistry) -> TopicCluster:
        """A registry's own (its `local`): the `cluster` of a registry in no cluster."""
        return registry.local

    async def create(self, name: str, partitions: int, configs: dict[str, str | None],
                     replicas: list[list[int]] | None = None, replication_factor: int = 1,
                     owner: tuple[str, str] | None = None) -> Topic:
        node = self._registry.node_id
        if replication_factor > 1:
            raise TopicError(ErrorCode.INVALID_REPLICATION_FACTOR,
                             f"Unable to replicate the partition {replication_factor} time(s): The target replication "
                             f"factor of {replication_factor} cannot be reached because only 1 broker(s) are "
                             "registered.")
        if replicas is not None and any(ids != [node] for ids in replicas):
            raise TopicError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"Only broker {node} exists.")
        return self._registry.create(name, partitions, configs, owner=owner)

    async def delete(self, topic: Topic) -> None:
        self._registry.delete(topic)

    async def add_partitions(self, topic: Topic, count: int, assignments: list[list[int]] | None,
                             validate_only: bool) -> None:
        node = self._registry.node_id
        if assignments is not None and any(ids != [node] for ids in assignments):
            raise TopicError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"Only broker {node} exists.")
        self._registry.add_partitions(topic, count, validate_only=validate_only)

    def configs_changed(self, topic: Topic, configs: dict[str, str]) -> None:
        return None

    async def reassign(self, wanted: dict[str, dict[int, tuple[int, ...] | None]],
                       allow_factor_change: bool) -> Results:
        node = self._registry.node_id
        alone = PartitionState((node,), node, 0, (node,))  # this broker's only replica
        results: Results = {}
        for name, parts in wanted.items():
            topic = self._registry.get(name)
            if topic is None:
                results[name] = [(p, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Unable to find a topic named {name}.")
                                 for p in parts]
                continue
            results[name] = [(p, *reassign(alone, target, {node}, allow_factor_change)[1:]) if 0 <= p < topic.partitions
                             else (p, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Unable to find partition {name}:{p}.")
                             for p, target in parts.items()]
        return results

    async def reassignments(self, wanted: dict[str, list[int]] | None) -> dict[str, list[tuple[int, PartitionState]]]:
        return {}

    async def elect_leaders(self, election_type: int, wanted: dict[str, list[int]] | None) -> Results:
        """Every partition asked for (None: of every topic etcd does not place) by topic."""
        registry = self._registry
        asked = ({t.name: list(range(t.partitions)) for t in registry.all() if t.name not in registry.placements}
                 if wanted is None else wanted)
        results: Results = {}
        for name, parts in asked.items():
            topic = registry.get(name)
            if topic is None:
                results[name] = [(p, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"No such topic as {name}") for p in parts]
            else:
                results[name] = [(p, ErrorCode.ELECTION_NOT_NEEDED, None) if 0 <= p < topic.partitions
                                 else (p, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"No such partition as {name}-{p}")
                                 for p in parts]
        return results


#: On a cluster: each internal topic and the state topic it follows (``internal_sources``).
CLUSTER_INTERNAL_SOURCES = {GROUP_METADATA_TOPIC: GROUP_STATE_TOPIC, TRANSACTION_STATE_TOPIC: TXN_STATE_TOPIC}


class TopicRegistry:
    """Name and id lookups of every topic kind, backed by the storage catalog (`store`) and,
    for database and TDengine topics, the TDengine catalog cache their views read through."""

    def __init__(self, store: Store, catalog: TsdbCatalog, *, max_partitions: int = 100_000,
                 max_databases: int = 10_000, offsets_partitions: int = 50,
                 transaction_partitions: int = 50, transaction_version: int = 2, node_id: int = -1,
                 cluster: Callable[[TopicRegistry], TopicCluster] = LocalTopics.of,
                 internal_sources: Mapping[str, str] | None = None) -> None:
        self._store = store
        self.catalog = catalog
        # The broker's caps (max_partitions, max_databases in broker/configs/config.py).
        self.max_partitions = max_partitions
        self.max_databases = max_databases
        # Internal topics: partitions (offsets_topic_num_partitions,
        # transaction_state_log_num_partitions) and which exist (created on first use).
        store.group_log.configure(offsets_partitions, self._topic_id)
        store.transaction_log.configure(transaction_partitions, transaction_version)
        self._internal_partitions = {GROUP_METADATA_TOPIC: offsets_partitions,
                                     TRANSACTION_STATE_TOPIC: transaction_partitions}
        self._internal: set[str] = set(store.internal_topics_used())
        #: on a cluster: internal topic -> the state topic whose placement it follows
        self.internal_sources: Mapping[str, str] = internal_sources or {}
        self._by_name: dict[str, Topic] = {}
        self._by_id: dict[bytes, Topic] = {}
        #: topic config name -> the broker's default of it (log.* settings, static or dynamic:
        #: broker.dynamic_configs.broker_configs keeps it up to date); every topic reads it
        self.broker_defaults: dict[str, BrokerDefault] = {}
        # database and TDengine topics: [rows scanned, rows delivered] by their views (metrics)
        self.view_rows: dict[str, list[int]] = {}
        #: called with each topic `delete` removed, by DeleteTopics here or by another broker's
        #: (a cluster's apply): Fetches parked on it answer at once
        self.on_deleted: list[Callable[[Topic], None]] = []
        #: this node; the topics it holds alone (`local`), and the creator of the topics etcd
        #: places on a cluster (``cluster``: made over this registry, broker/cluster/topics.py),
        #: with the placement of each shared topic's partitions; without one this node leads all
        self.node_id = node_id
        self.local = LocalTopics(self)
        self.cluster: TopicCluster = cluster(self)
        self.placements: Mapping[str, Placement] = {}
        #: the high watermarks of replicated partitions led here (every Topic reads it)
        self.replicated: dict[tuple[str, int], int] = {}
        self.reload()

    def place(self, placements: Mapping[str, Placement]) -> None:
        """The cluster's placements as etcd has them now (broker/cluster/topics.py, each read)."""
        self.placements = placements
        for name, source in self.internal_sources.items():
            if source in placements:
                self.ensure_internal(name)

    def reload(self) -> None:
        """Rebuild the topic map from the catalog (after DDL that adds or removes topics)."""
        by_name: dict[str, Topic] = {}
        vgroups = {}
        for info in self._store.databases():
            vgroups[info.name] = info.vgroups
            if info.kind == TSDB:
                definition = TopicDef(info.name, "database", info.name, None, None,
                                      f"CREATE TOPIC {info.name} AS DATABASE {info.name}")
                by_name[info.name] = Topic(info.name, info.topic_id, info.name, info.vgroups, {}, TSDB,
                                           View(definition, self._store, self.catalog, self.view_rows))
            else:
                by_name[info.name] = Topic(info.name, info.topic_id, info.name, info.vgroups,
                                           dict(info.configs))
        for name, tmq in self._store.tmq_topics().items():
            definition = TopicDef.from_json(name, tmq.definition)
            by_name[name] = Topic(name, tmq.topic_id, definition.db, vgroups.get(definition.db, 0),
                                  tmq_configs(definition), TMQ,
                                  View(definition, self._store, self.catalog, self.view_rows))
        for name in self._internal:
            by_name[name] = self._internal_topic(name)
        for gone in [name for name in self.view_rows if name not in by_name]:
            del self.view_rows[gone]
        for t in by_name.values():
            t.broker_defaults = self.broker_defaults
            t.replicated = self.replicated
        self._by_name = by_name
        self._by_id = {t.topic_id: t for t in by_name.values()}

    def _topic_id(self, name: str) -> bytes | None:
        topic = self._by_name.get(name)
        return None if topic is None else topic.topic_id

    def _internal_topic(self, name: str) -> Topic:
        log: InternalLog = (self._store.group_log if name == GROUP_METADATA_TOPIC
                            else self._store.transaction_log)
        return Topic(name, internal_topic_id(name), name, self._internal_partitions[name],
                     dict(INTERNAL_CONFIGS[name]), INTERNAL, log=log)

    def ensure_internal(self, name: str) -> None:
        """The internal topic exists from now on (Kafka creates it on the first FindCoordinator
        of its kind; tmqgate's shows once the store holds its data, or after such a request)."""
        if name not in self._internal and is_internal(name):
            self._internal.add(name)
            topic = self._internal_topic(name)
            topic.broker_defaults = self.broker_defaults
            self._by_name[name] = topic
            self._by_id[topic.topic_id] = topic

    def invalidate_views(self, db: str) -> None:
        """A supertable of `db` changed: views recompile their expressions on next use."""
        for topic in self._by_name.values():
            if topic.view is not None and topic.db == db:
                topic.view.invalidate()

    def get(self, name: str | None) -> Topic | None:
        return self._by_name.get(name) if name is not None else None

    def by_id(self, topic_id: bytes) -> Topic | None:
        return self._by_id.get(topic_id)

    def partition_error(self, topic: Topic | None, index: int, by_id: bool = False,
                        leader_epoch: int = -1) -> ErrorCode | None:
        """Why partition `index` of a looked-up `topic` cannot be served here, or None if it can.

        A missing topic is UNKNOWN_TOPIC_ID when it was looked up by id (v13+ Fetch/Produce),
        UNKNOWN_TOPIC_OR_PARTITION otherwise, as is a partition outside [0, partitions). On a
        cluster, a client's `leader_epoch` (its current_leader_epoch; -1: none) other than the
        partition's is FENCED_LEADER_EPOCH (older) or UNKNOWN_LEADER_EPOCH (newer than this
        broker knows), then a partition led by another broker is NOT_LEADER_OR_FOLLOWER, an
        offline one (no live leader) LEADER_NOT_AVAILABLE, as Kafka answers them."""
        if topic is None:
            return ErrorCode.UNKNOWN_TOPIC_ID if by_id else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        if not 0 <= index < topic.partitions:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        state = self.partition_state(topic, index)
        if state is not None and leader_epoch >= 0 and leader_epoch != state.epoch:
            return ErrorCode.FENCED_LEADER_EPOCH if leader_epoch < state.epoch else ErrorCode.UNKNOWN_LEADER_EPOCH
        if state is not None and state.leader != self.node_id:
            return ErrorCode.LEADER_NOT_AVAILABLE if state.leader < 0 else ErrorCode.NOT_LEADER_OR_FOLLOWER
        return None

    def partition_state(self, topic: Topic, index: int) -> PartitionState | None:
        """The partition's replicas and leader on a cluster; None: this node's alone. A
        TDengine topic's partitions are its database's vnodes, placed with the database."""
        if topic.kind == INTERNAL:
            followed = self.internal_sources.get(topic.name)
            placement = None if followed is None else self.placements.get(followed)
            return None if placement is None or index >= len(placement.partitions) else placement.partitions[index]
        source = self._by_name.get(topic.db) if topic.kind == TMQ else topic
        placement = None if source is None else self.placements.get(source.name)
        if (source is None or placement is None or placement.topic_id != source.topic_id
                or index >= len(placement.partitions)):
            return None
        return placement.partitions[index]

    def all(self) -> list[Topic]:
        return sorted(self._by_name.values(), key=lambda t: t.name)

    def capacity_error(self, new_partitions: int, new_databases: int = 0) -> str | None:
        """Why adding `new_partitions` vnodes in `new_databases` new databases would pass the
        broker's max_partitions or max_databases, or None if it would not."""
        infos = self._store.databases()
        if new_databases and len(infos) + new_databases > self.max_databases:
            return (f"The broker holds {len(infos)} database(s); {new_databases} more would exceed "
                    f"max_databases ({self.max_databases}).")
        total = sum(info.vgroups for info in infos)
        if total + new_partitions > self.max_partitions:
            return (f"The broker holds {total} partition(s); {new_partitions} more would exceed "
                    f"max_partitions ({self.max_partitions}).")
        return None

    def create(self, name: str, partitions: int, configs: dict[str, str | None],
               validate_only: bool = False, topic_id: bytes | None = None,
               owner: tuple[str, str] | None = None) -> Topic:
        """CreateTopics: a plain topic (its database of `partitions` vnodes and the topic over
        it), or — with the tmq.as config — a TDengine topic over an existing database, made by
        `owner` (principal, host: whose READ on the database a Fetch of it checks)."""
        check_topic_name(name)
        if name in self._by_name:
            raise TopicError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
        if is_internal(name):  # made by the broker itself when a group or a transaction needs it
            raise TopicError(ErrorCode.INVALID_REQUEST, f"Topic '{name}' is an internal topic; the broker creates it.")
        if configs.get(TMQ_AS) is not None:
            return self._create_tmq(name, partitions, configs, validate_only, owner)
        if partitions < 1:
            raise TopicError(ErrorCode.INVALID_PARTITIONS, "Number of partitions must be larger than 0.")
        clean = validate_configs(configs)
        refused = self.capacity_error(partitions, 1)
        if refused is not None:
            raise TopicError(ErrorCode.POLICY_VIOLATION, refused)
        if validate_only:
            return Topic(name, ZERO_UUID, name, partitions, clean)
        info = self._store.create_database(name, partitions, clean, topic_id=topic_id)
        topic = Topic(name, info.topic_id, name, info.vgroups, dict(info.configs))
        topic.broker_defaults = self.broker_defaults
        topic.replicated = self.replicated
        self._by_name[name] = topic
        self._by_id[topic.topic_id] = topic
        return topic

    def _create_tmq(self, name: str, partitions: int, configs: dict[str, str | None],
                    validate_only: bool, owner: tuple[str, str] | None) -> Topic:
        unknown = set(configs) - {TMQ_AS, TMQ_META, TMQ_DB}
        if unknown:
            raise TopicError(ErrorCode.INVALID_CONFIG, f"A TDengine topic takes only the configs {TMQ_AS}, {TMQ_META}, "
                                               f"{TMQ_DB}; got {', '.join(sorted(unknown))}")
        meta = (configs.get(TMQ_META) or "").strip().lower()
        if meta not in ("", "with", "only"):
            raise TopicError(ErrorCode.INVALID_CONFIG, f"{TMQ_META} must be 'with' or 'only', not {meta!r}")
        # backquoted: a legal Kafka name ('my-topic') is not an unquoted TDengine one
        prefix = f"CREATE TOPIC `{name}` {meta.upper() + ' META ' if meta else ''}AS "
        try:
            definition = topic_definition(self._store, self.catalog, f"{prefix}{configs[TMQ_AS]}", configs.get(TMQ_DB),
                                          None if owner is None else Caller(*owner))
        except SqlError as exc:
            if exc.code == INVALID_IDENTIFIER and exc.position == len("CREATE TOPIC "):  # the name itself
                raise TopicError(ErrorCode.INVALID_TOPIC_EXCEPTION, exc.message) from None
            raise TopicError(ErrorCode.INVALID_CONFIG, f"{TMQ_AS}: {_in_config(exc, len(prefix))}") from None
        info = self._store.get_database(definition.db)
        assert info is not None  # topic_definition found it
        vgroups = info.vgroups
        # -1 (Kafka's "the broker's default") takes the database's vnodes, as any count equal to them
        if partitions not in (-1, vgroups):
            raise TopicError(ErrorCode.INVALID_PARTITIONS,
                             f"A topic over database {definition.db} has its {vgroups} vnodes as partitions")
        if validate_only:  # its view holds the checked definition (a cluster places it)
            return Topic(name, ZERO_UUID, definition.db, vgroups, {}, TMQ, View(definition, self._store, self.catalog))
        self._store.create_tmq_topic(name, definition.to_json())
        self.reload()
        topic = self._by_name[name]
        return topic

    def delete(self, topic: Topic) -> None:
        if topic.kind == INTERNAL:
            raise TopicError(ErrorCode.INVALID_REQUEST,
                             f"Topic '{topic.name}' is an internal topic and cannot be deleted.")
        if topic.kind == TSDB:
            raise TopicError(ErrorCode.INVALID_REQUEST, f"'{topic.name}' is a database; drop it with DROP DATABASE")
        if topic.kind == TMQ:
            self._store.drop_tmq_topic(topic.name)
        else:
            self._store.drop_database(topic.db)
        self._by_name.pop(topic.name, None)
        self._by_id.pop(topic.topic_id, None)
        for call in self.on_deleted:
            call(topic)

    def make_database(self, name: str, vgroups: int, options: dict[str, Any], topic_id: bytes | None = None) -> None:
        """A SQL database (CREATE DATABASE, checked by the caller); on a cluster made here with
        the cluster's topic id (broker/cluster/topics.py), its DDL and rows its leader's."""
        self._store.create_database(name, vgroups, {}, topic_id=topic_id, kind=TSDB, options=options)
        self.reload()

    def make_view(self, name: str, definition: dict[str, Any], topic_id: bytes | None = None) -> None:
        """A TDengine topic (CREATE TOPIC, checked by the caller); on a cluster made here with
        the cluster's topic id (its database's leader checked it; this broker may lack the
        supertable it reads)."""
        self._store.create_tmq_topic(name, definition, topic_id=topic_id)
        self.reload()

    def set_database_options(self, db: str, options: Mapping[str, Any]) -> None:
        """A shared SQL database's options as the cluster records them (ALTER DATABASE)."""
        info = self._store.get_database(db)
        if info is not None and options and dict(info.options) != dict(options):
            self._store.set_options(db, dict(options), merge=False)

    def set_stables(self, db: str, stables: Mapping[str, dict[str, Any]]) -> None:
        """A shared SQL database's supertables as the cluster records them, on a broker that
        holds no replica of it (its copy answers no statement: they go to the leader)."""
        held = dict(self._store.stables(db))
        if held == dict(stables):
            return
        with self._store.transaction() as tx:
            for name, schema in stables.items():
                if name not in held:
                    tx.create_stable(db, name, dict(schema))
                elif held[name] != schema:
                    tx.alter_stable(db, name, dict(schema))
            for name in held.keys() - stables.keys():
                tx.drop_stable(db, name)
        self.catalog.invalidate(db)

    def drop_sql(self, topic: Topic) -> None:
        """A SQL database or TDengine topic dropped (DROP DATABASE / TOPIC, checked by the
        caller, or gone from the cluster), with the offsets committed to a TDengine topic."""
        if topic.kind == TMQ:
            self._store.drop_tmq_topic(topic.name)
            for group in self._store.offset_groups():
                self._store.delete_offsets(group, topic.name)
        elif topic.kind == TSDB:
            self._store.drop_database(topic.name)
            self.catalog.invalidate(topic.name)
        self.reload()

    def add_partitions(self, topic: Topic, count: int, validate_only: bool = False) -> None:
        if topic.kind == INTERNAL:
            raise TopicError(ErrorCode.INVALID_REQUEST, f"Topic '{topic.name}' is an internal topic; its partitions "
                                                        "are the broker's setting.")
        if topic.kind != KAFKA:
            raise TopicError(ErrorCode.INVALID_REQUEST,
                             f"'{topic.name}' takes its partitions from the vnodes of database {topic.db}")
        if count < topic.partitions:
            raise TopicError(ErrorCode.INVALID_PARTITIONS, f"The topic {topic.name} currently has {topic.partitions} "
                                                   f"partition(s); {count} would not be an increase.")
        if count == topic.partitions:
            raise TopicError(ErrorCode.INVALID_PARTITIONS, f"Topic already has {topic.partitions} partition(s).")
        refused = self.capacity_error(count - topic.partitions)
        if refused is not None:
            raise TopicError(ErrorCode.POLICY_VIOLATION, refused)
        if validate_only:
            return
        self._store.add_vnodes(topic.db, count)
        topic.partitions = count

    def set_configs(self, topic: Topic, configs: dict[str, str], *, shared: bool = True) -> None:
        """Replace the topic's own configs (values already validated); a shared topic's go to
        the cluster too (``shared``: not when the change comes from there)."""
        if topic.kind == INTERNAL:
            raise TopicError(ErrorCode.INVALID_REQUEST,
                             f"Topic '{topic.name}' is an internal topic; its configs are fixed.")
        if topic.kind != KAFKA:
            raise TopicError(ErrorCode.INVALID_REQUEST, f"'{topic.name}' is configured through SQL, not topic configs")
        stored: dict[str, str | None] = dict(configs)
        self._store.set_configs(topic.db, stored)
        topic.configs = dict(configs)
        if shared and self.partition_state(topic, 0) is not None:
            self.cluster.configs_changed(topic, dict(configs))
