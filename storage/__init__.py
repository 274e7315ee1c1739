"""storage package: the only code that touches LevelDB (layout in storage.keys, the parts in
storage.store)."""

from tmqgate.storage.model import (
    ChildTable,
    CommittedOffset,
    DatabaseExists,
    DatabaseInfo,
    HistoryRecord,
    LayoutMismatch,
    ObjectExists,
    OffsetOutOfRange,
    StableExists,
    StorageError,
    StorageFull,
    StorageIOError,
    TableExists,
    TmqTopic,
    TopicExists,
    TransactionConflict,
    UnknownDatabase,
    UnknownObject,
    UnknownStable,
    UnknownTable,
    UnknownTopic,
    UnknownVnode,
    WalEntry,
)
from tmqgate.storage.producers import ActiveProducer, BatchMeta, ProducerAppend, ProducerWindow
from tmqgate.storage.store import Store
from tmqgate.storage.txn import Transaction
from tmqgate.storage.users import ScramCredential
from tmqgate.storage.wal import Appended

__all__ = [
    "ActiveProducer",
    "Appended",
    "BatchMeta",
    "ChildTable",
    "CommittedOffset",
    "DatabaseExists",
    "DatabaseInfo",
    "HistoryRecord",
    "LayoutMismatch",
    "ObjectExists",
    "OffsetOutOfRange",
    "ProducerAppend",
    "ProducerWindow",
    "ScramCredential",
    "StableExists",
    "StorageError",
    "StorageFull",
    "StorageIOError",
    "Store",
    "TableExists",
    "TmqTopic",
    "TopicExists",
    "Transaction",
    "TransactionConflict",
    "UnknownDatabase",
    "UnknownObject",
    "UnknownStable",
    "UnknownTable",
    "UnknownTopic",
    "UnknownVnode",
    "WalEntry",
]
