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
from typing import TYPE_CHECKING, NamedTuple

from tmqgate.storage import keys

if TYPE_CHECKING:
    from tmqgate.storage.core import Core
    from tmqgate.storage.offsets import Offsets

#: (group id, topic id, partition)
ShareKey = tuple[str, bytes, int]
#: (first offset, last offset, state, delivery count)
StateBatch = tuple[int, int, int, int]

_HEAD = struct.Struct(">qI")
_BATCH = struct.Struct(">qqBH")


_EPOCH = struct.Struct(">I")


class Stored(NamedTuple):
    """A share-partition's state as kept: ``start`` -1 when it is to start again at
    share.auto.offset.reset (Kafka's uninitialised start: its offsets were deleted);
    ``epoch``: the state epoch, raised by every change made at the coordinator
    (AlterShareGroupOffsets, DeleteShareGroupOffsets), which fences a leader's older copy."""

    start: int
    batches: list[StateBatch]
    epoch: int


def encode(start: int, batches: list[StateBatch], epoch: int = 0) -> bytes:
    return (_HEAD.pack(start, len(batches)) + b"".join(_BATCH.pack(*b) for b in batches)
            + (_EPOCH.pack(epoch) if epoch else b""))


def decode(value: bytes) -> Stored:
    start, count = _HEAD.unpack_from(value)
    end = _HEAD.size + count * _BATCH.size
    epoch = _EPOCH.unpack_from(value, end)[0] if len(value) >= end + _EPOCH.size else 0  # (none written before)
    return Stored(start, [_BATCH.unpack_from(value, _HEAD.size + i * _BATCH.size) for i in range(count)], epoch)


class ShareStates:
    """See the module docstring."""

    def __init__(self, core: Core, offsets: Offsets) -> None:
        self._core = core
        self._offsets = offsets  # the one write path of a group's state (mirrored on a cluster)

    def load(self) -> dict[ShareKey, Stored]:
        """Every share-partition's state."""
        return {keys.parse_share_key(key): decode(value)
                for key, value in self._core.db.iterator(prefix=keys.SHARE)}

    def read(self, key: ShareKey) -> Stored | None:
        """One share-partition's state (None: none written)."""
        group, topic_id, partition = key
        value = self._core.db.get(keys.share_key(topic_id, partition, group))
        return None if value is None else decode(value)

    def of_group(self, group: str) -> dict[ShareKey, Stored]:
        """The group's share-partitions' states."""
        return {k: v for k, v in self.load().items() if k[0] == group}

    def write(self, key: ShareKey, start: int, batches: list[StateBatch], epoch: int = 0) -> None:
        """Raises StateNotReplicated on a cluster broker that does not coordinate the group."""
        group, topic_id, partition = key
        self._offsets.write_state(group, [(keys.share_key(topic_id, partition, group),
                                           encode(start, batches, epoch))])

    def groups(self) -> list[str]:
        """The share groups that exist (storage.keys SHAREGRP)."""
        return [key[1:].decode() for key, _ in self._core.db.iterator(prefix=keys.SHAREGRP)]

    def has_group(self, group: str) -> bool:
        return self._core.db.get(keys.share_group_key(group)) is not None

    def add_group(self, group: str) -> None:
        self._offsets.write_state(group, [(keys.share_group_key(group), b"")])

    def remove_group(self, group: str) -> None:
        self._offsets.write_state(group, [(keys.share_group_key(group), None)])

    def delete(self, doomed: list[ShareKey]) -> None:
        """Forget these share-partitions (a group deleted, its offsets deleted or a topic gone)."""
        by_group: dict[str, list[tuple[bytes, bytes | None]]] = {}
        for group, topic_id, partition in doomed:
            by_group.setdefault(group, []).append((keys.share_key(topic_id, partition, group), None))
        for group, ops in by_group.items():
            self._offsets.write_state(group, ops)
