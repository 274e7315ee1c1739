"""Store: vnode WALs, catalog, producer state and group offsets in one LevelDB.

One LevelDB holds everything (layout in ``storage.keys``) so that a WAL entry, its vnode's
counters, the time index and the producer state go to disk in one atomic ``WriteBatch``.
The broker is single-threaded asyncio, so calls are plain and synchronous; per-vnode
counters (next version, log start, size, max timestamp) and producer states are cached in
memory and LevelDB is only read for WAL data and cold producer states.

Durability (TDengine's WAL_LEVEL / WAL_FSYNC_PERIOD):

* ``wal_level=1``: writes use ``sync=False``. LevelDB appends every write to its log file
  with ``write(2)`` before returning, so an acknowledged write survives SIGKILL of the
  process (not a power loss / kernel crash).
* ``wal_level=2, fsync_period_ms=0``: every write uses ``sync=True`` (fsync before return).
* ``wal_level=2, fsync_period_ms>0``: writes use ``sync=False`` and the broker calls
  ``sync()`` every ``fsync_period_ms``; it writes a tiny marker with ``sync=True``, which
  fsyncs LevelDB's log and with it every earlier write.

Catalog changes (create/drop database, vnodes, configs) are always written with sync=True:
they are rare and losing one is worse than losing the tail of a WAL.

Versions: per vnode, ``append`` gives a data entry of N records the versions
``next .. next+N-1`` and ``append_meta`` gives a meta entry one version. Versions are never
reused, not after deletion and not after a drop (a recreated database gets a new numeric id).

Retention (``enforce_retention``) follows Kafka per vnode, oldest entries first, whole entries
only: ``retention.ms`` removes entries while their max timestamp < now - retention.ms;
``retention.bytes`` removes the oldest entry while the vnode stays >= retention.bytes without
it. ``-1`` or a missing config means unlimited (the broker fills Kafka's defaults into a
database's configs when it creates one).
"""

from __future__ import annotations

import bisect
import itertools
import json
import os
import struct
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import NamedTuple

import plyvel

from storage import keys

_WriteBatch = plyvel._plyvel.WriteBatch

BATCH_HEADER_SIZE = 61  # record batch v2 header up to and including the record count
MAX_PRODUCER_BATCHES = 5  # Kafka keeps metadata of the last 5 batches per producer
_INT32_MAX = 2**31 - 1
_I64 = struct.Struct(">q")


class StorageError(Exception):
    """Base of the errors raised by the store."""


class UnknownDatabase(StorageError, KeyError):
    """No database of that name."""


class DatabaseExists(StorageError):
    """create_database on a name already in use."""


class UnknownVnode(StorageError, IndexError):
    """Vnode number outside 0 .. vgroups-1."""


class OffsetOutOfRange(StorageError):
    """delete_before beyond the high watermark."""


@dataclass(frozen=True)
class DatabaseInfo:
    """A database as the catalog knows it; ``id`` is the internal numeric id used in keys."""

    name: str
    vgroups: int
    topic_id: bytes
    configs: dict[str, str]
    created_ms: int
    id: int = 0


class ProducerState(NamedTuple):
    """What the broker needs for sequence checks (of the producer's latest batch)."""

    epoch: int
    last_seq: int
    last_base_offset: int


class ProducerBatch(NamedTuple):
    """One of the last MAX_PRODUCER_BATCHES batches of a producer, for duplicate detection."""

    first_seq: int
    last_seq: int
    base_offset: int
    last_offset: int


class WalEntry(NamedTuple):
    """A WAL entry as ``read_entries`` returns it; ``data`` is the batch or the meta payload."""

    version: int
    is_meta: bool
    data: bytes


class CommittedOffset(NamedTuple):
    offset: int
    leader_epoch: int
    metadata: str | None
    commit_ms: int


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
        "max_ts",
        "max_ts_base",
        "tail_bases",
        "tail_entries",
        "tail_bytes",
    )

    def __init__(self, next_version: int, log_start: int, size: int) -> None:
        self.next = next_version
        self.log_start = log_start
        self.size = size
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


