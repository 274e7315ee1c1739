"""A full disk: the reserve file, the read-only state, and LevelDB handles that survive ENOSPC.

Why a module of its own: LevelDB on a full disk behaves in ways every write of the store must
handle alike, found by experiment on a small tmpfs (plyvel 1.5, LevelDB 1.23):

* a write that finds no space raises ``plyvel.IOError`` ("No space left on device");
* after that, the DB is in a *sticky* state: the background compaction that failed to write
  its table sets LevelDB's background error, and every later write — deletes included —
  fails with it until the DB is closed and opened again, even once there is room;
* a log record whose write failed may be half in the log file, and the log writer's block
  offset no longer matches the file: later records on the same log could be unreadable at
  the next open. So a DB that saw a failed write is reopened (a new log) before its next
  write, never written again as it is;
* opening a DB itself needs space (the old log is replayed into a table, a new log and
  MANIFEST are written), so a store that was killed on a full disk cannot even be opened;
  deletes need log space too, so a full disk could not be freed through the broker.

Hence the *reserve*: a file of ``reserve_bytes`` in the data directory (``tmqgate-reserve``),
allocated while there is room and released the moment a write fails for lack of space (or an
open does), so that the reopen, the deletes (DeleteTopics, DeleteRecords, the archiver) and
their compactions find room. To cover the replay of both LevelDBs' logs at open it should be
at least twice the LevelDB write buffer.

The store is *full* (read-only for new data: ``Core.write_entries`` raises ``StorageFull``
without touching LevelDB; reads, deletes and small metadata writes go on) from a failed write
until there is room again: the reserve back in place and ``reserve_bytes`` (at least
``MIN_FREE``) free beside it. ``check`` decides that (the broker calls it periodically; the
write path calls it at most every ``RECHECK_S`` while full), reopens the DBs a failed write
left sticky, and allocates the reserve again. At open, a disk with less than ``reserve_bytes``
free (the reserve not counted) starts full.

The *disk guard* (``DiskGuard``) is the other side of a filling disk: the archiver
(``storage.archiver``) removes the oldest WAL entries while usage is over
``disk_usage_max_percent``, measured by ``usage``; when nothing more may be removed and usage is
still over, the guard says so with the figures — once, then at most every
``GUARD_LOG_INTERVAL_MS`` while it lasts, and once when usage is back under the limit — and
keeps them in ``shortfall`` for the broker's status and metrics.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import shutil
import time
from collections.abc import Callable
from typing import Any

import plyvel

from tmqgate.storage.model import StorageFull, StorageIOError

log = logging.getLogger("tmqgate.storage")

RESERVE_FILE = "tmqgate-reserve"
#: The reserve while it is allocated, before it is renamed to RESERVE_FILE.
RESERVE_TMP_FILE = RESERVE_FILE + ".tmp"
#: Free bytes needed beside the reserve to leave the full state (when the reserve is 0, too).
MIN_FREE = 1 << 20
#: While full, the write path looks at the disk again at most this often (seconds).
RECHECK_S = 0.5
#: The disk guard's "cannot get under the limit" line: at most one per this many ms while
#: the shortfall lasts (the archiver runs every archiver_interval_ms), then one when it ends.
GUARD_LOG_INTERVAL_MS = 60_000


def is_no_space(exc: BaseException) -> bool:
    """Whether ``exc`` (a plyvel error or an OSError) says the disk is full."""
    if isinstance(exc, OSError) and exc.errno is not None:  # plyvel.IOError is an OSError too
        return exc.errno in (errno.ENOSPC, errno.EDQUOT)
    text = str(exc)
    return "No space left on device" in text or "Disk quota exceeded" in text


class DiskSpace:
    """The data directory's reserve file and the store's full (read-only) state."""

    def __init__(self, path: str, reserve_bytes: int) -> None:
        if reserve_bytes < 0:
            raise ValueError("reserve_bytes must be >= 0")
        self.path = path
        self.reserve_bytes = reserve_bytes
        self.reserve_path = os.path.join(path, RESERVE_FILE)
        self._reserve_tmp = os.path.join(path, RESERVE_TMP_FILE)
        #: Why the store is read-only, or None when it takes writes.
        self.full_reason: str | None = None
        self._handles: list[GuardedDB] = []
        self._next_check = 0.0

    @property
    def full(self) -> bool:
        return self.full_reason is not None

    def free_bytes(self) -> int:
        return shutil.disk_usage(self.path).free

    def reserve_present(self) -> bool:
        return self.reserve_bytes == 0 or os.path.exists(self.reserve_path)

    # the reserve -----------------------------------------------------------------------------

    def release_reserve(self) -> int:
        """Delete the reserve file; returns the bytes it held (0 if there was none)."""
        try:
            size = os.path.getsize(self.reserve_path)
            os.unlink(self.reserve_path)
        except FileNotFoundError:
            return 0
        log.warning("disk full under %s: released the %d-byte reserve so deletes and compactions "
                    "can proceed", self.path, size)
        return size

    def _allocate_reserve(self) -> bool:
        """Allocate the reserve file (blocks really taken); False if the disk has no room."""
        if self.reserve_bytes == 0 or os.path.exists(self.reserve_path):
            return True
        tmp = self._reserve_tmp
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                try:
                    os.posix_fallocate(fd, 0, self.reserve_bytes)
                except OSError as exc:
                    if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
                        raise
                    chunk = b"\0" * (1 << 20)
                    left = self.reserve_bytes
                    while left > 0:
                        left -= os.write(fd, chunk[:left])
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, self.reserve_path)
            return True
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            if is_no_space(exc):
                return False
            raise

    # the full state --------------------------------------------------------------------------

    def settle_at_open(self) -> None:
        """At open: keep or allocate the reserve, and start full when the disk lacks room."""
        if not self.reserve_present() and self.room():
            self._allocate_reserve()
        if not self.reserve_present() or not self.room():
            self.full_reason = (f"disk full: {self.free_bytes()} bytes free under {self.path}, "
                                f"{self.need_bytes()} needed to take writes (the "
                                f"{self.reserve_bytes}-byte reserve, if it is not in place, and as "
                                "much again beside it)")
            self._next_check = time.monotonic() + RECHECK_S

    def failed(self, exc: BaseException) -> None:
        """A write (to a LevelDB or a payload segment) failed for lack of space: reserve
        out, store full."""
        released = self.release_reserve()
        if self.full_reason is None:
            self.full_reason = f"disk full under {self.path}: {exc}"
            log.error("storage is read-only: %s (reserve released: %d bytes)", self.full_reason, released)
        self._next_check = time.monotonic() + RECHECK_S

    def need_bytes(self) -> int:
        """Free bytes needed to take writes: the reserve (unless in place) and as much again
        beside it (at least MIN_FREE)."""
        need = max(self.reserve_bytes, MIN_FREE)
        if not self.reserve_present():
            need += self.reserve_bytes
        return need

    def room(self) -> bool:
        """Whether there is room to leave the full state (reserve allocated or allocatable)."""
        return self.free_bytes() >= self.need_bytes()

    def check(self) -> bool:
        """Leave the full state if there is room: reopen the handles a failed write left
        sticky, allocate the reserve. Returns True when the store takes writes."""
        if self.full_reason is None:
            return True
        self._next_check = time.monotonic() + RECHECK_S
        if not self.room():
            return False
        try:
            for handle in self._handles:
                if handle.broken:
                    handle._ready()
        except StorageIOError as exc:
            log.warning("storage still read-only: %s", exc)
            return False
        if not self._allocate_reserve():
            return False
        log.warning("storage writable again: %d bytes free under %s", self.free_bytes(), self.path)
        self.full_reason = None
        return True

    def check_due(self) -> bool:
        """``check``, at most every RECHECK_S (for the write path)."""
        if self.full_reason is None:
            return True
        if time.monotonic() < self._next_check:
            return False
        return self.check()

    # opening ---------------------------------------------------------------------------------

    def open(self, path: str, **options: Any) -> GuardedDB:
        """Open a LevelDB under this space's guard; on a full disk the reserve goes first."""
        handle = GuardedDB(self, path, options)
        self._handles.append(handle)
        return handle


