"""The log history: a record of every removal of a vnode's head entries (kdb Insights RT's
log-history API, ``GET /log-history``).

Why a module of its own: the history is read by the broker and written by one routine only
(``storage.head_removal``, which retention, DeleteRecords and the archiver share), through
``stage`` in the removal's own WriteBatch, then ``add`` once it is written, so the history
never misses or invents a removal. Rules it keeps: records are keyed by an ever-growing
sequence (``keys.history_key``), oldest first; at most ``limit`` over the store, the oldest
trimmed in the WriteBatch that adds one (0: nothing new recorded, old records kept); a dropped
database's records go in its catalog deletion (``stage_forget``); records of databases no
longer listed are deleted at open (``load``).
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Any

from tmqgate.storage import keys
from tmqgate.storage.model import REASON_CODE, REMOVAL_REASONS, HistoryRecord
from tmqgate.storage.wal import age_ts

if TYPE_CHECKING:
    from tmqgate.storage.catalog import Catalog
    from tmqgate.storage.core import Core, WriteBatch


class LogHistory:
    """See the module docstring."""

    def __init__(self, core: Core, catalog: Catalog, limit: int) -> None:
        self._core = core
        self._catalog = catalog
        self.limit = limit
        # sequence -> record, oldest first (at most limit).
        self._records: dict[int, HistoryRecord] = {}
        self._seq = 0

    def load(self, live: set[int]) -> None:
        """Read the log history; delete the records of databases no longer listed."""
        stale: list[int] = []
        for key, value in self._core.db.iterator(prefix=keys.HISTORY):
            seq = keys.history_key_seq(key)
            rec = keys.unpack_history(value)
            if rec[0] in live:
                self._records[seq] = HistoryRecord(*rec[:9], REMOVAL_REASONS[rec[9]])
            else:
                stale.append(seq)
            self._seq = seq + 1
        if stale:
            wb = self._core.batch()
            for seq in stale:
                wb.delete(keys.history_key(seq))
            self._core.write(wb)

    def stage_forget(self, wb: WriteBatch, dbid: int) -> list[int]:
        """Put the deletion of a dropped database's history records into ``wb`` (its
        catalog deletion); returns their sequences for ``forget``."""
        gone = [seq for seq, rec in self._records.items() if rec.db == dbid]
        for seq in gone:
            wb.delete(keys.history_key(seq))
        return gone

    def forget(self, seqs: list[int]) -> None:
        for seq in seqs:
            del self._records[seq]

    def stage(self, wb: WriteBatch, rec: HistoryRecord) -> list[int]:
        """Put ``rec`` and the trimming of the history to ``limit`` into ``wb`` (nothing while
        ``limit`` is 0); returns the sequences trimmed, for ``add``."""
        trimmed: list[int] = []
        if self.limit:
            wb.put(keys.history_key(self._seq), keys.pack_history(*rec[:9], REASON_CODE[rec.reason]))
            excess = len(self._records) + 1 - self.limit
            if excess > 0:
                trimmed = list(itertools.islice(self._records, excess))
                for old in trimmed:
                    wb.delete(keys.history_key(old))
        return trimmed

    def add(self, rec: HistoryRecord, trimmed: list[int]) -> None:
        """``stage``'s WriteBatch is written: the same change in memory."""
        if self.limit:
            for old in trimmed:
                del self._records[old]
            self._records[self._seq] = rec
            self._seq += 1

    def records(self, db: str | None = None) -> list[HistoryRecord]:
        """The recorded removals (oldest first), of one database or all."""
        if db is None:
            return list(self._records.values())
        dbid = self._catalog.database(db).info.id
        return [r for r in self._records.values() if r.db == dbid]

    def view(self, db: str | None = None) -> list[dict[str, Any]]:
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
        for rec in self._records.values():
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
                        live["first_ts"] = keys.unpack_wal_index(value)[2]
                        break
                    if vs.tail_bases:
                        last_kind, last_value = vs.tail_entries[-1]
                        last_ts = age_ts(last_kind, last_value)
                    else:
                        last_ts = keys.unpack_wal_index(next(self._core.db.iterator(prefix=p, reverse=True))[1])[2]
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
