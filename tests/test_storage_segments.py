"""The payload log's segment files (layout 3, ``storage.payloads``): every payload's bytes
written once to a segment, its place in the payload LevelDB. Segments roll, a deleted
payload's disk blocks come back at once (a hole punched, or where that is refused a copy
forward), a segment nothing lives in is unlinked, readers read on while places move, a
power loss that took a segment's tail rolls the vnode tails back, a full disk cuts the
segment back, and a layout-2 store (bytes in the LevelDB) is converted at open, even when
killed midway."""

from __future__ import annotations

import os
import random
import shutil
from pathlib import Path

import plyvel
import pytest
from diskfull import small_fs
from test_storage import make_batch

from tmqgate.storage import StorageFull, Store, keys, payloads
from tmqgate.storage.payloads import PAYLOAD_DIR, SEGMENT_DIR, segment_name

TS = 1_700_000_000_000


_HEADER = make_batch(1)[:61]


def payload(rng: random.Random, size: int) -> bytes:
    """A stored entry's bytes: a record batch header (the store writes the base offset into
    its first 8 bytes; no producer, not transactional), then random bytes, each entry its own."""
    return _HEADER + rng.randbytes(size - len(_HEADER))


def append(s: Store, db: str, vnode: int, data: bytes) -> int:
    return s.append(db, vnode, data, 1, TS).base


def read_all(s: Store, db: str, vnode: int) -> list[bytes]:
    """Every entry of the vnode, the base offset cut off (what the test wrote)."""
    return [b[8:] for b in s.read(db, vnode, s.log_start(db, vnode), 1 << 40)]


def segment_files(path: Path) -> dict[int, os.stat_result]:
    d = path / SEGMENT_DIR
    return {int(name.split(".")[0]): os.stat(d / name) for name in sorted(os.listdir(d))}


def places(path: Path) -> dict[int, tuple[int, int, int]]:
    db = plyvel.DB(str(path / PAYLOAD_DIR))
    try:
        return {keys.read_u64(k): keys.read_payload_ptr(v) for k, v in db.iterator(stop=keys.PAYLOG_META)}
    finally:
        db.close()


def recount(path: Path) -> dict[int, int]:
    """Each segment's live bytes counted from every place (what the stored figures must say)."""
    live: dict[int, int] = {}
    for segment, _, size in places(path).values():
        live[segment] = live.get(segment, 0) + size
    return live


def stored_live(s: Store) -> dict[int, int]:
    return {sid: live for sid, (_, live) in s.core.payloads.segments().items() if live}


@pytest.fixture
def small_segments(monkeypatch: pytest.MonkeyPatch) -> int:
    monkeypatch.setattr(payloads, "SEGMENT_BYTES", 64 << 10)
    return 64 << 10


def test_bytes_are_written_once_to_segments_and_read_back_exact(tmp_path: Path, small_segments: int) -> None:
    rng = random.Random(1)
    path = tmp_path / "d"
    written: dict[int, list[bytes]] = {0: [], 1: []}
    with Store(path, tail_cache_bytes=0) as s:
        s.create_database("db", 2)
        for i in range(60):
            data = payload(rng, rng.choice([100, 3_000, 20_000]))
            append(s, "db", i % 2, data)
            written[i % 2].append(data[8:])
        total = s.total_bytes()
        segs = s.core.payloads.segments()
        assert len(segs) > 5  # rolled at 64 KiB
        assert sum(size for size, _ in segs.values()) == total  # each byte once, nothing else
        assert sum(live for _, live in segs.values()) == total
        assert all(size <= small_segments + 20_000 for size, _ in segs.values())
        # The payload LevelDB holds places, not bytes.
        assert all(len(v) == keys.PAYLOAD_PTR_SIZE for _, v in s.core.payloads.db.iterator(stop=keys.PAYLOG_META))
        assert [read_all(s, "db", v) for v in (0, 1)] == [written[0], written[1]]
    sizes = {sid: st.st_size for sid, st in segment_files(path).items()}
    assert sizes == {sid: size for sid, (size, _) in segs.items()}
    with Store(path, tail_cache_bytes=0) as s:
        assert [read_all(s, "db", v) for v in (0, 1)] == [written[0], written[1]]
        assert s.core.payloads.segments() == segs
        append(s, "db", 0, payload(rng, 500))  # appends continue in the newest segment
        assert max(s.core.payloads.segments()) == max(segs)


