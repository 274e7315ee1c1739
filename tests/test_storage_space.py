"""The store on a full disk (a real small tmpfs, ``storage.space``): an append that finds no
space raises StorageFull and leaves every acknowledged entry readable; dropping a database
frees the disk (compacted) and appends work again; a store opened on a full disk is read-only
(reads work, appends StorageFull) until there is room."""

from __future__ import annotations

import logging
import os

import pytest
from diskfull import fill, free_bytes, small_fs

from tmqgate.storage import StorageFull, Store
from tmqgate.storage.space import GUARD_LOG_INTERVAL_MS, RESERVE_FILE

RESERVE = 2 << 20
BATCH = 20_000


def open_store(path: str) -> Store:
    return Store(path, write_buffer_size=256 << 10, lru_cache_size=1 << 20, reserve_bytes=RESERVE)


def payload(i: int) -> bytes:
    return bytes(8) + i.to_bytes(4, "big") * (BATCH // 4)


def append_until_full(s: Store, db: str, limit: int = 10_000) -> list[int]:
    bases = []
    for i in range(limit):
        try:
            bases.append(s.append(db, 0, payload(i), 1, 1_700_000_000_000 + i).base)
        except StorageFull:
            return bases
    raise AssertionError("the disk never filled")


def read_all(s: Store, db: str) -> list[bytes]:
    """Every entry's bytes after the base offset (the store writes its version there)."""
    return [b[8:] for b in s.read(db, 0, s.log_start(db, 0), 1 << 40)]


def test_full_disk_append_then_drop_frees_and_reopen_read_only() -> None:
    with small_fs(24) as fs:
        path = os.path.join(fs, "data")
        s = open_store(path)
        assert os.path.getsize(os.path.join(path, RESERVE_FILE)) == RESERVE
        s.create_database("other", 1)
        s.create_database("main", 1)
        for i in range(300):  # ~6 MB in the database to drop later
            s.append("other", 0, payload(i), 1, 1_700_000_000_000 + i)
        acked = append_until_full(s, "main")
        assert acked == list(range(len(acked))) and len(acked) > 100
        assert s.read_only is not None
        assert not os.path.exists(os.path.join(path, RESERVE_FILE))  # released for deletes
        # Every acknowledged entry is there with its bytes; a second try is refused cleanly.
        assert read_all(s, "main") == [payload(i)[8:] for i in acked]
        with pytest.raises(StorageFull):
            s.append("main", 0, payload(0), 1, 1)
        before = free_bytes(fs)
        s.drop_database("other")  # deletes work on the full disk, and free it
        assert free_bytes(fs) > before + 4_000_000
        assert s.check_space()
        assert s.read_only is None
        assert os.path.getsize(os.path.join(path, RESERVE_FILE)) == RESERVE
        nxt = s.append("main", 0, payload(99_999), 1, 1).base
        assert nxt == len(acked)
        s.close()

        # Full while the store is closed: it opens read-only, reads work, appends refused.
        filler = fill(fs)
        s = open_store(path)
        try:
            assert s.read_only is not None and "disk full" in s.read_only
            assert read_all(s, "main") == [payload(i)[8:] for i in (*acked, 99_999)]
            with pytest.raises(StorageFull):
                s.append("main", 0, payload(1), 1, 1)
            assert not s.check_space()
            os.unlink(filler)
            assert s.check_space()
            assert s.append("main", 0, payload(2), 1, 1).base == len(acked) + 1
        finally:
            s.close()
        s = open_store(path)
        try:
            assert s.read_only is None
            assert read_all(s, "main") == [payload(i)[8:] for i in (*acked, 99_999, 2)]
        finally:
            s.close()


def test_delete_records_on_full_disk_and_archiver_compaction_free_the_disk() -> None:
    with small_fs(24) as fs:
        path = os.path.join(fs, "data")
        s = open_store(path)
        try:
            s.create_database("main", 1)
            acked = append_until_full(s, "main")
            assert s.read_only is not None
            # DeleteRecords works on the full disk and gives the space back at once.
            half = len(acked) // 2
            before = free_bytes(fs)
            assert s.delete_before("main", 0, half) == half
            assert free_bytes(fs) > before + (half * BATCH) // 2
            assert read_all(s, "main") == [payload(i)[8:] for i in acked[half:]]
            assert s.check_space() and s.read_only is None
            for i in range(len(acked), len(acked) + 100):
                assert s.append("main", 0, payload(i), 1, 1_700_000_000_000 + i).base == i
            # The archiver's disk guard, when the operator sets one: what it removes is
            # compacted, so the filesystem really has the room afterwards.
            used = fs_used_percent(fs)
            removed = s.collect(disk_usage_max_percent=used - 20)
            assert removed and {r["reason"] for r in removed} == {"archiver_disk"}
            assert fs_used_percent(fs) <= used - 15
        finally:
            s.close()


def fs_used_percent(path: str) -> float:
    import shutil

    du = shutil.disk_usage(path)
    return 100 * du.used / du.total


def test_disk_guard_says_once_when_it_cannot_get_under_the_limit(caplog: pytest.LogCaptureFixture) -> None:
    """Another file holds most of the disk: the archiver removes (and compacts, so the space
    really comes back) everything it may — all but each vnode's newest entry — and, still over
    the limit, says so in one line with the figures; again at most every GUARD_LOG_INTERVAL_MS,
    counting the checks in between; and once when usage is back under the limit."""
    with small_fs(24) as fs:
        s = open_store(os.path.join(fs, "data"))
        try:
            s.create_database("a", 2)
            for i in range(100):
                s.append("a", i % 2, payload(i), 1, 1_700_000_000_000 + i)
            filler = os.path.join(fs, "other-file")
            with open(filler, "wb") as fh:
                fh.write(b"\xff" * (12 << 20))
            used = fs_used_percent(fs)
            limit = 40.0  # the other file alone is 50% of the disk
            t0 = 1_800_000_000_000
            with caplog.at_level(logging.WARNING, logger="tmqgate.storage"):
                removed = s.collect(t0, disk_usage_max_percent=limit)
            assert {(r["db"], r["reason"]) for r in removed} == {("a", "archiver_disk")}
            assert sum(r["entries"] for r in removed) == 98  # each vnode keeps its newest entry
            assert fs_used_percent(fs) < used - 5  # compacted: ~2 MB back
            lines = [r.getMessage() for r in caplog.records if "disk guard" in r.getMessage()]
            assert len(lines) == 1, lines
            line = lines[0]
            assert "cannot bring usage under disk_usage_max_percent" in line
            assert "the limit is 40.0%" in line and "newest entry of each of 2 vnode(s)" in line
            status = s.archiver.guard.shortfall
            assert status is not None and status["vnodes"] == 2 and status["limit_percent"] == limit
            size = len(payload(0))
            assert status["wal_bytes"] == 2 * size and status["freed_bytes"] == 98 * size
            assert status["used_bytes"] > status["allowed_bytes"] and status["other_bytes"] > 12 << 20
            assert f"({status['used_bytes']} of {status['capacity_bytes']} bytes)" in line
            # Rate-limited: the next runs within the interval say nothing; the one after it
            # says it again, with how many checks it kept quiet about.
            caplog.clear()
            with caplog.at_level(logging.WARNING, logger="tmqgate.storage"):
                assert s.collect(t0 + 1000, disk_usage_max_percent=limit) == []
                assert s.collect(t0 + 2000, disk_usage_max_percent=limit) == []
                assert not [r for r in caplog.records if "disk guard" in r.getMessage()]
                s.collect(t0 + GUARD_LOG_INTERVAL_MS, disk_usage_max_percent=limit)
            lines = [r.getMessage() for r in caplog.records if "disk guard" in r.getMessage()]
            assert len(lines) == 1 and "(2 more check(s) found the same since the last line)" in lines[0]
            # Room again: one line says so, and the status clears.
            os.unlink(filler)
            caplog.clear()
            with caplog.at_level(logging.WARNING, logger="tmqgate.storage"):
                s.collect(t0 + GUARD_LOG_INTERVAL_MS + 1000, disk_usage_max_percent=limit)
            lines = [r.getMessage() for r in caplog.records if "disk guard" in r.getMessage()]
            assert len(lines) == 1 and "back under disk_usage_max_percent" in lines[0]
            assert s.archiver.guard.shortfall is None
        finally:
            s.close()
