"""Coordinators spread over a cluster, their state replicated (issue 16, step 4).

As Kafka keeps groups in ``__consumer_offsets`` and transactional ids in
``__transaction_state``, a cluster keeps them in internal topics of its own (``KINDS``:
``__tmqgate_group_state`` and ``__tmqgate_txn_state``; ``__consumer_offsets`` and
``__transaction_state`` follow them: as many partitions, each led where its state partition is,
its log the coordinator's — broker/topics.py). One ``CoordinatorState`` per kind;
the same rules for both:

- The topic has ``cluster_state_partitions`` partitions (fewer than Kafka's 50: every
  replicated partition costs in each replica fetch round; the brokers must agree on it, as
  Kafka's must on theirs) of ``offsets_topic_replication_factor`` /
  ``transaction_state_log_replication_factor`` replicas each (the latter with
  ``transaction_state_log_min_isr``), compacted. The first FindCoordinator of its kind
  creates it, once that many brokers are live (Kafka makes its topics on first use and refuses
  to with fewer live brokers than their replication factor); until it is there and led
  FindCoordinator answers COORDINATOR_NOT_AVAILABLE.
- A key's partition (group id, transactional id) is Kafka's hash of it modulo that count
  (``metadata.view.state_partitioner``); its coordinator is that partition's leader:
  FindCoordinator names it, and every other broker answers its requests NOT_COORDINATOR.
- Each change of a key's state (``storage.offsets`` for a group's state keys,
  ``storage.txn_coordinator`` for a transactional id's) is appended to its partition as one
  record batch — a record per LevelDB key, its new value or null for a delete — stamped with the
  leader epoch, *before* it is written locally; a broker that no longer leads the partition (or
  lost etcd) refuses it (``StateNotReplicated``), and the coordinator answers as for a refused
  write, with nothing changed. The partition replicates like any other
  (``broker.cluster.replication``).
- The answers that report a change (OffsetCommit, TxnOffsetCommit, OffsetDelete, DeleteGroups;
  InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn) go out once the partition's high
  watermark passed what was appended (Kafka appends both logs with acks=all): NOT_COORDINATOR
  when the broker stopped leading the partition meanwhile, COORDINATOR_NOT_AVAILABLE after
  ``offsets_commit_timeout_ms`` (Kafka's mapping of NOT_LEADER_OR_FOLLOWER and
  REQUEST_TIMED_OUT for the coordinators' appends). JoinGroup, SyncGroup and heartbeats do not
  wait: a group whose membership did not reach the replicas rejoins at its new coordinator,
  its offsets intact. OffsetFetch waits too, so it shows only what the replicas have.
- A broker that becomes a partition's leader replays the partition from its log start to its
  log end (compacted, it holds the newest value of every key) into its store — what it held of
  those keys before is replaced, and ``__consumer_offsets`` / ``__transaction_state``'s partition
  of the same number is the previous leader's, its records at their offsets: each change's batch
  of that log is replicated with the change (``storage.group_log``); it ends with the state
  taken over where the two differ (``append_snapshot``; state replicated before its log was) —
  and the coordinator loads them (a prepared transaction's markers are written again from
  there); one that stops leading it unloads them.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from tmqgate.broker.metadata.view import GROUP_STATE_TOPIC, TXN_STATE_TOPIC
from tmqgate.protocol import clock
from tmqgate.protocol.errors import ErrorCode
from tmqgate.protocol.records import build_batch, decode_records, parse_header
from tmqgate.storage.model import StateNotReplicated

if TYPE_CHECKING:
    from tmqgate.broker.cluster.membership import Membership
    from tmqgate.broker.cluster.replication import Replication
    from tmqgate.broker.cluster.topics import ClusterTopics
    from tmqgate.broker.configs.config import BrokerConfig
    from tmqgate.broker.runtime.waiters import DataNotifier
    from tmqgate.broker.topics import Topic, TopicRegistry
    from tmqgate.storage import Store

log = logging.getLogger("tmqgate.coordinator_state")

REPLAY_READ_BYTES = 1 << 20
Ops = list[tuple[bytes, bytes | None]]


class PartitionOwner(Protocol):
    """A coordinator's machine as far as this module drives it."""

    owned: set[int] | None

    def load_partition(self, partition: int, now: int) -> None: ...

    def unload_partition(self, partition: int) -> None: ...


