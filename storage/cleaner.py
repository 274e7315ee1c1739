"""The log cleaner: compacted topics (``cleanup.policy`` includes ``compact``) over the vnode WAL.

Why here: it rewrites WAL entries, and storage is the only code that touches LevelDB. It
follows Apache Kafka's LogCleaner / LogCleanerManager (behaviour learnt, not code copied):

* Cleanable range of a vnode: from log start to the first of — the *head* (tmqgate's active
  segment: the newest entries that fit in ``segment.bytes`` and lie within ``segment.ms`` of
  the newest one; the newest entry always), the first entry younger than
  ``min.compaction.lag.ms``, the last stable offset (an open transaction's first offset).
  Nothing at or past the range's end is read or changed.
* Dirty part: from the vnode's checkpoint (key 0x21, the first offset not yet cleaned) to the
  range's end. A vnode is cleaned when its dirty bytes / cleanable bytes >=
  ``min.cleanable.dirty.ratio``, or when the oldest dirty entry is older than
  ``max.compaction.lag.ms``.
* A cleaning builds a map key -> newest offset over the dirty part (bounded by
  ``log_cleaner_dedupe_buffer_size``: 24 bytes per key as Kafka's SkimpyOffsetMap, times
  ``log_cleaner_io_buffer_load_factor``; a full map ends the cleaning where it stopped), then
  walks log start .. the map's end: a record survives if no newer record of its key is in the
  map; records without a key go (Kafka counts them invalid); a tombstone (null value) that
  survives gets its batch a delete horizon (now + ``delete.retention.ms``, the batch's
  delete-horizon attribute and base timestamp, KIP-534) and goes at a cleaning after that
  horizon; the data batches of aborted transactions go whole (the aborted-transaction index);
  a transaction marker (control batch) stays while records of its transaction do, then gets
  a delete horizon the same way and goes at a cleaning after it.
* Offsets never change: a rewritten batch keeps its base offset, last offset delta, producer
  id, epoch and base sequence, transactional flag and compression; its records keep their
  offsets (gaps between them). An entry left with no record is deleted (a gap between
  entries; readers already return the entry before a gap and the client skips what it did
  not ask for; the producer state lives in its own keys, so nothing needs the empty batch).
* Bounded steps: ``Cleaning.step`` reads at most ``budget`` bytes of entries and returns a
  plan (read-only, so it may run in a thread); ``Cleaning.commit`` applies a plan (on the
  thread that writes the store) through ``Core.write_replacing`` — crash-safe: the old
  entries or the new ones, never neither (``storage.keys``). An entry changed or removed in
  between (retention, DeleteRecords) is left alone. ``Cleaning.finish`` writes the checkpoint;
  ``Cleaning.reclaim`` compacts the freed payloads' range so the disk gets the space back.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple

from tmqgate.protocol import clock
from tmqgate.protocol.compression import CorruptRecord
from tmqgate.protocol.records import (
    RecordRef,
    build_batch,
    decode_records,
    filtered_batch,
    parse_header,
    scan_records,
)
from tmqgate.storage import keys
from tmqgate.storage.core import NewEntry
from tmqgate.storage.model import StorageError
from tmqgate.storage.wal import age_ts

if TYPE_CHECKING:
    from tmqgate.storage.catalog import Catalog
    from tmqgate.storage.core import Core
    from tmqgate.storage.wal_txns import WalTxns

#: Kafka's topic defaults of the settings the cleaner reads (LogConfig).
DEFAULTS = {
    "cleanup.policy": "delete",
    "min.cleanable.dirty.ratio": "0.5",
    "min.compaction.lag.ms": "0",
    "max.compaction.lag.ms": str(2**63 - 1),
    "delete.retention.ms": "86400000",
    "segment.bytes": "1073741824",
    "segment.ms": "604800000",
}
#: Bytes per key in Kafka's SkimpyOffsetMap (a 16-byte hash and an 8-byte offset).
MAP_ENTRY_BYTES = 24


class Settings(NamedTuple):
    """A compacted topic's cleaner settings (its configs over the broker's defaults)."""

    min_dirty_ratio: float
    min_lag_ms: int
    max_lag_ms: int
    delete_retention_ms: int
    segment_bytes: int
    segment_ms: int

    @classmethod
    def of(cls, configs: dict[str, str]) -> Settings:
        def get(name: str) -> str:
            return configs.get(name, DEFAULTS[name])

        return cls(float(get("min.cleanable.dirty.ratio")), int(get("min.compaction.lag.ms")),
                   int(get("max.compaction.lag.ms")), int(get("delete.retention.ms")),
                   int(get("segment.bytes")), int(get("segment.ms")))


def policies(configs: dict[str, str]) -> set[str]:
    """The cleanup.policy items ("compact", "delete"; empty: keep everything)."""
    return {p for p in configs.get("cleanup.policy", DEFAULTS["cleanup.policy"]).split(",") if p}


class _Entry(NamedTuple):
    key: bytes
    idx: bytes  # the WAL key's value (payload sequence, length, age ts, index ts)
    base: int
    size: int
    age_ts: int


class Change(NamedTuple):
    """One entry of a plan: its key and old payload sequence (what it must still be at
    commit), its old size, and the new stored batch (None: the entry goes)."""

    key: bytes
    old_seq: int
    old_size: int
    new: bytes | None


@dataclass
class CleanStats:
    """What a cleaning did (Kafka's CleanerStats)."""

    bytes_read: int = 0  # by the clean pass (Kafka's cleaner stats count it apart from the map's)
    map_bytes_read: int = 0
    bytes_written: int = 0
    records_read: int = 0
    records_kept: int = 0
    entries_rewritten: int = 0
    entries_deleted: int = 0
    cleaned_to: int = -1  # the checkpoint written (-1: not due, nothing done)
    freed_first: int = -1  # the payload sequences the cleaning freed: first .. last (-1: none)
    freed_last: int = -1
    seconds: float = 0.0
    dirty_ratio: float = 0.0


@dataclass
class Cleaning:
    """One cleaning of one vnode; see the module docstring. Built on the store's thread
    (``Cleaner.cleanings``); ``step`` may run in another thread; ``commit`` and ``finish``
    run on the store's thread."""

    cleaner: Cleaner
    db: str
    dbid: int
    vnode: int
    settings: Settings
    now_ms: int
    log_start: int
    stable_end: int
    checkpoint: int
    aborted: list[tuple[int, int, int]]
    max_map_keys: int
    stats: CleanStats = field(default_factory=CleanStats)
    _entries: list[_Entry] | None = None
    _end: int = 0  # the cleanable range's end (exclusive)
    _map: dict[bytes, int] = field(default_factory=dict)
    _map_end: int = -1  # the map covers [checkpoint, _map_end) once built
    _txn_data: set[int] = field(default_factory=set)  # producers whose transaction keeps records
    _pos: int = 0  # next entry index (map pass, then clean pass)
    _phase: str = "scan"  # scan -> map -> clean -> done
    _started: float = field(default_factory=time.perf_counter)
    _failed: bool = False
    #: The vnode's state when this cleaning was made (see ``Cleaner.cleanings``).
    memo: tuple[object, ...] = ()

    # the plan (read only) ------------------------------------------------------------------

    def step(self, budget: int) -> list[Change] | None:
        """Advance by about ``budget`` bytes of entries read; the changes to commit (maybe
        none), or None when the cleaning is over (then ``finish``)."""
        try:
            if self._phase == "scan":
                self._scan()
                return [] if self._phase != "done" else None
            if self._phase == "map":
                self._build_map(budget)
                return []
            if self._phase == "clean":
                return self._clean(budget)
        except StorageError:  # an entry removed under us (retention): try again next round
            self._phase = "done"
            self._map_end = -1
            self._failed = True
        return None

    def _scan(self) -> None:
        """The vnode's index (no payload read): the cleanable range and whether it is due."""
        p = keys.vnode_prefix(keys.WAL, self.dbid, self.vnode)
        entries: list[_Entry] = []
        db = self.cleaner.core.db
        for k, v in db.iterator(start=keys.wal_seek_key(self.dbid, self.vnode, self.log_start),
                                stop=keys.prefix_end(p)):
            base = keys.wal_key_version(k)
            if k[17] != keys.KIND_DATA:
                continue
            _, size, age, _ = keys.unpack_wal_index(v)
            entries.append(_Entry(k, v, base, size, age))
        self._entries = entries
        s = self.settings
        if not entries:
            self._phase = "done"
            return
        # The head (Kafka's active segment): the newest entry, and those before it while they
        # fit in segment.bytes and lie within segment.ms of it.
        newest = entries[-1].age_ts
        head = len(entries) - 1
        total = entries[head].size
        while head > 0:
            e = entries[head - 1]
            if total + e.size > s.segment_bytes or e.age_ts < newest - s.segment_ms:
                break
            total += e.size
            head -= 1
        end_i = head
        for i in range(end_i):  # never at or past the last stable offset
            if entries[i].base >= self.stable_end:
                end_i = i
                break
        lag_limit = self.now_ms - s.min_lag_ms
        for i in range(end_i):
            if entries[i].age_ts > lag_limit:
                end_i = i
                break
        self._end = entries[end_i].base if end_i < len(entries) else self.stable_end
        first_dirty = max(self.checkpoint, self.log_start)
        clean = sum(e.size for e in entries[:end_i] if e.base < first_dirty)
        dirty_entries = [e for e in entries[:end_i] if e.base >= first_dirty]
        dirty = sum(e.size for e in dirty_entries)
        ratio = dirty / (clean + dirty) if clean + dirty else 0.0
        self.stats.dirty_ratio = ratio
        overdue = bool(dirty_entries) and dirty_entries[0].age_ts < self.now_ms - s.max_lag_ms
        if not dirty or (ratio < s.min_dirty_ratio and not overdue):
            self._phase = "done"
            return
        self._pos = end_i - len(dirty_entries)
        self._entries = entries[:end_i]
        self._phase = "map"

    def _payloads(self, chunk: list[_Entry]) -> Iterable[tuple[_Entry, bytes]]:
        got = self.cleaner.core.payloads.entries((e.key, e.idx) for e in chunk)
        for e, (_, _, value) in zip(chunk, got, strict=True):
            if self._phase == "map":
                self.stats.map_bytes_read += len(value)
            else:
                self.stats.bytes_read += len(value)
            yield e, value

    def _chunk(self, budget: int) -> list[_Entry]:
        assert self._entries is not None
        out: list[_Entry] = []
        total = 0
        while self._pos < len(self._entries) and (not out or total < budget):
            e = self._entries[self._pos]
            out.append(e)
            total += e.size
            self._pos += 1
        return out

    def _aborted_batch(self, producer_id: int, offset: int) -> bool:
        return any(pid == producer_id and first <= offset <= last for pid, first, last in self.aborted)

    def _build_map(self, budget: int) -> None:
        assert self._entries is not None
        offset_map = self._map
        for e, value in self._payloads(self._chunk(budget)):
            h = parse_header(value)
            if h.is_control or (h.is_transactional and self._aborted_batch(h.producer_id, h.base_offset)):
                continue
            for r in scan_records(value)[1]:
                if r.key is not None:
                    offset_map[r.key] = r.offset
            if len(offset_map) >= self.max_map_keys:  # full: clean up to here this time
                self._map_end = e.base + h.last_offset_delta + 1
                break
        else:
            if self._pos < len(self._entries):
                return
            self._map_end = self._end
        self._entries = [e for e in self._entries if e.base < self._map_end]
        self._pos = 0
        self._phase = "clean"

    def _clean(self, budget: int) -> list[Change] | None:
        assert self._entries is not None
        if self._pos >= len(self._entries):
            self._phase = "done"
            return None
        changes: list[Change] = []
        for e, value in self._payloads(self._chunk(budget)):
            try:
                change = self._filter(e, value)
            except CorruptRecord:  # never expected of a validated, stored batch: keep it
                change = None
            if change is not None:
                changes.append(change)
        return changes

    def _filter(self, e: _Entry, value: bytes) -> Change | None:
        """The entry's batch filtered as Kafka's filterTo does; None when it stays as it is."""
        h = parse_header(value)
        seq = keys.wal_index_seq(e.idx)
        if h.is_control:
            return self._filter_marker(e, value, seq)
        stats = self.stats
        stats.records_read += h.record_count
        if h.is_transactional and self._aborted_batch(h.producer_id, h.base_offset):
            stats.entries_deleted += 1
            return Change(e.key, seq, e.size, None)
        buf, records = scan_records(value)
        horizon = h.base_timestamp if h.has_delete_horizon else None
        kept: list[RecordRef] = []
        tombstones = False
        offset_map = self._map
        for r in records:
            if r.key is None or offset_map.get(r.key, -1) > r.offset:
                continue
            if r.tombstone:
                if horizon is not None and horizon <= self.now_ms:
                    continue
                tombstones = True
            kept.append(r)
        stats.records_kept += len(kept)
        if kept and h.is_transactional:
            self._txn_data.add(h.producer_id)  # its marker stays while this data does
        if len(kept) == len(records) and not (tombstones and horizon is None):
            return None
        if not kept:
            stats.entries_deleted += 1
            return Change(e.key, seq, e.size, None)
        if not (tombstones and horizon is None):
            new = filtered_batch(value, buf, kept)  # the kept records' bytes as they are
            stats.entries_rewritten += 1
            stats.bytes_written += len(new)
            return Change(e.key, seq, e.size, new)
        # A tombstone kept for the first time: the batch gets a delete horizon (KIP-534), its
        # base timestamp, so the records' timestamp deltas are written again relative to it.
        horizon = self.now_ms + self.settings.delete_retention_ms
        offsets = {r.offset for r in kept}
        new = build_batch(
            [r for r in decode_records(value) if r.offset in offsets], base_offset=h.base_offset,
            compression=h.compression, producer_id=h.producer_id,
            producer_epoch=h.producer_epoch, base_sequence=h.base_sequence, timestamp_type=h.timestamp_type,
            is_transactional=h.is_transactional, partition_leader_epoch=h.partition_leader_epoch,
            last_offset_delta=h.last_offset_delta, delete_horizon_ms=horizon)
        stats.entries_rewritten += 1
        stats.bytes_written += len(new)
        return Change(e.key, seq, e.size, new)

    def _filter_marker(self, e: _Entry, value: bytes, seq: int) -> Change | None:
        """A transaction marker stays while records of its transaction do; then it gets a
        delete horizon (now + delete.retention.ms) and goes at a cleaning after it, as Kafka's
        cleaner treats control batches."""
        h = parse_header(value)
        if h.producer_id in self._txn_data:
            self._txn_data.discard(h.producer_id)
            return None
        if h.has_delete_horizon:
            if h.base_timestamp > self.now_ms:
                return None
            self.stats.entries_deleted += 1
            return Change(e.key, seq, e.size, None)
        new = build_batch(
            decode_records(value), base_offset=h.base_offset, producer_id=h.producer_id,
            producer_epoch=h.producer_epoch, base_sequence=h.base_sequence, timestamp_type=h.timestamp_type,
            is_transactional=True, is_control=True, partition_leader_epoch=h.partition_leader_epoch,
            last_offset_delta=h.last_offset_delta,
            delete_horizon_ms=self.now_ms + self.settings.delete_retention_ms)
        self.stats.entries_rewritten += 1
        self.stats.bytes_written += len(new)
        return Change(e.key, seq, e.size, new)

    # applying it (the store's thread) ------------------------------------------------------

    def commit(self, changes: list[Change]) -> int:
        """Apply a step's plan in one crash-safe write; returns the entries changed."""
        if not changes:
            return 0
        core = self.cleaner.core
        d = self.cleaner.catalog.by_id(self.dbid)
        if d is None or self.vnode >= len(d.vnodes):
            self._phase = "done"
            self._map_end = -1
            return 0
        vs = d.vnodes[self.vnode]
        wb = core.batch()
        new_entries: list[NewEntry] = []
        old_seqs: list[int] = []
        dsize = 0
        deleted = 0
        touched = -1
        for ch in changes:
            raw = core.db.get(ch.key)
            if raw is None or keys.wal_index_seq(raw) != ch.old_seq:
                continue  # removed or changed since the plan was made
            old_seqs.append(ch.old_seq)
            dsize -= ch.old_size
            touched = max(touched, keys.wal_key_version(ch.key))
            if ch.new is None:
                wb.delete(ch.key)
                deleted += 1
            else:
                ts = age_ts(keys.KIND_DATA, ch.new)
                new_entries.append(NewEntry(ch.key, ch.new, ts, ts))
                dsize += len(ch.new)
        if not old_seqs:
            return 0
        wb.put(keys.vnode_key(self.dbid, self.vnode),
               keys.pack_vnode_state(vs.next, vs.log_start, vs.size + dsize, vs.entries - deleted))
        core.write_replacing(wb, new_entries, old_seqs)
        st = self.stats
        st.freed_first = min(old_seqs) if st.freed_first < 0 else min(st.freed_first, *old_seqs)
        st.freed_last = max(st.freed_last, *old_seqs)
        vs.size += dsize
        vs.entries -= deleted
        if vs.tail_bases and touched >= vs.tail_bases[0]:
            vs.uncache_below(touched + 1)
        return len(old_seqs)

    def finish(self) -> CleanStats:
        """Write the checkpoint (the map's end: the first offset not cleaned) if the cleaning
        got through; returns its figures."""
        if self._map_end >= 0 and self.cleaner.catalog.by_id(self.dbid) is not None:
            self.cleaner.core.put(keys.cleaner_key(self.dbid, self.vnode), keys.u64(self._map_end))
            self.stats.cleaned_to = self._map_end
        elif not self._failed and self.memo:  # not due: not scanned again until the vnode changes
            self.cleaner.idle[(self.dbid, self.vnode)] = self.memo
        self.stats.seconds = time.perf_counter() - self._started
        return self.stats

    def reclaim(self) -> None:
        """Give the freed payloads' disk space back now: the payload segments the cleaning
        left mostly dead are copied forward and unlinked (``PayloadLog.reclaim``). Safe in a
        worker thread; a no-op when nothing was freed."""
        if self.stats.freed_last >= 0:
            self.cleaner.core.payloads.reclaim()

    def run(self, budget: int) -> CleanStats:
        """Every step at once on the calling thread (tests, tools)."""
        while (changes := self.step(budget)) is not None:
            self.commit(changes)
        stats = self.finish()
        self.reclaim()
        return stats


class Cleaner:
    """The store's log cleaner (see the module docstring)."""

    def __init__(self, core: Core, catalog: Catalog, txns: WalTxns | None) -> None:
        self.core = core
        self.catalog = catalog
        self.txns = txns
        #: (db id, vnode) -> its state when a scan found it not due: while that state holds (no
        #: append, no removal, same configs) and the topic has no time-based trigger
        #: (min.compaction.lag.ms 0, max.compaction.lag.ms unset), the vnode is not scanned again.
        self.idle: dict[tuple[int, int], tuple[object, ...]] = {}

    def checkpoint(self, dbid: int, vnode: int) -> int:
        """The vnode's first dirty offset (0: never cleaned)."""
        raw = self.core.db.get(keys.cleaner_key(dbid, vnode))
        return keys.read_u64(raw) if raw is not None else 0

    def cleanings(self, now_ms: int | None = None, defaults: dict[str, str] | None = None,
                  dedupe_buffer_size: int = 128 << 20, load_factor: float = 0.9) -> list[Cleaning]:
        """A cleaning per vnode of every Kafka database whose cleanup.policy includes compact
        (``defaults``: the broker's topic defaults, under a database's own configs); each
        finds out in its first step whether it is due."""
        now = clock.now_ms() if now_ms is None else now_ms
        max_keys = max(1, int(dedupe_buffer_size / MAP_ENTRY_BYTES * load_factor))
        out: list[Cleaning] = []
        for d in list(self.catalog.all_databases()):
            if d.info.kind == "tsdb":
                continue
            configs = {**defaults, **d.info.configs} if defaults else d.info.configs
            if "compact" not in policies(configs):
                continue
            settings = Settings.of(configs)
            timeless = settings.min_lag_ms <= 0 and settings.max_lag_ms >= 2**63 - 1
            for vnode, vs in enumerate(d.vnodes):
                checkpoint = self.checkpoint(d.info.id, vnode)
                memo = (vs.next, vs.log_start, vs.size, checkpoint, settings) if timeless else ()
                if memo and self.idle.get((d.info.id, vnode)) == memo:
                    continue
                first = self.txns.first_unstable(d.info.id, vnode) if self.txns is not None else None
                stable = vs.next if first is None else min(first, vs.next)
                aborted = (self.txns.aborted_ranges(d.info.id, vnode, vs.log_start, stable)
                           if self.txns is not None else [])
                out.append(Cleaning(self, d.info.name, d.info.id, vnode, settings, now, vs.log_start, stable,
                                    checkpoint, aborted, max_keys, memo=memo))
        return out

    def clean_all(self, now_ms: int | None = None, defaults: dict[str, str] | None = None,
                  budget: int = 512 << 10) -> list[CleanStats]:
        """Every due cleaning, run to its end on the calling thread."""
        return [c.run(budget) for c in self.cleanings(now_ms, defaults)]
