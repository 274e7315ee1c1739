"""The payload log: WAL bytes keyed by a global sequence (their places in
``<data>/wal-payloads``, the bytes in segment files: test_storage_segments), the main DB's WAL
keys pointing at them. Orphans above the last committed sequence go at open, removals take
the payloads with them, reopened stores read back exact bytes, and a layout-1 data
directory is refused."""

from __future__ import annotations

import os
import random
from pathlib import Path

import plyvel
import pytest
from kafka.record.default_records import DefaultRecordBatch
from test_storage import make_batch, offsets, put

from tmqgate.storage import BatchMeta, LayoutMismatch, ProducerAppend, StorageError, Store, WalEntry, keys, payloads
from tmqgate.storage.payloads import PAYLOAD_DIR


def payload_seqs(s: Store) -> list[int]:
    return s.core.payloads.sequences()


def indexed_seqs(s: Store) -> list[int]:
    return sorted(keys.wal_index_seq(v) for _, v in s.core.db.iterator(prefix=keys.WAL))


def window_batches(s: Store, producer_id: int) -> tuple[BatchMeta, ...]:
    window = s.producer_window("db", 0, producer_id)
    return () if window is None else window.batches


def fill(s: Store, db: str, vnodes: int, n: int, rng: random.Random) -> dict[tuple[int, int], bytes]:
    """n data batches of random sizes (up to ~70 KiB) spread over the vnodes; version ->
    stored bytes."""
    out: dict[tuple[int, int], bytes] = {}
    for i in range(n):
        vnode = rng.randrange(vnodes)
        count = rng.randint(1, 5)
        batch = make_batch(count, ts=1000 + i, value_size=rng.choice([10, 300, 14_000]))
        base = s.append(db, vnode, batch, count, DefaultRecordBatch(batch).max_timestamp).base
        out[(vnode, base)] = s.read(db, vnode, base, 1)[0]
    return out


def test_reopened_store_reads_back_exact_bytes(tmp_path: Path) -> None:
    rng = random.Random(7)
    path = tmp_path / "d"
    with Store(path, tail_cache_bytes=0) as s:
        s.create_database("k", 3)
        s.create_database("t", 2, kind="tsdb")
        stored = fill(s, "k", 3, 60, rng)
        written: dict[int, list[WalEntry]] = {0: [], 1: []}
        for i in range(20):
            payload = rng.randbytes(rng.choice([5, 1000, 70_000]))
            with s.transaction() as tx:
                v = tx.append_meta("t", i % 2, b"meta%d" % i, timestamp_ms=50 + i)
                b = tx.append_rows("t", i % 2, payload, 3, 900 + i, 800 + i, timestamp_ms=60 + i)
            written[i % 2] += [
                WalEntry(v, True, b"meta%d" % i, "meta", 1),
                WalEntry(b, False, payload, "rows", 3),
            ]
        assert indexed_seqs(s) == payload_seqs(s) == list(range(60 + 40))
        assert {vn: s.read_entries("t", vn, 0, 1 << 30) for vn in (0, 1)} == written
    with Store(path, tail_cache_bytes=0) as s:
        for (vnode, base), data in stored.items():
            assert s.read("k", vnode, base, 1) == [data]
            assert DefaultRecordBatch(data).base_offset == base
        for vn in (0, 1):
            assert s.read_entries("t", vn, 0, 1 << 30) == written[vn]
        # appends continue after the last committed sequence
        base = put(s, "k", 0, 2)
        assert payload_seqs(s)[-1] == 100 and indexed_seqs(s)[-1] == 100
        assert DefaultRecordBatch(s.read("k", 0, base, 1)[0]).base_offset == base


