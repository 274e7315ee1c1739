"""The store on a full disk (a real small tmpfs, ``storage.space``): an append that finds no
space raises StorageFull and leaves every acknowledged entry readable; dropping a database
frees the disk (compacted) and appends work again; a store opened on a full disk is read-only
(reads work, appends StorageFull) until there is room."""

from __future__ import annotations

import os

import pytest
from diskfull import fill, free_bytes, small_fs

from tmqgate.storage import StorageFull, Store
from tmqgate.storage.space import RESERVE_FILE

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
