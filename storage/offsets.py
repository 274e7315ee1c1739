"""Consumer groups' committed offsets, their pending transactional offsets and the group
coordinator's opaque metadata.

Why here and not in the coordinator: they must survive a restart with the same durability
rule as the WAL (``storage.core``), and a group's commit of many partitions is one atomic
WriteBatch. Nothing is cached: offsets are read only when a consumer (re)joins.

Transactional offsets (TxnOffsetCommit) are kept apart (``keys.TXNOFF``) per group and producer
id until the transaction ends: its commit moves them to the committed offsets and its abort
drops them, in one WriteBatch either way (Kafka's ``OffsetMetadataManager``: pending offsets
replayed from ``__consumer_offsets``, materialised by the end-transaction marker). Deleting a
group, some of its offsets or a topic's offsets deletes the pending ones with them, as Kafka's
tombstones do.

On a cluster (issue 16, step 4) every change is also handed, as the puts and deletes of its
state keys (``OFFSET``, ``TXNOFF``, ``GROUP``, and its share groups' ``SHARE`` and
``SHAREGRP``: ``write_state``) and its batch of the ``__consumer_offsets`` log, to ``mirror``
before it is written: the broker
appends them to the group's partition of the replicated group-state topic, and a broker that
becomes that partition's leader rebuilds the partition's groups from it (``replace_partition``).
The mirror goes first so that a write the cluster refused (this broker no longer leads the
partition) changes nothing here.

Every change of the committed offsets is also written, in its WriteBatch, to the log of
``__consumer_offsets`` (``storage.group_log``) as Kafka writes it: a commit's records, the
tombstones of deleted offsets. A transaction's offsets are written there when its commit makes
them the committed ones (Kafka writes them as transactional records at TxnOffsetCommit, then
the marker).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from tmqgate.protocol import clock
from tmqgate.protocol.internal_topics import group_metadata_key, offset_commit_key, offset_commit_value
from tmqgate.storage import keys
from tmqgate.storage.model import CommittedOffset, PendingOffset

if TYPE_CHECKING:
    from tmqgate.storage.core import Core
    from tmqgate.storage.group_log import GroupLog


#: The keys of a group's state (what a cluster replicates, with the log of __consumer_offsets).
STATE_PREFIXES = (keys.OFFSET, keys.TXNOFF, keys.GROUP, keys.SHARE, keys.SHAREGRP)
StateOps = list[tuple[bytes, bytes | None]]  # (key, value; None: deleted), in order


def state_key_group(key: bytes) -> str | None:
    """The group a state key belongs to (None: not a group state key)."""
    prefix = key[:1]
    if prefix == keys.OFFSET:
        return keys.parse_offset_key(key)[0]
    if prefix == keys.TXNOFF:
        return keys.parse_txn_offset_key(key)[0]
    if prefix in (keys.GROUP, keys.SHAREGRP):
        return key[1:].decode()
    if prefix == keys.SHARE:
        return keys.parse_share_key(key)[0]
    return None


class _Recorded:
    """A WriteBatch that also keeps the puts and deletes of group state keys, in order."""

    def __init__(self, wb: Any) -> None:
        self.wb = wb
        self.ops: StateOps = []

    def put(self, key: bytes, value: bytes) -> None:
        self.wb.put(key, value)
        if key[:1] in STATE_PREFIXES:
            self.ops.append((key, value))

    def delete(self, key: bytes) -> None:
        self.wb.delete(key)
        if key[:1] in STATE_PREFIXES:
            self.ops.append((key, None))


class Offsets:
    """See the module docstring."""

    def __init__(self, core: Core, log: GroupLog) -> None:
        self._core = core
        self._log = log
        #: On a cluster: takes (group, its state ops) before they are written; raises to refuse.
        self.mirror: Callable[[str, StateOps], None] | None = None

    def _batch(self) -> _Recorded:
        return _Recorded(self._core.batch())

    def _write(self, wb: _Recorded, group: str, records: list[tuple[bytes, bytes | None]] | None = None,
               ms: int | None = None) -> None:
        """Write ``wb`` with the batch of ``records`` in the group's partition of the log;
        mirrored first on a cluster, the log's batch with the state keys (``storage.group_log``)."""
        staged = self._log.stage(wb.wb, group, records or [], ms)
        if self.mirror is not None and (wb.ops or staged is not None):
            self.mirror(group, wb.ops if staged is None else [*wb.ops, staged.op])
        self._core.write(wb.wb)
        self._log.advance(staged)

    def write_state(self, group: str, ops: StateOps) -> None:
        """Put or delete (value None) some of the group's other state keys — its share groups'
        (``storage.share_state``) — in one WriteBatch, mirrored first as every group state
        change (nothing of them goes to the log of ``__consumer_offsets``)."""
        wb = self._batch()
        for key, value in ops:
            assert state_key_group(key) == group, key
            if value is None:
                wb.delete(key)
            else:
                wb.put(key, value)
        self._write(wb, group)

    @staticmethod
    def _tombstone(key: bytes) -> tuple[bytes, None]:
        """The log's tombstone of a deleted OFFSET key."""
        group, topic, partition = keys.parse_offset_key(key)
        return offset_commit_key(group, topic, partition), None

    def commit_offsets(
        self,
        group: str,
        offsets: Iterable[tuple[str, int, int, int, str | None]],
        commit_ms: int | None = None,
        supersede: Iterable[tuple[int, str, int]] = (),
    ) -> None:
        """Atomically store (topic, partition, offset, leader_epoch, metadata) for a group.

        ``supersede``: (producer id, topic, partition) of pending transactional offsets this
        commit outdates (flagged in the same WriteBatch: their commit keeps this one)."""
        ms = clock.now_ms() if commit_ms is None else commit_ms
        wb = self._batch()
        db = self._core.db
        records: list[tuple[bytes, bytes | None]] = []
        for topic, partition, offset, leader_epoch, metadata in offsets:
            wb.put(
                keys.offset_key(group, topic, partition), keys.pack_offset(offset, leader_epoch, ms, metadata)
            )
            records.append((offset_commit_key(group, topic, partition),
                            offset_commit_value(offset, leader_epoch, metadata, ms, self._log.topic_id(topic))))
        for producer_id, topic, partition in supersede:
            k = keys.txn_offset_key(group, producer_id, topic, partition)
            v = db.get(k)
            if v is not None:
                epoch, _, value = keys.unpack_txn_offset(v)
                wb.put(k, keys.pack_txn_offset(epoch, True, value))
        self._write(wb, group, records, ms)

    def commit_offset(
        self,
        group: str,
        topic: str,
        partition: int,
        offset: int,
        metadata: str | None = None,
        leader_epoch: int = -1,
        commit_ms: int | None = None,
    ) -> None:
        self.commit_offsets(group, [(topic, partition, offset, leader_epoch, metadata)], commit_ms)

    def fetch_offsets(
        self, group: str, topics: Iterable[str] | None = None
    ) -> dict[tuple[str, int], CommittedOffset]:
        """Committed offsets of a group, all of them or those of the given topics."""
        prefixes = (
            [keys.offset_group_prefix(group)]
            if topics is None
            else [keys.offset_topic_prefix(group, t) for t in topics]
        )
        out: dict[tuple[str, int], CommittedOffset] = {}
        for p in prefixes:
            for key, value in self._core.db.iterator(prefix=p):
                _, topic, partition = keys.parse_offset_key(key)
                offset, leader_epoch, ms, metadata = keys.unpack_offset(value)
                out[(topic, partition)] = CommittedOffset(offset, leader_epoch, metadata, ms)
        return out

    def delete_offsets(
        self, group: str, topic: str | None = None, partitions: Iterable[int] | None = None
    ) -> int:
        """Delete a group's offsets: all, one topic's, or some partitions of it. Returns count."""
        db = self._core.db
        wb = self._batch()
        n = 0
        wanted = None if partitions is None else set(partitions)
        tombstones: list[tuple[bytes, bytes | None]] = []
        if topic is not None and wanted is not None:
            for part in sorted(wanted):
                k = keys.offset_key(group, topic, part)
                if db.get(k) is not None:
                    wb.delete(k)
                    tombstones.append(self._tombstone(k))
                    n += 1
        else:
            p = keys.offset_group_prefix(group) if topic is None else keys.offset_topic_prefix(group, topic)
            for k in db.iterator(prefix=p, include_value=False):
                wb.delete(k)
                tombstones.append(self._tombstone(k))
                n += 1
        pending = self._delete_pending(wb, group, None if topic is None else {topic: wanted})
        if n or pending:
            self._write(wb, group, tombstones)
        return n

    def _delete_pending(self, wb: Any, group: str, topics: dict[str, set[int] | None] | None) -> int:
        """Add to ``wb`` the deletion of the group's pending transactional offsets: all of them
        (``topics`` None) or those of these topics (partitions None: the whole topic)."""
        n = 0
        for k in self._core.db.iterator(prefix=keys.txn_offset_group_prefix(group), include_value=False):
            if topics is not None:
                _, _, topic, partition = keys.parse_txn_offset_key(k)
                if topic not in topics:
                    continue
                parts = topics[topic]
                if parts is not None and partition not in parts:
                    continue
            wb.delete(k)
            n += 1
        return n

    def delete_partitions(self, group: str, topics: Iterable[tuple[str, Iterable[int]]]) -> int:
        """Delete some partitions' offsets of several topics in one WriteBatch (OffsetDelete:
        all or nothing). Returns how many were there."""
        db = self._core.db
        wb = self._batch()
        n = 0
        wanted: dict[str, set[int] | None] = {}
        deleted: dict[bytes, None] = {}  # in order, each once
        for topic, partitions in topics:
            parts = set(partitions)
            wanted[topic] = parts | (wanted.get(topic) or set())
            for part in sorted(parts):
                k = keys.offset_key(group, topic, part)
                if k not in deleted and db.get(k) is not None:
                    wb.delete(k)
                    deleted[k] = None
                    n += 1
        if self._delete_pending(wb, group, wanted) or n:
            self._write(wb, group, [self._tombstone(k) for k in deleted])
        return n

    def delete_group(self, group: str, records: Iterable[tuple[bytes, bytes | None]] = ()) -> None:
        """A group's offsets (pending transactional ones too) and metadata, in one WriteBatch (DeleteGroups: all or
        nothing). ``records``: what the log gets after the offsets' tombstones (the group's own tombstone)."""
        wb = self._batch()
        tombstones: list[tuple[bytes, bytes | None]] = []
        for k in self._core.db.iterator(prefix=keys.offset_group_prefix(group), include_value=False):
            wb.delete(k)
            tombstones.append(self._tombstone(k))
        self._delete_pending(wb, group, None)
        wb.delete(keys.group_key(group))
        self._write(wb, group, tombstones + list(records))

    def offset_groups(self) -> list[str]:
        """Groups that have committed offsets."""
        groups: list[str] = []
        it = self._core.db.iterator(prefix=keys.OFFSET, include_value=False)
        for key in it:
            group = keys.parse_offset_key(key)[0]
            groups.append(group)
            it.seek(keys.prefix_end(keys.offset_group_prefix(group)))
        return groups

    # ---- transactional offsets ---------------------------------------------------------

    def commit_txn_offsets(
        self,
        group: str,
        producer_id: int,
        producer_epoch: int,
        offsets: Iterable[tuple[str, int, int, int, str | None]],
        commit_ms: int | None = None,
    ) -> dict[tuple[str, int], PendingOffset]:
        """Store a TxnOffsetCommit's (topic, partition, offset, leader_epoch, metadata) as pending
        for the producer's transaction, in one WriteBatch (a later one of the same partition
        replaces it, and is no longer superseded). Returns what it stored."""
        ms = clock.now_ms() if commit_ms is None else commit_ms
        wb = self._batch()
        out: dict[tuple[str, int], PendingOffset] = {}
        for topic, partition, offset, leader_epoch, metadata in offsets:
            wb.put(
                keys.txn_offset_key(group, producer_id, topic, partition),
                keys.pack_txn_offset(producer_epoch, False, keys.pack_offset(offset, leader_epoch, ms, metadata)),
            )
            out[(topic, partition)] = PendingOffset(producer_epoch, offset, leader_epoch, metadata, ms, False)
        self._write(wb, group)
        return out

    def txn_offsets(self) -> dict[str, dict[int, dict[tuple[str, int], PendingOffset]]]:
        """Every pending transactional offset: group -> producer id -> (topic, partition) -> it."""
        out: dict[str, dict[int, dict[tuple[str, int], PendingOffset]]] = {}
        for key, value in self._core.db.iterator(prefix=keys.TXNOFF):
            group, producer_id, topic, partition = keys.parse_txn_offset_key(key)
            epoch, superseded, raw = keys.unpack_txn_offset(value)
            offset, leader_epoch, ms, metadata = keys.unpack_offset(raw)
            out.setdefault(group, {}).setdefault(producer_id, {})[(topic, partition)] = PendingOffset(
                epoch, offset, leader_epoch, metadata, ms, superseded
            )
        return out

    def complete_txn_offsets(self, group: str, producer_id: int, commit: bool) -> list[tuple[str, int]]:
        """End the producer's transaction for the group in one WriteBatch: its pending offsets
        are dropped, and on commit those no later plain commit superseded become the committed
        offsets. Returns the (topic, partition)s whose committed offset it wrote."""
        wb = self._batch()
        written: list[tuple[str, int]] = []
        records: list[tuple[bytes, bytes | None]] = []
        for key, value in self._core.db.iterator(prefix=keys.txn_offset_producer_prefix(group, producer_id)):
            wb.delete(key)
            _, superseded, raw = keys.unpack_txn_offset(value)
            if commit and not superseded:
                _, _, topic, partition = keys.parse_txn_offset_key(key)
                wb.put(keys.offset_key(group, topic, partition), raw)
                written.append((topic, partition))
                offset, leader_epoch, ms, metadata = keys.unpack_offset(raw)
                records.append((offset_commit_key(group, topic, partition),  # no topic id: Kafka's TxnOffsetCommit
                                offset_commit_value(offset, leader_epoch, metadata, ms)))
        self._write(wb, group, records)
        return written

    def put_group_metadata(self, group: str, data: bytes, record: tuple[bytes, bytes | None] | None = None) -> None:
        """Store the coordinator's metadata of a group; ``record``: the log's record of the
        change (Kafka's GroupMetadata record), in the same WriteBatch."""
        wb = self._batch()
        wb.put(keys.group_key(group), data)
        self._write(wb, group, None if record is None else [record])

    def get_group_metadata(self, group: str) -> bytes | None:
        return self._core.db.get(keys.group_key(group))

    def delete_group_metadata(self, group: str) -> None:
        wb = self._batch()
        wb.delete(keys.group_key(group))
        self._write(wb, group)

    def group_metadata(self) -> dict[str, bytes]:
        return {key[1:].decode(): value for key, value in self._core.db.iterator(prefix=keys.GROUP)}

    # ---- a cluster's group-state partitions ---------------------------------------------

    def replace_partition(self, in_partition: Callable[[str], bool], ops: Iterable[tuple[bytes, bytes | None]]) -> int:
        """Make the state of the groups ``in_partition`` says are in a partition what the
        replicated ``ops`` (replayed in order) say, in one WriteBatch, without mirroring: what
        this broker held of them before (it led the partition once, or never) is dropped.
        Keys that are not group state keys, or not of the partition, are skipped. Returns
        how many keys the partition now holds."""
        def ours(key: bytes) -> bool:
            group = state_key_group(key)
            return group is not None and in_partition(group)

        return self._core.replace_keys(STATE_PREFIXES, ours, ops)

    def snapshot_log(self, partition: int, in_partition: Callable[[str], bool]) -> None:
        """End ``__consumer_offsets``' partition with the committed offsets of its groups as the
        store holds them now (``GroupLog.append_snapshot``; a cluster's new coordinator of the
        partition, after ``replace_partition``): a group's metadata record is left while the
        group exists — the coordinator writes the next one —, tombstoned when it is gone."""
        db = self._core.db
        current: dict[bytes, bytes] = {}
        for key, value in db.iterator(prefix=keys.OFFSET):
            group, topic, index = keys.parse_offset_key(key)
            if in_partition(group):
                offset, leader_epoch, ms, metadata = keys.unpack_offset(value)
                current[offset_commit_key(group, topic, index)] = offset_commit_value(
                    offset, leader_epoch, metadata, ms, self._log.topic_id(topic))
        groups = {group_metadata_key(key[1:].decode()) for key in db.iterator(prefix=keys.GROUP, include_value=False)
                  if in_partition(key[1:].decode())}
        self._log.append_snapshot(partition, current, groups.__contains__)