class GuardedDB:
    """A plyvel DB whose writes turn a full disk into ``StorageFull`` and whose next write
    after a failed one reopens it first (see the module docstring). Reads are plyvel's own
    bound methods, so they cost nothing extra."""

    def __init__(self, space: DiskSpace, path: str, options: dict[str, Any]) -> None:
        self._space = space
        self._path = path
        self._options = options
        self.broken = False
        self._open(create_if_missing=True)

    def _open(self, **extra: Any) -> None:
        try:
            db = plyvel.DB(self._path, **self._options, **extra)
        except plyvel.IOError as exc:
            if not is_no_space(exc):
                raise
            if not self._space.release_reserve():
                raise StorageFull(f"cannot open {self._path}: {exc!r}; free some space") from exc
            try:
                db = plyvel.DB(self._path, **self._options, **extra)
            except plyvel.IOError as exc2:
                raise StorageFull(f"cannot open {self._path} even with the reserve released: {exc2!r}; "
                                  "free some space") from exc2
        self._db = db
        self.get = db.get
        self.iterator = db.iterator
        self.raw_iterator = db.raw_iterator

    def reopen(self) -> None:
        """Close and open again (a new log; LevelDB's sticky error cleared)."""
        self._db.close()
        self._open()
        self.broken = False
        log.warning("reopened %s after a failed write", self._path)

    @property
    def closed(self) -> bool:
        closed: bool = self._db.closed
        return closed

    def close(self) -> None:
        self._db.close()

    def reopen_need(self) -> int:
        """Bytes an open needs: its logs are replayed into tables before they go (+ MIN_FREE)."""
        need = MIN_FREE
        with os.scandir(self._path) as it:
            for entry in it:
                if entry.name.endswith(".log"):
                    need += entry.stat().st_size
        return need

    def _ready(self) -> None:
        if self.broken:
            # Closed, it could not be read either: reopen only when the open will find room.
            if self._space.free_bytes() < self.reopen_need():
                raise StorageFull(f"disk full: {self._path} awaits room to reopen after a failed write")
            self.reopen()

    def _failed(self, exc: BaseException) -> StorageIOError:
        self.broken = True
        if is_no_space(exc):
            self._space.failed(exc)
            return StorageFull(f"no space left for {self._path}: {exc!r}")
        return StorageIOError(f"write to {self._path} failed: {exc!r}")

    def put(self, key: bytes, value: bytes, *, sync: bool = False) -> None:
        if self.broken:
            self._ready()
        try:
            self._db.put(key, value, sync=sync)
        except plyvel.IOError as exc:
            raise self._failed(exc) from exc

    def delete(self, key: bytes, *, sync: bool = False) -> None:
        if self.broken:
            self._ready()
        try:
            self._db.delete(key, sync=sync)
        except plyvel.IOError as exc:
            raise self._failed(exc) from exc

    def write_batch(self, *, sync: bool = False) -> GuardedBatch:
        if self.broken:  # a batch is made on the handle it will be written to
            self._ready()
        return GuardedBatch(self, self._db.write_batch(sync=sync))

    def compact_range(self, *, start: bytes | None = None, stop: bytes | None = None) -> None:
        """Compact the range; a failure (no room for the new tables) is a StorageIOError."""
        if self.broken:
            self._ready()
        try:
            self._db.compact_range(start=start, stop=stop)
        except plyvel.IOError as exc:
            raise self._failed(exc) from exc