def test_payloads_above_last_committed_sequence_are_removed_at_open(tmp_path: Path) -> None:
    path = tmp_path / "d"
    s = Store(path, tail_cache_bytes=0)
    s.create_database("db", 2)
    stored = fill(s, "db", 2, 10, random.Random(1))
    # A writer killed between the payload write and the main WriteBatch leaves payloads
    # nothing indexes (never acknowledged); a place may even point where nothing was written.
    assert s.core.payloads.stage([b"orphan 10", b"orphan 11"], sync=False) == 10
    s.core.payloads.db.put(keys.u64(500), keys.pack_payload_ptr(99, 0, 9))
    s.core.payloads.close()  # killed: no sync, no cleanup
    s.core.db.close()
    with Store(path, tail_cache_bytes=0) as s:
        assert payload_seqs(s) == list(range(10))
        for (vnode, base), data in stored.items():
            assert s.read("db", vnode, base, 1) == [data]
        nxt = s.next_version("db", 1)
        base = put(s, "db", 1, 3)
        assert base == nxt
        assert payload_seqs(s) == list(range(11))
        batch = DefaultRecordBatch(s.read("db", 1, base, 1 << 20)[-1])
        assert batch.base_offset == base and batch.validate_crc()
    with Store(path) as s:
        assert payload_seqs(s) == indexed_seqs(s) == list(range(11))


