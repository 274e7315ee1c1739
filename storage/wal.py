"""Vnode WALs: appending and reading entries, the in-memory vnode state, the time index.

Why a module of its own: this is the data plane — every produce and fetch goes through it —
so its state is kept in memory (``Vnode``: counters, the time index's tail, a hot tail of
the newest entries) and LevelDB is only read for older entries. Writes go through the one
write path in ``storage.core``; meta and rows entries are one-entry transactions
(``storage.txn``), so their rules are written once.

Versions: per vnode, ``append`` gives a data entry of N records the versions
``next .. next+N-1``, ``append_rows`` a rows entry of N rows likewise, and ``append_meta`` a
meta entry one version. Versions are never reused, not after deletion and not after a drop
(a recreated database gets a new numeric id). ``read`` returns data entries only (plain
Kafka); ``read_entries`` returns all three kinds with their version counts.

An entry's age timestamp is a data batch's max timestamp, or the append time of a meta or
rows entry (TDengine ages WAL by write time; rows may be back-filled with old timestamps).
"""

from __future__ import annotations

import bisect
import itertools
import struct
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, NamedTuple

from tmqgate.protocol import clock
from tmqgate.protocol.records import build_end_txn_marker, parse_end_txn_marker
from tmqgate.storage import keys
from tmqgate.storage.core import NewEntry
from tmqgate.storage.model import ENTRY_KINDS, RowsEntry, WalEntry
from tmqgate.storage.producers import ProducerAppend, ProducerWindow
from tmqgate.storage.rollback import roll_back_vnode
from tmqgate.storage.txn import Transaction

if TYPE_CHECKING:
    from tmqgate.storage.catalog import Catalog
    from tmqgate.storage.core import Core
    from tmqgate.storage.producers import Producers
    from tmqgate.storage.wal_txns import WalTxns

BATCH_HEADER_SIZE = 61  # record batch v2 header up to and including the record count
_I64 = struct.Struct(">q")
_I32 = struct.Struct(">i")
#: a v2 batch's last offset delta (23), max timestamp (35), producer id, epoch, base sequence (43)
_LAST_DELTA = struct.Struct(">i")
_REPLICA_FIELDS = struct.Struct(">qqhi")  # max timestamp, producer id, epoch, base sequence at 35
_CONTROL = 0x20  # attributes bit 5
_PID_EPOCH = struct.Struct(">qh")  # a v2 batch's producer id and epoch, at byte 43
_TRANSACTIONAL = 0x10  # attributes bit 4 (the attributes' low byte is byte 22)
_ROWS_HEADER_SIZE = keys.ROWS_HEADER.size
#: A NamedTuple built without its Python-level __new__ (all fields given): the append path
#: makes two per batch.
_new_tuple = tuple.__new__


class Vnode:
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

    def __init__(self, next_version: int = 0, log_start: int = 0, size: int = 0, entries: int = 0) -> None:
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


def age_ts(kind: int, value: bytes) -> int:
    """An entry's age timestamp: a data batch's max timestamp (header bytes 35..43), the
    append time of meta and rows entries (TDengine ages its WAL by write time)."""
    ts: int
    if kind == keys.KIND_DATA:
        (ts,) = _I64.unpack_from(value, 35)
    else:
        (ts,) = _I64.unpack_from(value, 0)
    return ts


class Appended(NamedTuple):
    """What ``append`` did: the batch's base version and the vnode's log start afterwards
    (a produce response carries both)."""

    base: int
    log_start: int


