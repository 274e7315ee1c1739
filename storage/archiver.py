"""The archiver (kdb Insights RT's garbage collection): store-wide limits on total bytes, disk
usage and age, applied to the oldest WAL entries across all vnodes.

Why a module of its own: retention (``storage.retention``) cuts one vnode by its database's
limits; the archiver merges every vnode's head by age timestamp and cuts oldest first until
the store-wide limits hold, through the same head-removal routine (``storage.head_removal``),
so its removals are recorded in the log history alike. Rules it keeps: a vnode is only ever
cut from its head; its newest entry is never removed (RT never collects the active log); no
entry holding an offset at or beyond an open transaction's first offset is removed. Under a
disk-usage limit, the disk guard (``storage.space.DiskGuard``) reports when usage stays over.
"""

from __future__ import annotations

import heapq
import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from tmqgate.protocol import clock
from tmqgate.storage import keys
from tmqgate.storage.head_removal import Dead
from tmqgate.storage.model import StorageIOError
from tmqgate.storage.space import DiskGuard, usage

if TYPE_CHECKING:
    from tmqgate.storage.catalog import Catalog
    from tmqgate.storage.core import Core
    from tmqgate.storage.head_removal import HeadRemoval
    from tmqgate.storage.wal import Wal

log = logging.getLogger("tmqgate.storage")


