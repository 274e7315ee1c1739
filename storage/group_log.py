"""The log of ``__consumer_offsets``: what Kafka's group coordinator appends there, kept so a
consumer of that internal topic (``kafka-console-consumer --formatter OffsetsMessageFormatter``,
Burrow and other lag monitors) reads it in Kafka's own record format.

Why a log of its own and not the WAL: a group's state changes are written in one WriteBatch
(``storage.offsets``); the record batch describing the change goes in that same WriteBatch
(key ``keys.GROUPLOG``: partition, base offset), so the log never misses nor invents a change
across a kill. What is stored is the batch's content — its timestamp and its records' keys and
values, packed — and the record batch is built when it is read: building a v2 batch (varints,
CRC-32C) in Python costs more than the rest of an offset commit, and commits are many where
readers of ``__consumer_offsets`` are few (``bench/group_log_bench.py``). A partition's offsets are increasing and never
reused (dense until compacted): the next offset of a partition is read once from its last batch, then kept in memory and
advanced only after the WriteBatch is written (``stage`` / ``advance``: a failed write takes nothing).

On a cluster the log is replicated with the state it describes (a cluster's partition p of
``__consumer_offsets`` / ``__transaction_state`` is led where the state topic's partition p is:
broker/cluster/coordinator_state.py): each stored batch is also one op (its key, its packed
value) of the state change it belongs to, handed to the mirror with it (``Staged.op``), and the
log's own writes — a snapshot, a compaction — go to ``mirror_groups_at`` /
``mirror_txns_at`` first (``_mirror``), refused where this
broker no longer leads the partition. A broker that takes the partition over replaces its log
with the replicated batches (``replace_partition``), so the records keep their offsets across a
coordinator's move, as Kafka's replicated ``__consumer_offsets`` does (a coordinator's log of its
own had appended what it took over at its own log end, so offsets changed).

Compaction (Kafka's ``__consumer_offsets`` is ``cleanup.policy=compact``): every commit adds a
batch, so a group committing every few seconds would grow the log for ever. ``compaction``
plans, from a read-only scan (a worker thread may run it), to keep only the newest record of
each key and drop tombstones older than ``delete.retention.ms``; ``apply_compaction`` writes
the plan (on the store's writing thread). Rules:

- offsets never change: a batch that loses records is replaced by batches of its surviving
  runs, each at its first record's offset (gaps, as in Kafka's compacted log);
- the partition's last ``ACTIVE`` records (the head: what Kafka keeps in its active segment,
  which its cleaner never touches) and at least its last batch are never rewritten, so the next
  offset, read from the last key at open, never goes back, and a reader of the recent log sees
  every change as Kafka's does (a group's JoinGroup, sync and leave records, not just the last);
- only the compactor removes or rewrites keys below the head, and appends only add keys above
  it, so a plan made from one scan stays right when it is written later: a record it keeps
  may have been superseded meanwhile (the next pass drops it), never the other way round;
- a partition is compacted again once as many records were appended since its last compaction
  as it kept then (Kafka's min.cleanable.dirty.ratio 0.5), and at least ``MIN_DIRTY``.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from tmqgate.protocol import clock
from tmqgate.protocol.internal_topics import partition_for
from tmqgate.protocol.records import build_batch
from tmqgate.storage import keys
from tmqgate.storage.model import StateNotReplicated
from tmqgate.storage.offsets import StateOps

if TYPE_CHECKING:
    from tmqgate.storage.core import Core

#: Kafka's offsets.topic.num.partitions default.
DEFAULT_PARTITIONS = 50
#: The log's partitions from here on are __transaction_state's (TXN_BASE + its partition).
TXN_BASE = 1 << 31
#: A partition is not compacted before this many records were appended since the last time.
MIN_DIRTY = 1000
#: The newest records of a partition that compaction leaves as they are (the active segment).
ACTIVE = 1000


class Staged(NamedTuple):
    """A batch added to a WriteBatch: the partition, its next offset once written (``advance``),
    and the batch as the op a cluster replicates with the state change it belongs to."""

    partition: int
    after: int
    op: tuple[bytes, bytes]


_HEAD = struct.Struct(">qI")  # timestamp ms, record count
_U32 = struct.Struct(">I")
_I32 = struct.Struct(">i")


def _next_of(key: bytes, packed: bytes) -> int:
    """The offset after a stored batch: its base + its record count."""
    count: int = _HEAD.unpack_from(packed)[1]
    return keys.group_log_base(key) + count


def pack(timestamp_ms: int, records: Sequence[tuple[bytes, bytes | None]]) -> bytes:
    """A stored batch: timestamp i64, count u32, then per record key (u32 length + bytes) and
    value (i32 length, -1 for a tombstone, + bytes)."""
    parts = [_HEAD.pack(timestamp_ms, len(records))]
    for k, v in records:
        parts.append(_U32.pack(len(k)))
        parts.append(k)
        parts.append(_I32.pack(-1 if v is None else len(v)))
        if v is not None:
            parts.append(v)
    return b"".join(parts)


def unpack(packed: bytes) -> tuple[int, list[tuple[bytes, bytes | None]]]:
    ms, n = _HEAD.unpack_from(packed)
    pos = _HEAD.size
    out: list[tuple[bytes, bytes | None]] = []
    for _ in range(n):
        klen = _U32.unpack_from(packed, pos)[0]
        key = packed[pos + 4:pos + 4 + klen]
        pos += 4 + klen
        vlen = _I32.unpack_from(packed, pos)[0]
        pos += 4
        value = None if vlen < 0 else packed[pos:pos + vlen]
        pos += max(vlen, 0)
        out.append((key, value))
    return ms, out


class GroupLog:
    """See the module docstring."""

    def __init__(self, core: Core, partitions: int = DEFAULT_PARTITIONS) -> None:
        self._core = core
        self.partitions = partitions
        self._next: dict[int, int] = {}
        self._partition: dict[str, int] = {}
        self._topic_id: Callable[[str], bytes | None] = lambda name: None
        #: records appended per partition since its last compaction, and what that one kept
        #: (a partition not in ``_dirty`` has not been looked at since the store opened)
        self._dirty: dict[int, int] = {}
        self._kept: dict[int, int] = {}
        #: On a cluster: take (partition, ops) before the log's own writes (a snapshot, a
        #: compaction) are written — __consumer_offsets' partitions, __transaction_state's (its
        #: partition p, not TXN_BASE + p) —; raise ``StateNotReplicated`` to refuse.
        self.mirror_groups_at: Callable[[int, StateOps], None] | None = None
        self.mirror_txns_at: Callable[[int, StateOps], None] | None = None

    def configure(self, partitions: int, topic_id: Callable[[str], bytes | None] | None = None) -> None:
        """The partition count (the broker's offsets_topic_num_partitions) and how to find a
        topic's id by name (offset commit values carry it, as Kafka 4.3 writes them)."""
        if partitions < 1:
            raise ValueError("the offsets topic needs at least one partition")
        self.partitions = partitions
        self._next.clear()
        self._partition.clear()
        if topic_id is not None:
            self._topic_id = topic_id

    def topic_id(self, topic: str) -> bytes | None:
        """The id of the topic named ``topic`` (None: not known)."""
        return self._topic_id(topic)

    def partition_of(self, group: str) -> int:
        p = self._partition.get(group)
        if p is None:  # Java's hashCode in Python: ~10 µs a group id, so computed once
            if len(self._partition) >= 100_000:
                self._partition.clear()
            p = self._partition[group] = partition_for(group, self.partitions)
        return p

    def next_offset(self, partition: int) -> int:
        """The partition's high watermark (0 when empty)."""
        n = self._next.get(partition)
        if n is None:
            n = 0
            for key, value in self._core.db.iterator(prefix=keys.group_log_prefix(partition), reverse=True):
                n = _next_of(key, value)
                break
            self._next[partition] = n
        return n

    def stage(self, wb: Any, group: str, records: Sequence[tuple[bytes, bytes | None]],
              timestamp_ms: int | None = None) -> Staged | None:
        """Add to ``wb`` one batch of ``records`` (key, value; None = tombstone) in the group's
        partition at its next offset, for ``advance`` once ``wb`` is written (None: no records)."""
        return self.stage_at(wb, self.partition_of(group), records, timestamp_ms)

    def stage_at(self, wb: Any, partition: int, records: Sequence[tuple[bytes, bytes | None]],
                 timestamp_ms: int | None = None) -> Staged | None:
        """``stage`` in a given partition of the log (``TXN_BASE`` + p: __transaction_state's)."""
        if not records:
            return None
        ms = clock.now_ms() if timestamp_ms is None else timestamp_ms
        base = self.next_offset(partition)
        key, value = keys.group_log_key(partition, base), pack(ms, records)
        wb.put(key, value)
        return Staged(partition, base + len(records), (key, value))

    def advance(self, staged: Staged | None) -> None:
        """The WriteBatch holding a staged batch was written: its offsets are taken."""
        if staged is not None:
            partition, after = staged.partition, staged.after
            before = self._next.get(partition, after)
            self._next[partition] = after
            if partition in self._dirty:
                self._dirty[partition] += after - before

    def append_snapshot(self, partition: int, current: dict[bytes, bytes], keep: Callable[[bytes], bool]) -> None:
        """Append one batch that makes the partition's log say ``current`` (record key ->
        value): each record whose newest value differs, and a tombstone for each key the log
        holds live that is neither in ``current`` nor ``keep``-ed. A cluster's new coordinator
        of a partition so ends its log with the state it took over — what the previous leader's
        log showed, compacted — its own older records superseded. Only appends (compaction's
        rules hold); nothing when the log already says it."""
        latest: dict[bytes, bytes | None] = {}
        for _key, value in self._core.db.iterator(prefix=keys.group_log_prefix(partition)):
            for k, v in unpack(value)[1]:
                latest[k] = v
        records: list[tuple[bytes, bytes | None]] = [(k, v) for k, v in current.items() if latest.get(k) != v]
        records += [(k, None) for k, v in latest.items() if v is not None and k not in current and not keep(k)]
        wb = self._core.batch()
        staged = self.stage_at(wb, partition, records)
        if staged is not None:
            self._mirror(partition, [staged.op])
            self._core.write(wb)
            self.advance(staged)

    def replace_partition(self, partition: int, ops: Iterable[tuple[bytes, bytes | None]]) -> bool:
        """Make the partition's log what the replicated ``ops`` (a cluster's state partition,
        replayed in order; other keys skipped) leave of it, in one WriteBatch: a broker taking
        the partition over gets the previous leader's batches at their offsets. False, and the
        log left as it is, when the ops hold none of its batches (state replicated before the
        log was)."""
        prefix = keys.group_log_prefix(partition)
        ours = [(k, v) for k, v in ops if k.startswith(prefix)]
        if not ours:
            return False
        self._core.replace_keys((prefix,), lambda key: True, ours)
        self._next.pop(partition, None)  # read again from its last batch
        self._dirty.pop(partition, None)  # looked at again by the compactor
        self._kept.pop(partition, None)
        return True

    def _mirror(self, partition: int, ops: StateOps) -> None:
        """The log's own write of ``partition`` to its cluster mirror first, if it has one."""
        if partition < TXN_BASE:
            if self.mirror_groups_at is not None:
                self.mirror_groups_at(partition, ops)
        elif self.mirror_txns_at is not None:
            self.mirror_txns_at(partition - TXN_BASE, ops)

    # ---- compaction ---------------------------------------------------------------------

    def partitions_to_compact(self, min_dirty: int = MIN_DIRTY) -> list[int]:
        """The partitions due for compaction (the rules above): those holding batches that were
        not looked at since the store opened, and those with enough appended since."""
        due = {p for p, dirty in self._dirty.items() if dirty >= max(min_dirty, self._kept.get(p, 0))}
        db = self._core.db
        start = keys.GROUPLOG
        stop = keys.prefix_end(keys.GROUPLOG)
        while True:  # one seek per partition holding batches
            key = next(db.iterator(start=start, stop=stop, include_value=False), None)
            if key is None:
                break
            partition = int(_U32.unpack_from(key, 1)[0])
            if partition not in self._dirty:
                due.add(partition)
            if partition == 0xFFFFFFFF:
                break
            start = keys.group_log_prefix(partition + 1)
        return sorted(due)

    def compaction(self, partition: int, now_ms: int, delete_retention_ms: int, active: int = ACTIVE
                   ) -> tuple[list[bytes], list[tuple[bytes, bytes]], int]:
        """A plan for the partition (read-only; any thread): the keys to delete, the batches to
        put, and how many records the partition keeps. The batches holding its last ``active``
        records and its last batch are the head, left as they are."""
        db = self._core.db
        prefix = keys.group_log_prefix(partition)
        latest: dict[bytes, int] = {}
        last: tuple[bytes, bytes] | None = None
        for key, value in db.iterator(prefix=prefix):
            base = keys.group_log_base(key)
            for i, (k, _v) in enumerate(unpack(value)[1]):
                latest[k] = base + i
            last = key, value
        deletes: list[bytes] = []
        puts: list[tuple[bytes, bytes]] = []
        kept = 0
        if last is None:
            return deletes, puts, kept
        cut = max(0, _next_of(*last) - active)
        head = keys.group_log_key(partition, cut)
        for key, value in db.iterator(start=prefix, stop=head, reverse=True):
            if _next_of(key, value) > cut:  # the batch holding offset `cut` is the head's first
                head = key
            break
        head = min(head, last[0])
        horizon = now_ms - delete_retention_ms
        for key, value in db.iterator(start=prefix, stop=head):
            base = keys.group_log_base(key)
            ms, records = unpack(value)
            keep = [latest[k] == base + i and (v is not None or ms >= horizon) for i, (k, v) in enumerate(records)]
            kept += sum(keep)
            if all(keep):
                continue
            deletes.append(key)
            run: list[tuple[bytes, bytes | None]] = []
            for i, record in enumerate([*records, (b"", None)]):
                if i < len(records) and keep[i]:
                    run.append(record)
                    continue
                if run:
                    puts.append((keys.group_log_key(partition, base + i - len(run)), pack(ms, run)))
                    run = []
        for _key, value in db.iterator(start=head, stop=keys.prefix_end(prefix)):
            kept += len(unpack(value)[1])
        return deletes, puts, kept

    def apply_compaction(self, partition: int, deletes: Sequence[bytes], puts: Sequence[tuple[bytes, bytes]],
                         kept: int) -> bool:
        """Write a plan of ``compaction`` in one WriteBatch (puts after deletes: a batch's first
        surviving run may sit at the key it replaces), mirrored first on a cluster. False when
        the cluster refused it (this broker does not lead the partition: whoever does compacts
        the replicated log, and this copy is replaced if it leads it again); the partition is
        then left until enough is appended to it, as after a compaction."""
        refused = False
        if deletes or puts:
            try:
                self._mirror(partition, [*((key, None) for key in deletes), *puts])
            except StateNotReplicated:
                refused = True
            else:
                wb = self._core.batch()
                for key in deletes:
                    wb.delete(key)
                for key, value in puts:
                    wb.put(key, value)
                self._core.write(wb)
        self._dirty[partition] = 0
        self._kept[partition] = kept
        return not refused

    def read(self, partition: int, offset: int, max_bytes: int) -> list[bytes]:
        """Stored batches from the one holding ``offset`` on, at least one, then while they fit
        in ``max_bytes`` (Kafka returns whole batches; the client skips records before its offset)."""
        db = self._core.db
        prefix = keys.group_log_prefix(partition)
        start = keys.group_log_key(partition, offset)
        for key, value in db.iterator(start=prefix, stop=keys.group_log_key(partition, offset + 1), reverse=True):
            if _next_of(key, value) > offset:
                start = key
            break
        out: list[bytes] = []
        size = 0
        for key, value in db.iterator(start=start, stop=keys.prefix_end(prefix)):
            ms, records = unpack(value)
            batch = build_batch([(k, v, [], ms) for k, v in records], base_offset=keys.group_log_base(key))
            if out and size + len(batch) > max_bytes:
                break
            out.append(batch)
            size += len(batch)
        return out


class TransactionLog:
    """``__transaction_state`` over the same log: its partition p is the log's ``TXN_BASE + p``;
    a transactional id's partition is Kafka's hash of it over ``partitions``."""

    def __init__(self, log: GroupLog, partitions: int = DEFAULT_PARTITIONS) -> None:
        self._log = log
        self.partitions = partitions
        #: TransactionLogValue version: 1 (flexible) from transaction.version 1 on, else 0 (Kafka
        #: 4.3's TransactionVersion.transactionLogValueVersion; KIP-890)
        self.value_version = 1

    def configure(self, partitions: int, transaction_version: int) -> None:
        self.partitions = partitions
        self.value_version = 1 if transaction_version >= 1 else 0

    def partition_of(self, transactional_id: str) -> int:
        return partition_for(transactional_id, self.partitions)

    def stage(self, wb: Any, transactional_id: str, record: tuple[bytes, bytes | None],
              timestamp_ms: int | None = None) -> Staged | None:
        return self._log.stage_at(wb, TXN_BASE + self.partition_of(transactional_id), [record], timestamp_ms)

    def advance(self, staged: Staged | None) -> None:
        self._log.advance(staged)

    def replace_partition(self, partition: int, ops: Iterable[tuple[bytes, bytes | None]]) -> bool:
        """``GroupLog.replace_partition`` of partition p."""
        return self._log.replace_partition(TXN_BASE + partition, ops)

    def append_snapshot(self, partition: int, current: dict[bytes, bytes]) -> None:
        """``GroupLog.append_snapshot`` of partition p (every other id tombstoned)."""
        self._log.append_snapshot(TXN_BASE + partition, current, lambda key: False)

    def next_offset(self, partition: int) -> int:
        return self._log.next_offset(TXN_BASE + partition)

    def read(self, partition: int, offset: int, max_bytes: int) -> list[bytes]:
        return self._log.read(TXN_BASE + partition, offset, max_bytes)
