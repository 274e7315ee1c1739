"""Store: vnode WALs, catalog, producer state and group offsets in two LevelDBs.

The main LevelDB holds everything but the WAL entries' bytes (layout in ``storage.keys``)
so that a WAL entry's index key, its vnode's counters, the time index and the producer state
go to disk in one atomic ``WriteBatch``. The bytes themselves go to the *payload log*
(``<data dir>/wal-payloads``), a second LevelDB keyed by a global increasing sequence, written
just before that WriteBatch: its keys only grow, so compaction never rewrites record batches
(see ``storage.keys`` for how a WriteBatch stays all-or-nothing across kill -9).
The broker is single-threaded asyncio, so calls are plain and synchronous; per-vnode
counters (next version, log start, size, max timestamp) and producer states are cached in
memory and LevelDB is only read for WAL data and cold producer states.

Durability (TDengine's WAL_LEVEL / WAL_FSYNC_PERIOD):

* ``wal_level=1``: writes use ``sync=False``. LevelDB appends every write to its log file
  with ``write(2)`` before returning, so an acknowledged write survives SIGKILL of the
  process (not a power loss / kernel crash).
* ``wal_level=2, fsync_period_ms=0``: every write uses ``sync=True`` (fsync before return).
* ``wal_level=2, fsync_period_ms>0``: writes use ``sync=False`` and the broker calls
  ``sync()`` every ``fsync_period_ms``; it writes a tiny marker with ``sync=True`` to the
  payload log, then to the main DB, which fsyncs each LevelDB's log and with it every
  earlier write.

The same rule applies to the payload-log write and the main WriteBatch of an append.

Catalog changes (create/drop database, vnodes, configs, options, supertables, child tables,
TDengine topics) are always written with sync=True: they are rare and losing one is worse
than losing the tail of a WAL. A catalog change and the meta entry that logs it go in one
WriteBatch through ``store.transaction()`` (see ``storage.txn``). The whole catalog —
100k child tables included — is loaded into dicts at open, so lookups never touch LevelDB.

Versions: per vnode, ``append`` gives a data entry of N records the versions
``next .. next+N-1``, ``append_rows`` a rows entry of N rows likewise, and ``append_meta`` a
meta entry one version. Versions are never reused, not after deletion and not after a drop
(a recreated database gets a new numeric id). ``read`` returns data entries only (plain
Kafka); ``read_entries`` returns all three kinds with their version counts.

Removal is always of whole entries from a vnode's head (log start moves), and every removal
is recorded in the log history with the same WriteBatch (``log_history``, bounded to the last
``history_limit`` records over the store, oldest trimmed).

* Retention (``enforce_retention``), per vnode. Kafka databases follow Kafka:
  ``retention.ms`` removes entries while their age timestamp < now - retention.ms;
  ``retention.bytes`` removes the oldest entry while the vnode stays >= retention.bytes
  without it; ``-1`` or a missing config means unlimited (the broker fills Kafka's defaults
  into a database's configs when it creates one). tsdb databases apply the same two rules
  with their options WAL_RETENTION_PERIOD (seconds) and WAL_RETENTION_SIZE (KB), -1 or
  missing = unlimited.
* DeleteRecords (``delete_before``).
* The archiver (``collect``): store-wide limits on total bytes, disk usage and age, oldest
  entries first across all vnodes, never a vnode's newest entry.

An entry's age timestamp is a data batch's max timestamp, or the append time of a meta or
rows entry (TDengine ages WAL by write time; rows may be back-filled with old timestamps).
"""

from __future__ import annotations

import bisect
import contextlib
import heapq
import itertools
import json
import os
import shutil
import struct
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import replace
from types import MappingProxyType
from typing import Any, NamedTuple

import plyvel

from tmqgate.storage import keys
from tmqgate.storage.model import (
    ENTRY_KINDS,
    REASON_CODE,
    REMOVAL_REASONS,
    ChildTable,
    CommittedOffset,
    DatabaseExists,
    DatabaseInfo,
    HistoryRecord,
    LayoutMismatch,
    OffsetOutOfRange,
    ProducerBatch,
    ProducerState,
    StorageError,
    TmqTopic,
    UnknownDatabase,
    UnknownVnode,
    WalEntry,
)
from tmqgate.storage.txn import Transaction

__all__ = ["Store"]  # the model types are exported by the storage package

_WriteBatch = plyvel._plyvel.WriteBatch

BATCH_HEADER_SIZE = 61  # record batch v2 header up to and including the record count
MAX_PRODUCER_BATCHES = 5  # Kafka keeps metadata of the last 5 batches per producer
_INT32_MAX = 2**31 - 1
_I64 = struct.Struct(">q")
_ROWS_HEADER_SIZE = keys.ROWS_HEADER.size
_new_entry = tuple.__new__  # WalEntry without its __new__ (all five fields given)


class _Vnode:
    """Cached counters of one vnode (the VNODE key plus the time index's tail) and its hot tail.

    ``tail_bases``/``tail_entries`` hold the newest entries (base, key kind, stored value) and
    cover every version from ``tail_bases[0]`` to ``next - 1``: a caught-up consumer's read
    is served from memory without a LevelDB seek.
    """

    __slots__ = (
        "next",
        "log_start",
        "size",
        "entries",
        "max_ts",
        "max_ts_base",
        "tail_bases",
        "tail_entries",
        "tail_bytes",
    )

    def __init__(self, next_version: int, log_start: int, size: int, entries: int = 0) -> None:
        self.next = next_version
        self.log_start = log_start
        self.size = size
        self.entries = entries
        self.max_ts: int | None = None
        self.max_ts_base = 0
        self.tail_bases: list[int] = []
        self.tail_entries: list[tuple[int, bytes]] = []
        self.tail_bytes = 0

    def cache(self, base: int, kind: int, value: bytes, cap: int) -> None:
        """Add the newest entry; when over ``cap`` drop the oldest down to 3/4 of it."""
        if cap <= 0:
            return
        self.tail_bases.append(base)
        self.tail_entries.append((kind, value))
        self.tail_bytes += len(value)
        if self.tail_bytes > cap:
            keep = cap * 3 // 4
            n = 0
            for _, v in self.tail_entries:
                if self.tail_bytes <= keep:
                    break
                self.tail_bytes -= len(v)
                n += 1
            del self.tail_bases[:n]
            del self.tail_entries[:n]

    def uncache_below(self, first_kept: int) -> None:
        """Forget cached entries that were deleted from the head of the log."""
        n = bisect.bisect_left(self.tail_bases, first_kept)
        if n:
            self.tail_bytes -= sum(len(v) for _, v in self.tail_entries[:n])
            del self.tail_bases[:n]
            del self.tail_entries[:n]


class _Db:
    __slots__ = ("info", "vnodes")

    def __init__(self, info: DatabaseInfo, vnodes: list[_Vnode]) -> None:
        self.info = info
        self.vnodes = vnodes


def _now_ms() -> int:
    return int(time.time() * 1000)


def _next_seq(base_seq: int, count: int) -> int:
    """Last sequence of a batch, wrapping at int32 max like Kafka."""
    inc = count - 1
    if base_seq > _INT32_MAX - inc:
        return inc - (_INT32_MAX - base_seq) - 1
    return base_seq + inc


