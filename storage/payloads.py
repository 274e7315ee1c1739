"""The payload log: the WAL entries' bytes appended to segment files, and where each one lies
in a second LevelDB (``storage.keys``: payload log).

Why apart from the main DB: a payload is written once and read back by its sequence, never
rewritten; the main DB holds only small values that one WriteBatch keeps consistent. Why
files rather than LevelDB values (layout 2 kept the bytes in the LevelDB): a value went
through LevelDB's log, memtable and a table (written twice, CRC'd in software) and took
about 40 % of a produced record's broker CPU (measured by replacing it with a plain file
append); an append to a file is one ``pwritev``. LevelDB still carries each payload's 16-byte place, so the rules
that tie the two stores together (``storage.keys``) are about sequence keys, as before: the
payloads are staged before the main WriteBatch that indexes them, deleted after the one
that unindexes them, and at open payloads nothing indexes are dropped, interrupted deletes
finished, and vnode tails whose payloads a power loss took rolled back.

Space: all vnodes share the segments, so retention of one topic or the log cleaner leaves
them partly dead. A deleted payload's bytes are given back at once by punching a hole
(``fallocate(PUNCH_HOLE)``, after the deletes are synced: a power loss must not keep a place
whose bytes are zeros), which needs no free space (a full disk is freed by deletes) and no
copy; a segment nothing points into is unlinked. Where the filesystem cannot punch holes,
``reclaim`` copies the live payloads of mostly dead segments forward and unlinks those.
``storage.core`` owns the write path that ties the stores together.

Readers: a reader's places come from one LevelDB snapshot (as the bytes did when they were
LevelDB values), so the bytes they point at must stay while it reads: holes and unlinks
wait until no reader is open (``_settle``). Threads: the log cleaner reads and reclaims in
worker threads while the event loop appends, so every step that reads or changes places and
segments holds ``_lock``.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import logging
import os
import threading
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING

from tmqgate.storage import keys
from tmqgate.storage.model import StorageError, StorageFull, StorageIOError
from tmqgate.storage.rollback import roll_back_vnode
from tmqgate.storage.space import is_no_space

if TYPE_CHECKING:
    from tmqgate.storage.core import LevelDB, WriteBatch
    from tmqgate.storage.space import DiskSpace

log = logging.getLogger("tmqgate.storage")

PAYLOAD_DIR = "wal-payloads"
SEGMENT_DIR = "wal-segments"
#: A segment takes no more appends once it holds this many bytes.
SEGMENT_BYTES = 64 << 20
#: ``reclaim`` copies forward the segments whose live bytes are under this share of their size.
COPY_BELOW = 0.5
#: Where holes are punched the space is back already; ``reclaim`` then copies forward only
#: the segments left this sparse, so partly live segments do not pile up as files.
SPARSE_BELOW = 1 / 16
#: Segments one ``reclaim`` copies forward at most (the sparsest first): bounded work per call.
RECLAIM_SEGMENTS = 16
#: Bytes copied forward per step under the lock, and converted from layout 2 per batch.
COPY_CHUNK = 4 << 20
CONVERT_CHUNK = 32 << 20
#: At open, a segment holding more disk than its live bytes and this share of its size has
#: its dead bytes punched out (``_punch_gaps``; each hole leaves its edge blocks allocated).
GAP_SLACK = 0.125
#: Read handles of older segments kept open at once (the oldest is closed past it).
OPEN_READERS = 128
#: Buffers per pwritev (Linux's IOV_MAX).
IOV_MAX = 1024
#: payloads lying back to back read with one pread, up to this many bytes (PayloadLog.entries)
READ_AHEAD = 64 << 10
#: The places LevelDB's memtable, at most (under the configured write buffer): its values are
#: 16-byte places, so the main DB's 64 MiB mostly held memory, and log to replay at open —
#: 1.5 M one-record appends peaked at 225–226 MiB RSS with 64 MiB, 172 MiB with 8, for
#: 24.8–25.2 against 25.1–25.9 CPU-s, flushes included (bench/places_memtable_bench.py).
PLACES_WRITE_BUFFER = 8 << 20


_FALLOC_PUNCH = 0x01 | 0x02  # FALLOC_FL_KEEP_SIZE | FALLOC_FL_PUNCH_HOLE (linux/falloc.h)
_fallocate = getattr(ctypes.CDLL(None, use_errno=True), "fallocate", None)
if _fallocate is not None:
    _fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]


def punch_hole(fd: int, pos: int, size: int) -> bool:
    """Give the disk blocks of ``size`` bytes at ``pos`` back (they read as zeros; the size
    stays). False where the filesystem (or the C library) cannot."""
    if _fallocate is None:
        return False
    if _fallocate(fd, _FALLOC_PUNCH, pos, size) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
        return False
    raise OSError(err, f"fallocate(PUNCH_HOLE) failed: {os.strerror(err)}")


#: A segment's lowest sequence while none points into it.
NO_LO = (1 << 64) - 1


class _Segment:
    """One segment file's figures: its size, the bytes places point at, and the range of
    sequences pointing into it (where ``reclaim`` looks for them)."""

    __slots__ = ("hi", "live", "lo", "size")

    def __init__(self, size: int) -> None:
        self.size = size
        self.live = 0
        self.lo = NO_LO
        self.hi = -1


class _Cursor:
    """Places looked up through one LevelDB cursor (and its snapshot): a step to the next key
    when the sequence follows the last one found (one vnode appending alone, a transaction's
    entries), else a seek — measured ~35% and ~10% cheaper than a get per entry."""

    def __init__(self, db: LevelDB) -> None:
        self._it = db.raw_iterator()
        self._last = -2

    def place(self, seq: int) -> bytes | None:
        want = keys.u64(seq)
        it = self._it
        if seq == self._last + 1 and it.valid():
            it.next()
        else:
            it.seek(want)
        if it.valid() and it.key() == want:
            self._last = seq
            place: bytes = it.value()
            return place
        self._last = -2  # the cursor is past ``want``: seek the next one
        return None


def segment_name(segment: int) -> str:
    return f"{segment:08d}.seg"


def _pwrite_all(fd: int, values: Sequence[bytes], pos: int) -> None:
    """Write ``values`` back to back at ``pos`` (pwritev, IOV_MAX buffers at a time; a
    short write, as on a disk filling up, is finished or raises)."""
    for i in range(0, len(values), IOV_MAX):
        chunk = values[i:i + IOV_MAX]
        want = sum(map(len, chunk))
        done = os.pwritev(fd, chunk, pos)
        if done < want:
            rest = memoryview(b"".join(chunk))[done:]
            while rest:
                n = os.pwrite(fd, rest, pos + done)
                if n <= 0:
                    raise OSError(errno.ENOSPC, "No space left on device (short write)")
                done += n
                rest = rest[n:]
        pos += want


class PayloadLog:
    """The segments, the LevelDB of places, and the next payload sequence (set by
    ``recover``)."""

    def __init__(self, data_dir: str, space: DiskSpace, *, write_buffer_size: int, lru_cache_size: int) -> None:
        self._space = space
        self._dir = os.path.join(data_dir, SEGMENT_DIR)
        self._lock = threading.RLock()
        self._segments: dict[int, _Segment] = {}
        self._readers: dict[int, int] = {}  # older segments' read handles, oldest first
        self._active = 0
        self._fd = -1
        self._pos = 0
        #: Sealed segments with appends not yet fdatasynced, and whether a segment's name
        #: is not yet synced in the folder (``_durable``).
        self._unsynced: set[int] = set()
        self._new_name = False
        #: Whether deletes punch holes (until the filesystem says it cannot).
        self._punch = True
        #: Readers open (``entries`` generators started and not finished), and what waits
        #: for none to be: holes to punch, segments to unlink (``_settle``).
        self._reading = 0
        self._holes: list[tuple[int, int, int]] = []
        self._doomed: set[int] = set()
        self.next_seq = 0
        self.db: LevelDB = space.open(
            os.path.join(data_dir, PAYLOAD_DIR),
            write_buffer_size=min(write_buffer_size, PLACES_WRITE_BUFFER),
            lru_cache_size=lru_cache_size,
            max_file_size=64 << 20,
            compression=None,
        )

    def close(self) -> None:
        """Settle (no reader reads past the close), then close the segments and the LevelDB."""
        with self._lock:
            self._reading = 0
            if self._fd >= 0:
                self._settle()
            for fd in [self._fd, *self._readers.values()]:
                if fd >= 0:
                    with contextlib.suppress(OSError):
                        os.close(fd)
            self._fd = -1
            self._readers.clear()
            self.db.close()

    def sync(self) -> None:
        """Make every earlier append durable: the segments (``_durable``), then the LevelDB
        of places (an empty synced batch)."""
        with self._lock:
            self._durable()
            self.db.write_batch(sync=True).write()

    # writing -------------------------------------------------------------------------------

    def stage(self, values: list[bytes], sync: bool) -> int:
        """Append payloads at the next sequences, before the main WriteBatch that indexes
        them: their bytes to the active segment (fdatasynced with ``sync``), then their
        places (one put, or one batch); returns the first sequence. They stay staged
        (``next_seq`` unchanged) until ``committed``: open drops what nothing indexes."""
        with self._lock:
            seq = self.next_seq
            segment, pos = self._append(values, full_on_no_space=True)
            try:
                if sync:
                    self._durable()
                ptr = keys.pack_payload_ptr
                wb = self.db.write_batch(sync=sync)
                at = pos
                for i, value in enumerate(values):
                    wb.put(keys.u64(seq + i), ptr(segment, at, len(value)))
                    at += len(value)
                new = self._figures(wb, {segment: (self._pos - pos, seq, seq + len(values) - 1)})
                wb.write()
            except BaseException:
                self._cut(pos)
                raise
            self._apply(new)
            return seq

    def committed(self, last: int) -> None:
        """The main WriteBatch indexing payloads up to ``last`` is written: move past them."""
        self.next_seq = last + 1

    def _figures(self, wb: WriteBatch, changes: dict[int, tuple[int, int, int]]) -> dict[int, tuple[int, int, int]]:
        """Put into ``wb`` the new figures of the segments whose places it changes
        (``changes``: segment -> (live bytes added, or removed when negative, lowest and
        highest sequence added)); returns them, to be applied once ``wb`` is written."""
        new: dict[int, tuple[int, int, int]] = {}
        for segment, (delta, lo, hi) in changes.items():
            seg = self._segments.get(segment)
            if seg is None:
                continue
            figures = seg.live + delta, min(seg.lo, lo), max(seg.hi, hi)
            new[segment] = figures
            if figures[0] > 0:
                wb.put(keys.payload_segment_key(segment), keys.pack_segment_figures(*figures))
            else:
                wb.delete(keys.payload_segment_key(segment))
        return new

    def _apply(self, new: dict[int, tuple[int, int, int]]) -> None:
        for segment, (live, lo, hi) in new.items():
            seg = self._segments[segment]
            seg.live, seg.lo, seg.hi = live, lo, hi

    def delete(self, seqs: Iterable[int], sync: bool = False) -> None:
        """Delete payloads in one batch: ones whose index keys a committed WriteBatch removed
        (listed under PAYGC, so a crash before this finishes is repaired at open), or ones
        nothing indexes. Their bytes are punched out and the segments left with nothing live
        unlinked, once no reader is open (``_settle``)."""
        with self._lock:
            sync = sync or self._punch
            wb = self.db.write_batch(sync=sync)
            freed: dict[int, int] = {}
            holes: list[tuple[int, int, int]] = []
            for seq, place in self._places(sorted(seqs)):
                if place is None:
                    continue
                segment, pos, size = keys.read_payload_ptr(place)
                freed[segment] = freed.get(segment, 0) + size
                holes.append((segment, pos, size))
                wb.delete(keys.u64(seq))
            if not holes:
                return
            new = self._figures(wb, {segment: (-size, NO_LO, -1) for segment, size in freed.items()})
            wb.write()  # synced before any hole is punched
            self._apply(new)
            if self._punch:
                self._holes.extend(holes)
            self._drop_dead(freed, synced=sync)

    def _settle(self) -> None:
        """With no reader open: unlink the doomed segments and punch the queued holes."""
        if self._reading:
            return
        for segment in self._doomed:
            fd = self._readers.pop(segment, None)
            if fd is not None:
                os.close(fd)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self._path(segment))
        self._doomed.clear()
        if self._holes:
            holes, self._holes = self._holes, []
            self._punch_holes(holes)

    def _punch_holes(self, holes: list[tuple[int, int, int]]) -> None:
        """Punch the deleted payloads' bytes out of the segments still there, adjacent
        ones as one hole; a failure only leaves the space taken (reclaim's)."""
        holes.sort()
        merged: list[list[int]] = []
        for segment, pos, size in holes:
            if merged and merged[-1][0] == segment and merged[-1][1] + merged[-1][2] == pos:
                merged[-1][2] += size
            else:
                merged.append([segment, pos, size])
        for segment, pos, size in merged:
            if segment not in self._segments or size == 0:
                continue
            try:
                fd = self._fd if segment == self._active else self._reader(segment)
                if not punch_hole(fd, pos, size):
                    log.warning("payload log: the filesystem of %s cannot punch holes: deleted "
                                "payloads' space comes back by copying segments forward", self._dir)
                    self._punch = False
                    return
            except (OSError, StorageError) as exc:
                log.warning("payload log: could not punch out %d bytes of segment %d: %r", size, segment, exc)

    def reclaim(self) -> None:
        """Copy the live payloads of mostly dead segments forward, into the active one, and
        unlink those segments: where deletes cannot punch holes, to give the space back
        (segments under COPY_BELOW live); where they can, so that sparse segments (under
        SPARSE_BELOW) do not pile up. At most RECLAIM_SEGMENTS a call. Safe in a worker
        thread (the event loop waits at most for one COPY_CHUNK step). Raises
        StorageIOError when the disk has no room for the copies (the store stays writable:
        deletes unlink whole segments without it)."""
        below = SPARSE_BELOW if self._punch else COPY_BELOW
        with self._lock:
            active = self._segments[self._active]
            if active.size and active.live < active.size * below:
                self._roll()  # sealed, so it can be copied forward and go too
            sparse = sorted((seg.live / max(seg.size, 1), sid) for sid, seg in self._segments.items()
                            if sid != self._active and seg.live < seg.size * below)
            victims = {sid: self._segments[sid] for _, sid in sparse[:RECLAIM_SEGMENTS]}
            if not victims:
                return
            lo = min(seg.lo for seg in victims.values())
            hi = max(seg.hi for seg in victims.values())
        moving: list[tuple[bytes, bytes]] = []
        if hi >= lo:
            for key, place in self.db.iterator(start=keys.u64(lo), stop=keys.u64(hi + 1)):
                if keys.read_payload_ptr(place)[0] in victims:
                    moving.append((key, place))
        step: list[tuple[bytes, bytes]] = []
        size = 0
        for item in moving:
            step.append(item)
            size += keys.read_payload_ptr(item[1])[2]
            if size >= COPY_CHUNK:
                self._copy_forward(step)
                step, size = [], 0
        if step:
            self._copy_forward(step)
        with self._lock:
            self._drop_dead(victims)

    def _copy_forward(self, items: list[tuple[bytes, bytes]]) -> None:
        """Copy payloads (key, place as read) that are still where they were to the active
        segment, fdatasync it, and move their places in one synced batch."""
        with self._lock:
            current = [(k, p) for k, p in items if self.db.get(k) == p]
            if not current:
                return
            data = [self._pread(*keys.read_payload_ptr(p)) for _, p in current]
            segment, pos = self._append(data, full_on_no_space=False)
            changes: dict[int, tuple[int, int, int]] = {}
            for (key, place), value in zip(current, data, strict=True):
                old = keys.read_payload_ptr(place)[0]
                delta, lo, hi = changes.get(old, (0, NO_LO, -1))
                changes[old] = delta - len(value), lo, hi
                seq = keys.read_u64(key)
                delta, lo, hi = changes.get(segment, (0, NO_LO, -1))
                changes[segment] = delta + len(value), min(lo, seq), max(hi, seq)
            try:
                self._durable()
                wb = self.db.write_batch(sync=True)
                at = pos
                for (key, _), value in zip(current, data, strict=True):
                    wb.put(key, keys.pack_payload_ptr(segment, at, len(value)))
                    at += len(value)
                new = self._figures(wb, changes)
                wb.write()
            except BaseException:
                self._cut(pos)
                raise
            self._apply(new)

    # reading -------------------------------------------------------------------------------

    def entries(self, pairs: Iterable[tuple[bytes, bytes]]) -> Iterator[tuple[int, int, bytes]]:
        """(base, kind, payload) for (WAL key, index value) pairs, fetched lazily (readers
        stop at max_bytes): each place through one LevelDB cursor (its snapshot: a step to
        the next key when the sequence follows the previous one, else a seek), then the
        bytes of payloads that lie back to back in one segment with one pread, up to
        READ_AHEAD bytes of them (small entries, as one-line sources write, cost a syscall
        each otherwise). Open until it is finished or closed: no hole is punched and no
        segment unlinked meanwhile."""
        with self._lock:
            self._reading += 1
        try:
            cursor: _Cursor | None = None
            run: list[tuple[bytes, int]] = []  # (WAL key, size) of payloads back to back
            segment = start = end = 0
            for k, v in pairs:
                seq = keys.wal_index_seq(v)
                with self._lock:
                    if cursor is None:  # made at the first pair: its snapshot holds every place indexed
                        cursor = _Cursor(self.db)
                    place = cursor.place(seq)
                if place is None:  # the entries before it are still read, as a reader may stop there
                    yield from self._read_run(run, segment, start, end)
                    raise StorageError(f"payload {seq} of WAL key {k.hex()} is missing from the payload log")
                seg, pos, size = keys.read_payload_ptr(place)
                if run and (seg != segment or pos != end or end - start + size > READ_AHEAD):
                    yield from self._read_run(run, segment, start, end)
                    run = []
                if not run:
                    segment, start, end = seg, pos, pos
                run.append((k, size))
                end += size
            yield from self._read_run(run, segment, start, end)
        finally:
            with self._lock:
                self._reading -= 1
                self._settle()

    def _read_run(self, run: list[tuple[bytes, int]], segment: int, start: int, end: int
                  ) -> Iterator[tuple[int, int, bytes]]:
        """``entries``' (base, kind, payload) of the payloads (WAL key, size) lying back to back
        from `start` to `end` of `segment`, read with one pread (nothing for no payloads)."""
        if not run:
            return
        with self._lock:
            data = self._pread(segment, start, end - start)
        version = keys.wal_key_version
        if len(run) == 1:
            yield version(run[0][0]), run[0][0][17], data
            return
        at = 0
        for key, size in run:
            yield version(key), key[17], data[at:at + size]
            at += size

    def sequences(self) -> list[int]:
        """Every payload sequence with a place (tools and tests)."""
        return [keys.read_u64(k) for k in self.db.iterator(stop=keys.PAYLOG_META, include_value=False)]

    def segments(self) -> dict[int, tuple[int, int]]:
        """{segment id: (its size, its live bytes)} (tools and tests)."""
        with self._lock:
            return {sid: (seg.size, seg.live) for sid, seg in sorted(self._segments.items())}

    def _places(self, seqs: Sequence[int]) -> Iterator[tuple[int, bytes | None]]:
        """(seq, its place or None) for sorted sequences, through one cursor (under the lock)."""
        cursor = _Cursor(self.db)
        for seq in seqs:
            yield seq, cursor.place(seq)

    def _pread(self, segment: int, pos: int, size: int) -> bytes:
        fd = self._fd if segment == self._active else self._reader(segment)
        try:
            data = os.pread(fd, size, pos)
        except OSError as exc:
            raise StorageError(f"cannot read payload segment {segment}: {exc!r}") from exc
        if len(data) != size:
            raise StorageError(f"payload segment {segment} ends before {pos + size} ({len(data)} bytes read)")
        return data

    def _reader(self, segment: int) -> int:
        """An older segment's handle, kept open (read-write: punching a hole needs it)."""
        fd = self._readers.get(segment)
        if fd is not None:
            return fd
        if segment not in self._segments and segment not in self._doomed:
            raise StorageError(f"payload segment {segment} is gone")
        try:
            fd = os.open(self._path(segment), os.O_RDWR | os.O_CLOEXEC)
        except OSError as exc:
            raise StorageError(f"cannot open payload segment {segment}: {exc!r}") from exc
        self._keep_reader(segment, fd)
        return fd

    def _keep_reader(self, segment: int, fd: int) -> None:
        """Keep an older segment's handle, closing the oldest kept past OPEN_READERS."""
        while len(self._readers) >= OPEN_READERS:
            os.close(self._readers.pop(next(iter(self._readers))))
        self._readers[segment] = fd

    # segments ------------------------------------------------------------------------------

    def _path(self, segment: int) -> str:
        return os.path.join(self._dir, segment_name(segment))

    def _append(self, values: Sequence[bytes], *, full_on_no_space: bool) -> tuple[int, int]:
        """Write ``values`` back to back at the active segment's end (after a roll to a new
        segment when it is full); returns (segment, position). On a failure the segment is
        cut back and the error raised: StorageFull (the store read-only, with
        ``full_on_no_space``) or StorageIOError."""
        total = sum(map(len, values))
        if self._pos and self._pos + total > SEGMENT_BYTES:
            self._roll()
        pos = self._pos
        try:
            _pwrite_all(self._fd, values, pos)
        except OSError as exc:
            self._cut(pos)
            if is_no_space(exc):
                if full_on_no_space:
                    self._space.failed(exc)
                raise StorageFull(f"no space left for payload segment {self._active}: {exc!r}") from exc
            raise StorageIOError(f"write to payload segment {self._active} failed: {exc!r}") from exc
        self._pos = pos + total
        self._segments[self._active].size = self._pos
        return self._active, pos

    def _cut(self, pos: int) -> None:
        """Cut the active segment back to ``pos`` (what a failed write added goes)."""
        with contextlib.suppress(OSError):
            os.ftruncate(self._fd, pos)
        self._pos = pos
        self._segments[self._active].size = pos

    def _durable(self) -> None:
        """fdatasync what was appended and not yet synced: the segments sealed since the
        last time, the active one, and the folder when a segment was made (its name must
        survive a power loss with its bytes). Not at a roll: under wal_level 1 nothing waits
        for the disk on the event loop."""
        for segment in sorted(self._unsynced):
            if segment in self._segments:
                self._fdatasync(self._reader(segment))
        self._unsynced.clear()
        self._fdatasync(self._fd)
        if self._new_name:
            dfd = os.open(self._dir, os.O_RDONLY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)
            self._new_name = False

    def _fdatasync(self, fd: int) -> None:
        try:
            os.fdatasync(fd)
        except OSError as exc:
            raise StorageIOError(f"fdatasync of payload segment {self._active} failed: {exc!r}") from exc

    def _open_active(self, segment: int, *, new: bool) -> None:
        flags = os.O_RDWR | os.O_CLOEXEC | (os.O_CREAT | os.O_EXCL if new else 0)
        fd = os.open(self._path(segment), flags, 0o644)
        if new:
            self._segments[segment] = _Segment(0)
            self._new_name = True
        self._active, self._fd = segment, fd
        self._pos = os.fstat(fd).st_size
        self._segments[segment].size = self._pos

    def _roll(self) -> None:
        """Close the active segment for appends (synced by the next ``_durable``) and start
        the next one."""
        old, fd = self._active, self._fd
        try:
            self._open_active(old + 1, new=True)
        except OSError as exc:
            if is_no_space(exc):
                self._space.failed(exc)
                raise StorageFull(f"no space left for a new payload segment: {exc!r}") from exc
            raise StorageIOError(f"cannot start payload segment {old + 1}: {exc!r}") from exc
        self._keep_reader(old, fd)
        self._unsynced.add(old)

    def _drop_dead(self, candidates: Iterable[int], *, synced: bool = False) -> None:
        """Doom the segments among ``candidates`` (not the active one) that nothing points
        into, once the deletes that emptied them are synced (here, unless ``synced``); then
        settle (unlinked at once when no reader is open)."""
        dead = [s for s in candidates if s != self._active and s in self._segments and self._segments[s].live <= 0]
        if dead:
            if not synced:
                self.db.write_batch(sync=True).write()
            for segment in dead:
                del self._segments[segment]
            self._doomed.update(dead)
        self._settle()

    # open ----------------------------------------------------------------------------------

    def recover(self, main: LevelDB) -> None:
        """Bring the payload log and the main DB ``main`` back into agreement at open: load
        the segments (dropping places whose bytes a power loss took), convert a layout-2
        payload log, roll back vnode tails whose payloads were lost, drop payloads above the
        last committed sequence (written, never indexed, never acknowledged), finish the
        payload deletes of the last removal, and set the next sequence."""
        with self._lock:
            self._load()
            self._convert()
            _repair_lost_payloads(main, self.db)
            raw = main.get(keys.PAYSEQ)
            committed = keys.read_u64(raw) if raw is not None else -1
            stale = [keys.read_u64(k) for k in self.db.iterator(
                start=keys.u64(committed + 1), stop=keys.PAYLOG_META, include_value=False)]
            if stale:
                self.delete(stale, sync=True)
            gc = main.get(keys.PAYGC)
            if gc is not None:
                self.delete(keys.unpack_seqs(gc))
                main.delete(keys.PAYGC)
            self._punch_gaps()
            self.next_seq = committed + 1

    def _load(self) -> None:
        """Read each segment's figures (not every place: open costs what the segments are,
        not the payloads), drop the newest places whose bytes lie past their segment's end
        (a power loss took those unsynced appends: they are a suffix of the sequences),
        unlink the segments nothing points into, and open the newest for appends."""
        os.makedirs(self._dir, exist_ok=True)
        for name in os.listdir(self._dir):
            stem, dot, ext = name.partition(".")
            if dot and ext == "seg" and stem.isdigit():
                self._segments[int(stem)] = _Segment(os.path.getsize(os.path.join(self._dir, name)))
        for key, raw in self.db.iterator(prefix=keys.PAYLOG_SEGMENT):
            segment = keys.read_u32(key[len(keys.PAYLOG_SEGMENT):])
            seg = self._segments.get(segment)
            if seg is None:
                log.error("payload log: segment %d is missing; the payloads in it are lost", segment)
                continue
            seg.live, seg.lo, seg.hi = keys.read_segment_figures(raw)
        if self.db.get(keys.PAYLOG_FORMAT) is not None:
            stop: bytes | None = keys.PAYLOG_META
        else:
            stop = self.db.get(keys.PAYLOG_MIGRATING)
        lost: list[tuple[bytes, int, int]] = []
        if stop is not None:
            for key, place in self.db.iterator(stop=stop, reverse=True):
                segment, pos, size = keys.read_payload_ptr(place)
                seg = self._segments.get(segment)
                if seg is not None and pos + size <= seg.size:
                    break
                lost.append((key, segment, size))
        if lost:
            log.warning("payload log: %d payloads (sequences %d..%d) lie past their segment's end "
                        "(a power loss took their unsynced bytes): dropped",
                        len(lost), keys.read_u64(lost[-1][0]), keys.read_u64(lost[0][0]))
            wb = self.db.write_batch(sync=True)
            changes: dict[int, tuple[int, int, int]] = {}
            for key, segment, size in lost:
                wb.delete(key)
                changes[segment] = changes.get(segment, (0, NO_LO, -1))[0] - size, NO_LO, -1
            new = self._figures(wb, changes)
            wb.write()
            self._apply(new)
        newest = max(self._segments, default=0)
        self._drop_dead([s for s in self._segments if s != newest])
        if newest:
            self._open_active(newest, new=False)
        else:
            self._open_active(1, new=True)

    def _punch_gaps(self) -> None:
        """At open: punch out the dead bytes of segments holding much more disk than their
        live payloads (holes queued when the process died, waiting for a reader). Gaps are
        found from the places sorted by position, one segment at a time."""
        if not self._punch:
            return
        for sid, seg in list(self._segments.items()):
            try:
                allocated = os.stat(self._path(sid)).st_blocks * 512
            except FileNotFoundError:
                continue
            if allocated <= seg.live + seg.size * GAP_SLACK or seg.hi < seg.lo:
                continue
            extents = sorted(
                (pos, size) for _, place in self.db.iterator(start=keys.u64(seg.lo), stop=keys.u64(seg.hi + 1))
                for segment, pos, size in (keys.read_payload_ptr(place),) if segment == sid
            )
            gaps: list[tuple[int, int, int]] = []
            end = 0
            for pos, size in extents:
                if pos > end:
                    gaps.append((sid, end, pos - end))
                end = max(end, pos + size)
            if seg.size > end:
                gaps.append((sid, end, seg.size - end))
            if gaps:
                self._punch_holes(gaps)

    def _convert(self) -> None:
        """Move a layout-2 payload log's bytes (LevelDB values) into segments: chunks of
        CONVERT_CHUNK appended and fdatasynced, then their values replaced by places with
        the progress (PAYLOG_MIGRATING) in one synced batch, and the chunk's range compacted
        so its space comes back as it goes. Killed midway it goes on from the progress at
        the next open. A new payload log is only marked."""
        if self.db.get(keys.PAYLOG_FORMAT) is not None:
            return
        raw = self.db.get(keys.PAYLOG_MIGRATING)
        start = raw if raw is not None else keys.u64(0)
        it = self.db.iterator(start=start, stop=keys.PAYLOG_META)
        converted = 0
        while True:
            chunk: list[tuple[bytes, bytes]] = []
            size = 0
            for key, value in it:
                chunk.append((key, value))
                size += len(value)
                if size >= CONVERT_CHUNK:
                    break
            if not chunk:
                break
            if not converted:
                log.warning("payload log: converting the payload LevelDB's bytes to segment files "
                            "(storage layout 2 to 3), from sequence %d", keys.read_u64(chunk[0][0]))
            segment, pos = self._append([v for _, v in chunk], full_on_no_space=True)
            self._durable()
            wb = self.db.write_batch(sync=True)
            at = pos
            for key, value in chunk:
                wb.put(key, keys.pack_payload_ptr(segment, at, len(value)))
                at += len(value)
            last = keys.read_u64(chunk[-1][0])
            wb.put(keys.PAYLOG_MIGRATING, keys.u64(last + 1))
            new = self._figures(wb, {segment: (size, keys.read_u64(chunk[0][0]), last)})
            wb.write()
            self._apply(new)
            self.db.compact_range(start=chunk[0][0], stop=keys.u64(last + 1))
            converted += len(chunk)
        wb = self.db.write_batch(sync=True)
        wb.put(keys.PAYLOG_FORMAT, keys.u32(1))
        wb.delete(keys.PAYLOG_MIGRATING)
        wb.write()
        if converted:
            log.warning("payload log: converted %d payloads to segment files", converted)


def _repair_lost_payloads(db: LevelDB, plog: LevelDB) -> None:
    """Roll back vnode tails whose payloads the payload log lost.

    Only possible after a power loss with unsynced writes (see ``storage.keys``): the
    segments and each LevelDB recover a prefix of what was written, so the payload log may
    end below PAYSEQ while the main DB kept the index keys. Within a vnode sequences grow
    with versions, so the lost entries are each vnode's newest ones: their index keys, time
    index entries and producer batches go, and the vnode's next version moves back to the
    first lost base (as a log that lost its unsynced tail would). One seek when nothing was
    lost.
    """
    raw = db.get(keys.PAYSEQ)
    if raw is None:
        return
    last = next(plog.iterator(reverse=True, stop=keys.PAYLOG_META, include_value=False), None)
    present = keys.read_u64(last) if last is not None else -1
    if present >= keys.read_u64(raw):
        return
    wb = db.write_batch(sync=True)
    repaired = False
    for vkey, state in db.iterator(prefix=keys.VNODE):
        dbid, vnode = keys.parse_vnode_key(vkey)
        lost: list[tuple[bytes, bytes]] = []
        for key, value in db.iterator(prefix=keys.vnode_prefix(keys.WAL, dbid, vnode), reverse=True):
            if keys.wal_index_seq(value) <= present:
                break
            lost.append((key, value))
        if not lost:
            continue
        repaired = True
        roll_back_vnode(db, wb, dbid, vnode, keys.wal_key_version(lost[-1][0]), state)
    if not repaired:  # the newest payloads were removed (retention ...), none lost
        return
    # Every sequence still indexed is <= present now.
    if present >= 0:
        wb.put(keys.PAYSEQ, keys.u64(present))
    else:
        wb.delete(keys.PAYSEQ)
    wb.write()