def test_a_deleted_head_unlinks_whole_segments_and_punches_the_rest(tmp_path: Path, small_segments: int) -> None:
    rng = random.Random(2)
    path = tmp_path / "d"
    with Store(path, tail_cache_bytes=0) as s:
        s.create_database("a", 1)
        s.create_database("b", 1)
        for _ in range(40):  # a and b interleaved in the same segments, 8 KiB each
            append(s, "a", 0, payload(rng, 8_192))
            append(s, "b", 0, payload(rng, 8_192))
        first = set(segment_files(path))
        blocks = {sid: st.st_blocks for sid, st in segment_files(path).items()}
        s.drop_database("b")  # half of every segment dies: holes
        after = segment_files(path)
        assert set(after) == first
        for sid in sorted(first)[:-1]:
            assert after[sid].st_blocks * 512 <= blocks[sid] * 512 - 4 * 8_192, sid
        assert s.delete_before("a", 0, 30) == 30  # the first ~7 segments die whole: unlinked
        left = segment_files(path)
        assert len(left) < len(first) - 4 and max(left) == max(first)
        assert sum(live for _, live in s.core.payloads.segments().values()) == s.total_bytes()
        remaining = read_all(s, "a", 0)
        assert len(remaining) == 10
    with Store(path, tail_cache_bytes=0) as s:
        assert read_all(s, "a", 0) == remaining
        assert set(segment_files(path)) == set(left)
        figures = stored_live(s)
    assert figures == recount(path)