def _entry_timestamp(key: bytes, value: bytes) -> int:
    """Max timestamp of a data batch (header bytes 35..43) or a meta entry's append time."""
    if key[17] == keys.KIND_DATA:
        return _I64.unpack_from(value, 35)[0]
    return _I64.unpack_from(value, 0)[0]


class Store:
    """The storage engine; see the module docstring for durability and retention."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        wal_level: int = 1,
        fsync_period_ms: int = 3000,
        *,
        write_buffer_size: int = 64 << 20,
        lru_cache_size: int = 64 << 20,
        tail_cache_bytes: int = 2 << 20,
    ) -> None:
        if wal_level not in (1, 2):
            raise ValueError("wal_level must be 1 or 2")
        if fsync_period_ms < 0:
            raise ValueError("fsync_period_ms must be >= 0")
        os.makedirs(path, exist_ok=True)
        self.path = os.fspath(path)
        self.wal_level = wal_level
        self.fsync_period_ms = fsync_period_ms
        self.tail_cache_bytes = tail_cache_bytes
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
        self._dbs: dict[str, _Db] = {}
        self._producers: dict[
            tuple[int, int, int], tuple[int, int, list[tuple[int, int, int, int]]] | None
        ] = {}
        self._load()

    # lifecycle -----------------------------------------------------------------------------

    @property
    def needs_periodic_sync(self) -> bool:
        """True when the broker should call ``sync()`` every ``fsync_period_ms``."""
        return self.wal_level == 2 and self.fsync_period_ms > 0

    def sync(self) -> None:
        """Make every earlier write durable: a sync=True write fsyncs LevelDB's log."""
        if self._dirty:
            self._db.put(keys.SYNC, b"", sync=True)
            self._dirty = False

    def close(self) -> None:
        if self._db.closed:
            return
        if self.wal_level == 2:
            self.sync()
        self._db.close()

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
        """Read the catalog and vnode counters, then drop data of databases no longer listed."""
        db = self._db
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
            )
            by_id[dbid] = _Db(info, [_Vnode(0, 0, 0) for _ in range(info.vgroups)])
        for key, value in db.iterator(prefix=keys.VNODE):
            dbid, vnode = keys.parse_vnode_key(key)
            d = by_id.get(dbid)
            if d is None or vnode >= len(d.vnodes):
                continue
            vs = _Vnode(*keys.unpack_vnode_state(value))
            self._load_max_ts(dbid, vnode, vs)
            d.vnodes[vnode] = vs
        self._dbs = {d.info.name: d for d in by_id.values()}
        self._gc_orphans(set(by_id))

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
        it = self._db.iterator(prefix=prefix, include_value=False)
        while True:
            wb = self._db.write_batch()
            n = 0
            for key in it:
                wb.delete(key)
                n += 1
                if n >= chunk:
                    break
            if n:
                self._write(wb)
            if n < chunk:
                return

    # catalog -------------------------------------------------------------------------------

    def create_database(
        self,
        name: str,
        vgroups: int,
        configs: dict[str, str] | None = None,
        *,
        topic_id: bytes | None = None,
        created_ms: int | None = None,
    ) -> DatabaseInfo:
        """Create a database of ``vgroups`` empty vnodes with a fresh numeric id and topic id."""
        if name in self._dbs:
            raise DatabaseExists(name)
        if vgroups < 1:
            raise ValueError("vgroups must be >= 1")
        raw = self._db.get(keys.NEXTDB)
        dbid = keys.read_u32(raw) if raw else 1
        info = DatabaseInfo(
            name=name,
            vgroups=vgroups,
            topic_id=topic_id if topic_id is not None else uuid.uuid4().bytes,
            configs={str(k): str(v) for k, v in (configs or {}).items()},
            created_ms=_now_ms() if created_ms is None else created_ms,
            id=dbid,
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
            wb.put(keys.vnode_key(dbid, v), keys.pack_vnode_state(0, 0, 0))
        self._write(wb)
        self._dbs[name] = _Db(info, [_Vnode(0, 0, 0) for _ in range(vgroups)])
        return info

    @staticmethod
    def _dbinfo_json(info: DatabaseInfo) -> bytes:
        return json.dumps(
            {
                "name": info.name,
                "vgroups": info.vgroups,
                "topic_id": info.topic_id.hex(),
                "created_ms": info.created_ms,
            }
        ).encode()

    def drop_database(self, name: str) -> None:
        """Remove a database: the catalog atomically first, then its data by range deletes."""
        d = self._get(name)
        dbid = d.info.id
        wb = self._batch(sync=True)
        wb.delete(keys.name_key(name))
        wb.delete(keys.dbinfo_key(dbid))
        wb.delete(keys.dbconf_key(dbid))
        wb.delete(keys.topic_id_key(d.info.topic_id))
        self._write(wb)
        del self._dbs[name]
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
        info = DatabaseInfo(
            d.info.name, new_count, d.info.topic_id, d.info.configs, d.info.created_ms, d.info.id
        )
        wb = self._batch(sync=True)
        wb.put(keys.dbinfo_key(info.id), self._dbinfo_json(info))
        for v in range(old, new_count):
            wb.put(keys.vnode_key(info.id, v), keys.pack_vnode_state(0, 0, 0))
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
        info = DatabaseInfo(
            d.info.name, d.info.vgroups, d.info.topic_id, merged, d.info.created_ms, d.info.id
        )
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
        wb = self._batch()
        wb.put(keys.wal_key(dbid, vnode, base, keys.KIND_DATA), value)
        wb.put(keys.vnode_key(dbid, vnode), keys.pack_vnode_state(nxt, vs.log_start, size))
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
        self._write(wb)
        vs.next = nxt
        vs.size = size
        vs.cache(base, keys.KIND_DATA, value, self.tail_cache_bytes)
        if new_max:
            vs.max_ts = max_timestamp
            vs.max_ts_base = base
        if pstate is not None:
            self._producers[pkey] = pstate
        return base

    def append_meta(self, db: str, vnode: int, payload: bytes, timestamp_ms: int | None = None) -> int:
        """Log a meta entry (create/alter table, …): one version; plain readers skip it."""
        dbid, vs = self._vnode(db, vnode)
        base = vs.next
        ts = _now_ms() if timestamp_ms is None else timestamp_ms
        value = _I64.pack(ts) + bytes(payload)
        size = vs.size + len(value)
        wb = self._batch()
        wb.put(keys.wal_key(dbid, vnode, base, keys.KIND_META), value)
        wb.put(keys.vnode_key(dbid, vnode), keys.pack_vnode_state(base + 1, vs.log_start, size))
        self._write(wb)
        vs.next = base + 1
        vs.size = size
        vs.cache(base, keys.KIND_META, value, self.tail_cache_bytes)
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
        return ((keys.wal_key_version(k), k[17], v) for k, v in pairs)

    def read(self, db: str, vnode: int, from_version: int, max_bytes: int) -> list[bytes]:
        """Stored data batches whose last version >= from_version, in order.

        The first may start before from_version (the client skips records below it, as with
        Kafka). At least one batch is returned if any exists; then batches are added while
        the total stays <= max_bytes. Meta entries are skipped.
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
        """Like ``read`` but with versions and meta entries (payload without the timestamp)."""
        dbid, vs = self._vnode(db, vnode)
        if from_version >= vs.next:
            return []
        out: list[WalEntry] = []
        total = 0
        for version, kind, value in self._entries_from(dbid, vnode, vs, from_version):
            is_meta = kind == keys.KIND_META
            if is_meta:
                if not include_meta:
                    continue
                value = value[8:]
            n = len(value)
            if out and total + n > max_bytes:
                break
            out.append(WalEntry(version, is_meta, value))
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

    def offset_for_timestamp(self, db: str, vnode: int, ts: int) -> tuple[int, int] | None:
        """(base version, max timestamp) of the first data batch whose max timestamp >= ts.

        Batch granularity: the broker reads that batch (``read(db, vnode, offset, 1)``) and
        picks the first record with timestamp >= ts, as Kafka returns. Never below log start.
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
        self._truncate_head(dbid, vnode, vs, lambda key, value, end, size: end <= offset, offset)
        return vs.log_start

    def enforce_retention(self, now_ms: int | None = None, defaults: dict[str, str] | None = None) -> int:
        """Apply retention.ms then retention.bytes to every vnode; returns entries removed.

        `defaults` supplies the values for databases that set none of their own (the broker's
        Kafka defaults); without it a missing setting means no limit.
        """
        now = _now_ms() if now_ms is None else now_ms
        removed = 0
        for d in list(self._dbs.values()):
            configs = {**defaults, **d.info.configs} if defaults else d.info.configs
            rms = _int_config(configs, "retention.ms")
            rbytes = _int_config(configs, "retention.bytes")
            if rms < 0 and rbytes < 0:
                continue
            for vnode, vs in enumerate(d.vnodes):
                if rms >= 0:
                    limit = now - rms
                    removed += self._truncate_head(
                        d.info.id,
                        vnode,
                        vs,
                        lambda key, value, end, size, limit=limit: _entry_timestamp(key, value) < limit,
                    )
                if rbytes >= 0 and vs.size > rbytes:
                    removed += self._truncate_head(
                        d.info.id, vnode, vs, lambda key, value, end, size, rb=rbytes: size - len(value) >= rb
                    )
        return removed

    def _truncate_head(
        self,
        dbid: int,
        vnode: int,
        vs: _Vnode,
        remove: Callable[[bytes, bytes, int, int], bool],
        new_log_start: int | None = None,
    ) -> int:
        """Remove the longest prefix of entries for which remove(key, value, end, size) holds.

        ``end`` is the entry's last version + 1 and ``size`` the vnode size before removing
        it. Moves log start to max(old, first kept base, new_log_start) and repairs the
        time index head. Returns how many entries were removed.
        """
        p = keys.vnode_prefix(keys.WAL, dbid, vnode)
        it = self._db.iterator(start=p, stop=keys.prefix_end(p))
        dead: list[bytes] = []
        freed = 0
        cur = next(it, None)
        while cur is not None:
            nxt = next(it, None)
            key, value = cur
            end = keys.wal_key_version(nxt[0]) if nxt is not None else vs.next
            if not remove(key, value, end, vs.size - freed):
                break
            dead.append(key)
            freed += len(value)
            cur = nxt
        if not dead:
            if new_log_start is not None and new_log_start > vs.log_start:
                self._db.put(
                    keys.vnode_key(dbid, vnode),
                    keys.pack_vnode_state(vs.next, new_log_start, vs.size),
                    sync=self._sync_each,
                )
                if not self._sync_each:
                    self._dirty = True
                vs.log_start = new_log_start
            return 0
        first_kept = keys.wal_key_version(cur[0]) if cur is not None else vs.next
        log_start = max(vs.log_start, first_kept, new_log_start or 0)
        size = vs.size - freed
        wb = self._batch()
        for key in dead:
            wb.delete(key)
        wb.put(keys.vnode_key(dbid, vnode), keys.pack_vnode_state(vs.next, log_start, size))
        max_ts = self._reindex_head(dbid, vnode, first_kept, wb)
        self._write(wb)
        vs.log_start = log_start
        vs.size = size
        vs.uncache_below(first_kept)
        if max_ts is not None:
            vs.max_ts, vs.max_ts_base = max_ts
        return len(dead)

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
            if key[17] != keys.KIND_DATA:
                continue
            ts = _entry_timestamp(key, value)
            if running is None or ts > running:
                running, running_base = ts, keys.wal_key_version(key)
                wb.put(keys.time_key(dbid, vnode, ts), keys.u64(running_base))
        if survivor is not None:
            return None
        return running, running_base

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


def _int_config(configs: dict[str, str], name: str) -> int:
    raw = configs.get(name)
    if raw is None:
        return -1
    try:
        return int(raw)
    except ValueError:
        return -1
