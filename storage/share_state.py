"""Share groups' share-partition state (KIP-932): what Kafka's share coordinator keeps in its
state topic, the start offset and the state batches beyond it of each (group, partition).

Why here: a record a consumer acknowledged must not be delivered again after a restart, nor a
record's delivery count forget deliveries (the delivery limit archives a poison record), so
the state is written before ShareFetch or ShareAcknowledge answers, under the store's sync
policy (as a WAL write: handed to the OS before the answer at wal_level 1). One key per
share-partition, its whole state each time (at most group.share.partition.max.record.locks
records in flight, a few runs in practice); states and counts are opaque numbers here (the
coordinator's RecordState values).
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING

from tmqgate.storage import keys

if TYPE_CHECKING:
    from tmqgate.storage.core import Core

#: (group id, topic id, partition)
ShareKey = tuple[str, bytes, int]
#: (first offset, last offset, state, delivery count)
StateBatch = tuple[int, int, int, int]

_HEAD = struct.Struct(">qI")
_BATCH = struct.Struct(">qqBH")


def encode(start: int, batches: list[StateBatch]) -> bytes:
    return _HEAD.pack(start, len(batches)) + b"".join(_BATCH.pack(*b) for b in batches)


def decode(value: bytes) -> tuple[int, list[StateBatch]]:
    start, count = _HEAD.unpack_from(value)
    return start, [_BATCH.unpack_from(value, _HEAD.size + i * _BATCH.size) for i in range(count)]


class ShareStates:
    """See the module docstring."""

    def __init__(self, core: Core) -> None:
        self._core = core

    def load(self) -> dict[ShareKey, tuple[int, list[StateBatch]]]:
        """Every share-partition's state."""
        return {keys.parse_share_key(key): decode(value)
                for key, value in self._core.db.iterator(prefix=keys.SHARE)}

    def write(self, key: ShareKey, start: int, batches: list[StateBatch]) -> None:
        group, topic_id, partition = key
        self._core.put(keys.share_key(topic_id, partition, group), encode(start, batches))

    def groups(self) -> list[str]:
        """The share groups that exist (storage.keys SHAREGRP)."""
        return [key[1:].decode() for key, _ in self._core.db.iterator(prefix=keys.SHAREGRP)]

    def add_group(self, group: str) -> None:
        self._core.put(keys.share_group_key(group), b"")

    def remove_group(self, group: str) -> None:
        wb = self._core.batch()
        wb.delete(keys.share_group_key(group))
        self._core.write(wb)

    def delete(self, doomed: list[ShareKey]) -> None:
        """Forget these share-partitions (a group deleted, its offsets deleted or a topic gone)."""
        if not doomed:
            return
        wb = self._core.batch()
        for group, topic_id, partition in doomed:
            wb.delete(keys.share_key(topic_id, partition, group))
        self._core.write(wb)