class OwnerRuntime(Protocol):
    @property
    def machine(self) -> PartitionOwner: ...

    def now(self) -> int: ...

    def kick(self) -> None: ...


@dataclass(frozen=True)
class Kind:
    """What differs between the group and the transaction state."""

    topic: str
    what: str  # for the log: "groups", "transactional ids"
    partitions: int
    replication_factor: int
    configs: dict[str, str | None]
    partition_of: Callable[[str], int]
    replace: Callable[[Callable[[str], bool], Iterable[tuple[bytes, bytes | None]], int, int], int]
    mirror: Callable[[Callable[[str, Ops], None] | None, Callable[[int, Ops], None] | None], None]


def kinds(store: Store, cfg: BrokerConfig, groups_of: Callable[[str], int],
          txns_of: Callable[[str], int]) -> tuple[Kind, Kind]:
    """The groups' and the transactional ids' (Kafka's topic configs: compacted; the
    transaction log's min.insync.replicas is transaction.state.log.min.isr); ``groups_of`` /
    ``txns_of``: the coordinators' own partitioning of their keys."""
    groups = Kind(GROUP_STATE_TOPIC, "groups", cfg.cluster_state_partitions, cfg.offsets_topic_replication_factor,
                  {"cleanup.policy": "compact", "compression.type": "producer"},
                  groups_of, store.replace_group_partition, store.mirror_groups)
    txns = Kind(TXN_STATE_TOPIC, "transactional ids", cfg.cluster_state_partitions,
                cfg.transaction_state_log_replication_factor,
                {"cleanup.policy": "compact", "compression.type": "producer",
                 "min.insync.replicas": str(cfg.transaction_state_log_min_isr)},
                txns_of, store.replace_txn_partition, store.mirror_txns)
    return groups, txns