def test_without_holes_reclaim_copies_mostly_dead_segments_forward(
    tmp_path: Path, small_segments: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(payloads, "punch_hole", lambda fd, pos, size: False)
    rng = random.Random(3)
    path = tmp_path / "d"
    with Store(path, tail_cache_bytes=0) as s:
        s.create_database("a", 2)
        kept: list[bytes] = []
        for i in range(48):  # vnode 1 holds a quarter of every segment
            data = payload(rng, 6_000)
            append(s, "a", 1 if i % 4 == 0 else 0, data)
            if i % 4 == 0:
                kept.append(data[8:])
        before = s.core.payloads.segments()
        s.delete_before("a", 0, s.next_version("a", 0))  # vnode 0 goes: 3/4 of each segment dead
        s.core.payloads.reclaim()
        after = s.core.payloads.segments()
        assert not set(before) & set(after)  # each copied forward and gone, the active one sealed first
        assert sum(size for size, _ in after.values()) < sum(size for size, _ in before.values()) / 2
        assert sum(live for _, live in after.values()) == s.total_bytes()
        assert read_all(s, "a", 1) == kept
        assert set(segment_files(path)) == set(after)
    with Store(path, tail_cache_bytes=0) as s:
        assert read_all(s, "a", 1) == kept
        assert s.core.payloads.segments() == after
    assert {sid: live for sid, (_, live) in after.items() if live} == recount(path)


def test_a_reader_reads_on_after_a_reclaim_moved_its_places(
    tmp_path: Path, small_segments: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(payloads, "punch_hole", lambda fd, pos, size: False)
    rng = random.Random(4)
    with Store(tmp_path / "d", tail_cache_bytes=0) as s:
        s.create_database("a", 2)
        kept = []
        for i in range(64):  # vnode 1 holds a third of every segment
            data = payload(rng, 4_000)
            append(s, "a", 1 if i % 3 == 0 else 0, data)
            if i % 3 == 0:
                kept.append(data)
        reclaim = s.core.payloads.reclaim
        monkeypatch.setattr(s.core.payloads, "reclaim", lambda: None)  # not yet: below, in a thread
        s.delete_before("a", 0, s.next_version("a", 0))
        before = s.core.payloads.segments()
        pairs = list(s.core.db.iterator(prefix=keys.vnode_prefix(keys.WAL, s.catalog.get_database("a").id, 1)))
        reader = s.core.payloads.entries(pairs)
        got = [next(reader)[2] for _ in range(5)]  # its cursor made before the move
        reclaim()  # as the log cleaner's thread does between two reads
        assert set(s.core.payloads.segments()).isdisjoint(before)  # every place moved meanwhile
        assert set(before) <= set(segment_files(tmp_path / "d"))  # the old files stay for the reader
        got += [value for _, _, value in reader]
        assert [g[8:] for g in got] == [k[8:] for k in kept]
        assert set(segment_files(tmp_path / "d")) == set(s.core.payloads.segments())  # then go


def test_a_power_loss_that_took_a_segment_tail_rolls_the_vnode_tails_back(tmp_path: Path) -> None:
    rng = random.Random(5)
    path = tmp_path / "d"
    with Store(path, tail_cache_bytes=0) as s:
        s.create_database("db", 2)
        written = []
        for i in range(8):  # seq i -> vnode i % 2
            data = payload(rng, 1_000)
            assert append(s, "db", i % 2, data) == i // 2
            written.append(data[8:])
    where = places(path)
    [(segment, _)] = segment_files(path).items()
    with open(path / SEGMENT_DIR / segment_name(segment), "r+b") as fh:
        fh.truncate(where[5][1] + 10)  # payloads 5 (torn), 6 and 7 lost
    with Store(path, tail_cache_bytes=0) as s:
        assert (s.next_version("db", 0), s.next_version("db", 1)) == (3, 2)
        assert read_all(s, "db", 0) == written[0:6:2]
        assert read_all(s, "db", 1) == written[1:5:2]
        assert s.core.payloads.sequences() == [0, 1, 2, 3, 4]
        again = payload(rng, 1_000)
        assert append(s, "db", 1, again) == 2
        assert read_all(s, "db", 1) == [*written[1:5:2], again[8:]]
    with Store(path, tail_cache_bytes=0) as s:
        assert read_all(s, "db", 1) == [*written[1:5:2], again[8:]]
        figures = stored_live(s)
    assert figures == recount(path)


def test_a_full_disk_cuts_the_segment_back_and_loses_nothing_acknowledged() -> None:
    rng = random.Random(6)
    with small_fs(16) as fs:
        path = os.path.join(fs, "data")
        s = Store(path, write_buffer_size=256 << 10, lru_cache_size=1 << 20, reserve_bytes=1 << 20)
        try:
            s.create_database("db", 1)
            acked = []
            with pytest.raises(StorageFull):
                for _ in range(10_000):
                    data = payload(rng, 50_000)
                    append(s, "db", 0, data)
                    acked.append(data[8:])
            assert len(acked) > 100
            size, live = s.core.payloads.segments()[max(s.core.payloads.segments())]
            assert size == live  # what the failed append wrote is cut off
            assert read_all(s, "db", 0) == acked
        finally:
            s.close()
        sizes = {sid: st.st_size for sid, st in segment_files(Path(path)).items()}
        s = Store(path, write_buffer_size=256 << 10, lru_cache_size=1 << 20, reserve_bytes=1 << 20)
        try:
            assert read_all(s, "db", 0) == acked
            assert {sid: size for sid, (size, _) in s.core.payloads.segments().items()} == sizes
        finally:
            s.close()


def to_layout_2(path: Path) -> None:
    """Turn a store into what layout 2 left on disk: the bytes as the payload LevelDB's
    values, no segments, LAYOUT 2."""
    where = places(path)
    plog = plyvel.DB(str(path / PAYLOAD_DIR))
    for seq, (segment, pos, size) in where.items():
        with open(path / SEGMENT_DIR / segment_name(segment), "rb") as fh:
            fh.seek(pos)
            plog.put(keys.u64(seq), fh.read(size))
    plog.delete(keys.PAYLOG_FORMAT)
    plog.close()
    shutil.rmtree(path / SEGMENT_DIR)
    main = plyvel.DB(str(path))
    main.put(keys.LAYOUT, keys.u32(2))
    main.close()


def layout_2_store(path: Path, rng: random.Random, n: int) -> dict[int, list[bytes]]:
    written: dict[int, list[bytes]] = {0: [], 1: []}
    with Store(path, tail_cache_bytes=0) as s:
        s.create_database("db", 2)
        for i in range(n):
            data = payload(rng, rng.choice([200, 9_000]))
            append(s, "db", i % 2, data)
            written[i % 2].append(data[8:])
        s.delete_before("db", 0, 2)  # a gap in the sequences
    written[0] = written[0][2:]
    to_layout_2(path)
    return written


def test_a_layout_2_store_is_converted_at_open(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(payloads, "CONVERT_CHUNK", 20_000)
    path = tmp_path / "d"
    written = layout_2_store(path, random.Random(7), 40)
    with Store(path, tail_cache_bytes=0) as s:
        assert keys.read_u32(s.core.db.get(keys.LAYOUT)) == 3
        assert [read_all(s, "db", v) for v in (0, 1)] == [written[0], written[1]]
        assert sum(size for size, _ in s.core.payloads.segments().values()) == s.total_bytes()
        assert s.core.payloads.db.get(keys.PAYLOG_MIGRATING) is None
        assert s.core.payloads.sequences() == [1, *range(3, 40)]  # vnode 0's first two went
    assert {segment for segment, _, _ in places(path).values()} <= set(segment_files(path))
    with Store(path, tail_cache_bytes=0) as s:
        assert [read_all(s, "db", v) for v in (0, 1)] == [written[0], written[1]]


def test_a_conversion_killed_midway_goes_on_at_the_next_open(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(payloads, "CONVERT_CHUNK", 20_000)
    path = tmp_path / "d"
    written = layout_2_store(path, random.Random(8), 40)

    class Killed(Exception):
        pass

    calls = 0
    real = payloads.PayloadLog._durable

    def dies_at_the_third_chunk(self: payloads.PayloadLog) -> None:
        nonlocal calls
        calls += 1
        if calls == 3:
            raise Killed
        real(self)

    monkeypatch.setattr(payloads.PayloadLog, "_durable", dies_at_the_third_chunk)
    with pytest.raises(Killed):
        Store(path, tail_cache_bytes=0)
    monkeypatch.setattr(payloads.PayloadLog, "_durable", real)
    plog = plyvel.DB(str(path / PAYLOAD_DIR))
    progress = keys.read_u64(plog.get(keys.PAYLOG_MIGRATING))
    assert 2 < progress < 40 and plog.get(keys.PAYLOG_FORMAT) is None
    plog.close()
    main = plyvel.DB(str(path))
    assert keys.read_u32(main.get(keys.LAYOUT)) == 2
    main.close()
    with Store(path, tail_cache_bytes=0) as s:
        assert [read_all(s, "db", v) for v in (0, 1)] == [written[0], written[1]]
        assert keys.read_u32(s.core.db.get(keys.LAYOUT)) == 3
        assert sum(live for _, live in s.core.payloads.segments().values()) == s.total_bytes()
        figures = stored_live(s)
    assert figures == recount(path)


def test_a_periodic_sync_covers_the_segments_sealed_since_the_last(
    tmp_path: Path, small_segments: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under a fsync period appends are not synced, nor is a segment when it is sealed (no
    wait for the disk on the event loop); ``sync`` then fdatasyncs every segment written
    since the last one, the newest included."""
    rng = random.Random(9)
    synced: list[str] = []
    real = os.fdatasync

    def recording(fd: int) -> None:
        synced.append(os.path.basename(os.readlink(f"/proc/self/fd/{fd}")))
        real(fd)

    with Store(tmp_path / "d", wal_level=2, fsync_period_ms=1000, tail_cache_bytes=0) as s:
        s.create_database("db", 1)
        s.sync()
        monkeypatch.setattr(os, "fdatasync", recording)
        written = [append(s, "db", 0, payload(rng, 20_000)) for _ in range(12)]  # 4 segments
        assert synced == []
        s.sync()
        assert sorted(set(synced)) == [segment_name(sid) for sid in sorted(s.core.payloads.segments())]
        assert len(s.core.payloads.segments()) >= 4 and written == list(range(12))
        synced.clear()
        s.sync()  # nothing written since
        assert synced == []


def test_holes_and_unlinks_wait_for_the_readers_open(tmp_path: Path, small_segments: int) -> None:
    """A reader's places come from one snapshot: bytes deleted meanwhile (DeleteRecords on
    the event loop while the log cleaner reads in its thread) are still there for it, and
    their space comes back when it is done."""
    rng = random.Random(10)
    path = tmp_path / "d"
    with Store(path, tail_cache_bytes=0) as s:
        s.create_database("a", 1)
        written = [payload(rng, 8_000) for _ in range(40)]
        for data in written:
            append(s, "a", 0, data)
        pairs = list(s.core.db.iterator(prefix=keys.vnode_prefix(keys.WAL, s.catalog.get_database("a").id, 0)))
        reader = s.core.payloads.entries(pairs)
        got = [next(reader)[2]]
        files = segment_files(path)
        s.delete_before("a", 0, 39)  # all but the last: most segments die whole, the rest is punched
        assert set(segment_files(path)) == set(files)  # not while the reader is open
        assert max(s.core.payloads.segments()) == max(files) and len(s.core.payloads.segments()) == 1
        got += [value for _, _, value in reader]  # finished: the deferred unlinks and holes happen
        assert [g[8:] for g in got] == [w[8:] for w in written]
        assert set(segment_files(path)) == {max(files)}
        [(_, last)] = segment_files(path).items()
        assert last.st_blocks * 512 < files[max(files)].st_blocks * 512 - 8_000
        assert read_all(s, "a", 0) == [written[-1][8:]]


def test_holes_a_killed_process_left_queued_are_punched_at_open(tmp_path: Path, small_segments: int) -> None:
    """Killed while a reader held the holes back: the dead bytes stay allocated until the
    next open finds the segments' gaps (from their places, by position) and punches them."""
    rng = random.Random(11)
    path = tmp_path / "d"
    s = Store(path, tail_cache_bytes=0)
    s.create_database("a", 2)
    kept = []
    for i in range(48):  # two vnodes interleaved in every segment
        data = payload(rng, 6_000)
        append(s, "a", i % 2, data)
        if i % 2:
            kept.append(data[8:])
    pairs = list(s.core.db.iterator(prefix=keys.vnode_prefix(keys.WAL, s.catalog.get_database("a").id, 1)))
    reader = s.core.payloads.entries(pairs)
    next(reader)
    s.delete_before("a", 0, s.next_version("a", 0))  # half of every segment dies; held back
    before = {sid: st.st_blocks * 512 for sid, st in segment_files(path).items()}
    s.core.payloads.db.close()  # killed: the reader never finished, nothing settled
    s.core.db.close()
    with Store(path, tail_cache_bytes=0) as s:
        after = {sid: st.st_blocks * 512 for sid, st in segment_files(path).items()}
        assert set(after) == set(before)
        assert sum(after.values()) <= sum(before.values()) - 24 * 4096  # each dead 6,000 bytes: a block at least
        assert read_all(s, "a", 1) == kept
        assert sum(live for _, live in s.core.payloads.segments().values()) == s.total_bytes()


def test_sparse_segments_are_copied_forward_even_with_holes(tmp_path: Path, small_segments: int) -> None:
    """Holes give the space back, but a segment kept for a few live payloads is one more file:
    reclaim copies the sparse ones (under 1/16 live) forward, at most 16 a call."""
    rng = random.Random(12)
    path = tmp_path / "d"
    with Store(path, tail_cache_bytes=0) as s:
        s.create_database("a", 2)
        kept = []
        for i in range(200):  # vnode 1: one 3,000-byte entry in 25: at most one per 63,000-byte segment
            data = payload(rng, 3_000)
            append(s, "a", 1 if i % 25 == 0 else 0, data)
            if i % 25 == 0:
                kept.append(data[8:])
        before = s.core.payloads.segments()
        assert len(before) >= 9
        s.delete_before("a", 0, s.next_version("a", 0))  # DeleteRecords reclaims as it ends
        after = s.core.payloads.segments()
        assert len(after) <= 2 and set(after).isdisjoint(before)
        assert set(segment_files(path)) == set(after)
        assert read_all(s, "a", 1) == kept
    with Store(path, tail_cache_bytes=0) as s:
        assert read_all(s, "a", 1) == kept
        figures = stored_live(s)
    assert figures == recount(path)


def test_open_segment_handles_stay_bounded_as_segments_roll(
    tmp_path: Path, small_segments: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each sealed segment's handle is kept for reads, but no more than OPEN_READERS of them
    (plus the active one): a store that keeps terabytes must not run out of descriptors."""
    monkeypatch.setattr(payloads, "OPEN_READERS", 3)
    rng = random.Random(13)

    ours = str(tmp_path / "d" / SEGMENT_DIR)

    def segment_fds() -> int:  # this store's (other tests' killed stores keep theirs)
        return sum(os.readlink(f"/proc/self/fd/{fd}").startswith(ours) for fd in os.listdir("/proc/self/fd")
                   if os.path.exists(f"/proc/self/fd/{fd}"))

    with Store(tmp_path / "d", tail_cache_bytes=0) as s:
        s.create_database("db", 1)
        written = [payload(rng, 20_000) for _ in range(40)]
        for data in written:
            append(s, "db", 0, data)
        assert len(s.core.payloads.segments()) >= 10
        assert segment_fds() <= 3 + 1
        assert read_all(s, "db", 0) == [w[8:] for w in written]
        assert segment_fds() <= 3 + 1
