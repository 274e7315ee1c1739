"""Consumer groups' committed offsets and the group coordinator's opaque metadata.

Why here and not in the coordinator: they must survive a restart with the same durability
rule as the WAL (``storage.core``), and a group's commit of many partitions is one atomic
WriteBatch. Nothing is cached: offsets are read only when a consumer (re)joins.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import TYPE_CHECKING

from tmqgate.storage import keys
from tmqgate.storage.model import CommittedOffset

if TYPE_CHECKING:
    from tmqgate.storage.core import Core


class Offsets:
    """See the module docstring."""

    def __init__(self, core: Core) -> None:
        self._core = core

    def commit_offsets(
        self,
        group: str,
        offsets: Iterable[tuple[str, int, int, int, str | None]],
        commit_ms: int | None = None,
    ) -> None:
        """Atomically store (topic, partition, offset, leader_epoch, metadata) for a group."""
        ms = int(time.time() * 1000) if commit_ms is None else commit_ms
        wb = self._core.batch()
        for topic, partition, offset, leader_epoch, metadata in offsets:
            wb.put(
                keys.offset_key(group, topic, partition), keys.pack_offset(offset, leader_epoch, ms, metadata)
            )
        self._core.write(wb)

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
        wb = self._core.batch()
        n = 0
        if topic is not None and partitions is not None:
            for part in partitions:
                k = keys.offset_key(group, topic, part)
                if db.get(k) is not None:
                    wb.delete(k)
                    n += 1
        else:
            p = keys.offset_group_prefix(group) if topic is None else keys.offset_topic_prefix(group, topic)
            for k in db.iterator(prefix=p, include_value=False):
                wb.delete(k)
                n += 1
        if n:
            self._core.write(wb)
        return n

    def delete_partitions(self, group: str, topics: Iterable[tuple[str, Iterable[int]]]) -> int:
        """Delete some partitions' offsets of several topics in one WriteBatch (OffsetDelete:
        all or nothing). Returns how many were there."""
        db = self._core.db
        wb = self._core.batch()
        n = 0
        for topic, partitions in topics:
            for part in partitions:
                k = keys.offset_key(group, topic, part)
                if db.get(k) is not None:
                    wb.delete(k)
                    n += 1
        if n:
            self._core.write(wb)
        return n

    def delete_group(self, group: str) -> None:
        """A group's offsets and metadata, in one WriteBatch (DeleteGroups: all or nothing)."""
        wb = self._core.batch()
        for k in self._core.db.iterator(prefix=keys.offset_group_prefix(group), include_value=False):
            wb.delete(k)
        wb.delete(keys.group_key(group))
        self._core.write(wb)

    def offset_groups(self) -> list[str]:
        """Groups that have committed offsets."""
        groups: list[str] = []
        it = self._core.db.iterator(prefix=keys.OFFSET, include_value=False)
        for key in it:
            group = keys.parse_offset_key(key)[0]
            groups.append(group)
            it.seek(keys.prefix_end(keys.offset_group_prefix(group)))
        return groups

    def put_group_metadata(self, group: str, data: bytes) -> None:
        self._core.put(keys.group_key(group), data)

    def get_group_metadata(self, group: str) -> bytes | None:
        return self._core.db.get(keys.group_key(group))

    def delete_group_metadata(self, group: str) -> None:
        self._core.delete(keys.group_key(group))

    def group_metadata(self) -> dict[str, bytes]:
        return {key[1:].decode(): value for key, value in self._core.db.iterator(prefix=keys.GROUP)}
