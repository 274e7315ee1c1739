"""Removing WAL entries from vnode heads — retention, DeleteRecords, the archiver — and the
log history that records every removal.

Why together: all three remove whole entries from a vnode's head (log start moves) through
one routine (``_remove_head``: counters, time-index repair, history record and the index
deletes in one WriteBatch, then the payloads), so the log history never misses or invents a
removal. The history is bounded to the last ``history_limit`` records over the store,
oldest trimmed.

* Retention (``enforce_retention``), per vnode. Kafka databases follow Kafka:
  ``retention.ms`` removes entries while their age timestamp < now - retention.ms;
  ``retention.bytes`` removes the oldest entry while the vnode stays >= retention.bytes
  without it; ``-1`` or a missing config means unlimited; a topic whose ``cleanup.policy``
  lacks ``delete`` (compact only, or empty) keeps everything from retention (the broker fills Kafka's defaults
  into a database's configs when it creates one). tsdb databases apply the same two rules
  with their options WAL_RETENTION_PERIOD (seconds) and WAL_RETENTION_SIZE (KB), -1 or
  missing = unlimited.
* DeleteRecords (``delete_before``).
* The archiver (``collect``): store-wide limits on total bytes, disk usage and age, oldest
  entries first across all vnodes, never a vnode's newest entry.

None of them removes an entry holding an offset at or beyond the first offset of an open
transaction (the last stable offset, ``storage.wal_txns``): removal stops there. DeleteRecords
still moves log start to the offset asked for (up to the high watermark, as Kafka's
maybeIncrementLogStartOffset allows), so readers see the new log start, but the entries from
the open transaction on stay stored until it ends and a later removal takes them. A removal
also drops the aborted-index entries that end below the new log start, in its WriteBatch.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import shutil
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, NamedTuple

from tmqgate.protocol import clock
from tmqgate.storage import keys
from tmqgate.storage.model import (
    REASON_CODE,
    REMOVAL_REASONS,
    HistoryRecord,
    OffsetOutOfRange,
    StorageIOError,
)
from tmqgate.storage.wal import age_ts

if TYPE_CHECKING:
    from tmqgate.storage.catalog import Catalog
    from tmqgate.storage.core import Core, WriteBatch
    from tmqgate.storage.wal import Vnode, Wal
    from tmqgate.storage.wal_txns import WalTxns

log = logging.getLogger("tmqgate.storage")

_unpack_index = keys.unpack_wal_index

#: remove(key, idx, end, size): whether a head entry goes (see ``Retention._truncate_head``).
_Predicate = Callable[[bytes, tuple[int, int, int, int], int, int], bool]


#: The disk guard's "cannot get under the limit" line: at most one per this many ms while
#: the shortfall lasts (the archiver runs every archiver_interval_ms), then one when it ends.
GUARD_LOG_INTERVAL_MS = 60_000



class _Dead(NamedTuple):
    """A head entry chosen for removal (``seq``: its payload's sequence)."""

    key: bytes
    size: int
    ts: int
    seq: int


class Retention:
    """See the module docstring."""

    def __init__(self, core: Core, catalog: Catalog, wal: Wal, history_limit: int,
                 txns: WalTxns | None = None) -> None:
        self._core = core
        self._catalog = catalog
        self._wal = wal
        self._txns = txns
        self.history_limit = history_limit
        # Log history: sequence -> record, oldest first (at most history_limit).
        self._history: dict[int, HistoryRecord] = {}
        self._history_seq = 0
        # The disk guard's shortfall line: when it was last logged, and checks since.
        self._shortfall_logged_ms: int | None = None
        self._shortfall_suppressed = 0
        #: The last shortfall's figures (None while usage is within the limit), for status.
        self.disk_guard_shortfall: dict[str, Any] | None = None

    def load_history(self, live: set[int]) -> None:
        """Read the log history; delete the records of databases no longer listed."""
        stale: list[int] = []
        for key, value in self._core.db.iterator(prefix=keys.HISTORY):
            seq = keys.history_key_seq(key)
            rec = keys.unpack_history(value)
            if rec[0] in live:
                self._history[seq] = HistoryRecord(*rec[:9], REMOVAL_REASONS[rec[9]])
            else:
                stale.append(seq)
            self._history_seq = seq + 1
        if stale:
            wb = self._core.batch()
            for seq in stale:
                wb.delete(keys.history_key(seq))
            self._core.write(wb)

    def stage_forget(self, wb: WriteBatch, dbid: int) -> list[int]:
        """Put the deletion of a dropped database's history records into ``wb`` (its
        catalog deletion); returns their sequences for ``forget``."""
        gone = [seq for seq, rec in self._history.items() if rec.db == dbid]
        for seq in gone:
            wb.delete(keys.history_key(seq))
        return gone

    def forget(self, seqs: list[int]) -> None:
        for seq in seqs:
            del self._history[seq]

    # DeleteRecords and retention -----------------------------------------------------------

    def delete_before(self, db: str, vnode: int, offset: int) -> int:
        """Kafka DeleteRecords: log start becomes ``offset`` (-1 = high watermark).

        Entries whose last version < offset are removed; one straddling it stays, and what
        was removed is compacted so the disk space comes back now (an operator freeing a full
        disk). Returns the new log start; raises OffsetOutOfRange beyond the high watermark.
        """
        dbid, vs = self._catalog.vnode(db, vnode)
        if offset == -1:
            offset = vs.next
        if offset < 0 or offset > vs.next:
            raise OffsetOutOfRange(f"{offset} outside 0..{vs.next}")
        if offset <= vs.log_start:
            return vs.log_start
        self._truncate_head(
            dbid, vnode, vs, lambda key, idx, end, size: end <= offset, offset, reason="delete_records",
            compact=True,
        )
        return vs.log_start

    def enforce_retention(self, now_ms: int | None = None, defaults: dict[str, str] | None = None) -> int:
        """Apply the age limit then the size limit to every vnode; returns entries removed.

        Kafka databases: retention.ms / retention.bytes from their configs; ``defaults``
        supplies the values for databases that set none of their own (the broker's Kafka
        defaults). tsdb databases: the options wal_retention_period (seconds) and
        wal_retention_size (KB per vnode); ``defaults`` never applies to them. A missing
        setting or -1 means no limit.
        """
        now = clock.now_ms() if now_ms is None else now_ms
        removed = 0
        for d in list(self._catalog.all_databases()):
            if d.info.kind == "tsdb":
                period = _int_option(d.info.options, "wal_retention_period")
                kb = _int_option(d.info.options, "wal_retention_size")
                rms = period * 1000 if period >= 0 else -1
                rbytes = kb * 1024 if kb >= 0 else -1
                age_reason, size_reason = "wal_retention_period", "wal_retention_size"
            else:
                configs = {**defaults, **d.info.configs} if defaults else d.info.configs
                if "delete" not in configs.get("cleanup.policy", "delete").split(","):
                    continue  # compact only (the log cleaner's), or an empty policy: kept
                rms = _int_config(configs, "retention.ms")
                rbytes = _int_config(configs, "retention.bytes")
                age_reason, size_reason = "retention.ms", "retention.bytes"
            if rms < 0 and rbytes < 0:
                continue
            for vnode, vs in enumerate(d.vnodes):
                if rms >= 0:
                    removed += self._truncate_head(
                        d.info.id, vnode, vs, _older_than(now - rms), reason=age_reason, now_ms=now
                    )
                if rbytes >= 0 and vs.size > rbytes:
                    removed += self._truncate_head(
                        d.info.id, vnode, vs, _above_without(rbytes), reason=size_reason, now_ms=now
                    )
        return removed

    def _truncate_head(
        self,
        dbid: int,
        vnode: int,
        vs: Vnode,
        remove: _Predicate,
        new_log_start: int | None = None,
        *,
        reason: str,
        now_ms: int | None = None,
        compact: bool = False,
    ) -> int:
        """Remove the longest prefix of entries for which remove(key, idx, end, size) holds.

        ``idx`` is the WAL key's value unpacked (payload sequence, length, age timestamp,
        index timestamp: no payload is read), ``end`` the entry's last version + 1 and
        ``size`` the vnode size before removing it. Moves log start to max(old, first kept
        base, new_log_start), repairs the time index head and records the removal in the log
        history. Returns how many entries were removed.
        """
        p = keys.vnode_prefix(keys.WAL, dbid, vnode)
        it = self._core.db.iterator(start=p, stop=keys.prefix_end(p))
        dead: list[_Dead] = []
        freed = 0
        stable = self._stable_end(dbid, vnode, vs)
        cur = next(it, None)
        while cur is not None:
            nxt = next(it, None)
            key, idx = cur[0], _unpack_index(cur[1])
            end = keys.wal_key_version(nxt[0]) if nxt is not None else vs.next
            if end > stable or not remove(key, idx, end, vs.size - freed):
                break
            dead.append(_Dead(key, idx[1], idx[2], idx[0]))
            freed += idx[1]
            cur = nxt
        if not dead:
            if new_log_start is not None and new_log_start > vs.log_start:
                self._core.put(
                    keys.vnode_key(dbid, vnode), keys.pack_vnode_state(vs.next, new_log_start, vs.size, vs.entries)
                )
                vs.log_start = new_log_start
            return 0
        first_kept = keys.wal_key_version(cur[0]) if cur is not None else vs.next
        self._remove_head(
            dbid, vnode, vs, dead, first_kept, new_log_start, reason, clock.now_ms() if now_ms is None else now_ms
        )
        if compact:
            seqs = [e.seq for e in dead]
            try:
                self._core.db.compact_range(start=p, stop=keys.wal_seek_key(dbid, vnode, first_kept))
                self._core.payloads.compact(min(seqs), max(seqs))
            except StorageIOError as exc:
                log.error("removed %d WAL entries but could not compact them, so their disk space "
                          "comes back only when LevelDB compacts on its own: %s", len(dead), exc)
        return len(dead)

    def _stable_end(self, dbid: int, vnode: int, vs: Vnode) -> int:
        """Removable entries end at or below this: the vnode's last stable offset."""
        first = self._txns.first_unstable(dbid, vnode) if self._txns is not None else None
        return vs.next if first is None else first

    def _remove_head(
        self,
        dbid: int,
        vnode: int,
        vs: Vnode,
        dead: list[_Dead],
        first_kept: int,
        new_log_start: int | None,
        reason: str,
        now_ms: int,
    ) -> HistoryRecord:
        """Delete ``dead`` (the vnode's first entries, in order; ``first_kept`` is the base
        after them) in one WriteBatch with the new counters, the time index repair and the
        log-history record (trimming the history to ``history_limit``); then their payloads
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
        seq = self._history_seq
        trimmed: list[int] = []
        if self.history_limit:
            wb.put(keys.history_key(seq), keys.pack_history(*rec[:9], REASON_CODE[reason]))
            excess = len(self._history) + 1 - self.history_limit
            if excess > 0:
                trimmed = list(itertools.islice(self._history, excess))
                for old in trimmed:
                    wb.delete(keys.history_key(old))
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
        if self.history_limit:
            for old in trimmed:
                del self._history[old]
            self._history[seq] = rec
            self._history_seq = seq + 1
        return rec

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
            ts = _unpack_index(value)[3]
            if running is None or ts > running:
                running, running_base = ts, keys.wal_key_version(key)
                wb.put(keys.time_key(dbid, vnode, ts), keys.u64(running_base))
        if survivor is not None:
            return None
        return running, running_base

    # archiver (kdb Insights RT's garbage collection) ---------------------------------------

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
        (dicts as in ``log_history``), one per vnode and reason.
        """
        now = clock.now_ms() if now_ms is None else now_ms
        total = self._wal.total_bytes()
        need_size = total - max_total_bytes if max_total_bytes is not None and total > max_total_bytes else 0
        need_disk = 0
        if disk_usage_max_percent is not None:
            if volume_bytes is not None:
                used, capacity = total, volume_bytes
            else:
                du = shutil.disk_usage(self._core.path)
                used, capacity = du.used, du.total
            allowed = int(capacity * disk_usage_max_percent / 100)
            need_disk = max(0, used - allowed)
        cutoff = now - max_age_ms if max_age_ms is not None else None
        need = max(need_size, need_disk)
        if need <= 0 and cutoff is None:
            if disk_usage_max_percent is not None:
                self._guard_status(now, disk_usage_max_percent, volume_bytes, 0, exhausted=False)
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
                stable[(d.info.id, vnode)] = self._stable_end(d.info.id, vnode, vs)
                p = keys.vnode_prefix(keys.WAL, d.info.id, vnode)
                it = db.iterator(start=p, stop=keys.prefix_end(p))
                head = next(it, None)
                after = next(it, None)
                if head is None or after is None:
                    continue
                cursors[(d.info.id, vnode)] = (it, after)
                heap.append((_unpack_index(head[1])[2], d.info.id, vnode, head))
        heapq.heapify(heap)
        plan: dict[tuple[int, int], list[tuple[str, list[_Dead]]]] = {}
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
            idx = _unpack_index(value)
            runs[-1][1].append(_Dead(key, idx[1], ts, idx[0]))
            freed += idx[1]
            first_kept[(dbid, vnode)] = keys.wal_key_version(after[0])
            nxt = next(cursor, None)
            if nxt is None:  # ``after`` is the newest entry: it stays
                heapq.heappop(heap)
                continue
            cursors[(dbid, vnode)] = (cursor, nxt)
            heapq.heapreplace(heap, (_unpack_index(after[1])[2], dbid, vnode, after))

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
                rec = self._remove_head(dbid, vnode, vs, dead, kept, None, reason, now)
                out.append(rec.as_dict(database.info.name))
            cut.append((keys.vnode_prefix(keys.WAL, dbid, vnode), keys.wal_seek_key(dbid, vnode, first_kept[(dbid, vnode)])))
        freed = sum(r["bytes"] for r in out)
        if compact and removed:
            try:
                for start, stop in cut:
                    db.compact_range(start=start, stop=stop)
                # The bytes live in the payload log: compact the removed payloads' range.
                self._core.payloads.compact(min(removed), max(removed))
            except StorageIOError as exc:
                log.error("archiver removed %d bytes of WAL entries but could not compact them, so "
                          "the disk space is not given back yet (LevelDB frees deleted entries only "
                          "when it compacts them; it retries on its own later): %s", freed, exc)
                return out
        if disk_usage_max_percent is not None:
            self._guard_status(now, disk_usage_max_percent, volume_bytes, freed, exhausted)
        return out

    def _guard_status(self, now: int, limit_pct: float, volume_bytes: int | None, freed: int,
                      exhausted: bool) -> None:
        """After the disk guard ran: if usage is still over the limit and nothing more may be
        removed, say so with the figures — once, then at most every GUARD_LOG_INTERVAL_MS
        while it lasts, and once when usage is back under the limit."""
        wal_left = self._wal.total_bytes()
        if volume_bytes is not None:
            used, capacity, where = wal_left, volume_bytes, f"the {volume_bytes}-byte WAL volume"
        else:
            du = shutil.disk_usage(self._core.path)
            used, capacity, where = du.used, du.total, f"the filesystem of {self._core.path}"
        allowed = int(capacity * limit_pct / 100)
        if used <= allowed or not exhausted:
            if used <= allowed and self.disk_guard_shortfall is not None:
                log.warning("disk guard: usage of %s is back under disk_usage_max_percent %s%%: "
                            "%.1f%% (%d of %d bytes)", where, limit_pct, 100 * used / capacity, used, capacity)
                self.disk_guard_shortfall = None
                self._shortfall_logged_ms = None
                self._shortfall_suppressed = 0
            return
        vnodes = sum(1 for d in self._catalog.all_databases() for vs in d.vnodes if vs.entries)
        self.disk_guard_shortfall = {"used_bytes": used, "capacity_bytes": capacity, "limit_percent": limit_pct,
                                     "allowed_bytes": allowed, "wal_bytes": wal_left, "vnodes": vnodes,
                                     "other_bytes": max(0, used - wal_left), "freed_bytes": freed}
        last = self._shortfall_logged_ms
        if last is not None and now - last < GUARD_LOG_INTERVAL_MS:
            self._shortfall_suppressed += 1
            return
        since = (f" ({self._shortfall_suppressed} more check(s) found the same since the last line)"
                 if self._shortfall_suppressed else "")
        self._shortfall_logged_ms = now
        self._shortfall_suppressed = 0
        log.warning("disk guard cannot bring usage under disk_usage_max_percent: %s is %.1f%% used "
                    "(%d of %d bytes), the limit is %s%% (%d bytes); removed and compacted %d bytes "
                    "now; left: %d bytes of WAL entries, the newest entry of each of %d vnode(s), "
                    "which the archiver never removes, and %d bytes of other files — drop databases "
                    "or topics, or raise the limit%s",
                    where, 100 * used / capacity, used, capacity, limit_pct, allowed, freed, wal_left,
                    vnodes, max(0, used - wal_left), since)

    # log history (RT's log-history API) ----------------------------------------------------

    def history(self, db: str | None = None) -> list[HistoryRecord]:
        """The recorded removals (oldest first), of one database or all."""
        if db is None:
            return list(self._history.values())
        dbid = self._catalog.database(db).info.id
        return [r for r in self._history.values() if r.db == dbid]

    def log_history(self, db: str | None = None) -> list[dict[str, Any]]:
        """Per vnode (databases by name, vnodes in order): the live WAL range and the
        collected ranges, JSON-ready for ``GET /log-history``.

        Each item: ``db``, ``kind``, ``vnode``, ``log_start``, ``next_version``, ``live``
        {first_version, last_version, entries, bytes, first_ts, last_ts} (versions and
        timestamps None when the vnode is empty) and ``collected`` [{first_version,
        last_version, entries, bytes, first_ts, last_ts, removed_ms, reason}] oldest first.
        Timestamps are age timestamps (see ``storage.keys``).
        """
        catalog = self._catalog
        dbs = (
            [catalog.database(db)]
            if db is not None
            else sorted(catalog.all_databases(), key=lambda d: d.info.name)
        )
        by_vnode: dict[tuple[int, int], list[HistoryRecord]] = {}
        for rec in self._history.values():
            by_vnode.setdefault((rec.db, rec.vnode), []).append(rec)
        out: list[dict[str, Any]] = []
        for d in dbs:
            dbid = d.info.id
            for vnode, vs in enumerate(d.vnodes):
                live: dict[str, Any] = {
                    "first_version": None,
                    "last_version": None,
                    "entries": vs.entries,
                    "bytes": vs.size,
                    "first_ts": None,
                    "last_ts": None,
                }
                if vs.entries:
                    p = keys.vnode_prefix(keys.WAL, dbid, vnode)
                    for key, value in self._core.db.iterator(prefix=p):
                        live["first_version"] = keys.wal_key_version(key)
                        live["first_ts"] = _unpack_index(value)[2]
                        break
                    if vs.tail_bases:
                        last_kind, last_value = vs.tail_entries[-1]
                        last_ts = age_ts(last_kind, last_value)
                    else:
                        last_ts = _unpack_index(next(self._core.db.iterator(prefix=p, reverse=True))[1])[2]
                    live["last_version"] = vs.next - 1
                    live["last_ts"] = last_ts
                collected = [r.as_dict(d.info.name) for r in by_vnode.get((dbid, vnode), ())]
                for c in collected:
                    del c["db"], c["vnode"]
                out.append(
                    {
                        "db": d.info.name,
                        "kind": d.info.kind,
                        "vnode": vnode,
                        "log_start": vs.log_start,
                        "next_version": vs.next,
                        "live": live,
                        "collected": collected,
                    }
                )
        return out


def _older_than(limit: int) -> _Predicate:
    """retention.ms: the entry's age timestamp is below ``limit``."""
    return lambda key, idx, end, size: idx[2] < limit


def _above_without(limit: int) -> _Predicate:
    """retention.bytes: the vnode stays >= ``limit`` bytes without the entry."""
    return lambda key, idx, end, size: size - idx[1] >= limit


def _int_option(options: dict[str, Any], name: str) -> int:
    """A tsdb option as an int, looked up case-insensitively (stored as the broker gave it);
    missing or unparsable = -1 (no limit)."""
    raw = options.get(name)
    if raw is None:
        lname = name.lower()
        raw = next((v for k, v in options.items() if str(k).lower() == lname), None)
    if raw is None:
        return -1
    try:
        return int(raw)
    except (TypeError, ValueError):
        return -1


def _int_config(configs: dict[str, str], name: str) -> int:
    raw = configs.get(name)
    if raw is None:
        return -1
    try:
        return int(raw)
    except ValueError:
        return -1
