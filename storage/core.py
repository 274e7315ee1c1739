"""The shared core of a Store: the main LevelDB, the payload log, the sync policy and the write paths.

Why one core: every part of the store (catalog, WAL, retention, producers, offsets) writes
to the same main DB under the same durability rule, and WAL entries must reach the payload
log and the main DB in one order. Keeping the handles, the rule and the paths here means
there is exactly one place that decides how a write becomes durable:

* ``write`` — a main-DB WriteBatch; under ``wal_level=1`` or a fsync period it marks the
  store dirty so that ``sync`` fsyncs it later;
* ``write_entries`` — THE write path of WAL entries, used by single appends and by
  transactions alike: stage the payloads in the payload log, write the WriteBatch that
  indexes them (with PAYSEQ), drop the staged payloads again if that fails, and only then
  move the payload sequence on (``storage.keys``: a WriteBatch stays all-or-nothing);
* ``write_removing`` — the reverse: unindex (listing the sequences under PAYGC), then delete
  the payloads, so open can finish a delete a crash interrupted.

Durability (TDengine's WAL_LEVEL / WAL_FSYNC_PERIOD):

* ``wal_level=1``: writes use ``sync=False``. LevelDB appends every write to its log file,
  and the payload log its bytes to a segment, with ``write(2)`` before returning, so an
  acknowledged write survives SIGKILL of the process (not a power loss / kernel crash).
* ``wal_level=2, fsync_period_ms=0``: every write uses ``sync=True`` (the segment
  fdatasynced, then each LevelDB's log fsynced, before return).
* ``wal_level=2, fsync_period_ms>0``: writes use ``sync=False`` and the broker calls
  ``sync()`` every ``fsync_period_ms``: the active segment is fdatasynced and a tiny marker
  written with ``sync=True`` to the payload LevelDB, then to the main DB, which fsyncs each
  LevelDB's log and with it every earlier write.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterable, Sequence
from typing import Any, NamedTuple, Protocol

from tmqgate.protocol import clock
from tmqgate.storage import keys
from tmqgate.storage.model import LayoutMismatch, StorageFull
from tmqgate.storage.payloads import PayloadLog
from tmqgate.storage.space import DiskSpace


class WriteBatch(Protocol):
    """What the store uses of a plyvel WriteBatch."""

    def put(self, key: bytes, value: bytes) -> None: ...
    def delete(self, key: bytes) -> None: ...
    def write(self) -> None: ...
    def clear(self) -> None: ...


class LevelDB(Protocol):
    """What the store uses of a plyvel DB (plyvel has no type stubs)."""

    @property
    def closed(self) -> bool: ...
    def get(self, key: bytes) -> bytes | None: ...
    def put(self, key: bytes, value: bytes, *, sync: bool = False) -> None: ...
    def delete(self, key: bytes, *, sync: bool = False) -> None: ...
    def write_batch(self, *, sync: bool = False) -> WriteBatch: ...
    def iterator(self, **options: Any) -> Any: ...
    def raw_iterator(self) -> Any: ...
    def compact_range(self, *, start: bytes | None = None, stop: bytes | None = None) -> None: ...
    def close(self) -> None: ...


class NewEntry(NamedTuple):
    """A WAL entry to index: its WAL key, the stored value (goes to the payload log), its
    age timestamp and index timestamp (``storage.keys``: the WAL key's value)."""

    key: bytes
    value: bytes
    age_ts: int
    index_ts: int


class Core:
    """The DB handles and the sync policy; see the module docstring."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        wal_level: int,
        fsync_period_ms: int,
        *,
        write_buffer_size: int,
        lru_cache_size: int,
        reserve_bytes: int = 0,
    ) -> None:
        if wal_level not in (1, 2):
            raise ValueError("wal_level must be 1 or 2")
        if fsync_period_ms < 0:
            raise ValueError("fsync_period_ms must be >= 0")
        os.makedirs(path, exist_ok=True)
        self.path = os.fspath(path)
        self.wal_level = wal_level
        self.created_ms = 0  # when the data directory was made (_check_layout reads it)
        self.fsync_period_ms = fsync_period_ms
        #: Every write synced (wal_level 2 without a period); else writes mark ``dirty``.
        self.sync_each = wal_level == 2 and fsync_period_ms == 0
        self.dirty = False
        #: The reserve file and the full (read-only) state: ``storage.space``.
        self.space = DiskSpace(self.path, reserve_bytes)
        # compression=None: batches arrive compressed by producers; snappy would waste CPU.
        self.db: LevelDB = self.space.open(
            self.path,
            write_buffer_size=write_buffer_size,
            lru_cache_size=lru_cache_size,
            max_file_size=32 << 20,
            compression=None,
        )
        try:
            layout = self._check_layout()
            self.payloads = PayloadLog(
                self.path, self.space, write_buffer_size=write_buffer_size, lru_cache_size=lru_cache_size
            )
        except BaseException:
            self.db.close()
            raise
        try:
            self.payloads.recover(self.db)
            if layout != keys.LAYOUT_VERSION:  # the payload log is converted now
                self.db.put(keys.LAYOUT, keys.u32(keys.LAYOUT_VERSION), sync=True)
        except BaseException:
            self.payloads.close()
            self.db.close()
            raise
        self.space.settle_at_open()

    def _check_layout(self) -> int:
        """Refuse a data directory of a layout we cannot open; stamp a new one with ours; read
        (or, the first time, record) when the directory was made: ``created_ms``. Returns the
        directory's layout (one of ``keys.LAYOUTS_READ``)."""
        raw = self.db.get(keys.LAYOUT)
        if raw is None:
            if next(self.db.iterator(include_value=False), None) is not None:
                raise LayoutMismatch(
                    f"{self.path} holds a tmqgate store of storage layout 1 (WAL entries inline); "
                    f"this tmqgate reads layout {keys.LAYOUT_VERSION} only and cannot migrate it: "
                    "use a new data directory"
                )
            self.db.put(keys.LAYOUT, keys.u32(keys.LAYOUT_VERSION), sync=True)
            version = keys.LAYOUT_VERSION
        else:
            version = keys.read_u32(raw)
            if version not in keys.LAYOUTS_READ:
                raise LayoutMismatch(
                    f"{self.path} holds a tmqgate store of storage layout {version}; this tmqgate "
                    f"reads layouts {', '.join(map(str, keys.LAYOUTS_READ))} only"
                )
        created = self.db.get(keys.CREATED)
        if created is None:
            self.created_ms = clock.now_ms()
            self.db.put(keys.CREATED, keys.u64(self.created_ms), sync=True)
        else:
            self.created_ms = keys.read_u64(created)
        return version

    # lifecycle -----------------------------------------------------------------------------

    @property
    def needs_periodic_sync(self) -> bool:
        return self.wal_level == 2 and self.fsync_period_ms > 0

    def sync(self) -> None:
        """Make every earlier write durable: a sync=True write fsyncs a LevelDB's log (the
        payload log first, then the main DB, so no synced index points at a lost payload)."""
        if self.dirty:
            self.payloads.sync()
            self.db.put(keys.SYNC, b"", sync=True)
            self.dirty = False

    @property
    def closed(self) -> bool:
        return self.db.closed

    def close(self) -> None:
        if self.db.closed:
            return
        if self.wal_level == 2:
            self.sync()
        self.payloads.close()
        self.db.close()

    # main-DB writes under the sync policy --------------------------------------------------

    def batch(self, sync: bool | None = None) -> WriteBatch:
        """A main-DB WriteBatch: synced per the policy, or as ``sync`` says (catalog: True)."""
        return self.db.write_batch(sync=self.sync_each if sync is None else sync)

    def replace_keys(self, prefixes: Iterable[bytes], ours: Callable[[bytes], bool],
                     ops: Iterable[tuple[bytes, bytes | None]]) -> int:
        """Make the keys under ``prefixes`` that ``ours`` accepts exactly what ``ops`` (puts and
        deletes, replayed in order; others skipped) leave, in one WriteBatch: a cluster's
        replicated coordinator state replacing this broker's copy of one partition. Returns
        how many keys it holds."""
        wanted = tuple(prefixes)
        state: dict[bytes, bytes | None] = {}
        for key, value in ops:
            if key.startswith(wanted) and ours(key):
                state[key] = value
        wb = self.batch()
        for prefix in wanted:
            for key in self.db.iterator(prefix=prefix, include_value=False):
                if key not in state and ours(key):
                    wb.delete(key)
        held = 0
        for key, value in state.items():
            if value is None:
                wb.delete(key)
            else:
                wb.put(key, value)
                held += 1
        self.write(wb)
        return held

    def write(self, wb: WriteBatch) -> None:
        wb.write()
        if not self.sync_each:
            self.dirty = True

    def put(self, key: bytes, value: bytes) -> None:
        """One main-DB key under the policy (no WriteBatch needed)."""
        self.db.put(key, value, sync=self.sync_each)
        if not self.sync_each:
            self.dirty = True

    def delete(self, key: bytes) -> None:
        self.db.delete(key, sync=self.sync_each)
        if not self.sync_each:
            self.dirty = True

    # THE write paths of WAL entries --------------------------------------------------------

    def write_entries(self, wb: WriteBatch, entries: Sequence[NewEntry], sync: bool) -> None:
        """Write ``wb`` (made with the same ``sync``, or — the log cleaner — the store's policy
        while its payloads are staged synced) plus the index keys of ``entries``.

        The payloads go to the payload log first, then ``wb`` with each entry's index key
        and PAYSEQ; once ``wb`` is written the payload sequence moves past them. If it fails
        the staged payloads (indexed by nothing) are dropped again, on a best-effort basis:
        open drops them anyway, being above PAYSEQ, and the next stage overwrites them. Without
        entries this is ``write``. While the disk is full (``storage.space``) nothing is
        written: ``StorageFull``; a write that finds the disk full raises it too, having
        changed nothing that was acknowledged.
        """
        if self.space.full and not self.space.check_due():
            raise StorageFull(f"storage is read-only: {self.space.full_reason}")
        if not entries:
            self.write(wb)
            return
        payloads = self.payloads
        first = payloads.stage([e[1] for e in entries], sync)
        put = wb.put
        for seq, (key, value, age_ts, index_ts) in enumerate(entries, first):
            put(key, keys.pack_wal_index(seq, len(value), age_ts, index_ts))
        last = first + len(entries) - 1
        wb.put(keys.PAYSEQ, keys.u64(last))
        try:
            self.write(wb)
        except BaseException:
            with contextlib.suppress(Exception):
                payloads.delete(range(first, last + 1))
            raise
        payloads.committed(last)

    def write_removing(self, wb: WriteBatch, seqs: list[int]) -> None:
        """Write ``wb``, which deletes the index keys of payloads ``seqs``, listing them under
        PAYGC (so open finishes an interrupted delete); then delete the payloads."""
        if seqs:
            wb.put(keys.PAYGC, keys.pack_seqs(seqs))
        self.write(wb)
        if seqs:
            self.payloads.delete(seqs)

    def write_replacing(self, wb: WriteBatch, entries: Sequence[NewEntry], old_seqs: list[int]) -> None:
        """The log cleaner's write: ``entries`` take the place of entries with the same keys
        (``wb`` may also delete index keys), their old payloads ``old_seqs`` listed under
        PAYGC in the same WriteBatch, then deleted (``storage.keys``: replacing entries). The new
        payloads are staged with sync=True (a rewritten payload's sequence is above its
        neighbours', so a power loss must not take it while its index survives: the tail
        rollback at open would not find it); ``wb`` is written under the store's policy."""
        if old_seqs:
            wb.put(keys.PAYGC, keys.pack_seqs(old_seqs))
        self.write_entries(wb, entries, True)
        if old_seqs:
            self.payloads.delete(old_seqs)

    def delete_database_data(self, dbid: int, *, compact: bool = False) -> None:
        """Range-delete every per-database key of ``dbid`` (WAL payloads included); with
        ``compact`` compact what was deleted and copy the payload segments it left mostly dead
        forward, to give the space back."""
        seqs: list[int] = []
        for prefix in keys.PER_DB_PREFIXES:
            seqs.extend(self._delete_prefix(keys.db_prefix(prefix, dbid)))
        if compact:
            for prefix in keys.PER_DB_PREFIXES:
                p = keys.db_prefix(prefix, dbid)
                self.db.compact_range(start=p, stop=keys.prefix_end(p))
            if seqs:
                self.payloads.reclaim()

    def delete_orphans(self, live: set[int]) -> None:
        """Delete per-db data whose id is not in the catalog (a drop interrupted by a crash)."""
        for prefix in keys.PER_DB_PREFIXES:
            it = self.db.iterator(start=prefix, stop=keys.prefix_end(prefix), include_value=False)
            while True:
                key = next(it, None)
                if key is None:
                    break
                dbid = keys.read_u32(key[1:5])
                if dbid not in live:
                    self._delete_prefix(keys.db_prefix(prefix, dbid))
                it.seek(keys.db_prefix(prefix, dbid + 1))

    def _delete_prefix(self, prefix: bytes, chunk: int = 10_000) -> list[int]:
        """Delete every key under ``prefix`` in chunks; under WAL also their payloads (their
        sequences are returned)."""
        wal = prefix[:1] == keys.WAL
        it = self.db.iterator(prefix=prefix, include_value=wal)
        removed: list[int] = []
        while True:
            wb = self.db.write_batch()
            n = 0
            seqs: list[int] = []
            for item in it:
                if wal:
                    key, value = item
                    seqs.append(keys.wal_index_seq(value))
                else:
                    key = item
                wb.delete(key)
                n += 1
                if n >= chunk:
                    break
            if n:
                self.write_removing(wb, seqs)
                removed.extend(seqs)
            if n < chunk:
                return removed
