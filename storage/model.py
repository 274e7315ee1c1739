"""Values and errors of the storage API (no LevelDB here; ``storage.store`` re-exports them)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

#: WAL entry kinds as ``WalEntry.kind`` names them, indexed by the key's kind byte.
ENTRY_KINDS = ("data", "meta", "rows")

#: Why head entries were removed, as the log history records it (index = stored code).
REMOVAL_REASONS = (
    "delete_records",  # Kafka DeleteRecords / delete_before
    "retention.ms",  # Kafka database: age
    "retention.bytes",  # Kafka database: size per vnode
    "wal_retention_period",  # tsdb database: age (seconds option)
    "wal_retention_size",  # tsdb database: size per vnode (KB option)
    "archiver_age",  # collect(max_age_ms=...)
    "archiver_size",  # collect(max_total_bytes=...)
    "archiver_disk",  # collect(disk_usage_max_percent=...)
)
REASON_CODE = {name: i for i, name in enumerate(REMOVAL_REASONS)}


class StorageError(Exception):
    """Base of the errors raised by the store."""


class StorageIOError(StorageError):
    """The disk refused a write (Kafka's KafkaStorageException: KAFKA_STORAGE_ERROR)."""


class StateNotReplicated(StorageIOError):
    """A cluster refused a group's state change before it was written: this broker no longer
    leads the group's state partition (the coordinator answers NOT_COORDINATOR)."""


class StorageFull(StorageIOError):
    """No space left on the data directory's disk: the write was not made (``storage.space``)."""


class LayoutMismatch(StorageError):
    """The data directory was written with another storage layout (no migration exists)."""


class UnknownDatabase(StorageError, KeyError):
    """No database of that name."""


class DatabaseExists(StorageError):
    """create_database on a name already in use."""


class UnknownVnode(StorageError, IndexError):
    """Vnode number outside 0 .. vgroups-1."""


class OffsetOutOfRange(StorageError):
    """delete_before beyond the high watermark."""


class ObjectExists(StorageError):
    """A catalog name (supertable, child table, TDengine topic) already in use."""


class UnknownObject(StorageError, KeyError):
    """No catalog object (supertable, child table, TDengine topic) of that name."""


class StableExists(ObjectExists):
    """The name is taken by a supertable (tables and supertables share a database's names)."""


class TableExists(ObjectExists):
    """The name is taken by a child table."""


class TopicExists(ObjectExists):
    """A TDengine topic of that name exists."""


class UnknownStable(UnknownObject):
    pass


class UnknownTable(UnknownObject):
    pass


class UnknownTopic(UnknownObject):
    pass


class TransactionConflict(StorageError):
    """A vnode a transaction appended to was written by someone else before it committed
    (an ``await`` inside ``with store.transaction()``); nothing of the transaction is kept."""


@dataclass(frozen=True)
class DatabaseInfo:
    """A database as the catalog knows it; ``id`` is the internal numeric id used in keys.

    ``kind`` is "kafka" (a plain topic's database: opaque record batches) or "tsdb" (a SQL
    database: supertables, rows entries); ``options`` are its TDengine options as the broker
    gave them (precision, wal_retention_period seconds, wal_retention_size KB, ...).
    """

    name: str
    vgroups: int
    topic_id: bytes
    configs: dict[str, str]
    created_ms: int
    id: int = 0
    kind: str = "kafka"
    options: dict[str, Any] = field(default_factory=dict)


class _WalEntryFields(NamedTuple):
    version: int
    is_meta: bool
    data: bytes
    kind: str
    count: int  # type: ignore[assignment]  # the version count; shadows tuple.count on purpose


class WalEntry(_WalEntryFields):
    """A WAL entry as ``read_entries`` returns it.

    ``data`` is the record batch (data), the meta payload (meta) or the Arrow IPC payload
    (rows), without storage's own headers; ``kind`` is "data", "meta" or "rows" and ``count``
    the versions the entry takes (records, 1, rows), so the next entry starts at
    ``version + count``. The three-argument form ``WalEntry(v, is_meta, data)`` still works
    (kind from is_meta, count 1) so older code and tests compare equal.
    """

    __slots__ = ()

    def __new__(
        cls, version: int, is_meta: bool, data: bytes, kind: str | None = None, count: int = 1
    ) -> WalEntry:
        if kind is None:
            kind = "meta" if is_meta else "data"
        return super().__new__(cls, version, is_meta, data, kind, count)


class RowsEntry(NamedTuple):
    """One rows entry to append (``Store.append_rows_many``): Arrow IPC bytes (opaque to the
    store) taking ``row_count`` versions, with the rows' max and min timestamps (ms)."""

    payload: bytes | bytearray | memoryview
    row_count: int
    max_timestamp: int
    min_timestamp: int


class CommittedOffset(NamedTuple):
    offset: int
    leader_epoch: int
    metadata: str | None
    commit_ms: int


class PendingOffset(NamedTuple):
    """A transactional offset (TxnOffsetCommit) waiting for its transaction's end."""

    producer_epoch: int
    offset: int
    leader_epoch: int
    metadata: str | None
    commit_ms: int
    superseded: bool  # a later plain OffsetCommit of the partition wins at the commit


class ChildTable(NamedTuple):
    """A child table of a supertable: its tag values (JSON-able, opaque here) and home vnode."""

    name: str
    stable: str
    tags: dict[str, Any]
    vnode: int


class TmqTopic(NamedTuple):
    """A TDengine topic: ``definition`` is the broker's opaque JSON (kind, db, stable, sql,
    meta mode, ...)."""

    topic_id: bytes
    definition: dict[str, Any]
    created_ms: int


class HistoryRecord(NamedTuple):
    """One removal of consecutive head entries of a vnode (a "collected log" in RT terms).

    Versions ``first_version .. last_version`` (the removed entries' span), their stored
    bytes, the age timestamps of the first and last removed entry, when and why.
    """

    db: int
    vnode: int
    first_version: int
    last_version: int
    entries: int
    bytes: int
    first_ts: int
    last_ts: int
    removed_ms: int
    reason: str

    def as_dict(self, db_name: str) -> dict[str, Any]:
        return {
            "db": db_name,
            "vnode": self.vnode,
            "first_version": self.first_version,
            "last_version": self.last_version,
            "entries": self.entries,
            "bytes": self.bytes,
            "first_ts": self.first_ts,
            "last_ts": self.last_ts,
            "removed_ms": self.removed_ms,
            "reason": self.reason,
        }