class Archiver:
    """See the module docstring."""

    def __init__(self, core: Core, catalog: Catalog, wal: Wal, heads: HeadRemoval) -> None:
        self._core = core
        self._catalog = catalog
        self._wal = wal
        self._heads = heads
        #: The disk guard's report (``shortfall``) for the broker's status and metrics.
        self.guard = DiskGuard(core.path)

    def collect(
        self,
        now_ms: int | None = None,
        *,
        max_total_bytes: int | None = None,
        disk_usage_max_percent: float | None = None,
        volume_bytes: int | None = None,
        max_age_ms: int | None = None,
        compact: bool = True,
    ) -> list[dict[str, Any]]:
        """Garbage-collect the oldest WAL entries across all vnodes of all databases.

        Triggers (each optional, as RT's archiver policy): the total stored bytes exceed
        ``max_total_bytes``; the disk usage exceeds ``disk_usage_max_percent`` — of the
        filesystem holding the data directory (used / total), or with ``volume_bytes`` of a
        simulated volume holding only the WAL (total stored bytes / volume_bytes); entries
        older than ``max_age_ms`` (by age timestamp). Entries are removed oldest first by age
        timestamp, merging the vnodes' heads (a vnode is only ever cut from its head), until
        every limit holds again. The newest entry of each vnode is never removed, as RT never
        collects the active log: a vnode's tail stays readable and its counters need no
        special case. So a limit may still be exceeded afterwards.

        On a real filesystem LevelDB frees deleted entries only when it compacts, so the
        bytes to free are computed once from the stored sizes (not by re-reading the disk)
        and, with ``compact``, the cut key ranges are compacted at once so the space comes
        back before the next call sees the disk. Returns the log-history records written
        (dicts as in ``Store.log_history``), one per vnode and reason.
        """
        now = clock.now_ms() if now_ms is None else now_ms
        total = self._wal.total_bytes()
        need_size = total - max_total_bytes if max_total_bytes is not None and total > max_total_bytes else 0
        need_disk = 0
        if disk_usage_max_percent is not None:
            used, capacity, _ = usage(self._core.path, total, volume_bytes)
            allowed = int(capacity * disk_usage_max_percent / 100)
            need_disk = max(0, used - allowed)
        cutoff = now - max_age_ms if max_age_ms is not None else None
        need = max(need_size, need_disk)
        if need <= 0 and cutoff is None:
            if disk_usage_max_percent is not None:
                self._report(now, disk_usage_max_percent, volume_bytes, 0, exhausted=False)
            return []

        db = self._core.db
        # One cursor per vnode holding >= 2 entries: (iterator, head, entry after head).
        cursors: dict[tuple[int, int], tuple[Iterator[tuple[bytes, bytes]], tuple[bytes, bytes]]] = {}
        heap: list[tuple[int, int, int, tuple[bytes, bytes]]] = []
        stable: dict[tuple[int, int], int] = {}  # removable entries end at or below (the LSO)
        for d in self._catalog.all_databases():
            for vnode, vs in enumerate(d.vnodes):
                if vs.entries < 2:
                    continue
                stable[(d.info.id, vnode)] = self._heads.stable_end(d.info.id, vnode, vs)
                p = keys.vnode_prefix(keys.WAL, d.info.id, vnode)
                it = db.iterator(start=p, stop=keys.prefix_end(p))
                head = next(it, None)
                after = next(it, None)
                if head is None or after is None:
                    continue
                cursors[(d.info.id, vnode)] = (it, after)
                heap.append((keys.unpack_wal_index(head[1])[2], d.info.id, vnode, head))
        heapq.heapify(heap)
        plan: dict[tuple[int, int], list[tuple[str, list[Dead]]]] = {}
        first_kept: dict[tuple[int, int], int] = {}
        freed = 0
        while heap:
            ts, dbid, vnode, (key, value) = heap[0]
            if cutoff is not None and ts < cutoff:
                reason = "archiver_age"
            elif freed < need_size:
                reason = "archiver_size"
            elif freed < need:
                reason = "archiver_disk"
            else:
                break
            cursor, after = cursors[(dbid, vnode)]
            if keys.wal_key_version(after[0]) > stable[(dbid, vnode)]:  # holds an open txn's data
                heapq.heappop(heap)
                continue
            runs = plan.setdefault((dbid, vnode), [])
            if not runs or runs[-1][0] != reason:
                runs.append((reason, []))
            idx = keys.unpack_wal_index(value)
            runs[-1][1].append(Dead(key, idx[1], ts, idx[0]))
            freed += idx[1]
            first_kept[(dbid, vnode)] = keys.wal_key_version(after[0])
            nxt = next(cursor, None)
            if nxt is None:  # ``after`` is the newest entry: it stays
                heapq.heappop(heap)
                continue
            cursors[(dbid, vnode)] = (cursor, nxt)
            heapq.heapreplace(heap, (keys.unpack_wal_index(after[1])[2], dbid, vnode, after))

        exhausted = not heap  # every entry the archiver may remove is planned for removal
        out: list[dict[str, Any]] = []
        removed: list[int] = []  # payload sequences
        cut: list[tuple[bytes, bytes]] = []  # main-DB ranges to compact
        for (dbid, vnode), runs in plan.items():
            database = self._catalog.by_id(dbid)
            assert database is not None
            vs = database.vnodes[vnode]
            for i, (reason, dead) in enumerate(runs):
                removed.extend(e.seq for e in dead)
                kept = (
                    keys.wal_key_version(runs[i + 1][1][0].key)
                    if i + 1 < len(runs)
                    else first_kept[(dbid, vnode)]
                )
                rec = self._heads.remove(dbid, vnode, vs, dead, kept, None, reason, now)
                out.append(rec.as_dict(database.info.name))
            cut.append((keys.vnode_prefix(keys.WAL, dbid, vnode),
                        keys.wal_seek_key(dbid, vnode, first_kept[(dbid, vnode)])))
        freed = sum(r["bytes"] for r in out)
        if compact and removed:
            try:
                # The bytes live in the payload log: its removed payloads' range is compacted too.
                self._heads.compact(cut, removed)
            except StorageIOError as exc:
                log.error("archiver removed %d bytes of WAL entries but could not compact them, so "
                          "the disk space is not given back yet (LevelDB frees deleted entries only "
                          "when it compacts them; it retries on its own later): %s", freed, exc)
                return out
        if disk_usage_max_percent is not None:
            self._report(now, disk_usage_max_percent, volume_bytes, freed, exhausted)
        return out

    def _report(self, now: int, limit_pct: float, volume_bytes: int | None, freed: int, exhausted: bool) -> None:
        """The disk guard's report on what is left (``DiskGuard.report``)."""
        self.guard.report(now, limit_pct, volume_bytes, freed, exhausted, self._wal.total_bytes(),
                          lambda: sum(1 for d in self._catalog.all_databases() for vs in d.vnodes if vs.entries))
