"""The committed and the pending (transactional) offsets of the coordinator's groups.

Committed offsets live in the Store per (group, topic, partition) — TDengine's per-vnode
progress, shared by a group and independent across groups. A group with offsets but no
members (a "simple" group, or one whose members left) is still a group: ``offset_groups``
holds them for the admin queries (``coordinator.admin``). The group coordinator composes one
``GroupOffsets`` over its groups (``coordinator.coordinator``): it loads and unloads the same
state partitions, and asks ``check_topics`` at every tick.

A write the disk refuses (``StorageIOError``: a full disk) changes nothing, in memory either,
as Kafka's group coordinator keeps it (an append to ``__consumer_offsets`` that fails with
KAFKA_STORAGE_ERROR answers NOT_COORDINATOR, so the client looks the coordinator up again and
retries; ``GroupMetadataManager.appendGroupMetadataErrorToResponseError``):

* OffsetCommit, TxnOffsetCommit and OffsetDelete write one WriteBatch each and touch memory
  only after it is written; a refused one answers NOT_COORDINATOR and leaves the offsets and
  the group as they were;
* a deleted (or deleted and re-created) topic loses its committed offsets, as in Kafka; a
  refused delete is tried again at the next tick.

Transactional offsets (TxnOffsetCommit, KIP-98/447; Kafka's ``OffsetMetadataManager``) are
pending per (group, producer id) until the transaction coordinator ends the transaction with
``complete_transaction``: a commit makes them the committed offsets (except a partition a later
plain OffsetCommit wrote: the most recent commit wins, as Kafka keeps it), an abort drops them.
Pending offsets are persisted (a restart keeps them), invisible to OffsetFetch, which answers
UNSTABLE_OFFSET_COMMIT for such a partition when asked ``require_stable``; deleting the group,
its offsets of a partition or a topic drops them too. The same rules for a refused write hold:
nothing changes in memory unless the WriteBatch is written.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Protocol

from tmqgate.coordinator.classic import ClassicGroup, ClassicGroupState
from tmqgate.coordinator.consumer import ConsumerGroup, TopicSource
from tmqgate.protocol.errors import ErrorCode
from tmqgate.storage.model import StorageIOError

if TYPE_CHECKING:
    from tmqgate.storage import PendingOffset, Store

log = logging.getLogger("tmqgate.coordinator")

#: A group of either protocol, as the coordinator holds them.
Group = ClassicGroup | ConsumerGroup
#: (topic, partition, offset, leader epoch, metadata) as OffsetCommit carries them.
OffsetEntry = tuple[str, int, int, int, str | None]
#: What Kafka's coordinator answers when its log append fails with KAFKA_STORAGE_ERROR.
REFUSED = ErrorCode.NOT_COORDINATOR


class TxnOffsetsGate(Protocol):
    """The transaction coordinator's check of a TxnOffsetCommit (the TxnOffsetCommit handler
    passes it to ``GroupOffsets.txn_offset_commit``): Kafka verifies the producer's transaction before
    the group sees the commit — INVALID_PRODUCER_ID_MAPPING for a producer id the transactional
    id does not have, INVALID_PRODUCER_EPOCH / PRODUCER_FENCED for a stale epoch,
    INVALID_TXN_STATE when AddOffsetsToTxn did not add the group to the ongoing transaction."""

    def check_txn_offset_commit(self, transactional_id: str, producer_id: int, producer_epoch: int,
                                group_id: str, add: bool = False) -> ErrorCode: ...


class GroupOffsets:
    """The offsets of the groups in ``groups`` (the coordinator's, read here, never changed but
    for a member's liveness). Not thread-safe; driven with the coordinator."""

    def __init__(self, store: Store, topics: TopicSource, groups: Mapping[str, Group],
                 partition_of: Callable[[str], int], metadata_max_bytes: int) -> None:
        self.store = store
        self.topics = topics
        self.groups = groups
        self.partition_of = partition_of
        #: offset.metadata.max.bytes: a longer metadata is OFFSET_METADATA_TOO_LARGE.
        self.metadata_max_bytes = metadata_max_bytes
        #: The coordinator is loading its state: OffsetFetch answers COORDINATOR_LOAD_IN_PROGRESS.
        self.loading = False
        #: Groups holding committed or pending offsets (read by the admin queries).
        self.offset_groups: set[str] = set()
        self._topic_ids: dict[str, bytes] = {}
        #: group -> producer id -> (topic, partition) -> its pending transactional offset
        self._pending: dict[str, dict[int, dict[tuple[str, int], PendingOffset]]] = {}

    # ---- loading and unloading ---------------------------------------------------------

    def load(self, wanted: Callable[[str], bool]) -> None:
        """The offsets of the groups ``wanted`` says, as the store holds them, into memory."""
        pending = {g: v for g, v in self.store.txn_offsets().items() if wanted(g)}
        self.offset_groups |= {g for g in self.store.offset_groups() if wanted(g)}
        self._pending.update(pending)
        self.offset_groups |= set(pending)  # Kafka: the replayed commit makes a "simple" group
        self._topic_ids = self._current_topics()

    def unload(self, ours: Callable[[str], bool]) -> None:
        """The groups ``ours`` says leave memory (their state partition is led elsewhere)."""
        for group_id in [g for g in self.offset_groups if ours(g)]:
            self.offset_groups.discard(group_id)
        for group_id in [g for g in self._pending if ours(g)]:
            del self._pending[group_id]

    def forget(self, group_id: str) -> None:
        """The group's offsets, committed and pending, are gone from the store (DeleteGroups)."""
        self.offset_groups.discard(group_id)
        self._pending.pop(group_id, None)

    def _current_topics(self) -> dict[str, bytes]:
        out = {}
        for name in self.topics.names():
            found = self.topics.lookup(name)
            if found is not None:
                out[name] = found[0]
        return out

    def check_topics(self) -> None:
        """A deleted (or deleted and re-created) topic loses its committed offsets, as in Kafka
        (a refused delete is tried again at the next tick)."""
        current = self._current_topics()
        gone = [name for name, tid in self._topic_ids.items() if current.get(name) != tid]
        try:
            for name in gone:
                for group_id in list(self.offset_groups):
                    self.store.delete_offsets(group_id, name)  # pending transactional ones too
                    self._drop_pending(group_id, {name: None})
        except StorageIOError as exc:
            log.warning("offsets of deleted topics %s not deleted yet: %s", gone, exc)
            return
        self._topic_ids = current

    # ---- offsets -----------------------------------------------------------------------

    def commit_offsets(self, now: int, group_id: str, member_id: str, instance_id: str | None, generation: int,
                       version: int, offsets: list[OffsetEntry]) -> list[ErrorCode]:
        """Validate membership as Kafka does, then store; one error code per entry."""
        group = self.groups.get(group_id)
        if not group_id:
            code = ErrorCode.INVALID_GROUP_ID
        elif group is None:
            code = ErrorCode.NONE if generation < 0 else ErrorCode.ILLEGAL_GENERATION
        elif isinstance(group, ConsumerGroup):
            code = group.commit_check(member_id, generation, version, [(t, p) for t, p, *_ in offsets])
        else:
            code = group.commit_check(member_id, instance_id, generation)
        if code is not ErrorCode.NONE:
            return [code] * len(offsets)
        codes: list[ErrorCode] = []
        good: list[OffsetEntry] = []
        limit = self.metadata_max_bytes
        for entry in offsets:
            topic, partition, _, _, metadata = entry
            found = self.topics.lookup(topic)
            if found is None or not 0 <= partition < found[1]:
                codes.append(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            elif metadata is not None and len(metadata.encode()) > limit:
                codes.append(ErrorCode.OFFSET_METADATA_TOO_LARGE)
            else:
                codes.append(ErrorCode.NONE)
                good.append(entry)
        if good:
            pending = self._pending.get(group_id, {})
            touched = {(topic, partition) for topic, partition, *_ in good}
            supersede = [(pid, topic, partition) for pid, parts in pending.items()
                         for topic, partition in touched & parts.keys() if not parts[(topic, partition)].superseded]
            try:
                self.store.commit_offsets(group_id, good, supersede=supersede)
            except StorageIOError as exc:
                # Kafka: OffsetCommitRequest.getErrorResponse(NOT_COORDINATOR), every partition.
                log.warning("group %s: offset commit refused by the disk: %s", group_id, exc)
                return [REFUSED] * len(offsets)
            self.offset_groups.add(group_id)
            for pid, topic, partition in supersede:  # the most recent commit wins at the commit
                parts = pending[pid]
                parts[(topic, partition)] = parts[(topic, partition)]._replace(superseded=True)
        if isinstance(group, ClassicGroup) and member_id in group.members:
            group.members[member_id].last_heartbeat_ms = now  # a commit proves liveness, as in Kafka
        return codes

    def fetch_offsets(self, group_id: str, topics: list[tuple[str, list[int]]] | None,
                      member_id: str | None = None, member_epoch: int = -1, require_stable: bool = False,
                      ) -> tuple[ErrorCode, list[tuple[str, list[tuple[int, int, int, str, ErrorCode]]]]]:
        """Committed offsets: (topic, [(partition, offset, leader epoch, metadata, error)]).

        A partition without a commit answers offset -1, so the client applies auto.offset.reset.
        ``require_stable`` (OffsetFetch v7+, KIP-447): a partition with pending transactional
        offsets answers UNSTABLE_OFFSET_COMMIT and offset -1 (the client retries); without it
        the last committed offset is answered. Asking for all topics lists the committed ones.
        """
        if self.loading:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, []
        group = self.groups.get(group_id)
        if isinstance(group, ConsumerGroup):
            code = group.fetch_check(member_id, member_epoch)
            if code is not ErrorCode.NONE:
                return code, []
        if group_id not in self.offset_groups:
            stored = {}
        else:
            stored = self.store.fetch_offsets(group_id, None if topics is None else [t for t, _ in topics])
        unstable = self._pending_partitions(group_id) if require_stable else set()
        out = []
        if topics is None:
            by_topic: dict[str, list[tuple[int, int, int, str, ErrorCode]]] = {}
            for (topic, partition), c in sorted(stored.items()):
                by_topic.setdefault(topic, []).append(
                    (partition, -1, -1, "", ErrorCode.UNSTABLE_OFFSET_COMMIT) if (topic, partition) in unstable
                    else (partition, c.offset, c.leader_epoch, c.metadata or "", ErrorCode.NONE))
            return ErrorCode.NONE, list(by_topic.items())
        for topic, partitions in topics:
            rows = []
            for p in partitions:
                found = stored.get((topic, p))
                if (topic, p) in unstable:
                    rows.append((p, -1, -1, "", ErrorCode.UNSTABLE_OFFSET_COMMIT))
                elif found:
                    rows.append((p, found.offset, found.leader_epoch, found.metadata or "", ErrorCode.NONE))
                else:
                    rows.append((p, -1, -1, "", ErrorCode.NONE))
            out.append((topic, rows))
        return ErrorCode.NONE, out

    def delete_offsets(self, group_id: str, topics: list[tuple[str, list[int]]],
                       ) -> tuple[ErrorCode, list[tuple[str, list[tuple[int, ErrorCode]]]]]:
        group = self.groups.get(group_id)
        if group is None and group_id not in self.offset_groups:
            return ErrorCode.GROUP_ID_NOT_FOUND, []
        subscribed: set[str] = set()
        if group is not None and not group.is_empty():
            found = group.subscribed_topics()
            if found is None:
                return ErrorCode.NON_EMPTY_GROUP, []
            subscribed = found
        out = []
        deleted = []
        for topic, partitions in topics:
            if topic in subscribed:
                out.append((topic, [(p, ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC) for p in partitions]))
                continue
            deleted.append((topic, partitions))
            out.append((topic, [(p, ErrorCode.NONE) for p in partitions]))
        try:
            self.store.delete_partitions(group_id, deleted)  # pending transactional ones too
        except StorageIOError as exc:
            log.warning("group %s: offset delete refused by the disk: %s", group_id, exc)
            return REFUSED, []  # Kafka: the top-level code alone
        gone: dict[str, set[int] | None] = {}
        for topic, partitions in deleted:
            gone[topic] = set(partitions) | (gone.get(topic) or set())
        self._drop_pending(group_id, gone)
        return ErrorCode.NONE, out

    # ---- transactional offsets -----------------------------------------------------------

    def _pending_partitions(self, group_id: str) -> set[tuple[str, int]]:
        """(topic, partition)s of the group with a pending transactional offset."""
        out: set[tuple[str, int]] = set()
        for parts in self._pending.get(group_id, {}).values():
            out.update(parts)
        return out

    def pending_offsets(self, group_id: str) -> dict[int, dict[tuple[str, int], PendingOffset]]:
        """The group's pending transactional offsets per producer id (a copy)."""
        return {pid: dict(parts) for pid, parts in self._pending.get(group_id, {}).items()}

    def _drop_pending(self, group_id: str, topics: dict[str, set[int] | None] | None) -> None:
        """Forget pending offsets the store just deleted: all the group's (``topics`` None) or
        those of these topics (partitions None: the whole topic)."""
        producers = self._pending.get(group_id)
        if producers is None:
            return
        def dropped(topic: str, partition: int) -> bool:
            if topics is None:
                return True
            if topic not in topics:
                return False
            wanted = topics[topic]
            return wanted is None or partition in wanted

        for pid, parts in list(producers.items()):
            for tp in [tp for tp in parts if dropped(*tp)]:
                del parts[tp]
            if not parts:
                del producers[pid]
        if not producers:
            del self._pending[group_id]

    def _txn_commit_check(self, group: Group | None, member_id: str, instance_id: str | None,
                          generation: int, partitions: list[tuple[str, int]]) -> ErrorCode:
        """Kafka's validateTransactionalOffsetCommit: the group's validateOffsetCommit with
        isTransactional, a stale member epoch answered ILLEGAL_GENERATION."""
        if group is None:
            # No such group: a "simple" one is made (the commit's offsets keep it), unless the
            # producer claims a generation of it.
            return ErrorCode.NONE if generation < 0 else ErrorCode.ILLEGAL_GENERATION
        if isinstance(group, ClassicGroup):
            if group.state is ClassicGroupState.DEAD:
                return ErrorCode.COORDINATOR_NOT_AVAILABLE
            if generation < 0 and group.is_empty():
                return ErrorCode.NONE
            if generation >= 0 or member_id or instance_id is not None:
                return group.commit_check(member_id, instance_id, generation, transactional=True)
            return ErrorCode.NONE  # TxnOffsetCommit v0-v2 carries no member: accepted in any state
        if generation < 0 and group.is_empty():
            return ErrorCode.NONE
        if generation == -1 and not member_id and instance_id is None:
            return ErrorCode.NONE  # an old producer (v0-v2) without member information
        code = group.commit_check(member_id, generation, 9, partitions)  # KIP-1251's epochs, as OffsetCommit's
        return ErrorCode.ILLEGAL_GENERATION if code is ErrorCode.STALE_MEMBER_EPOCH else code

    def txn_offset_commit(self, now: int, group_id: str, transactional_id: str, producer_id: int,
                          producer_epoch: int, member_id: str, generation_id: int, group_instance_id: str | None,
                          topics: list[OffsetEntry], add_group: bool = False,
                          gate: TxnOffsetsGate | None = None) -> list[ErrorCode]:
        """TxnOffsetCommit: one error code per entry, as Kafka answers it. ``add_group``
        (v5+, transaction version 2, KIP-890): the gate adds the group to the transaction
        itself instead of requiring AddOffsetsToTxn.

        Unknown topics and partitions are answered UNKNOWN_TOPIC_OR_PARTITION before anything
        else (KafkaApis checks the metadata first; a request with none left is not validated);
        the rest is validated against the group (``_txn_commit_check``), then stored pending for
        the producer's transaction — invisible to OffsetFetch until ``complete_transaction``.
        The transaction itself is the transaction coordinator's business: ``gate`` (None: not
        checked) is asked after the group id and before the group (Kafka's order)."""
        codes: list[ErrorCode] = []
        known: list[int] = []
        for i, (topic, partition, _, _, _) in enumerate(topics):
            found = self.topics.lookup(topic)
            if found is None or not 0 <= partition < found[1]:
                codes.append(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            else:
                codes.append(ErrorCode.NONE)
                known.append(i)
        if not known:
            return codes
        code = ErrorCode.NONE if group_id else ErrorCode.INVALID_GROUP_ID
        if code is ErrorCode.NONE and gate is not None:
            # Kafka verifies the transaction before the group validates the commit.
            code = gate.check_txn_offset_commit(transactional_id, producer_id, producer_epoch, group_id,
                                                         add=add_group)
        if code is ErrorCode.NONE:
            code = self._txn_commit_check(self.groups.get(group_id), member_id, group_instance_id, generation_id,
                                          [(topics[i][0], topics[i][1]) for i in known])
        if code is not ErrorCode.NONE:
            for i in known:
                codes[i] = code
            return codes
        good: list[OffsetEntry] = []
        limit = self.metadata_max_bytes
        for i in known:
            metadata = topics[i][4]
            if metadata is not None and len(metadata.encode()) > limit:
                codes[i] = ErrorCode.OFFSET_METADATA_TOO_LARGE
            else:
                good.append(topics[i])
        if not good:
            return codes
        try:
            stored = self.store.commit_txn_offsets(group_id, producer_id, producer_epoch, good)
        except StorageIOError as exc:
            # Kafka: KAFKA_STORAGE_ERROR becomes NOT_COORDINATOR on every partition it validated.
            log.warning("group %s: transactional offset commit of %s refused by the disk: %s",
                        group_id, transactional_id, exc)
            validated = set(known)
            return [REFUSED if i in validated else c for i, c in enumerate(codes)]
        self.offset_groups.add(group_id)
        self._pending.setdefault(group_id, {}).setdefault(producer_id, {}).update(stored)
        group = self.groups.get(group_id)
        if isinstance(group, ClassicGroup) and member_id in group.members:
            group.members[member_id].last_heartbeat_ms = now
        return codes

    def pending_groups(self, producer_id: int, partition: int) -> list[str]:
        """The groups of a group-state partition holding offsets of the producer's transaction
        (on a cluster, a marker for that partition of ``__consumer_offsets`` ends them)."""
        return sorted(g for g, producers in self._pending.items()
                      if producer_id in producers and self.partition_of(g) == partition)

    def complete_transaction(self, group_id: str, producer_id: int, producer_epoch: int, commit: bool) -> None:
        """The producer's transaction ended (the transaction coordinator's marker for the
        group): commit makes its pending offsets for the group the committed offsets (a
        partition a later plain OffsetCommit wrote keeps that one), abort drops them. Nothing
        pending: nothing to do (Kafka ignores such a marker). Raises ``StorageIOError`` when
        the disk refused the write: nothing changed, the caller tries again later."""
        if producer_id not in self._pending.get(group_id, {}):
            return
        written = self.store.complete_txn_offsets(group_id, producer_id, commit)
        producers = self._pending[group_id]
        del producers[producer_id]
        if not producers:
            del self._pending[group_id]
        if written:
            self.offset_groups.add(group_id)
        log.debug("group %s: transaction of producer %d (epoch %d) %s, %d offsets committed", group_id,
                  producer_id, producer_epoch, "committed" if commit else "aborted", len(written))
