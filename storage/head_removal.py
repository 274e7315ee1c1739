"""Removing entries from a vnode's head: the one routine that retention, DeleteRecords
(``storage.retention``) and the archiver (``storage.archiver``) share.

Why one routine: all three remove whole entries from a vnode's head (log start moves), and
``HeadRemoval.remove`` does it one way — the index deletes, the new counters, the time-index
repair, the aborted-index trim and the log-history record (``storage.log_history``) in one
WriteBatch, then the payloads — so the counters, the indexes and the log history never miss or
invent a removal.

None of them removes an entry holding an offset at or beyond the first offset of an open
transaction (the last stable offset, ``storage.wal_txns``): removal stops at ``stable_end``.
A removal also drops the aborted-index entries that end below the new log start, in its
WriteBatch.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, NamedTuple

from tmqgate.storage import keys
from tmqgate.storage.model import HistoryRecord

if TYPE_CHECKING:
    from tmqgate.storage.catalog import Catalog
    from tmqgate.storage.core import Core, WriteBatch
    from tmqgate.storage.log_history import LogHistory
    from tmqgate.storage.wal import Vnode
    from tmqgate.storage.wal_txns import WalTxns

log = logging.getLogger("tmqgate.storage")


class Dead(NamedTuple):
    """A head entry chosen for removal (``seq``: its payload's sequence)."""

    key: bytes
    size: int
    ts: int
    seq: int


class HeadRemoval:
    """See the module docstring."""

    def __init__(self, core: Core, catalog: Catalog, history: LogHistory, txns: WalTxns | None = None) -> None:
        self._core = core
        self._catalog = catalog
        self._history = history
        self._txns = txns

    def stable_end(self, dbid: int, vnode: int, vs: Vnode) -> int:
        """Removable entries end at or below this: the vnode's last stable offset."""
        first = self._txns.first_unstable(dbid, vnode) if self._txns is not None else None
        return vs.next if first is None else first

    def remove(
        self,
        dbid: int,
        vnode: int,
        vs: Vnode,
        dead: list[Dead],
        first_kept: int,
        new_log_start: int | None,
        reason: str,
        now_ms: int,
    ) -> HistoryRecord:
        """Delete ``dead`` (the vnode's first entries, in order; ``first_kept`` is the base
        after them) in one WriteBatch with the new counters, the time index repair and the
        log-history record (trimming the history to its limit); then their payloads
        (listed under PAYGC in that WriteBatch, so open finishes an interrupted delete)."""
        log_start = max(vs.log_start, first_kept, new_log_start or 0)
        freed = sum(e.size for e in dead)
        size = vs.size - freed
        entries = vs.entries - len(dead)
        wb = self._core.batch()
        for e in dead:
            wb.delete(e.key)
        wb.put(keys.vnode_key(dbid, vnode), keys.pack_vnode_state(vs.next, log_start, size, entries))
        max_ts = self._reindex_head(dbid, vnode, first_kept, wb)
        aborted_gone = self._txns.stage_trim(wb, dbid, vnode, log_start) if self._txns is not None else 0
        rec = HistoryRecord(
            dbid,
            vnode,
            keys.wal_key_version(dead[0].key),
            first_kept - 1,
            len(dead),
            freed,
            dead[0].ts,
            dead[-1].ts,
            now_ms,
            reason,
        )
        trimmed = self._history.stage(wb, rec)
        self._core.write_removing(wb, [e.seq for e in dead])
        database = self._catalog.by_id(dbid)
        name = database.info.name if database is not None else str(dbid)
        log.info("%s removed offsets %d..%d of %s-%d: %d entries, %d bytes", reason, rec.first_version,
                 rec.last_version, name, vnode, len(dead), freed,
                 extra={"event": "removal", "reason": reason, "topic": name, "partition": vnode,
                        "first_offset": rec.first_version, "last_offset": rec.last_version,
                        "entries": len(dead), "bytes": freed})
        vs.log_start = log_start
        vs.size = size
        vs.entries = entries
        vs.uncache_below(first_kept)
        if self._txns is not None:
            self._txns.trimmed(dbid, vnode, aborted_gone)
        if max_ts is not None:
            vs.max_ts, vs.max_ts_base = max_ts
        self._history.add(rec, trimmed)
        return rec

    def compact(self, ranges: list[tuple[bytes, bytes]], seqs: list[int]) -> None:
        """Compact the removed entries' main-DB ranges and copy the payload segments they
        left mostly dead forward, so the disk space comes back now (LevelDB frees deleted
        entries only when it compacts them; a segment goes when nothing lives in it).
        Raises StorageIOError when it cannot (no room for the new tables or copies)."""
        for start, stop in ranges:
            self._core.db.compact_range(start=start, stop=stop)
        if seqs:
            self._core.payloads.reclaim()

    def _reindex_head(
        self, dbid: int, vnode: int, first_kept: int, wb: WriteBatch
    ) -> tuple[int | None, int] | None:
        """Drop index entries of removed batches and re-index the kept batches before the
        first surviving index entry (they were hidden behind a removed, larger max).

        Returns the vnode's new (max_ts, base) if it changed, else None.
        """
        db = self._core.db
        tp = keys.vnode_prefix(keys.TIME, dbid, vnode)
        survivor: int | None = None
        for key, value in db.iterator(prefix=tp):
            base = keys.read_u64(value)
            if base >= first_kept:
                survivor = base
                break
            wb.delete(key)
        wp = keys.vnode_prefix(keys.WAL, dbid, vnode)
        stop = keys.wal_seek_key(dbid, vnode, survivor) if survivor is not None else keys.prefix_end(wp)
        running: int | None = None
        running_base = 0
        for key, value in db.iterator(start=keys.wal_seek_key(dbid, vnode, first_kept), stop=stop):
            if key[17] == keys.KIND_META:
                continue
            ts = keys.unpack_wal_index(value)[3]
            if running is None or ts > running:
                running, running_base = ts, keys.wal_key_version(key)
                wb.put(keys.time_key(dbid, vnode, ts), keys.u64(running_base))
        if survivor is not None:
            return None
        return running, running_base
