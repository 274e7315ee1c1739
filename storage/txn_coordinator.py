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
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tmqgate.storage import keys

if TYPE_CHECKING:
    from tmqgate.storage.core import Core


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
    """See the module docstring."""

    def __init__(self, core: Core) -> None:
        self._core = core

    def load(self) -> dict[str, TxnRecord]:
        """Every transactional id's last written state."""
        return {r.transactional_id: r for r in
                (TxnRecord.from_json(v) for _, v in self._core.db.iterator(prefix=keys.TXNSTATE))}

    def put(self, record: TxnRecord) -> None:
        """Write the record (before the coordinator answers); raises StorageIOError."""
        wb = self._core.batch()
        wb.put(keys.txn_state_key(record.transactional_id), record.to_json())
        self._core.write(wb)

    def delete(self, transactional_id: str) -> None:
        """Forget an expired transactional id (Kafka's tombstone)."""
        wb = self._core.batch()
        wb.delete(keys.txn_state_key(transactional_id))
        self._core.write(wb)