class CoordinatorState:
    """See the module docstring. ``apply`` after every read of the placements (after
    ``Replication.apply``, whose leadership it follows)."""

    def __init__(self, kind: Kind, node_id: int, store: Store, topics: TopicRegistry, cluster_topics: ClusterTopics,
                 membership: Membership, replication: Replication, notifier: DataNotifier,
                 coordinator: OwnerRuntime, commit_timeout_ms: int) -> None:
        self.kind = kind
        self.node_id = node_id
        self._store = store
        self._topics = topics
        self._cluster_topics = cluster_topics
        self._membership = membership
        self._replication = replication
        self._notifier = notifier
        self._coordinator = coordinator
        self.commit_timeout_s = commit_timeout_ms / 1000
        self._ends: dict[int, int] = {}  # partition -> the offset after this broker's last append
        self._creating: asyncio.Task[None] | None = None

    # ---- where keys are coordinated --------------------------------------------------------

    def partition_of(self, key: str) -> int:
        """The key's partition of the state topic (and of Kafka's topic)."""
        return self.kind.partition_of(key)

    def placed(self) -> bool:
        """The state topic exists (the first FindCoordinator of its kind made it)."""
        return self.kind.topic in self._membership.placements

    def coordinator_of(self, key: str) -> int:
        """The node id of the key's coordinator (-1: none now)."""
        placement = self._membership.placements.get(self.kind.topic)
        if placement is None:
            return -1
        p = self.partition_of(key)
        if p >= len(placement.partitions):
            return -1
        leader = placement.partitions[p].leader
        return leader if leader in self._membership.view.brokers else -1

    def _topic(self) -> Topic | None:
        return self._topics.get(self.kind.topic)

    def _leads(self, topic: Topic, partition: int) -> bool:
        state = self._topics.partition_state(topic, partition)
        return state is not None and state.leader == self.node_id and not self._membership.cut_off()

    def apply(self) -> None:
        """Load the partitions this broker now leads and unload those it no longer does (on
        the event loop)."""
        topic = self._topic()
        led = set() if topic is None else {p for p in range(topic.partitions) if self._leads(topic, p)}
        machine = self._coordinator.machine
        owned = set(machine.owned or ())
        for p in sorted(owned - led):
            log.info("%s: no longer coordinating the %s of partition %d", self.kind.topic, self.kind.what, p)
            machine.unload_partition(p)
            self._ends.pop(p, None)
        for p in sorted(led - owned):
            assert topic is not None
            try:
                self._load(topic, p)
            except Exception:  # noqa: BLE001 - the next round tries again; its keys wait
                log.exception("%s: cannot load partition %d", self.kind.topic, p)
        self._coordinator.kick()

    def ensure(self) -> None:
        """A FindCoordinator found no coordinator: make the topic if it is not there and
        enough brokers are live (Kafka makes its internal topics on first use, so a cluster
        that never runs a transaction has no transaction state to replicate). Any broker may:
        the creation is a compare-and-swap."""
        view = self._membership.view
        if (self.kind.topic in self._membership.placements or len(view.brokers) < self.kind.replication_factor
                or (self._creating is not None and not self._creating.done())):
            return
        self._creating = asyncio.create_task(self._create())

    async def _create(self) -> None:
        from tmqgate.broker.topics import TopicError

        kind = self.kind
        try:
            await self._cluster_topics.create(kind.topic, kind.partitions, dict(kind.configs),
                                              replication_factor=kind.replication_factor)
            log.info("created %s (%d partitions, replication factor %d)", kind.topic, kind.partitions,
                     kind.replication_factor)
        except TopicError as exc:
            if exc.code != ErrorCode.TOPIC_ALREADY_EXISTS:
                log.warning("cannot create %s yet: %s", kind.topic, exc.message)

    def _load(self, topic: Topic, partition: int) -> None:
        """Replay the partition into the store, then let the coordinator load its keys."""
        started = time.monotonic()
        store = self._store
        ops: Ops = []
        offset = topic.log_start(store, partition)
        end = store.next_version(topic.db, partition)  # the log end: a new leader keeps all its log
        while offset < end:
            batches = topic.read(store, partition, offset, REPLAY_READ_BYTES)
            if not batches:
                break
            for batch in batches:
                header = parse_header(batch)
                offset = max(offset, header.next_offset)
                if not header.is_control:
                    ops.extend((r.key, r.value) for r in decode_records(batch) if r.key is not None)
        partition_of = self.kind.partition_of
        held = self.kind.replace(lambda key: partition_of(key) == partition, ops, partition, self.kind.partitions)
        self._coordinator.machine.load_partition(partition, self._coordinator.now())
        self._ends[partition] = max(end, self._ends.get(partition, end))  # past a snapshot appended
        log.info("%s: coordinating the %s of partition %d (%d records replayed, %d keys, %.0f ms)", self.kind.topic,
                 self.kind.what, partition, len(ops), held, (time.monotonic() - started) * 1000)

    # ---- the replicated writes --------------------------------------------------------------

    def mirrored(self, key: str, ops: Ops) -> None:
        """The store's mirror: the ops into the key's partition, before they are written
        locally; ``StateNotReplicated`` when this broker may not write it."""
        self.mirrored_at(self.partition_of(key), ops, key)

    def mirrored_at(self, partition: int, ops: Ops, key: str = "") -> None:
        """``mirrored`` into a partition (the internal log's own writes: a snapshot, a compaction)."""
        topic = self._topic()
        if topic is None or partition >= topic.partitions or not self._leads(topic, partition):
            raise StateNotReplicated(f"this broker does not coordinate {key or 'partition'} "
                                     f"({self.kind.topic}-{partition})")
        state = self._topics.partition_state(topic, partition)
        assert state is not None
        now_ms = clock.now_ms()
        batch = build_batch([(k, v, [], now_ms) for k, v in ops])
        appended = self._store.append(topic.db, partition, batch, len(ops), now_ms, leader_epoch=state.epoch)
        self._notifier.notify(topic.db, partition)
        self._replication.appended(topic, partition)
        self._ends[partition] = appended.base + len(ops)

    async def replicated(self, key: str) -> ErrorCode | None:
        """Wait until the key's partition's in-sync replicas have what this broker appended to
        it so far; the error to answer instead (see the module docstring), or None."""
        topic = self._topic()
        partition = self.partition_of(key)
        end = self._ends.get(partition)
        if topic is None or end is None:
            return ErrorCode.NOT_COORDINATOR
        if self._replication.led_state(topic, partition) is None:  # one replica: nothing to wait for
            return None if self._leads(topic, partition) else ErrorCode.NOT_COORDINATOR
        if await self._replication.wait_replicated(topic, partition, end, self.commit_timeout_s):
            return None
        if self._replication.led_state(topic, partition) is None:
            return ErrorCode.NOT_COORDINATOR
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