class GuardedBatch:
    """A plyvel WriteBatch whose ``write`` goes through the guard (``put``/``delete`` are the
    batch's own bound methods)."""

    __slots__ = ("_db", "_wb", "put", "delete", "clear")

    def __init__(self, db: GuardedDB, wb: Any) -> None:
        self._db = db
        self._wb = wb
        self.put = wb.put
        self.delete = wb.delete
        self.clear = wb.clear

    def write(self) -> None:
        try:
            self._wb.write()
        except plyvel.IOError as exc:
            raise self._db._failed(exc) from exc
        except RuntimeError as exc:  # its DB was reopened since (a failed write in between)
            raise StorageIOError(f"write batch outlived its handle: {exc}") from exc


def usage(path: str, wal_bytes: int, volume_bytes: int | None) -> tuple[int, int, str]:
    """(used, capacity, what they are of) for ``disk_usage_max_percent``: the filesystem
    holding ``path``, or with ``volume_bytes`` a simulated volume holding only the WAL
    (``wal_bytes`` of it used)."""
    if volume_bytes is not None:
        return wal_bytes, volume_bytes, f"the {volume_bytes}-byte WAL volume"
    du = shutil.disk_usage(path)
    return du.used, du.total, f"the filesystem of {path}"


class DiskGuard:
    """The disk guard's report (see the module docstring)."""

    def __init__(self, path: str) -> None:
        self.path = path
        #: The last shortfall's figures (None while usage is within the limit), for status.
        self.shortfall: dict[str, Any] | None = None
        # The shortfall line: when it was last logged, and checks since.
        self._logged_ms: int | None = None
        self._suppressed = 0

    def report(self, now: int, limit_pct: float, volume_bytes: int | None, freed: int, exhausted: bool,
               wal_left: int, vnodes: Callable[[], int]) -> None:
        """After the archiver ran (``freed`` bytes; ``exhausted``: nothing more it may remove;
        ``wal_left`` WAL bytes stored, the newest entries of ``vnodes()`` vnodes): if usage is
        still over the limit and nothing more may be removed, say so with the figures — once,
        then at most every GUARD_LOG_INTERVAL_MS while it lasts, and once when usage is back
        under the limit."""
        used, capacity, where = usage(self.path, wal_left, volume_bytes)
        allowed = int(capacity * limit_pct / 100)
        if used <= allowed or not exhausted:
            if used <= allowed and self.shortfall is not None:
                log.warning("disk guard: usage of %s is back under disk_usage_max_percent %s%%: "
                            "%.1f%% (%d of %d bytes)", where, limit_pct, 100 * used / capacity, used, capacity)
                self.shortfall = None
                self._logged_ms = None
                self._suppressed = 0
            return
        held = vnodes()
        self.shortfall = {"used_bytes": used, "capacity_bytes": capacity, "limit_percent": limit_pct,
                          "allowed_bytes": allowed, "wal_bytes": wal_left, "vnodes": held,
                          "other_bytes": max(0, used - wal_left), "freed_bytes": freed}
        last = self._logged_ms
        if last is not None and now - last < GUARD_LOG_INTERVAL_MS:
            self._suppressed += 1
            return
        since = (f" ({self._suppressed} more check(s) found the same since the last line)"
                 if self._suppressed else "")
        self._logged_ms = now
        self._suppressed = 0
        log.warning("disk guard cannot bring usage under disk_usage_max_percent: %s is %.1f%% used "
                    "(%d of %d bytes), the limit is %s%% (%d bytes); removed and compacted %d bytes "
                    "now; left: %d bytes of WAL entries, the newest entry of each of %d vnode(s), "
                    "which the archiver never removes, and %d bytes of other files — drop databases "
                    "or topics, or raise the limit%s",
                    where, 100 * used / capacity, used, capacity, limit_pct, allowed, freed, wal_left,
                    held, max(0, used - wal_left), since)
