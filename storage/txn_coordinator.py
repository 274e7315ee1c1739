"""The transaction coordinator's state: transactional id -> its metadata (Kafka's
``__transaction_state`` log, as one key per transactional id).

Why here: Kafka's coordinator writes the new state to its log *before* it answers
(``TransactionStateManager.appendTransactionToLog``), so a kill -9 at any point leaves on disk
a state the coordinator can finish at restart (a prepared commit or abort completed, an ongoing
transaction aborted at its timeout). Every write is one ``WriteBatch`` written before the
coordinator answers, under the store's sync policy like the WAL it describes (wal_level 1: in
the OS before the answer, which survives kill -9, fsynced on the fsync period; wal_level 2 with
fsync_period_ms 0: fsynced each time) — a state stronger than the markers and data it refers to
would buy nothing. The values are opaque here: states and rules are ``coordinator.transactions``'.

Key (``storage.keys``): 0xB0 TXNSTATE + transactional id (utf-8); value: JSON of ``TxnRecord``.

Each write also puts, in its WriteBatch, the record Kafka would append to ``__transaction_state``
(``protocol.internal_topics``' TransactionLog key and value; a tombstone when an id expires) in
the id's partition of that topic (``storage.group_log.TransactionLog``), so consumers of the
internal topic (``TransactionLogMessageFormatter``) read the coordinator's states.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tmqgate.protocol.internal_topics import TXN_STATUS, transaction_log_key, transaction_log_value
from tmqgate.storage import keys

if TYPE_CHECKING:
    from tmqgate.storage.core import Core
    from tmqgate.storage.group_log import TransactionLog


@dataclass(frozen=True)
class TxnRecord:
    """One transactional id's metadata as written (Kafka's TransactionLogValue, plus the groups
    AddOffsetsToTxn added, which Kafka keeps as partitions of __consumer_offsets)."""

    transactional_id: str
    producer_id: int
    previous_producer_id: int  # KIP-360: the id before an epoch exhaustion rotated it (-1: none)
    producer_epoch: int
    last_producer_epoch: int  # KIP-360: the epoch before the last bump (-1: none)
    timeout_ms: int
    state: str  # coordinator.transactions.TxnState's value ("Empty", "Ongoing", ...)
    partitions: tuple[tuple[str, int], ...]
    groups: tuple[str, ...]
    start_ms: int  # -1 before the first transaction
    update_ms: int
    # Transaction version 2 (KIP-890): the producer id an EndTxn that exhausted the epoch
    # allocated, taken on at CompleteX (-1: none); the transaction version the client ended
    # or added with (1 or 2; records written before it existed are 1).
    next_producer_id: int = -1
    transaction_version: int = 1

    def to_json(self) -> bytes:
        d: dict[str, Any] = dict(self.__dict__)
        d["partitions"] = [list(p) for p in self.partitions]
        d["groups"] = list(self.groups)
        return json.dumps(d, separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, data: bytes) -> TxnRecord:
        d = json.loads(data)
        d["partitions"] = tuple((str(t), int(p)) for t, p in d["partitions"])
        d["groups"] = tuple(d["groups"])
        return cls(**d)


class TxnStates:
    """See the module docstring. On a cluster (issue 16, step 4) every write is handed to
    ``mirror`` first, as its (key, value or None) — the broker appends it to the id's partition
    of the replicated transaction-state topic (``storage.offsets`` does the same for groups)."""

    def __init__(self, core: Core, log: TransactionLog | None = None) -> None:
        self._core = core
        self._log = log
        self.mirror: Callable[[str, list[tuple[bytes, bytes | None]]], None] | None = None

    def _value(self, r: TxnRecord) -> bytes:
        assert self._log is not None
        by_topic: dict[str, list[int]] = {}
        for topic, partition in r.partitions:
            by_topic.setdefault(topic, []).append(partition)
        partitions = None if r.state == "Empty" else [(t, sorted(ids)) for t, ids in sorted(by_topic.items())]
        # As Kafka 4.3 writes them: the previous producer id is the current one until a rotation
        # (KIP-360) gave another; the client's transaction version is TV_2 or TV_0 (Kafka takes it
        # from EndTxn/AddPartitionsToTxn's version: TV_1 clients are recorded as 0).
        previous = r.producer_id if r.previous_producer_id == -1 else r.previous_producer_id
        return transaction_log_value(self._log.value_version, r.producer_id, r.producer_epoch, r.timeout_ms,
                                     TXN_STATUS.get(r.state, 0), partitions, r.update_ms, r.start_ms,
                                     previous, r.next_producer_id, 2 if r.transaction_version >= 2 else 0)

    def _write(self, wb: Any, transactional_id: str, value: bytes | None, ms: int | None = None,
               state: bytes | None = None) -> None:
        """Write ``wb`` (``state``: the id's new TXNSTATE value, None: deleted) with the log's
        record ``value``; mirrored first on a cluster, the log's batch with the state
        (``storage.group_log``)."""
        staged = None if self._log is None else \
            self._log.stage(wb, transactional_id, (transaction_log_key(transactional_id), value), ms)
        if self.mirror is not None:
            ops: list[tuple[bytes, bytes | None]] = [(keys.txn_state_key(transactional_id), state)]
            self.mirror(transactional_id, ops if staged is None else [*ops, staged.op])
        self._core.write(wb)
        if self._log is not None:
            self._log.advance(staged)

    def load(self) -> dict[str, TxnRecord]:
        """Every transactional id's last written state."""
        return {r.transactional_id: r for r in
                (TxnRecord.from_json(v) for _, v in self._core.db.iterator(prefix=keys.TXNSTATE))}

    def put(self, record: TxnRecord) -> None:
        """Write the record (before the coordinator answers); raises StorageIOError."""
        wb = self._core.batch()
        state = record.to_json()
        wb.put(keys.txn_state_key(record.transactional_id), state)
        self._write(wb, record.transactional_id, self._value(record) if self._log is not None else None,
                    record.update_ms, state)

    def delete(self, transactional_id: str) -> None:
        """Forget an expired transactional id (Kafka's tombstone)."""
        wb = self._core.batch()
        wb.delete(keys.txn_state_key(transactional_id))
        self._write(wb, transactional_id, None)

    def replace_partition(self, in_partition: Callable[[str], bool], ops: Iterable[tuple[bytes, bytes | None]]) -> int:
        """The ids ``in_partition`` says are in a partition as the replicated ``ops`` (replayed in
        order) say, in one WriteBatch, without mirroring; what this broker held of them before
        is dropped; keys that are not TXNSTATE keys of the partition are skipped. Returns how
        many ids the partition now holds."""
        return self._core.replace_keys((keys.TXNSTATE,), lambda key: in_partition(key[1:].decode()), ops)

    def snapshot_log(self, partition: int, in_partition: Callable[[str], bool]) -> None:
        """End ``__transaction_state``' partition with its ids' states as the store holds them
        now, the others tombstoned (``GroupLog.append_snapshot``; after ``replace_partition``)."""
        if self._log is None:
            return
        current = {transaction_log_key(r.transactional_id): self._value(r) for r in self.load().values()
                   if in_partition(r.transactional_id)}
        self._log.append_snapshot(partition, current)
