"""Group coordinators spread over a cluster, their state replicated (issue 16, step 4).

As Kafka keeps groups in ``__consumer_offsets``, a cluster keeps them in an internal topic of
its own, ``coordinator.cluster.GROUP_STATE_TOPIC`` (``__consumer_offsets`` itself stays what
one broker's group log shows). Rules:

- The topic has ``offsets_topic_num_partitions`` partitions (the brokers must agree on it, as
  Kafka's must) of ``offsets_topic_replication_factor`` replicas each, compacted. The
  controller creates it once that many brokers are live (Kafka makes ``__consumer_offsets`` on
  the first FindCoordinator and refuses to with fewer live brokers than its replication factor);
  until then FindCoordinator answers COORDINATOR_NOT_AVAILABLE.
- A group's partition is Kafka's hash of its id (the one it has in ``__consumer_offsets``); its
  coordinator is that partition's leader: FindCoordinator names it, and every other broker
  answers the group's requests NOT_COORDINATOR.
- Each change of a group's state (``storage.offsets``: the puts and deletes of its state keys)
  is appended to its partition as one record batch — a record per key, the key's new value or
  null for a delete — stamped with the leader epoch, *before* it is written locally; a broker
  that no longer leads the partition (or lost etcd) refuses it, and the coordinator answers
  NOT_COORDINATOR with nothing changed. The partition replicates like any other
  (``broker.cluster.replication``).
- OffsetCommit, TxnOffsetCommit, OffsetDelete and DeleteGroups are answered once the partition's
  high watermark passed what they appended (Kafka appends offsets with acks=all):
  NOT_COORDINATOR when the broker stopped leading the partition meanwhile,
  COORDINATOR_NOT_AVAILABLE after ``offsets_commit_timeout_ms`` (Kafka's mapping of
  NOT_LEADER_OR_FOLLOWER and REQUEST_TIMED_OUT for the group coordinator's appends).
  JoinGroup, SyncGroup and heartbeats do not wait: a group whose membership did not reach the
  replicas rejoins at its new coordinator, its offsets intact.
- A broker that becomes a partition's leader replays the partition from its log start to its
  log end (compacted, it holds the newest value of every key) into its store — what it held of
  those groups before is replaced — and loads the groups; one that stops leading it unloads
  them (``coordinator.coordinator``).

Not yet: the transaction coordinator's state (still the controller's, local).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING

from tmqgate.coordinator.cluster import GROUP_STATE_TOPIC
from tmqgate.protocol.errors import ErrorCode
from tmqgate.protocol.records import build_batch, decode_records, parse_header
from tmqgate.storage.model import StateNotReplicated

if TYPE_CHECKING:
    from tmqgate.broker.cluster.membership import Membership
    from tmqgate.broker.cluster.replication import Replication
    from tmqgate.broker.cluster.topics import ClusterTopics
    from tmqgate.broker.topics import Topic, TopicRegistry
    from tmqgate.broker.waiters import DataNotifier
    from tmqgate.coordinator.runtime import CoordinatorRuntime
    from tmqgate.storage import Store

log = logging.getLogger("tmqgate.group_state")

REPLAY_READ_BYTES = 1 << 20
#: The topic's configs (Kafka's __consumer_offsets: compacted, batches as the broker made them).
CONFIGS: dict[str, str | None] = {"cleanup.policy": "compact", "compression.type": "producer"}


class GroupState:
    """See the module docstring. ``apply`` after every read of the placements (after
    ``Replication.apply``, whose leadership it follows)."""

    def __init__(self, node_id: int, store: Store, topics: TopicRegistry, cluster_topics: ClusterTopics,
                 membership: Membership, replication: Replication, notifier: DataNotifier,
                 coordinator: CoordinatorRuntime, partitions: int, replication_factor: int,
                 commit_timeout_ms: int) -> None:
        self.node_id = node_id
        self._store = store
        self._topics = topics
        self._cluster_topics = cluster_topics
        self._membership = membership
        self._replication = replication
        self._notifier = notifier
        self._coordinator = coordinator
        self.partitions = partitions
        self.replication_factor = replication_factor
        self.commit_timeout_s = commit_timeout_ms / 1000
        self._ends: dict[int, int] = {}  # partition -> the offset after this broker's last append
        self._creating: asyncio.Task[None] | None = None
        store.mirror_groups(self._append)

    # ---- where groups are coordinated --------------------------------------------------

    def partition_of(self, group_id: str) -> int:
        """The group's partition of the group-state topic (and of ``__consumer_offsets``)."""
        return self._store.group_log.partition_of(group_id)

    def coordinator_of(self, group_id: str) -> int:
        """The node id of the group's coordinator (-1: none now)."""
        placement = self._membership.placements.get(GROUP_STATE_TOPIC)
        if placement is None:
            return -1
        p = self._store.group_log.partition_of(group_id)
        if p >= len(placement.partitions):
            return -1
        leader = placement.partitions[p].leader
        return leader if leader in self._membership.view.brokers else -1

    def _topic(self) -> Topic | None:
        return self._topics.get(GROUP_STATE_TOPIC)

    def _leads(self, topic: Topic, partition: int) -> bool:
        state = self._topics.partition_state(topic, partition)
        return state is not None and state.leader == self.node_id and not self._membership.cut_off()

    def apply(self) -> None:
        """Create the topic (the controller), then load the partitions this broker now leads
        and unload those it no longer does (on the event loop)."""
        self._create_if_due()
        topic = self._topic()
        led = set() if topic is None else {p for p in range(topic.partitions) if self._leads(topic, p)}
        machine = self._coordinator.machine
        owned = machine.owned if machine.owned is not None else set()
        for p in sorted(owned - led):
            log.info("group state: no longer coordinating the groups of partition %d", p)
            machine.unload_partition(p)
            self._ends.pop(p, None)
        for p in sorted(led - owned):
            assert topic is not None
            try:
                self._load(topic, p)
            except Exception:  # noqa: BLE001 - the next round tries again; its groups wait
                log.exception("group state: cannot load partition %d", p)
        self._coordinator.kick()

    def _create_if_due(self) -> None:
        view = self._membership.view
        if (view.controller_id != self.node_id or GROUP_STATE_TOPIC in self._membership.placements
                or len(view.brokers) < self.replication_factor
                or (self._creating is not None and not self._creating.done())):
            return
        self._creating = asyncio.create_task(self._create())

    async def _create(self) -> None:
        from tmqgate.broker.topics import TopicError

        try:
            await self._cluster_topics.create(GROUP_STATE_TOPIC, self.partitions, dict(CONFIGS),
                                              replication_factor=self.replication_factor)
            log.info("group state: created %s (%d partitions, replication factor %d)", GROUP_STATE_TOPIC,
                     self.partitions, self.replication_factor)
        except TopicError as exc:
            if exc.code != ErrorCode.TOPIC_ALREADY_EXISTS:
                log.warning("group state: cannot create %s yet: %s", GROUP_STATE_TOPIC, exc.message)

    def _load(self, topic: Topic, partition: int) -> None:
        """Replay the partition into the store, then let the coordinator load its groups."""
        started = time.monotonic()
        store = self._store
        ops: list[tuple[bytes, bytes | None]] = []
        offset = topic.log_start(store, partition)
        end = store.next_version(topic.db, partition)  # the log end: a new leader keeps all its log
        while offset < end:
            batches = topic.read(store, partition, offset, REPLAY_READ_BYTES)
            if not batches:
                break
            for batch in batches:
                header = parse_header(batch)
                offset = max(offset, header.next_offset)
                if header.is_control:
                    continue
                ops.extend((r.key, r.value) for r in decode_records(batch) if r.key is not None)
        partition_of = store.group_log.partition_of
        held = store.replace_group_partition(lambda group_id: partition_of(group_id) == partition, ops)
        machine = self._coordinator.machine
        machine.load_partition(partition, self._coordinator.now())
        self._ends[partition] = end
        log.info("group state: coordinating the groups of partition %d (%d records replayed, %d keys, %.0f ms)",
                 partition, len(ops), held, (time.monotonic() - started) * 1000)

    # ---- the replicated writes ----------------------------------------------------------

    def _append(self, group_id: str, ops: list[tuple[bytes, bytes | None]]) -> None:
        """``storage.offsets``' mirror: the ops into the group's partition, before they are
        written locally; ``StateNotReplicated`` when this broker may not write it."""
        topic = self._topic()
        partition = self._store.group_log.partition_of(group_id)
        if topic is None or partition >= topic.partitions or not self._leads(topic, partition):
            raise StateNotReplicated(f"this broker does not coordinate group {group_id} (partition {partition})")
        state = self._topics.partition_state(topic, partition)
        assert state is not None
        now_ms = int(time.time() * 1000)
        batch = build_batch([(k, v, [], now_ms) for k, v in ops])
        appended = self._store.append(topic.db, partition, batch, len(ops), now_ms, leader_epoch=state.epoch)
        self._notifier.notify(topic.db, partition)
        self._replication.appended(topic, partition)
        self._ends[partition] = appended.base + len(ops)

    async def replicated(self, group_id: str) -> ErrorCode | None:
        """Wait until the group's partition's in-sync replicas have what this broker appended
        to it so far; the error to answer instead (see the module docstring), or None."""
        topic = self._topic()
        partition = self._store.group_log.partition_of(group_id)
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
