"""storage package: the only code that touches LevelDB (layout in storage.keys)."""

from storage.store import (
    CommittedOffset,
    DatabaseExists,
    DatabaseInfo,
    OffsetOutOfRange,
    ProducerBatch,
    ProducerState,
    StorageError,
    Store,
    UnknownDatabase,
    UnknownVnode,
    WalEntry,
)

__all__ = [
    "CommittedOffset",
    "DatabaseExists",
    "DatabaseInfo",
    "OffsetOutOfRange",
    "ProducerBatch",
    "ProducerState",
    "StorageError",
    "Store",
    "UnknownDatabase",
    "UnknownVnode",
    "WalEntry",
]