def test_failed_main_write_leaves_no_payload(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with Store(tmp_path / "d") as s:
        s.create_database("db", 1)
        put(s, "db", 0, 1)

        def broken_write(wb: object) -> None:
            raise OSError("disk full")

        monkeypatch.setattr(s.core, "write", broken_write)
        with pytest.raises(OSError):
            put(s, "db", 0, 2)
        with pytest.raises(OSError):
            with s.transaction() as tx:
                tx.append_meta("db", 0, b"m")
        monkeypatch.undo()
        assert payload_seqs(s) == [0]
        assert put(s, "db", 0, 1) == 1
        assert payload_seqs(s) == indexed_seqs(s) == [0, 1]


def test_delete_before_and_retention_remove_payloads(tmp_path: Path) -> None:
    with Store(tmp_path / "d", tail_cache_bytes=0) as s:
        s.create_database("db", 2, {"retention.bytes": "-1"})
        for i in range(10):
            put(s, "db", i % 2, 2, ts=1000 + i)  # vnode 0: versions 0,2,..,8; vnode 1 too
        assert len(payload_seqs(s)) == 10
        assert s.delete_before("db", 0, 4) == 4  # two entries of vnode 0
        assert len(payload_seqs(s)) == 8
        assert payload_seqs(s) == indexed_seqs(s)
        s.set_configs("db", {"retention.ms": "100"})
        removed = s.enforce_retention(now_ms=1106)
        assert removed == 3  # max ts < 1006: vnode 0's 1005, vnode 1's 1002 and 1004
        assert payload_seqs(s) == indexed_seqs(s)
        assert len(payload_seqs(s)) == 10 - 2 - removed
        size = s.log_size("db", 1)
        s.set_configs("db", {"retention.bytes": str(size - size // 3)})  # 3 equal entries: one goes
        assert s.enforce_retention(now_ms=0) == 1
        assert payload_seqs(s) == indexed_seqs(s)
        assert len(payload_seqs(s)) == 10 - 2 - removed - 1
        for vnode in (0, 1):
            got = s.read("db", vnode, s.log_start("db", vnode), 1 << 20)
            assert [DefaultRecordBatch(b).base_offset for b in got][0] == s.log_start("db", vnode)


def test_archiver_removes_payloads(tmp_path: Path) -> None:
    with Store(tmp_path / "d", tail_cache_bytes=0) as s:
        s.create_database("db", 2)
        fill(s, "db", 2, 20, random.Random(3))
        total = s.total_bytes()
        out = s.collect(max_total_bytes=total // 2)
        gone = sum(r["entries"] for r in out)
        assert gone > 0
        assert len(payload_seqs(s)) == 20 - gone
        assert payload_seqs(s) == indexed_seqs(s)
        assert sum(live for _, live in s.core.payloads.segments().values()) == s.total_bytes()


def test_drop_database_removes_its_payloads(tmp_path: Path) -> None:
    path = tmp_path / "d"
    with Store(path, tail_cache_bytes=0) as s:
        s.create_database("a", 2)
        s.create_database("b", 1, kind="tsdb")
        kept = fill(s, "a", 2, 8, random.Random(5))
        for i in range(6):
            s.append_rows("b", 0, b"r%d" % i, 2, i, i)
            s.append_meta("b", 0, b"m%d" % i)
        assert len(payload_seqs(s)) == 20
        s.drop_database("b")
        assert len(payload_seqs(s)) == 8
        assert payload_seqs(s) == indexed_seqs(s)
        for (vnode, base), data in kept.items():
            assert s.read("a", vnode, base, 1) == [data]
    with Store(path) as s:
        assert len(payload_seqs(s)) == 8


def test_payload_deletes_interrupted_by_a_crash_finish_at_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "d"
    s = Store(path, tail_cache_bytes=0)
    s.create_database("db", 1)
    for _ in range(6):
        put(s, "db", 0, 1)
    monkeypatch.setattr(s.core.payloads, "delete", lambda seqs: None)  # "killed" before it ran
    s.delete_before("db", 0, 4)
    assert len(payload_seqs(s)) == 6 and indexed_seqs(s) == [4, 5]
    s.close()
    with Store(path) as s:
        assert payload_seqs(s) == [4, 5]
        assert s.core.db.get(keys.PAYGC) is None
        assert [DefaultRecordBatch(b).base_offset for b in s.read("db", 0, 0, 1 << 20)] == [4, 5]


def test_interrupted_drop_collects_payloads_at_open(tmp_path: Path) -> None:
    path = tmp_path / "d"
    with Store(path) as s:
        info = s.create_database("db", 1)
        s.create_database("other", 1)
        put(s, "other", 0, 1)
        for _ in range(4):
            put(s, "db", 0, 1)
        s.core.db.delete(keys.dbinfo_key(info.id))  # as if killed right after the catalog delete
        s.core.db.delete(keys.name_key("db"))
    with Store(path) as s:
        assert len(payload_seqs(s)) == 1 and payload_seqs(s) == indexed_seqs(s)
        assert len(s.read("other", 0, 0, 1 << 20)) == 1


def test_missing_payload_is_an_error_not_a_short_read(tmp_path: Path) -> None:
    with Store(tmp_path / "d", tail_cache_bytes=0) as s:
        s.create_database("db", 1)
        put(s, "db", 0, 1)
        put(s, "db", 0, 1)
        s.core.payloads.db.delete(keys.u64(1))
        with pytest.raises(StorageError):
            s.read("db", 0, 0, 1 << 20)
        # a reader that stops before the missing payload still gets what lies before it,
        # though the two were written back to back (read together, PayloadLog.entries)
        assert offsets(s.read("db", 0, 0, 1)) == [0]


def test_layout_1_data_dir_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "old"
    db = plyvel.DB(str(path), create_if_missing=True)
    db.put(keys.name_key("db"), keys.u32(1))  # what a layout-1 store holds, without LAYOUT
    db.put(keys.wal_key(1, 0, 0, keys.KIND_DATA), make_batch(1))
    db.close()
    with pytest.raises(LayoutMismatch, match="layout 1"):
        Store(path)
    assert not os.path.exists(os.path.join(path, PAYLOAD_DIR))
    db = plyvel.DB(str(path))  # the store let go of the directory
    db.put(keys.LAYOUT, keys.u32(4))
    db.close()
    with pytest.raises(LayoutMismatch, match="layout 4"):
        Store(path)


def test_new_store_is_stamped_with_the_layout(tmp_path: Path) -> None:
    with Store(tmp_path / "d") as s:
        assert keys.read_u32(s.core.db.get(keys.LAYOUT)) == keys.LAYOUT_VERSION
    with Store(tmp_path / "d") as s:  # reopens fine
        assert s.databases() == []


def test_payload_log_that_lost_its_tail_rolls_back_the_vnode_tails(tmp_path: Path) -> None:
    """A power loss can keep index keys whose payloads the payload log lost (its unsynced
    tail): open rolls those vnodes back to their last entry with a payload."""
    path = tmp_path / "d"
    with Store(path, tail_cache_bytes=0) as s:
        s.create_database("db", 2)
        for i in range(8):  # seq i -> vnode i % 2, 2 records each, producer 7 on vnode 0
            batch = make_batch(2, ts=1000 + i)
            producer = ProducerAppend(7, 0, i, 2, s.producer_window("db", 0, 7)) if i % 2 == 0 else None
            s.append("db", i % 2, batch, 2, 1001 + i, producer=producer)
        assert [b.base_offset for b in window_batches(s, 7)] == [0, 2, 4, 6]
    plog = plyvel.DB(os.path.join(path, PAYLOAD_DIR))
    for seq in (5, 6, 7):  # lost: vnode 1's version 4 (seq 5), vnode 0's 6, vnode 1's 6
        plog.delete(keys.u64(seq))
    plog.close()
    with Store(path, tail_cache_bytes=0) as s:
        assert (s.next_version("db", 0), s.next_version("db", 1)) == (6, 4)
        assert (s.log_entries("db", 0), s.log_entries("db", 1)) == (3, 2)
        assert s.log_size("db", 0) == sum(len(b) for b in s.read("db", 0, 0, 1 << 20))
        assert [DefaultRecordBatch(b).base_offset for b in s.read("db", 1, 0, 1 << 20)] == [0, 2]
        assert [b.base_offset for b in window_batches(s, 7)] == [0, 2, 4]
        assert s.max_timestamp_offset("db", 0) == (4, 1005)
        assert s.offset_for_timestamp("db", 1, 1006) is None
        assert put(s, "db", 1, 1) == 4
        assert payload_seqs(s) == indexed_seqs(s) == [0, 1, 2, 3, 4, 5]
    with Store(path) as s:
        assert s.next_version("db", 1) == 5 and len(s.read("db", 1, 0, 1 << 20)) == 3


def test_removing_the_newest_payloads_keeps_sequences_increasing(tmp_path: Path) -> None:
    path = tmp_path / "d"
    with Store(path) as s:
        s.create_database("db", 1)
        for _ in range(3):
            put(s, "db", 0, 1)
        s.delete_before("db", 0, -1)
        assert payload_seqs(s) == []
    with Store(path) as s:
        assert s.next_version("db", 0) == 3 and s.log_start("db", 0) == 3
        put(s, "db", 0, 1)
        assert payload_seqs(s) == [3]


def test_back_to_back_payloads_are_read_together(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Small batches lying back to back in a segment are read with one pread per READ_AHEAD
    bytes of them, not one each (a source producing a record at a time); where another
    vnode's payloads lie between them, or a segment ends (rolled at 200 KiB here), a read
    starts again. What comes back is exactly what one pread per batch reads, from the start
    and from inside the log."""
    monkeypatch.setattr(payloads, "SEGMENT_BYTES", 200 << 10)
    s = Store(tmp_path / "data", tail_cache_bytes=0)
    try:
        s.create_database("db", 2)
        rng = random.Random(7)
        for i in range(3000):
            count = rng.randint(1, 3)
            batch = make_batch(count, ts=1000 + i, value_size=rng.choice([10, 100, 300]))
            s.append("db", 0 if i % 10 else 1, batch, count, DefaultRecordBatch(batch).max_timestamp)
        assert len(s.core.payloads.segments()) > 3
        preads = 0
        real_pread = os.pread

        def counted(fd: int, size: int, pos: int) -> bytes:
            nonlocal preads
            preads += 1
            return real_pread(fd, size, pos)

        monkeypatch.setattr(payloads.os, "pread", counted)

        def read_all(vnode: int, start: int) -> list[bytes]:
            out: list[bytes] = []
            while batches := s.read("db", vnode, start, 64 << 10):
                out.extend(batches)
                last = DefaultRecordBatch(batches[-1])
                start = last.base_offset + last.last_offset_delta + 1
            return out

        froms = [(0, 0), (1, 0), (0, 2001)]
        together = [read_all(v, at) for v, at in froms]
        read_together, preads = preads, 0
        monkeypatch.setattr(payloads, "READ_AHEAD", 0)
        one_by_one = [read_all(v, at) for v, at in froms]
        assert together == one_by_one
        batches = sum(map(len, one_by_one))
        assert batches > 3000 and preads >= batches  # (and the one past each read's limit)
        assert read_together * 4 < batches, (read_together, batches)
    finally:
        s.close()