class Wal:
    """The vnodes' WALs; see the module docstring. ``tail_cache_bytes`` caps each vnode's
    hot tail (0 = every read goes to LevelDB)."""

    def __init__(self, core: Core, catalog: Catalog, producers: Producers, tail_cache_bytes: int,
                 txns: WalTxns | None = None) -> None:
        self._core = core
        self._catalog = catalog
        self._producers = producers
        self._txns = txns
        self.tail_cache_bytes = tail_cache_bytes

    def load_vnodes(self) -> None:
        """Read every vnode's counters and time-index tail into the catalog's databases."""
        db = self._core.db
        for key, value in db.iterator(prefix=keys.VNODE):
            dbid, vnode = keys.parse_vnode_key(key)
            d = self._catalog.by_id(dbid)
            if d is None or vnode >= len(d.vnodes):
                continue
            nxt, start, size, entries = keys.unpack_vnode_state(value)
            if entries is None:  # written before the count existed: count once
                p = keys.vnode_prefix(keys.WAL, dbid, vnode)
                entries = sum(1 for _ in db.iterator(prefix=p, include_value=False))
            vs = Vnode(nxt, start, size, entries)
            self.load_max_ts(dbid, vnode, vs)
            d.vnodes[vnode] = vs

    def load_max_ts(self, dbid: int, vnode: int, vs: Vnode) -> None:
        """Set ``vs``'s max timestamp and its base from the time index's last entry."""
        p = keys.vnode_prefix(keys.TIME, dbid, vnode)
        for key, value in self._core.db.iterator(prefix=p, reverse=True):
            vs.max_ts = keys.time_key_ts(key)
            vs.max_ts_base = keys.read_u64(value)
            return
        vs.max_ts = None
        vs.max_ts_base = 0

    # appending -----------------------------------------------------------------------------

    def append(
        self,
        db: str,
        vnode: int,
        batch: bytes | bytearray | memoryview,
        record_count: int,
        max_timestamp: int,
        producer: ProducerAppend | None = None,
        leader_epoch: int | None = None,
    ) -> Appended:
        """Store a record batch v2 at the vnode's next versions.

        The batch's base offset (bytes 0..8, outside the CRC) is set to the version, and its
        partition leader epoch (bytes 12..16, outside the CRC too) to ``leader_epoch`` when
        given (a replicated partition's leader stamps its epoch, as Kafka's). Entry,
        counters, time index and — for an idempotent producer's batch — the producer's window
        after it (``producer.window_at(base)``: only the append knows the base) are written
        in one WriteBatch. ``max_timestamp`` feeds the time index and should equal the
        header's max timestamp (retention reads the header).
        """
        dbid, vs = self._catalog.vnode(db, vnode)
        if record_count < 1:
            raise ValueError("record_count must be >= 1")
        if len(batch) < BATCH_HEADER_SIZE:
            raise ValueError("not a record batch v2")
        core = self._core
        base = vs.next
        if leader_epoch is None:
            value = b"".join((keys.u64(base), memoryview(batch)[8:]))
        else:
            view = memoryview(batch)
            value = b"".join((keys.u64(base), view[8:12], _I32.pack(leader_epoch), view[16:]))
        nxt = base + record_count
        size = vs.size + len(value)
        wb = core.batch()
        wb.put(keys.vnode_key(dbid, vnode), keys.pack_vnode_state(nxt, vs.log_start, size, vs.entries + 1))
        new_max = vs.max_ts is None or max_timestamp > vs.max_ts
        if new_max:
            wb.put(keys.time_key(dbid, vnode, max_timestamp), keys.u64(base))
        staged = None  # (producer id, its window after this batch)
        if producer is not None:
            staged = (producer.producer_id, producer.window_at(base))
            self._producers.stage(wb, dbid, vnode, *staged)
        opened = None  # a transaction this transactional batch opens (storage.wal_txns)
        if value[22] & _TRANSACTIONAL and self._txns is not None:
            pid, epoch = _PID_EPOCH.unpack_from(value, 43)
            if pid >= 0:
                opened = self._txns.stage_open(wb, dbid, vnode, pid, base, epoch)
        batch_max_ts = age_ts(keys.KIND_DATA, value)  # the header's, as retention reads it
        key = keys.wal_key(dbid, vnode, base, keys.KIND_DATA)
        entry = _new_tuple(NewEntry, (key, value, batch_max_ts, batch_max_ts))
        core.write_entries(wb, (entry,), core.sync_each)
        vs.next = nxt
        vs.size = size
        vs.entries += 1
        vs.cache(base, keys.KIND_DATA, value, self.tail_cache_bytes)
        if new_max:
            vs.max_ts = max_timestamp
            vs.max_ts_base = base
        if staged is not None:
            self._producers.remember(dbid, vnode, *staged)
        if opened is not None and self._txns is not None:
            self._txns.opened(dbid, vnode, pid, opened)
        return _new_tuple(Appended, (base, vs.log_start))

    def append_marker(self, db: str, vnode: int, producer_id: int, producer_epoch: int, commit: bool,
                      coordinator_epoch: int, timestamp_ms: int | None = None, leader_epoch: int = -1,
                      replica_batch: bytes | None = None) -> int:
        """Write a commit or abort marker (a control batch) at the vnode's next version and
        close the producer's transaction there, in one WriteBatch with the producer's epoch
        (a marker carries it, as Kafka's ProducerStateManager takes it) and, for an abort, the
        aborted-index entry (``storage.wal_txns``). Returns the marker's offset.
        ``replica_batch``: a follower's copy of its leader's marker, stored as it is."""
        if self._txns is None:
            raise RuntimeError("this WAL keeps no transactions")
        dbid, vs = self._catalog.vnode(db, vnode)
        core = self._core
        base = vs.next
        now = clock.now_ms() if timestamp_ms is None else timestamp_ms
        value = replica_batch if replica_batch is not None else build_end_txn_marker(
            producer_id, producer_epoch, commit, coordinator_epoch, base_offset=base, timestamp=now,
            partition_leader_epoch=leader_epoch)
        size = vs.size + len(value)
        wb = core.batch()
        wb.put(keys.vnode_key(dbid, vnode), keys.pack_vnode_state(base + 1, vs.log_start, size, vs.entries + 1))
        new_max = vs.max_ts is None or now > vs.max_ts
        if new_max:
            wb.put(keys.time_key(dbid, vnode, now), keys.u64(base))
        window = self._producers.window(dbid, vnode, producer_id)
        # the marker's epoch (a newer one starts an empty window) and its coordinator epoch
        if window is None or window.epoch < producer_epoch:
            staged = ProducerWindow(producer_epoch, (), coordinator_epoch)
        else:
            staged = window._replace(coordinator_epoch=coordinator_epoch)
        self._producers.stage(wb, dbid, vnode, producer_id, staged)
        aborted = self._txns.stage_close(wb, dbid, vnode, producer_id, commit, base)
        key = keys.wal_key(dbid, vnode, base, keys.KIND_DATA)
        core.write_entries(wb, (NewEntry(key, value, now, now),), core.sync_each)
        vs.next = base + 1
        vs.size = size
        vs.entries += 1
        vs.cache(base, keys.KIND_DATA, value, self.tail_cache_bytes)
        if new_max:
            vs.max_ts = now
            vs.max_ts_base = base
        self._producers.remember(dbid, vnode, producer_id, staged)
        self._txns.closed(dbid, vnode, producer_id, aborted)
        return base

    # replicas (issue 16) ----------------------------------------------------------------------

    def append_replica(self, db: str, vnode: int, batch: bytes) -> None:
        """A follower's append of a batch fetched from its partition's leader, at the
        leader's offset (which must be this vnode's next version: ValueError otherwise) and with
        the leader's epoch in it; an idempotent producer's batch updates the producer's window
        here too, so this replica deduplicates retries as the leader did if it takes over."""
        dbid, vs = self._catalog.vnode(db, vnode)
        if len(batch) < BATCH_HEADER_SIZE:
            raise ValueError("not a record batch v2")
        base = _I64.unpack_from(batch, 0)[0]
        if base != vs.next:
            raise ValueError(f"replica append at {base}, the log ends at {vs.next}")
        span = _LAST_DELTA.unpack_from(batch, 23)[0] + 1
        max_ts, pid, epoch, first_seq = _REPLICA_FIELDS.unpack_from(batch, 35)
        if batch[22] & _CONTROL and pid >= 0 and self._txns is not None:
            # the leader's marker closes the producer's transaction here too (the aborted index,
            # the last stable offset), so read_committed reads the same on this replica
            marker = parse_end_txn_marker(batch)
            self.append_marker(db, vnode, pid, epoch, marker.commit, marker.coordinator_epoch, timestamp_ms=max_ts,
                               replica_batch=batch)
            return
        producer = None
        if pid >= 0 and first_seq >= 0 and not batch[22] & _CONTROL:
            window = self._producers.window(dbid, vnode, pid)
            producer = ProducerAppend(pid, epoch, first_seq, span, window)
        self.append(db, vnode, batch, span, max_ts, producer)

    def truncate(self, db: str, vnode: int, offset: int) -> None:
        """Remove versions >= ``offset`` (a follower's tail that its leader does not have:
        Kafka's replica truncation). The only case where versions are used again: the leader's
        log decides what they hold. Synced."""
        dbid, vs = self._catalog.vnode(db, vnode)
        if offset >= vs.next:
            return
        core = self._core
        state = core.db.get(keys.vnode_key(dbid, vnode))
        if state is None:
            return
        wb = core.batch(sync=True)
        seqs = roll_back_vnode(core.db, wb, dbid, vnode, offset, state)
        core.write_removing(wb, seqs)
        raw = core.db.get(keys.vnode_key(dbid, vnode))
        assert raw is not None
        vs.next, vs.log_start, vs.size, entries = keys.unpack_vnode_state(raw)
        vs.entries = entries if entries is not None else vs.entries
        n = bisect.bisect_left(vs.tail_bases, offset)
        vs.tail_bytes -= sum(len(v) for _, v in vs.tail_entries[n:])
        del vs.tail_bases[n:]
        del vs.tail_entries[n:]
        self.load_max_ts(dbid, vnode, vs)
        self._producers.forget_vnode(dbid, vnode)

    def epoch_end(self, db: str, vnode: int, epoch: int) -> tuple[int, int]:
        """Kafka's OffsetForLeaderEpoch on this log: (the largest leader epoch <= ``epoch``
        among its batches, the offset where that epoch ends — the first batch of a later
        epoch, or the log end); (-1, -1) when every batch is of a later epoch. Reads back
        from the newest batch, so it costs what the divergence is long. A vnode with a
        leader-epoch cache (``assign_epoch``: a replicated SQL database's) answers from it."""
        dbid, vs = self._catalog.vnode(db, vnode)
        end = vs.next
        cached = self.epochs(db, vnode)
        if cached:
            for e, start in reversed(cached):
                if e <= epoch:
                    return e, end
                end = start
            return -1, -1
        p = keys.vnode_prefix(keys.WAL, dbid, vnode)
        pairs = self._core.db.iterator(prefix=p, reverse=True)
        for base, kind, value in self._core.payloads.entries(pairs):
            if kind != keys.KIND_DATA or len(value) < 16:
                continue
            e = _I32.unpack_from(value, 12)[0]
            if e <= epoch:
                return e, end
            end = base
        return -1, -1

    def epochs(self, db: str, vnode: int) -> list[tuple[int, int]]:
        """The vnode's leader-epoch cache: (epoch, start version), oldest first."""
        dbid, _ = self._catalog.vnode(db, vnode)
        p = keys.vnode_prefix(keys.EPOCH, dbid, vnode)
        return [(keys.epoch_key_epoch(k), keys.read_u64(v)) for k, v in self._core.db.iterator(prefix=p)]

    def assign_epoch(self, db: str, vnode: int, epoch: int, start: int) -> None:
        """Leader ``epoch`` starts at version ``start`` (Kafka's LeaderEpochFileCache.assign):
        kept only when later than the cache's last epoch. Synced."""
        dbid, _ = self._catalog.vnode(db, vnode)
        cached = self.epochs(db, vnode)
        if cached and cached[-1][0] >= epoch:
            return
        wb = self._core.batch(sync=True)
        wb.put(keys.epoch_key(dbid, vnode, epoch), keys.u64(start))
        self._core.write(wb)

    def raw_entries(self, db: str, vnode: int, from_version: int, max_bytes: int) -> list[tuple[int, int, bytes, int]]:
        """(version, kind, stored value, version count) of the entries from the one holding
        ``from_version``, as stored (a follower stores them as they are: ``append_raw``); at
        least one, then while the total stays <= max_bytes."""
        dbid, vs = self._catalog.vnode(db, vnode)
        if from_version >= vs.next:
            return []
        out: list[tuple[int, int, bytes, int]] = []
        total = 0
        for version, kind, value, count in self._with_counts(self.entries_from(dbid, vnode, vs, from_version), vs):
            if out and total + len(value) > max_bytes:
                break
            out.append((version, kind, value, count))
            total += len(value)
        return out

    def last_stable_offset(self, db: str, vnode: int) -> int:
        """The first offset of the vnode's oldest open transaction (not below log start, as
        Kafka's first unstable offset after DeleteRecords moved log start past it), else the
        high watermark."""
        dbid, vs = self._catalog.vnode(db, vnode)
        first = self._txns.first_unstable(dbid, vnode) if self._txns is not None else None
        return vs.next if first is None else min(max(first, vs.log_start), vs.next)

    def transaction(self, *, sync: bool) -> Transaction:
        """A transaction over the catalog and these WALs (``storage.txn``)."""
        return Transaction(
            self._core, self._catalog, sync=sync, tail_cache_bytes=self.tail_cache_bytes, producers=self._producers,
            txns=self._txns,
        )

    def append_meta(self, db: str, vnode: int, payload: bytes, timestamp_ms: int | None = None) -> int:
        """Log a meta entry (create/alter table, …): one version; plain readers skip it.

        To log it together with the catalog change it describes, use
        ``with store.transaction() as tx: tx.create_stable(...); tx.append_meta(...)``.
        """
        tx = self.transaction(sync=self._core.sync_each)
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
        txn_producer: tuple[int, int] | None = None,
    ) -> int:
        """Log a rows entry (Arrow IPC bytes, opaque here) taking ``row_count`` versions;
        returns its base version (row i is version base + i). ``txn_producer``: the
        (producer id, epoch) of the transactional producer whose rows these are
        (``storage.wal_txns``).

        ``max_timestamp`` feeds the time index (``offset_for_timestamp``): pass the rows'
        timestamps as the Kafka record timestamps they become (milliseconds). Retention and
        the archiver age the entry by its append time ``timestamp_ms`` (default now).
        """
        return self.append_rows_many(
            db, vnode, (RowsEntry(payload, row_count, max_timestamp, min_timestamp),), timestamp_ms=timestamp_ms,
            txn_producer=txn_producer,
        )

    def append_rows_many(
        self,
        db: str,
        vnode: int,
        entries: Iterable[RowsEntry],
        *,
        producer: ProducerAppend | None = None,
        timestamp_ms: int | None = None,
        txn_producer: tuple[int, int] | None = None,
    ) -> int:
        """Log rows entries at consecutive versions in one WriteBatch; returns the first's base.

        ``producer``: the entries are one idempotent producer's batch (a database topic's
        Produce) — its window after them is written in the same WriteBatch, the batch's
        offsets being the entries' versions, first to last (``Transaction.producer_batch``).
        ``txn_producer``: (producer id, epoch) of a transactional producer — the entries join
        its open transaction on the vnode (``storage.wal_txns``).
        """
        tx = self.transaction(sync=self._core.sync_each)
        first: int | None = None
        for e in entries:
            base = tx.append_rows(db, vnode, e.payload, e.row_count, e.max_timestamp, e.min_timestamp, timestamp_ms,
                                  txn_producer)
            first = base if first is None else first
        if first is None:
            tx.abort()
            raise ValueError("no rows entry to append")
        if producer is not None:
            tx.producer_batch(db, vnode, producer)
        tx.commit()
        return first

    # reading -------------------------------------------------------------------------------

    def entries_from(self, dbid: int, vnode: int, vs: Vnode, from_version: int) -> Iterator[tuple[int, int, bytes]]:
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
        it = self._core.db.iterator(start=p, stop=keys.prefix_end(p))
        it.seek(keys.wal_seek_key(dbid, vnode, from_version))
        first = next(it, None)
        pairs: Iterable[tuple[bytes, bytes]]
        if first is None or keys.wal_key_version(first[0]) != from_version:
            it.seek(keys.wal_seek_key(dbid, vnode, from_version + 1))
            try:
                it.prev()
            except StopIteration:
                pass
            pairs = it
        else:
            pairs = itertools.chain((first,), it)
        return self._core.payloads.entries(pairs)

    @staticmethod
    def _with_counts(
        entries: Iterator[tuple[int, int, bytes]], vs: Vnode
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
        dbid, vs = self._catalog.vnode(db, vnode)
        if from_version >= vs.next:
            return []
        out: list[bytes] = []
        total = 0
        for _, kind, value in self.entries_from(dbid, vnode, vs, from_version):
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
        dbid, vs = self._catalog.vnode(db, vnode)
        if from_version >= vs.next:
            return []
        out: list[WalEntry] = []
        total = 0
        kinds = ENTRY_KINDS
        for version, kind, value, count in self._with_counts(
            self.entries_from(dbid, vnode, vs, from_version), vs
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
            out.append(_new_tuple(WalEntry, (version, kind == keys.KIND_META, value, kinds[kind], count)))
            total += n
            if total >= max_bytes:
                break
        return out

    def rows_in_range(self, db: str, vnode: int, from_version: int, upto: int, ts_low: int | None,
                      ts_high: int | None, max_bytes: int) -> tuple[list[tuple[int, bytes]], int]:
        """(base version, Arrow IPC payload) of the rows entries from ``from_version`` below
        ``upto`` whose rows' timestamps can fall in [ts_low, ts_high] (None: unbounded), read
        by their headers' min and max timestamps, so the others are never decoded; about
        ``max_bytes`` of payloads (at least one entry when any is there); with the version
        to read from next (``upto`` when all were read)."""
        dbid, vs = self._catalog.vnode(db, vnode)
        out: list[tuple[int, bytes]] = []
        total = 0
        low = -(2**63) if ts_low is None else ts_low
        high = 2**63 - 1 if ts_high is None else ts_high
        unpack = keys.ROWS_HEADER.unpack_from
        for version, kind, value in self.entries_from(dbid, vnode, vs, from_version):
            if version >= upto:
                return out, upto
            if version < from_version:  # the entry holding from_version began before it
                continue
            if kind != keys.KIND_ROWS:
                continue
            _, max_ts, min_ts = unpack(value)
            if max_ts < low or min_ts > high:
                continue
            # a copy, on purpose: a memoryview past the header was measured slower (Arrow then
            # copies the misaligned buffers itself, per column)
            out.append((version, value[_ROWS_HEADER_SIZE:]))
            total += len(value) - _ROWS_HEADER_SIZE
            if total >= max_bytes:
                return out, version + 1
        return out, upto

    def log_start(self, db: str, vnode: int) -> int:
        return self._catalog.vnode(db, vnode)[1].log_start

    def next_version(self, db: str, vnode: int) -> int:
        """The high watermark: every stored entry is committed."""
        return self._catalog.vnode(db, vnode)[1].next

    def log_size(self, db: str, vnode: int) -> int:
        """Bytes of stored entries (what retention.bytes counts)."""
        return self._catalog.vnode(db, vnode)[1].size

    def log_entries(self, db: str, vnode: int) -> int:
        """Number of stored entries of the vnode."""
        return self._catalog.vnode(db, vnode)[1].entries

    def total_bytes(self) -> int:
        """Bytes of stored WAL entries over all vnodes of all databases (what the archiver
        counts)."""
        return sum(vs.size for d in self._catalog.all_databases() for vs in d.vnodes)

    def offset_for_timestamp(self, db: str, vnode: int, ts: int) -> tuple[int, int] | None:
        """(base version, max timestamp) of the first data batch or rows entry whose max
        timestamp >= ts.

        Entry granularity: the broker reads that entry and picks the first record/row with
        timestamp >= ts, as Kafka returns. Never below log start.
        """
        dbid, vs = self._catalog.vnode(db, vnode)
        p = keys.vnode_prefix(keys.TIME, dbid, vnode)
        for key, value in self._core.db.iterator(start=keys.time_key(dbid, vnode, ts), stop=keys.prefix_end(p)):
            return max(keys.read_u64(value), vs.log_start), keys.time_key_ts(key)
        return None

    def max_timestamp_offset(self, db: str, vnode: int) -> tuple[int, int] | None:
        """(base version, timestamp) of the earliest batch holding the vnode's max timestamp."""
        _, vs = self._catalog.vnode(db, vnode)
        if vs.max_ts is None:
            return None
        return max(vs.max_ts_base, vs.log_start), vs.max_ts