def _age_ts(kind: int, value: bytes) -> int:
    """An entry's age timestamp: a data batch's max timestamp (header bytes 35..43), the
    append time of meta and rows entries (TDengine ages its WAL by write time)."""
    if kind == keys.KIND_DATA:
        return _I64.unpack_from(value, 35)[0]
    return _I64.unpack_from(value, 0)[0]


class _Dead(NamedTuple):
    """A head entry chosen for removal (``seq``: its payload's sequence)."""

    key: bytes
    size: int
    ts: int
    seq: int


_unpack_index = keys.unpack_wal_index
_pack_index = keys.pack_wal_index


PAYLOAD_DIR = "wal-payloads"


class Store:
    """The storage engine; see the module docstring for durability, retention, the archiver."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        wal_level: int = 1,
        fsync_period_ms: int = 3000,
        *,
        write_buffer_size: int = 64 << 20,
        lru_cache_size: int = 64 << 20,
        tail_cache_bytes: int = 2 << 20,
        history_limit: int = 10_000,
    ) -> None:
        if wal_level not in (1, 2):
            raise ValueError("wal_level must be 1 or 2")
        if fsync_period_ms < 0:
            raise ValueError("fsync_period_ms must be >= 0")
        if history_limit < 0:
            raise ValueError("history_limit must be >= 0")
        os.makedirs(path, exist_ok=True)
        self.path = os.fspath(path)
        self.wal_level = wal_level
        self.fsync_period_ms = fsync_period_ms
        self.tail_cache_bytes = tail_cache_bytes
        self.history_limit = history_limit
        self._sync_each = wal_level == 2 and fsync_period_ms == 0
        self._dirty = False
        # compression=None: batches arrive compressed by producers; snappy would waste CPU.
        self._db = plyvel.DB(
            self.path,
            create_if_missing=True,
            write_buffer_size=write_buffer_size,
            lru_cache_size=lru_cache_size,
            max_file_size=32 << 20,
            compression=None,
        )
        try:
            self._check_layout()
            # The payload log: keys (payload sequences) only grow, so its tables move down
            # the levels without being rewritten.
            self._plog = plyvel.DB(
                os.path.join(self.path, PAYLOAD_DIR),
                create_if_missing=True,
                write_buffer_size=write_buffer_size,
                lru_cache_size=lru_cache_size,
                max_file_size=64 << 20,
                compression=None,
            )
        except BaseException:
            self._db.close()
            raise
        self._pseq = 0  # the next payload sequence (set by _load)
        self._dbs: dict[str, _Db] = {}
        self._dbs_by_id: dict[int, _Db] = {}
        self._producers: dict[
            tuple[int, int, int], tuple[int, int, list[tuple[int, int, int, int]]] | None
        ] = {}
        # Catalog of the TDengine model, all in memory (lookups never touch LevelDB).
        self._stables: dict[int, dict[str, dict[str, Any]]] = {}
        self._ctables: dict[int, dict[str, ChildTable]] = {}
        self._topics: dict[str, TmqTopic] = {}
        # Log history: sequence -> record, oldest first (at most history_limit).
        self._history: dict[int, HistoryRecord] = {}
        self._history_seq = 0
        self._load()

    # lifecycle -----------------------------------------------------------------------------

    @property
    def needs_periodic_sync(self) -> bool:
        """True when the broker should call ``sync()`` every ``fsync_period_ms``."""
        return self.wal_level == 2 and self.fsync_period_ms > 0

    def sync(self) -> None:
        """Make every earlier write durable: a sync=True write fsyncs a LevelDB's log (the
        payload log first, then the main DB, so no synced index points at a lost payload)."""
        if self._dirty:
            self._plog.write_batch(sync=True).write()  # an empty batch: log record + fsync
            self._db.put(keys.SYNC, b"", sync=True)
            self._dirty = False

    def close(self) -> None:
        if self._db.closed:
            return
        if self.wal_level == 2:
            self.sync()
        self._plog.close()
        self._db.close()

    def _check_layout(self) -> None:
        """Refuse a data directory of another layout; stamp a new one with ours."""
        raw = self._db.get(keys.LAYOUT)
        if raw is None:
            if next(self._db.iterator(include_value=False), None) is not None:
                raise LayoutMismatch(
                    f"{self.path} holds a tmqgate store of storage layout 1 (WAL entries inline); "
                    f"this tmqgate reads layout {keys.LAYOUT_VERSION} only and cannot migrate it: "
                    "use a new data directory"
                )
            self._db.put(keys.LAYOUT, keys.u32(keys.LAYOUT_VERSION), sync=True)
            return
        version = keys.read_u32(raw)
        if version != keys.LAYOUT_VERSION:
            raise LayoutMismatch(
                f"{self.path} holds a tmqgate store of storage layout {version}; this tmqgate "
                f"reads layout {keys.LAYOUT_VERSION} only"
            )

    # payload log ---------------------------------------------------------------------------

    def _put_payload(self, value: bytes, sync: bool) -> int:
        """Write one payload at the next sequence (before the main WriteBatch that indexes
        it); returns the sequence."""
        seq = self._pseq
        self._plog.put(keys.u64(seq), value, sync=sync)
        return seq

    def _put_payloads(self, values: list[bytes], sync: bool) -> int:
        """Write payloads at the next sequences in one batch; returns the first sequence."""
        seq = self._pseq
        wb = self._plog.write_batch(sync=sync)
        for i, value in enumerate(values):
            wb.put(keys.u64(seq + i), value)
        wb.write()
        return seq

    def _write_indexed(self, wb: _WriteBatch, first: int, n: int) -> None:
        """Write the main WriteBatch that indexes payloads ``first`` .. ``first + n - 1``
        (already in the payload log), recording PAYSEQ; once it is written the next sequence
        moves past them. If it fails, the payloads (indexed by nothing) are dropped again, on a
        best-effort basis: open() drops them anyway, being above PAYSEQ."""
        last = first + n - 1
        wb.put(keys.PAYSEQ, keys.u64(last))
        try:
            self._write(wb)
        except BaseException:
            with contextlib.suppress(Exception):
                self._delete_payloads(range(first, last + 1))
            raise
        self._pseq = last + 1

    def _write_removing(self, wb: _WriteBatch, seqs: list[int]) -> None:
        """Write the main WriteBatch that deletes the index keys of payloads ``seqs``, listing
        them under PAYGC (so open finishes an interrupted delete), then delete the payloads."""
        if seqs:
            wb.put(keys.PAYGC, keys.pack_seqs(seqs))
        self._write(wb)
        if seqs:
            self._delete_payloads(seqs)

    def _delete_payloads(self, seqs: Iterable[int], sync: bool = False) -> None:
        """Delete payloads in one batch: ones whose index keys a committed WriteBatch removed
        (listed under PAYGC, so a crash before this finishes is repaired at open), or ones
        nothing indexes."""
        wb = self._plog.write_batch(sync=sync)
        for seq in seqs:
            wb.delete(keys.u64(seq))
        wb.write()

    def _repair_lost_payloads(self) -> None:
        """Roll back vnode tails whose payloads the payload log lost.

        Only possible after a power loss with unsynced writes (see ``storage.keys``): each
        LevelDB recovers a prefix of its log, so the payload log may end below PAYSEQ while
        the main DB kept the index keys. Within a vnode sequences grow with versions, so the
        lost entries are each vnode's newest ones: their index keys, time index entries and
        producer batches go, and the vnode's next version moves back to the first lost base
        (as a log that lost its unsynced tail would). One seek when nothing was lost.
        """
        raw = self._db.get(keys.PAYSEQ)
        if raw is None:
            return
        last = next(self._plog.iterator(reverse=True, include_value=False), None)
        present = keys.read_u64(last) if last is not None else -1
        if present >= keys.read_u64(raw):
            return
        wb = self._db.write_batch(sync=True)
        repaired = False
        for vkey, state in self._db.iterator(prefix=keys.VNODE):
            dbid, vnode = keys.parse_vnode_key(vkey)
            lost: list[tuple[bytes, bytes]] = []
            for key, value in self._db.iterator(
                prefix=keys.vnode_prefix(keys.WAL, dbid, vnode), reverse=True
            ):
                if keys.wal_index_seq(value) <= present:
                    break
                lost.append((key, value))
            if not lost:
                continue
            repaired = True
            first = keys.wal_key_version(lost[-1][0])
            for key, _ in lost:
                wb.delete(key)
            for key, value in self._db.iterator(
                prefix=keys.vnode_prefix(keys.TIME, dbid, vnode), reverse=True
            ):
                if keys.read_u64(value) < first:
                    break
                wb.delete(key)
            for key, value in self._db.iterator(prefix=keys.vnode_prefix(keys.PRODUCER, dbid, vnode)):
                epoch, update_ms, batches = keys.unpack_producer(value)
                kept = [b for b in batches if b[2] < first]
                if not kept:
                    wb.delete(key)
                elif len(kept) < len(batches):
                    wb.put(key, keys.pack_producer(epoch, update_ms, kept))
            _, start, size, entries = keys.unpack_vnode_state(state)
            if entries is None:
                p = keys.vnode_prefix(keys.WAL, dbid, vnode)
                entries = sum(1 for _ in self._db.iterator(prefix=p, include_value=False))
            size -= sum(keys.unpack_wal_index(v)[1] for _, v in lost)
            wb.put(vkey, keys.pack_vnode_state(first, min(start, first), size, entries - len(lost)))
        if not repaired:  # the newest payloads were removed (retention ...), none lost
            return
        # Every sequence still indexed is <= present now.
        if present >= 0:
            wb.put(keys.PAYSEQ, keys.u64(present))
        else:
            wb.delete(keys.PAYSEQ)
        wb.write()

    def _load_payload_log(self) -> None:
        """Delete payloads above the last committed sequence (written, never indexed, never
        acknowledged), finish the payload deletes of the last removal, set the next sequence."""
        raw = self._db.get(keys.PAYSEQ)
        committed = keys.read_u64(raw) if raw is not None else -1
        stale = [keys.read_u64(k) for k in self._plog.iterator(start=keys.u64(committed + 1), include_value=False)]
        if stale:
            self._delete_payloads(stale, sync=True)
        gc = self._db.get(keys.PAYGC)
        if gc is not None:
            self._delete_payloads(keys.unpack_seqs(gc))
            self._db.delete(keys.PAYGC)
        self._pseq = committed + 1

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _write(self, wb: _WriteBatch) -> None:
        wb.write()
        if not self._sync_each:
            self._dirty = True

    def _batch(self, sync: bool | None = None) -> _WriteBatch:
        return self._db.write_batch(sync=self._sync_each if sync is None else sync)

    def _load(self) -> None:
        """Read the catalog, vnode counters and log history; drop data of databases no longer
        listed."""
        db = self._db
        self._repair_lost_payloads()
        by_id: dict[int, _Db] = {}
        for key, value in db.iterator(prefix=keys.DBINFO):
            dbid = keys.read_u32(key[1:])
            meta = json.loads(value)
            conf = db.get(keys.dbconf_key(dbid))
            info = DatabaseInfo(
                name=meta["name"],
                vgroups=meta["vgroups"],
                topic_id=bytes.fromhex(meta["topic_id"]),
                configs=json.loads(conf) if conf else {},
                created_ms=meta["created_ms"],
                id=dbid,
                kind=meta.get("kind", "kafka"),
                options=meta.get("options", {}),
            )
            by_id[dbid] = _Db(info, [_Vnode(0, 0, 0) for _ in range(info.vgroups)])
        for key, value in db.iterator(prefix=keys.VNODE):
            dbid, vnode = keys.parse_vnode_key(key)
            d = by_id.get(dbid)
            if d is None or vnode >= len(d.vnodes):
                continue
            nxt, start, size, entries = keys.unpack_vnode_state(value)
            if entries is None:  # written before the count existed: count once
                p = keys.vnode_prefix(keys.WAL, dbid, vnode)
                entries = sum(1 for _ in db.iterator(prefix=p, include_value=False))
            vs = _Vnode(nxt, start, size, entries)
            self._load_max_ts(dbid, vnode, vs)
            d.vnodes[vnode] = vs
        self._dbs = {d.info.name: d for d in by_id.values()}
        self._dbs_by_id = by_id
        self._stables = {dbid: {} for dbid in by_id}
        self._ctables = {dbid: {} for dbid in by_id}
        for key, value in db.iterator(prefix=keys.STABLE):
            stables = self._stables.get(keys.catalog_key_db(key))
            if stables is not None:
                stables[keys.catalog_key_name(key)] = json.loads(value)
        self._load_child_tables()
        for key, value in db.iterator(prefix=keys.TMQTOPIC):
            t = json.loads(value)
            self._topics[key[1:].decode()] = TmqTopic(
                bytes.fromhex(t["topic_id"]), t["definition"], t["created_ms"]
            )
        self._load_payload_log()
        stale: list[int] = []
        for key, value in db.iterator(prefix=keys.HISTORY):
            seq = keys.history_key_seq(key)
            rec = keys.unpack_history(value)
            if rec[0] in by_id:
                self._history[seq] = HistoryRecord(*rec[:9], REMOVAL_REASONS[rec[9]])
            else:
                stale.append(seq)
            self._history_seq = seq + 1
        if stale:
            wb = self._batch()
            for seq in stale:
                wb.delete(keys.history_key(seq))
            self._write(wb)
        self._gc_orphans(set(by_id))

    def _load_child_tables(self) -> None:
        """All child tables into dicts: per database one json.loads of a JSON array joined
        from the stored values ([name, stable, tags, vnode] each) and one C-level tuple
        construction per table — 100k tables load in a fraction of a second."""
        new = tuple.__new__
        for dbid, ctables in self._ctables.items():
            p = keys.db_prefix(keys.CTABLE, dbid)
            values = list(self._db.iterator(prefix=p, include_key=False))
            if values:
                parsed = json.loads(b"[" + b",".join(values) + b"]")
                ctables.update({t[0]: new(ChildTable, t) for t in parsed})

    def _load_max_ts(self, dbid: int, vnode: int, vs: _Vnode) -> None:
        p = keys.vnode_prefix(keys.TIME, dbid, vnode)
        for key, value in self._db.iterator(prefix=p, reverse=True):
            vs.max_ts = keys.time_key_ts(key)
            vs.max_ts_base = keys.read_u64(value)
            return
        vs.max_ts = None
        vs.max_ts_base = 0

    def _gc_orphans(self, live: set[int]) -> None:
        """Delete per-db data whose id is not in the catalog (a drop interrupted by a crash)."""
        for prefix in keys.PER_DB_PREFIXES:
            it = self._db.iterator(start=prefix, stop=keys.prefix_end(prefix), include_value=False)
            while True:
                key = next(it, None)
                if key is None:
                    break
                dbid = keys.read_u32(key[1:5])
                if dbid not in live:
                    self._delete_prefix(keys.db_prefix(prefix, dbid))
                it.seek(keys.db_prefix(prefix, dbid + 1))

    def _delete_prefix(self, prefix: bytes, chunk: int = 10_000) -> None:
        """Delete every key under ``prefix`` in chunks; under WAL also their payloads."""
        wal = prefix[:1] == keys.WAL
        it = self._db.iterator(prefix=prefix, include_value=wal)
        while True:
            wb = self._db.write_batch()
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
                self._write_removing(wb, seqs)
            if n < chunk:
                return

    # catalog: databases --------------------------------------------------------------------

    def create_database(
        self,
        name: str,
        vgroups: int,
        configs: dict[str, str] | None = None,
        *,
        topic_id: bytes | None = None,
        created_ms: int | None = None,
        kind: str = "kafka",
        options: dict[str, Any] | None = None,
    ) -> DatabaseInfo:
        """Create a database of ``vgroups`` empty vnodes with a fresh numeric id and topic id.

        ``kind`` "kafka" (plain topics) or "tsdb" (SQL databases); ``options`` are stored as
        given (JSON-able) — retention reads wal_retention_period / wal_retention_size.
        """
        if name in self._dbs:
            raise DatabaseExists(name)
        if vgroups < 1:
            raise ValueError("vgroups must be >= 1")
        if kind not in ("kafka", "tsdb"):
            raise ValueError("kind must be 'kafka' or 'tsdb'")
        raw = self._db.get(keys.NEXTDB)
        dbid = keys.read_u32(raw) if raw else 1
        info = DatabaseInfo(
            name=name,
            vgroups=vgroups,
            topic_id=topic_id if topic_id is not None else uuid.uuid4().bytes,
            configs={str(k): str(v) for k, v in (configs or {}).items()},
            created_ms=_now_ms() if created_ms is None else created_ms,
            id=dbid,
            kind=kind,
            options=dict(options or {}),
        )
        if len(info.topic_id) != 16:
            raise ValueError("topic_id must be 16 bytes")
        wb = self._batch(sync=True)
        wb.put(keys.NEXTDB, keys.u32(dbid + 1))
        wb.put(keys.name_key(name), keys.u32(dbid))
        wb.put(keys.dbinfo_key(dbid), self._dbinfo_json(info))
        wb.put(keys.dbconf_key(dbid), json.dumps(info.configs).encode())
        wb.put(keys.topic_id_key(info.topic_id), keys.u32(dbid))
        for v in range(vgroups):
            wb.put(keys.vnode_key(dbid, v), keys.pack_vnode_state(0, 0, 0, 0))
        self._write(wb)
        d = _Db(info, [_Vnode(0, 0, 0) for _ in range(vgroups)])
        self._dbs[name] = d
        self._dbs_by_id[dbid] = d
        self._stables[dbid] = {}
        self._ctables[dbid] = {}
        return info

    @staticmethod
    def _dbinfo_json(info: DatabaseInfo) -> bytes:
        return json.dumps(
            {
                "name": info.name,
                "vgroups": info.vgroups,
                "topic_id": info.topic_id.hex(),
                "created_ms": info.created_ms,
                "kind": info.kind,
                "options": info.options,
            }
        ).encode()

    def drop_database(self, name: str) -> None:
        """Remove a database: the catalog (and its log history) atomically first, then its
        data, supertables and child tables by range deletes (finished at open after a crash)."""
        d = self._get(name)
        dbid = d.info.id
        gone = [seq for seq, rec in self._history.items() if rec.db == dbid]
        wb = self._batch(sync=True)
        wb.delete(keys.name_key(name))
        wb.delete(keys.dbinfo_key(dbid))
        wb.delete(keys.dbconf_key(dbid))
        wb.delete(keys.topic_id_key(d.info.topic_id))
        for seq in gone:
            wb.delete(keys.history_key(seq))
        self._write(wb)
        del self._dbs[name]
        del self._dbs_by_id[dbid]
        self._stables.pop(dbid, None)
        self._ctables.pop(dbid, None)
        for seq in gone:
            del self._history[seq]
        self._producers = {k: v for k, v in self._producers.items() if k[0] != dbid}
        for prefix in keys.PER_DB_PREFIXES:
            self._delete_prefix(keys.db_prefix(prefix, dbid))

    def databases(self) -> list[DatabaseInfo]:
        return sorted((d.info for d in self._dbs.values()), key=lambda i: i.name)

    def get_database(self, name: str) -> DatabaseInfo | None:
        d = self._dbs.get(name)
        return d.info if d else None

    def database_by_topic_id(self, topic_id: bytes) -> DatabaseInfo | None:
        """For Fetch/Metadata versions that address topics by id."""
        for d in self._dbs.values():
            if d.info.topic_id == topic_id:
                return d.info
        return None

    def add_vnodes(self, name: str, new_count: int) -> DatabaseInfo:
        """CreatePartitions: grow the database to ``new_count`` vnodes (never shrinks)."""
        d = self._get(name)
        old = d.info.vgroups
        if new_count <= old:
            raise ValueError(f"new vnode count {new_count} must exceed {old}")
        info = replace(d.info, vgroups=new_count)
        wb = self._batch(sync=True)
        wb.put(keys.dbinfo_key(info.id), self._dbinfo_json(info))
        for v in range(old, new_count):
            wb.put(keys.vnode_key(info.id, v), keys.pack_vnode_state(0, 0, 0, 0))
        self._write(wb)
        d.info = info
        d.vnodes.extend(_Vnode(0, 0, 0) for _ in range(old, new_count))
        return info

    def set_configs(self, name: str, configs: dict[str, str | None], *, merge: bool = False) -> DatabaseInfo:
        """Replace the database's configs (AlterConfigs), or with ``merge`` update them
        (a value of None then removes that config)."""
        d = self._get(name)
        merged = dict(d.info.configs) if merge else {}
        for k, v in configs.items():
            if v is None:
                merged.pop(k, None)
            else:
                merged[str(k)] = str(v)
        self._db.put(keys.dbconf_key(d.info.id), json.dumps(merged).encode(), sync=True)
        info = replace(d.info, configs=merged)
        d.info = info
        return info

    def set_options(self, name: str, options: dict[str, Any], *, merge: bool = True) -> DatabaseInfo:
        """ALTER DATABASE: update the TDengine options (a value of None removes one), or with
        ``merge=False`` replace them all."""
        d = self._get(name)
        merged = dict(d.info.options) if merge else {}
        for k, v in options.items():
            if v is None:
                merged.pop(k, None)
            else:
                merged[k] = v
        info = replace(d.info, options=merged)
        self._db.put(keys.dbinfo_key(info.id), self._dbinfo_json(info), sync=True)
        d.info = info
        return info

    def _get(self, name: str) -> _Db:
        d = self._dbs.get(name)
        if d is None:
            raise UnknownDatabase(name)
        return d

    def _vnode(self, name: str, vnode: int) -> tuple[int, _Vnode]:
        d = self._dbs.get(name)
        if d is None:
            raise UnknownDatabase(name)
        if not 0 <= vnode < len(d.vnodes):
            raise UnknownVnode(f"{name} vnode {vnode}")
        return d.info.id, d.vnodes[vnode]

    # catalog: supertables, child tables, TDengine topics -----------------------------------

    def transaction(self) -> Transaction:
        """Catalog changes and WAL entries written together in one synced WriteBatch; see
        ``storage.txn``. Use as ``with store.transaction() as tx: ...``."""
        return Transaction(self, sync=True)

    def stables(self, db: str) -> Mapping[str, dict[str, Any]]:
        """Supertable name -> schema JSON: a read-only live view (do not mutate the schemas)."""
        return MappingProxyType(self._stables[self._get(db).info.id])

    def stable(self, db: str, name: str) -> dict[str, Any] | None:
        return self._stables[self._get(db).info.id].get(name)

    def create_stable(self, db: str, name: str, schema_json: dict[str, Any]) -> None:
        with self.transaction() as tx:
            tx.create_stable(db, name, schema_json)

    def alter_stable(self, db: str, name: str, schema_json: dict[str, Any]) -> None:
        with self.transaction() as tx:
            tx.alter_stable(db, name, schema_json)

    def drop_stable(self, db: str, name: str) -> int:
        """Drops the supertable and its child tables; returns how many child tables went."""
        with self.transaction() as tx:
            return tx.drop_stable(db, name)

    def child_tables(self, db: str) -> Mapping[str, ChildTable]:
        """Child table name -> ChildTable: a read-only live view, no copy (100k tables)."""
        return MappingProxyType(self._ctables[self._get(db).info.id])

    def child_table(self, db: str, name: str) -> ChildTable | None:
        return self._ctables[self._get(db).info.id].get(name)

    def create_child_table(
        self, db: str, name: str, stable: str, tags_json: dict[str, Any], vnode: int
    ) -> ChildTable:
        with self.transaction() as tx:
            return tx.create_child_table(db, name, stable, tags_json, vnode)

    def create_child_tables(self, db: str, tables: Iterable[tuple[str, str, dict[str, Any], int]]) -> int:
        """Many (name, stable, tags, vnode) in one synced WriteBatch, all or none."""
        with self.transaction() as tx:
            return tx.create_child_tables(db, tables)

    def drop_child_table(self, db: str, name: str) -> ChildTable:
        with self.transaction() as tx:
            return tx.drop_child_table(db, name)

    def set_child_tags(
        self, db: str, name: str, tags_json: dict[str, Any], *, merge: bool = True
    ) -> ChildTable:
        with self.transaction() as tx:
            return tx.set_child_tags(db, name, tags_json, merge=merge)

    def create_tmq_topic(
        self,
        name: str,
        definition: dict[str, Any],
        *,
        topic_id: bytes | None = None,
        created_ms: int | None = None,
    ) -> bytes:
        """Store a TDengine topic (definition is the broker's opaque JSON); returns its id."""
        with self.transaction() as tx:
            return tx.create_tmq_topic(name, definition, topic_id=topic_id, created_ms=created_ms)

    def drop_tmq_topic(self, name: str) -> TmqTopic:
        with self.transaction() as tx:
            return tx.drop_tmq_topic(name)

    def tmq_topics(self) -> dict[str, TmqTopic]:
        """name -> (topic_id, definition, created_ms)."""
        return dict(self._topics)

    def tmq_topic(self, name: str) -> TmqTopic | None:
        return self._topics.get(name)

    def tmq_topic_by_id(self, topic_id: bytes) -> tuple[str, TmqTopic] | None:
        for name, t in self._topics.items():
            if t.topic_id == topic_id:
                return name, t
        return None

    # WAL -----------------------------------------------------------------------------------

    def append(
        self,
        db: str,
        vnode: int,
        batch: bytes | bytearray | memoryview,
        record_count: int,
        max_timestamp: int,
        producer: tuple[int, int, int] | None = None,
    ) -> int:
        """Store a record batch v2 at the vnode's next versions; returns its base version.

        The batch's base offset (bytes 0..8, outside the CRC) is set to the version. Entry,
        counters, time index and producer state ``(producer_id, epoch, base_sequence)`` are
        written in one WriteBatch. ``max_timestamp`` feeds the time index and should equal the
        header's max timestamp (retention reads the header).
        """
        dbid, vs = self._vnode(db, vnode)
        if record_count < 1:
            raise ValueError("record_count must be >= 1")
        if len(batch) < BATCH_HEADER_SIZE:
            raise ValueError("not a record batch v2")
        base = vs.next
        value = b"".join((keys.u64(base), memoryview(batch)[8:]))
        nxt = base + record_count
        size = vs.size + len(value)
        seq = self._put_payload(value, self._sync_each)
        wb = self._batch()
        batch_max_ts = _age_ts(keys.KIND_DATA, value)  # the header's, as retention reads it
        wb.put(
            keys.wal_key(dbid, vnode, base, keys.KIND_DATA),
            _pack_index(seq, len(value), batch_max_ts, batch_max_ts),
        )
        wb.put(keys.vnode_key(dbid, vnode), keys.pack_vnode_state(nxt, vs.log_start, size, vs.entries + 1))
        new_max = vs.max_ts is None or max_timestamp > vs.max_ts
        if new_max:
            wb.put(keys.time_key(dbid, vnode, max_timestamp), keys.u64(base))
        pstate = None
        if producer is not None:
            pid, epoch, base_seq = producer
            pkey = (dbid, vnode, pid)
            old = self._producer_load(pkey)
            batches = list(old[2]) if old is not None and old[0] == epoch else []
            last_seq = _next_seq(base_seq, record_count) if base_seq >= 0 else -1
            batches.append((base_seq, last_seq, base, nxt - 1))
            del batches[:-MAX_PRODUCER_BATCHES]
            pstate = (epoch, _now_ms(), batches)
            wb.put(keys.producer_key(dbid, vnode, pid), keys.pack_producer(*pstate))
        self._write_indexed(wb, seq, 1)
        vs.next = nxt
        vs.size = size
        vs.entries += 1
        vs.cache(base, keys.KIND_DATA, value, self.tail_cache_bytes)
        if new_max:
            vs.max_ts = max_timestamp
            vs.max_ts_base = base
        if pstate is not None:
            self._producers[pkey] = pstate
        return base

    def append_meta(self, db: str, vnode: int, payload: bytes, timestamp_ms: int | None = None) -> int:
        """Log a meta entry (create/alter table, …): one version; plain readers skip it.

        To log it together with the catalog change it describes, use
        ``with store.transaction() as tx: tx.create_stable(...); tx.append_meta(...)``.
        """
        tx = Transaction(self, sync=self._sync_each)
        base = tx.append_meta(db, vnode, payload, timestamp_ms)
        tx.commit()
        return base

    def append_rows(
        self,
        db: str,
        vnode: int,
        payload: bytes | bytearray | memoryview,
        row_count: int,
        max_timestamp: int,
        min_timestamp: int,
        *,
        timestamp_ms: int | None = None,
    ) -> int:
        """Log a rows entry (Arrow IPC bytes, opaque here) taking ``row_count`` versions;
        returns its base version (row i is version base + i).

        ``max_timestamp`` feeds the time index (``offset_for_timestamp``): pass the rows'
        timestamps as the Kafka record timestamps they become (milliseconds). Retention and
        the archiver age the entry by its append time ``timestamp_ms`` (default now).
        """
        tx = Transaction(self, sync=self._sync_each)
        base = tx.append_rows(db, vnode, payload, row_count, max_timestamp, min_timestamp, timestamp_ms)
        tx.commit()
        return base

    def _entries_from(
        self, dbid: int, vnode: int, vs: _Vnode, from_version: int
    ) -> Iterator[tuple[int, int, bytes]]:
        """(base, kind, value) from the entry holding ``from_version`` (or the first after it).

        Versions are dense, so that entry is the last one with base <= from_version. Served
        from the hot tail when it covers from_version; else one LevelDB seek (plus a step
        back when from_version is inside an entry).
        """
        bases = vs.tail_bases
        if bases and from_version >= bases[0]:
            i = bisect.bisect_right(bases, from_version) - 1
            entries = vs.tail_entries
            return ((bases[j], *entries[j]) for j in range(i, len(bases)))
        p = keys.vnode_prefix(keys.WAL, dbid, vnode)
        it = self._db.iterator(start=p, stop=keys.prefix_end(p))
        it.seek(keys.wal_seek_key(dbid, vnode, from_version))
        first = next(it, None)
        if first is None or keys.wal_key_version(first[0]) != from_version:
            it.seek(keys.wal_seek_key(dbid, vnode, from_version + 1))
            try:
                it.prev()
            except StopIteration:
                pass
            pairs: Iterable[tuple[bytes, bytes]] = it
        else:
            pairs = itertools.chain((first,), it)
        return self._with_payloads(pairs)

    def _with_payloads(self, pairs: Iterable[tuple[bytes, bytes]]) -> Iterator[tuple[int, int, bytes]]:
        """(base, kind, payload) for (WAL key, index value) pairs, fetched lazily (readers
        stop at max_bytes) through one payload-log cursor: a step to the next key when the
        sequence follows the previous one (one vnode appending alone, a transaction's
        entries), else a seek — measured ~35% and ~10% cheaper than a get per entry."""
        it = None
        prev = -2
        version = keys.wal_key_version
        for k, v in pairs:
            seq = keys.wal_index_seq(v)
            want = keys.u64(seq)
            if it is None:
                it = self._plog.raw_iterator()
                it.seek(want)
            elif seq == prev + 1 and it.valid():
                it.next()
            else:
                it.seek(want)
            if not it.valid() or it.key() != want:
                raise StorageError(f"payload {seq} of WAL key {k.hex()} is missing from the payload log")
            prev = seq
            yield version(k), k[17], it.value()

    @staticmethod
    def _with_counts(
        entries: Iterator[tuple[int, int, bytes]], vs: _Vnode
    ) -> Iterator[tuple[int, int, bytes, int]]:
        """Add each entry's version count: next entry's base - base (versions are dense)."""
        prev = next(entries, None)
        if prev is None:
            return
        for cur in entries:
            yield prev[0], prev[1], prev[2], cur[0] - prev[0]
            prev = cur
        yield prev[0], prev[1], prev[2], vs.next - prev[0]

    def read(self, db: str, vnode: int, from_version: int, max_bytes: int) -> list[bytes]:
        """Stored data batches whose last version >= from_version, in order.

        The first may start before from_version (the client skips records below it, as with
        Kafka). At least one batch is returned if any exists; then batches are added while
        the total stays <= max_bytes. Meta and rows entries are skipped.
        """
        dbid, vs = self._vnode(db, vnode)
        if from_version >= vs.next:
            return []
        out: list[bytes] = []
        total = 0
        for _, kind, value in self._entries_from(dbid, vnode, vs, from_version):
            if kind != keys.KIND_DATA:
                continue
            n = len(value)
            if out and total + n > max_bytes:
                break
            out.append(value)
            total += n
            if total >= max_bytes:
                break
        return out

    def read_entries(
        self, db: str, vnode: int, from_version: int, max_bytes: int, include_meta: bool = True
    ) -> list[WalEntry]:
        """Entries of every kind from the one holding ``from_version``, with versions, kinds
        and version counts; payloads without storage's headers. Same max_bytes rule as
        ``read`` (counted on the returned payloads); ``include_meta=False`` skips meta only."""
        dbid, vs = self._vnode(db, vnode)
        if from_version >= vs.next:
            return []
        out: list[WalEntry] = []
        total = 0
        kinds = ENTRY_KINDS
        for version, kind, value, count in self._with_counts(
            self._entries_from(dbid, vnode, vs, from_version), vs
        ):
            if kind == keys.KIND_META:
                if not include_meta:
                    continue
                value = value[8:]
            elif kind == keys.KIND_ROWS:
                value = value[_ROWS_HEADER_SIZE:]
            n = len(value)
            if out and total + n > max_bytes:
                break
            out.append(_new_entry(WalEntry, (version, kind == keys.KIND_META, value, kinds[kind], count)))
            total += n
            if total >= max_bytes:
                break
        return out

    def log_start(self, db: str, vnode: int) -> int:
        return self._vnode(db, vnode)[1].log_start

    def next_version(self, db: str, vnode: int) -> int:
        """The high watermark: every stored entry is committed."""
        return self._vnode(db, vnode)[1].next

    def log_size(self, db: str, vnode: int) -> int:
        """Bytes of stored entries (what retention.bytes counts)."""
        return self._vnode(db, vnode)[1].size

    def log_entries(self, db: str, vnode: int) -> int:
        """Number of stored entries of the vnode."""
        return self._vnode(db, vnode)[1].entries

    def total_bytes(self) -> int:
        """Bytes of stored WAL entries over all vnodes of all databases (what the archiver
        counts)."""
        return sum(vs.size for d in self._dbs.values() for vs in d.vnodes)

    def offset_for_timestamp(self, db: str, vnode: int, ts: int) -> tuple[int, int] | None:
        """(base version, max timestamp) of the first data batch or rows entry whose max
        timestamp >= ts.

        Entry granularity: the broker reads that entry and picks the first record/row with
        timestamp >= ts, as Kafka returns. Never below log start.
        """
        dbid, vs = self._vnode(db, vnode)
        p = keys.vnode_prefix(keys.TIME, dbid, vnode)
        for key, value in self._db.iterator(start=keys.time_key(dbid, vnode, ts), stop=keys.prefix_end(p)):
            return max(keys.read_u64(value), vs.log_start), keys.time_key_ts(key)
        return None

    def max_timestamp_offset(self, db: str, vnode: int) -> tuple[int, int] | None:
        """(base version, timestamp) of the earliest batch holding the vnode's max timestamp."""
        _, vs = self._vnode(db, vnode)
        if vs.max_ts is None:
            return None
        return max(vs.max_ts_base, vs.log_start), vs.max_ts

    # deletion ------------------------------------------------------------------------------

    def delete_before(self, db: str, vnode: int, offset: int) -> int:
        """Kafka DeleteRecords: log start becomes ``offset`` (-1 = high watermark).

        Entries whose last version < offset are removed; one straddling it stays. Returns the
        new log start; raises OffsetOutOfRange beyond the high watermark.
        """
        dbid, vs = self._vnode(db, vnode)
        if offset == -1:
            offset = vs.next
        if offset < 0 or offset > vs.next:
            raise OffsetOutOfRange(f"{offset} outside 0..{vs.next}")
        if offset <= vs.log_start:
            return vs.log_start
        self._truncate_head(
            dbid, vnode, vs, lambda key, idx, end, size: end <= offset, offset, reason="delete_records"
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
        now = _now_ms() if now_ms is None else now_ms
        removed = 0
        for d in list(self._dbs.values()):
            if d.info.kind == "tsdb":
                period = _int_option(d.info.options, "wal_retention_period")
                kb = _int_option(d.info.options, "wal_retention_size")
                rms = period * 1000 if period >= 0 else -1
                rbytes = kb * 1024 if kb >= 0 else -1
                age_reason, size_reason = "wal_retention_period", "wal_retention_size"
            else:
                configs = {**defaults, **d.info.configs} if defaults else d.info.configs
                rms = _int_config(configs, "retention.ms")
                rbytes = _int_config(configs, "retention.bytes")
                age_reason, size_reason = "retention.ms", "retention.bytes"
            if rms < 0 and rbytes < 0:
                continue
            for vnode, vs in enumerate(d.vnodes):
                if rms >= 0:
                    limit = now - rms
                    removed += self._truncate_head(
                        d.info.id,
                        vnode,
                        vs,
                        lambda key, idx, end, size, limit=limit: idx[2] < limit,
                        reason=age_reason,
                        now_ms=now,
                    )
                if rbytes >= 0 and vs.size > rbytes:
                    removed += self._truncate_head(
                        d.info.id,
                        vnode,
                        vs,
                        lambda key, idx, end, size, rb=rbytes: size - idx[1] >= rb,
                        reason=size_reason,
                        now_ms=now,
                    )
        return removed

    def _truncate_head(
        self,
        dbid: int,
        vnode: int,
        vs: _Vnode,
        remove: Callable[[bytes, tuple[int, int, int, int], int, int], bool],
        new_log_start: int | None = None,
        *,
        reason: str,
        now_ms: int | None = None,
    ) -> int:
        """Remove the longest prefix of entries for which remove(key, idx, end, size) holds.

        ``idx`` is the WAL key's value unpacked (payload sequence, length, age timestamp,
        index timestamp: no payload is read), ``end`` the entry's last version + 1 and
        ``size`` the vnode size before removing it. Moves log start to max(old, first kept base, new_log_start), repairs the time
        index head and records the removal in the log history. Returns how many entries were
        removed.
        """
        p = keys.vnode_prefix(keys.WAL, dbid, vnode)
        it = self._db.iterator(start=p, stop=keys.prefix_end(p))
        dead: list[_Dead] = []
        freed = 0
        cur = next(it, None)
        while cur is not None:
            nxt = next(it, None)
            key, idx = cur[0], _unpack_index(cur[1])
            end = keys.wal_key_version(nxt[0]) if nxt is not None else vs.next
            if not remove(key, idx, end, vs.size - freed):
                break
            dead.append(_Dead(key, idx[1], idx[2], idx[0]))
            freed += idx[1]
            cur = nxt
        if not dead:
            if new_log_start is not None and new_log_start > vs.log_start:
                self._db.put(
                    keys.vnode_key(dbid, vnode),
                    keys.pack_vnode_state(vs.next, new_log_start, vs.size, vs.entries),
                    sync=self._sync_each,
                )
                if not self._sync_each:
                    self._dirty = True
                vs.log_start = new_log_start
            return 0
        first_kept = keys.wal_key_version(cur[0]) if cur is not None else vs.next
        self._remove_head(
            dbid, vnode, vs, dead, first_kept, new_log_start, reason, _now_ms() if now_ms is None else now_ms
        )
        return len(dead)

    def _remove_head(
        self,
        dbid: int,
        vnode: int,
        vs: _Vnode,
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
        wb = self._batch()
        for e in dead:
            wb.delete(e.key)
        wb.put(keys.vnode_key(dbid, vnode), keys.pack_vnode_state(vs.next, log_start, size, entries))
        max_ts = self._reindex_head(dbid, vnode, first_kept, wb)
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
        self._write_removing(wb, [e.seq for e in dead])
        vs.log_start = log_start
        vs.size = size
        vs.entries = entries
        vs.uncache_below(first_kept)
        if max_ts is not None:
            vs.max_ts, vs.max_ts_base = max_ts
        if self.history_limit:
            for old in trimmed:
                del self._history[old]
            self._history[seq] = rec
            self._history_seq = seq + 1
        return rec

    def _reindex_head(
        self, dbid: int, vnode: int, first_kept: int, wb: _WriteBatch
    ) -> tuple[int | None, int] | None:
        """Drop index entries of removed batches and re-index the kept batches before the
        first surviving index entry (they were hidden behind a removed, larger max).

        Returns the vnode's new (max_ts, base) if it changed, else None.
        """
        tp = keys.vnode_prefix(keys.TIME, dbid, vnode)
        survivor: int | None = None
        for key, value in self._db.iterator(prefix=tp):
            base = keys.read_u64(value)
            if base >= first_kept:
                survivor = base
                break
            wb.delete(key)
        wp = keys.vnode_prefix(keys.WAL, dbid, vnode)
        stop = keys.wal_seek_key(dbid, vnode, survivor) if survivor is not None else keys.prefix_end(wp)
        running: int | None = None
        running_base = 0
        for key, value in self._db.iterator(start=keys.wal_seek_key(dbid, vnode, first_kept), stop=stop):
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
        now = _now_ms() if now_ms is None else now_ms
        total = self.total_bytes()
        need_size = total - max_total_bytes if max_total_bytes is not None and total > max_total_bytes else 0
        need_disk = 0
        if disk_usage_max_percent is not None:
            if volume_bytes is not None:
                used, capacity = total, volume_bytes
            else:
                du = shutil.disk_usage(self.path)
                used, capacity = du.used, du.total
            allowed = int(capacity * disk_usage_max_percent / 100)
            need_disk = max(0, used - allowed)
        cutoff = now - max_age_ms if max_age_ms is not None else None
        need = max(need_size, need_disk)
        if need <= 0 and cutoff is None:
            return []

        # One cursor per vnode holding >= 2 entries: (iterator, head, entry after head).
        cursors: dict[tuple[int, int], tuple[Iterator[tuple[bytes, bytes]], tuple[bytes, bytes]]] = {}
        heap: list[tuple[int, int, int, tuple[bytes, bytes]]] = []
        for d in self._dbs.values():
            for vnode, vs in enumerate(d.vnodes):
                if vs.entries < 2:
                    continue
                p = keys.vnode_prefix(keys.WAL, d.info.id, vnode)
                it = self._db.iterator(start=p, stop=keys.prefix_end(p))
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
            runs = plan.setdefault((dbid, vnode), [])
            if not runs or runs[-1][0] != reason:
                runs.append((reason, []))
            idx = _unpack_index(value)
            runs[-1][1].append(_Dead(key, idx[1], ts, idx[0]))
            freed += idx[1]
            it, after = cursors[(dbid, vnode)]
            first_kept[(dbid, vnode)] = keys.wal_key_version(after[0])
            nxt = next(it, None)
            if nxt is None:  # ``after`` is the newest entry: it stays
                heapq.heappop(heap)
                continue
            cursors[(dbid, vnode)] = (it, nxt)
            heapq.heapreplace(heap, (_unpack_index(after[1])[2], dbid, vnode, after))

        out: list[dict[str, Any]] = []
        removed: list[int] = []  # payload sequences
        for (dbid, vnode), runs in plan.items():
            d = self._dbs_by_id[dbid]
            vs = d.vnodes[vnode]
            for i, (reason, dead) in enumerate(runs):
                removed.extend(e.seq for e in dead)
                kept = (
                    keys.wal_key_version(runs[i + 1][1][0].key)
                    if i + 1 < len(runs)
                    else first_kept[(dbid, vnode)]
                )
                rec = self._remove_head(dbid, vnode, vs, dead, kept, None, reason, now)
                out.append(rec.as_dict(d.info.name))
            if compact:
                self._db.compact_range(
                    start=keys.vnode_prefix(keys.WAL, dbid, vnode),
                    stop=keys.wal_seek_key(dbid, vnode, first_kept[(dbid, vnode)]),
                )
        if compact and removed:
            # The bytes live in the payload log: compact the removed payloads' range.
            self._plog.compact_range(start=keys.u64(min(removed)), stop=keys.u64(max(removed) + 1))
        return out

    # log history (RT's log-history API) ----------------------------------------------------

    def history(self, db: str | None = None) -> list[HistoryRecord]:
        """The recorded removals (oldest first), of one database or all."""
        if db is None:
            return list(self._history.values())
        dbid = self._get(db).info.id
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
        dbs = [self._get(db)] if db is not None else sorted(self._dbs.values(), key=lambda d: d.info.name)
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
                    for key, value in self._db.iterator(prefix=p):
                        live["first_version"] = keys.wal_key_version(key)
                        live["first_ts"] = _unpack_index(value)[2]
                        break
                    if vs.tail_bases:
                        last_kind, last_value = vs.tail_entries[-1]
                        last_ts = _age_ts(last_kind, last_value)
                    else:
                        last_ts = _unpack_index(next(self._db.iterator(prefix=p, reverse=True))[1])[2]
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

    # producers -----------------------------------------------------------------------------

    def allocate_producer_id(self) -> int:
        """A producer id never handed out before (persisted before it is returned)."""
        raw = self._db.get(keys.NEXTPID)
        pid = keys.read_u64(raw) if raw else 1000
        self._db.put(keys.NEXTPID, keys.u64(pid + 1), sync=self.wal_level == 2)
        return pid

    def _producer_load(
        self, pkey: tuple[int, int, int]
    ) -> tuple[int, int, list[tuple[int, int, int, int]]] | None:
        if pkey in self._producers:
            return self._producers[pkey]
        raw = self._db.get(keys.producer_key(*pkey))
        state = keys.unpack_producer(raw) if raw is not None else None
        self._producers[pkey] = state
        return state

    def producer_state(self, db: str, vnode: int, producer_id: int) -> ProducerState | None:
        """Epoch, last sequence and last base offset of the producer's latest batch here."""
        dbid, _ = self._vnode(db, vnode)
        state = self._producer_load((dbid, vnode, producer_id))
        if state is None or not state[2]:
            return None
        last = state[2][-1]
        return ProducerState(state[0], last[1], last[2])

    def producer_batches(self, db: str, vnode: int, producer_id: int) -> list[ProducerBatch]:
        """The producer's last (up to 5) batches of its current epoch, oldest first."""
        dbid, _ = self._vnode(db, vnode)
        state = self._producer_load((dbid, vnode, producer_id))
        return [ProducerBatch(*b) for b in state[2]] if state else []

    def find_duplicate(
        self, db: str, vnode: int, producer_id: int, epoch: int, first_seq: int, last_seq: int
    ) -> ProducerBatch | None:
        """The stored batch with the same epoch and sequence range (a retried produce)."""
        dbid, _ = self._vnode(db, vnode)
        state = self._producer_load((dbid, vnode, producer_id))
        if state is None or state[0] != epoch:
            return None
        for b in state[2]:
            if b[0] == first_seq and b[1] == last_seq:
                return ProducerBatch(*b)
        return None

    # group offsets and metadata ------------------------------------------------------------

    def commit_offsets(
        self,
        group: str,
        offsets: Iterable[tuple[str, int, int, int, str | None]],
        commit_ms: int | None = None,
    ) -> None:
        """Atomically store (topic, partition, offset, leader_epoch, metadata) for a group."""
        ms = _now_ms() if commit_ms is None else commit_ms
        wb = self._batch()
        for topic, partition, offset, leader_epoch, metadata in offsets:
            wb.put(
                keys.offset_key(group, topic, partition), keys.pack_offset(offset, leader_epoch, ms, metadata)
            )
        self._write(wb)

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
            for key, value in self._db.iterator(prefix=p):
                _, topic, partition = keys.parse_offset_key(key)
                offset, leader_epoch, ms, metadata = keys.unpack_offset(value)
                out[(topic, partition)] = CommittedOffset(offset, leader_epoch, metadata, ms)
        return out

    def delete_offsets(
        self, group: str, topic: str | None = None, partitions: Iterable[int] | None = None
    ) -> int:
        """Delete a group's offsets: all, one topic's, or some partitions of it. Returns count."""
        wb = self._batch()
        n = 0
        if topic is not None and partitions is not None:
            for part in partitions:
                k = keys.offset_key(group, topic, part)
                if self._db.get(k) is not None:
                    wb.delete(k)
                    n += 1
        else:
            p = keys.offset_group_prefix(group) if topic is None else keys.offset_topic_prefix(group, topic)
            for k in self._db.iterator(prefix=p, include_value=False):
                wb.delete(k)
                n += 1
        if n:
            self._write(wb)
        return n

    def offset_groups(self) -> list[str]:
        """Groups that have committed offsets."""
        groups: list[str] = []
        it = self._db.iterator(prefix=keys.OFFSET, include_value=False)
        for key in it:
            group = keys.parse_offset_key(key)[0]
            groups.append(group)
            it.seek(keys.prefix_end(keys.offset_group_prefix(group)))
        return groups

    def put_group_metadata(self, group: str, data: bytes) -> None:
        self._db.put(keys.group_key(group), data, sync=self._sync_each)
        if not self._sync_each:
            self._dirty = True

    def get_group_metadata(self, group: str) -> bytes | None:
        return self._db.get(keys.group_key(group))

    def delete_group_metadata(self, group: str) -> None:
        self._db.delete(keys.group_key(group), sync=self._sync_each)
        if not self._sync_each:
            self._dirty = True

    def group_metadata(self) -> dict[str, bytes]:
        return {key[1:].decode(): value for key, value in self._db.iterator(prefix=keys.GROUP)}


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
