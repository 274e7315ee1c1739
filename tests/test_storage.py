"""Store against a real LevelDB in tmp_path: versions, reads, time index, deletion, catalog."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from tmqgate.storage import (
    BatchMeta,
    DatabaseExists,
    OffsetOutOfRange,
    ProducerAppend,
    ProducerWindow,
    Store,
    UnknownDatabase,
    UnknownVnode,
    WalEntry,
    keys,
)


def make_batch(
    n: int,
    ts: int = 1000,
    value_size: int = 10,
    producer: tuple[int, int, int] = (-1, -1, -1),
    timestamps: list[int] | None = None,
) -> bytes:
    """A record batch v2 of n records with base offset 0 and timestamps ts, ts+1, ..."""
    pid, epoch, seq = producer
    b = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=0,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        batch_size=1 << 24,
    )
    for i in range(n):
        t = timestamps[i] if timestamps else ts + i
        b.append(i, timestamp=t, key=None, value=bytes([65 + i % 26]) * value_size, headers=[])
    return bytes(b.build())


def put(store: Store, db: str, vnode: int, n: int, ts: int = 1000, **kw: object) -> int:
    batch = make_batch(n, ts, **kw)  # type: ignore[arg-type]
    return store.append(db, vnode, batch, n, DefaultRecordBatch(batch).max_timestamp).base


def offsets(batches: list[bytes]) -> list[int]:
    return [DefaultRecordBatch(b).base_offset for b in batches]


@pytest.fixture(params=[0, 4096, 2 << 20], ids=["nocache", "tinycache", "cache"])
def store(tmp_path: Path, request: pytest.FixtureRequest) -> Store:
    """Every store test runs with the hot-tail cache off, thrashing, and roomy."""
    s = Store(tmp_path / "data", tail_cache_bytes=request.param)
    yield s
    s.close()


def test_consecutive_versions_and_base_offset_rewrite(store: Store) -> None:
    store.create_database("db", 2)
    assert put(store, "db", 0, 3) == 0
    assert put(store, "db", 0, 1) == 3
    assert put(store, "db", 0, 5) == 4
    assert put(store, "db", 1, 2) == 0
    assert store.next_version("db", 0) == 9
    assert store.next_version("db", 1) == 2
    assert store.log_start("db", 0) == 0
    batches = store.read("db", 0, 0, 1 << 20)
    assert offsets(batches) == [0, 3, 4]
    last = DefaultRecordBatch(batches[2])
    assert last.validate_crc()  # base offset sits outside the CRC
    records = list(last)
    assert [r.offset for r in records] == [4, 5, 6, 7, 8]
    assert [r.value for r in records] == [b"A" * 10, b"B" * 10, b"C" * 10, b"D" * 10, b"E" * 10]


def test_meta_entries_take_one_version_and_plain_reads_skip_them(store: Store) -> None:
    store.create_database("db", 1)
    assert put(store, "db", 0, 2) == 0
    assert store.append_meta("db", 0, b'{"create":"t1"}', timestamp_ms=5) == 2
    assert put(store, "db", 0, 3) == 3
    assert store.append_meta("db", 0, b"m2") == 6
    assert store.next_version("db", 0) == 7
    assert offsets(store.read("db", 0, 0, 1 << 20)) == [0, 3]
    assert offsets(store.read("db", 0, 2, 1 << 20)) == [3]
    assert store.read("db", 0, 6, 1 << 20) == []
    entries = store.read_entries("db", 0, 1, 1 << 20)
    assert [(e.version, e.is_meta) for e in entries] == [(0, False), (2, True), (3, False), (6, True)]
    assert entries[1] == WalEntry(2, True, b'{"create":"t1"}')
    assert entries[3].data == b"m2"
    plain = store.read_entries("db", 0, 2, 1 << 20, include_meta=False)
    assert [(e.version, e.is_meta) for e in plain] == [(3, False)]


def test_read_max_bytes(store: Store) -> None:
    store.create_database("db", 1)
    for _ in range(5):
        put(store, "db", 0, 2, value_size=1000)
    size = len(store.read("db", 0, 0, 1)[0])
    assert size > 2000
    # at least one batch even if bigger than max_bytes
    assert offsets(store.read("db", 0, 0, 1)) == [0]
    assert offsets(store.read("db", 0, 0, 0)) == [0]
    assert offsets(store.read("db", 0, 0, 2 * size)) == [0, 2]
    assert offsets(store.read("db", 0, 0, 3 * size - 1)) == [0, 2]
    assert offsets(store.read("db", 0, 0, 3 * size)) == [0, 2, 4]
    assert offsets(store.read("db", 0, 4, 10 * size)) == [4, 6, 8]
    assert store.read("db", 0, 10, 1 << 20) == []
    assert store.read("db", 0, 99, 1 << 20) == []


def test_read_from_middle_of_batch(store: Store) -> None:
    store.create_database("db", 1)
    put(store, "db", 0, 4)  # 0..3
    put(store, "db", 0, 4)  # 4..7
    put(store, "db", 0, 1)  # 8
    assert offsets(store.read("db", 0, 2, 1 << 20)) == [0, 4, 8]
    assert offsets(store.read("db", 0, 3, 1 << 20)) == [0, 4, 8]
    assert offsets(store.read("db", 0, 5, 1 << 20)) == [4, 8]
    assert offsets(store.read("db", 0, 7, 1)) == [4]
    assert offsets(store.read("db", 0, 8, 1 << 20)) == [8]
    # a meta entry holding from_version: start at the next data batch
    store.append_meta("db", 0, b"m")  # 9
    put(store, "db", 0, 2)  # 10..11
    assert offsets(store.read("db", 0, 9, 1 << 20)) == [10]


def test_reopen_keeps_catalog_versions_producers(tmp_path: Path) -> None:
    path = tmp_path / "data"
    with Store(path) as s:
        info = s.create_database("db", 3, {"retention.ms": "1000"})
        s.create_database("other", 1)
        put(s, "db", 0, 3)
        s.append_meta("db", 0, b"m")
        put(s, "db", 2, 5, ts=7000)
        s.append("db", 1, make_batch(2), 2, 1001, producer=ProducerAppend(42, 3, 10, 2, None))
        s.set_configs("db", {"retention.bytes": "500"}, merge=True)
        pid = s.allocate_producer_id()
        s.commit_offset("g", "db", 0, 3, "meta", leader_epoch=1, commit_ms=99)
    with Store(path) as s:
        assert [d.name for d in s.databases()] == ["db", "other"]
        again = s.get_database("db")
        assert again is not None
        assert again.topic_id == info.topic_id and len(info.topic_id) == 16
        assert again.vgroups == 3
        assert again.created_ms == info.created_ms
        assert again.configs == {"retention.ms": "1000", "retention.bytes": "500"}
        assert s.database_by_topic_id(info.topic_id) == again
        assert s.next_version("db", 0) == 4
        assert s.next_version("db", 1) == 2
        assert s.next_version("db", 2) == 5
        assert s.next_version("other", 0) == 0
        assert put(s, "db", 0, 1) == 4
        assert s.producer_window("db", 1, 42) == ProducerWindow(3, (BatchMeta(10, 11, 0, 1),))
        assert s.allocate_producer_id() == pid + 1
        assert s.fetch_offsets("g")[("db", 0)].offset == 3
        assert s.offset_for_timestamp("db", 2, 7003) == (0, 7004)
        assert s.max_timestamp_offset("db", 2) == (0, 7004)


def test_time_index(store: Store) -> None:
    store.create_database("db", 1)
    assert store.offset_for_timestamp("db", 0, 0) is None
    assert store.max_timestamp_offset("db", 0) is None
    put(store, "db", 0, 2, ts=100)  # 0..1 max 101
    put(store, "db", 0, 2, ts=50)  # 2..3 max 51 (out of order: not indexed)
    store.append_meta("db", 0, b"m")  # 4
    put(store, "db", 0, 3, ts=200)  # 5..7 max 202
    put(store, "db", 0, 1, ts=202)  # 8 max 202 (equal: not indexed)
    put(store, "db", 0, 1, ts=300)  # 9 max 300
    assert store.offset_for_timestamp("db", 0, -5) == (0, 101)
    assert store.offset_for_timestamp("db", 0, 51) == (0, 101)
    assert store.offset_for_timestamp("db", 0, 101) == (0, 101)
    assert store.offset_for_timestamp("db", 0, 102) == (5, 202)
    assert store.offset_for_timestamp("db", 0, 202) == (5, 202)
    assert store.offset_for_timestamp("db", 0, 203) == (9, 300)
    assert store.offset_for_timestamp("db", 0, 300) == (9, 300)
    assert store.offset_for_timestamp("db", 0, 301) is None
    assert store.max_timestamp_offset("db", 0) == (9, 300)


def test_time_index_repaired_after_head_removal(store: Store) -> None:
    store.create_database("db", 1)
    put(store, "db", 0, 1, ts=100)  # 0: indexed
    put(store, "db", 0, 1, ts=50)  # 1: hidden behind 100
    put(store, "db", 0, 1, ts=60)  # 2: hidden
    put(store, "db", 0, 1, ts=200)  # 3: indexed
    store.delete_before("db", 0, 1)
    assert store.offset_for_timestamp("db", 0, 40) == (1, 50)
    assert store.offset_for_timestamp("db", 0, 55) == (2, 60)
    assert store.offset_for_timestamp("db", 0, 61) == (3, 200)
    assert store.max_timestamp_offset("db", 0) == (3, 200)
    store.delete_before("db", 0, 4)
    assert store.offset_for_timestamp("db", 0, 0) is None
    assert store.read("db", 0, 0, 1 << 20) == []
    put(store, "db", 0, 1, ts=10)  # 4: the first after emptying is indexed again
    assert store.offset_for_timestamp("db", 0, 0) == (4, 10)
    assert store.max_timestamp_offset("db", 0) == (4, 10)


def test_max_timestamp_after_removal_of_max(store: Store) -> None:
    store.create_database("db", 1)
    put(store, "db", 0, 1, ts=900)  # 0
    put(store, "db", 0, 1, ts=100)  # 1
    put(store, "db", 0, 1, ts=300)  # 2
    store.delete_before("db", 0, 1)
    assert store.max_timestamp_offset("db", 0) == (2, 300)


def test_delete_before(store: Store) -> None:
    store.create_database("db", 1)
    put(store, "db", 0, 3)  # 0..2
    put(store, "db", 0, 3)  # 3..5
    put(store, "db", 0, 3)  # 6..8
    size = store.log_size("db", 0)
    one = len(store.read("db", 0, 0, 1)[0])
    assert store.delete_before("db", 0, 4) == 4  # first batch removed, second straddles
    assert store.log_start("db", 0) == 4
    assert offsets(store.read("db", 0, 4, 1 << 20)) == [3, 6]
    assert store.log_size("db", 0) == size - one
    assert store.delete_before("db", 0, 2) == 4  # never moves back
    assert store.delete_before("db", 0, 6) == 6  # exact batch boundary
    assert offsets(store.read("db", 0, 0, 1 << 20)) == [6]
    with pytest.raises(OffsetOutOfRange):
        store.delete_before("db", 0, 10)
    assert store.delete_before("db", 0, -1) == 9  # -1 = high watermark
    assert store.read("db", 0, 0, 1 << 20) == []
    assert store.log_size("db", 0) == 0
    assert put(store, "db", 0, 1) == 9  # versions are never reused


def test_delete_before_persists(tmp_path: Path) -> None:
    with Store(tmp_path / "d") as s:
        s.create_database("db", 1)
        put(s, "db", 0, 3)
        put(s, "db", 0, 3)
        s.delete_before("db", 0, 1)  # nothing removable, log start still moves
        assert s.log_start("db", 0) == 1
    with Store(tmp_path / "d") as s:
        assert s.log_start("db", 0) == 1
        assert s.next_version("db", 0) == 6
        s.delete_before("db", 0, 5)
    with Store(tmp_path / "d") as s:
        assert s.log_start("db", 0) == 5
        assert offsets(s.read("db", 0, 0, 1 << 20)) == [3]


def test_retention_by_time(store: Store) -> None:
    store.create_database("db", 2, {"retention.ms": "1000"})
    store.create_database("keep", 1)
    put(store, "db", 0, 2, ts=1000)  # 0..1 max 1001
    store.append_meta("db", 0, b"m", timestamp_ms=1500)  # 2
    put(store, "db", 0, 2, ts=2000)  # 3..4 max 2001
    put(store, "db", 0, 2, ts=1100)  # 5..6 max 1101, behind a newer one: kept (prefix only)
    put(store, "db", 1, 1, ts=500)
    put(store, "keep", 0, 1, ts=0)
    assert store.enforce_retention(now_ms=2002) == 1 + 1  # db/0 entry 0, db/1 entry 0
    assert store.log_start("db", 0) == 2
    assert store.log_start("db", 1) == 1
    assert store.read("db", 1, 0, 1 << 20) == []
    assert store.enforce_retention(now_ms=2501) == 1  # the meta entry (1500 < 1501)
    assert store.log_start("db", 0) == 3
    assert store.enforce_retention(now_ms=3002) == 2
    assert store.log_start("db", 0) == 7
    assert store.next_version("db", 0) == 7
    assert store.log_size("db", 0) == 0
    assert store.log_start("keep", 0) == 0
    assert offsets(store.read("keep", 0, 0, 1 << 20)) == [0]


def test_retention_by_bytes(store: Store) -> None:
    store.create_database("db", 1)
    for _ in range(5):
        put(store, "db", 0, 1, value_size=100)
    one = len(store.read("db", 0, 0, 1)[0])
    assert store.log_size("db", 0) == 5 * one
    assert store.enforce_retention(now_ms=0) == 0  # no configs: unlimited
    store.set_configs("db", {"retention.bytes": str(2 * one + 1), "retention.ms": "-1"})
    # Kafka: drop the oldest while what remains is still >= retention.bytes
    assert store.enforce_retention(now_ms=0) == 2
    assert store.log_start("db", 0) == 2
    assert store.log_size("db", 0) == 3 * one
    store.set_configs("db", {"retention.bytes": str(2 * one)})
    assert store.enforce_retention(now_ms=0) == 1
    assert offsets(store.read("db", 0, 0, 1 << 20)) == [3, 4]
    assert store.set_configs("db", {"retention.bytes": "0", "x": "1"}).configs == {
        "retention.bytes": "0",
        "x": "1",
    }
    assert store.set_configs("db", {"x": None}, merge=True).configs == {"retention.bytes": "0"}
    assert store.enforce_retention(now_ms=0) == 2
    assert store.log_start("db", 0) == 5
    assert store.log_size("db", 0) == 0


def test_drop_and_recreate_sees_no_old_data(tmp_path: Path) -> None:
    with Store(tmp_path / "d") as s:
        old = s.create_database("db", 2)
        put(s, "db", 0, 3)
        s.append("db", 1, make_batch(1), 1, 0, producer=ProducerAppend(7, 0, 0, 1, None))
        with pytest.raises(DatabaseExists):
            s.create_database("db", 1)
        s.drop_database("db")
        assert s.get_database("db") is None
        with pytest.raises(UnknownDatabase):
            s.read("db", 0, 0, 100)
        new = s.create_database("db", 2)
        assert new.id != old.id and new.topic_id != old.topic_id
        assert s.database_by_topic_id(old.topic_id) is None
        assert s.next_version("db", 0) == 0
        assert s.read("db", 0, 0, 1 << 20) == []
        assert s.producer_window("db", 1, 7) is None
        assert put(s, "db", 0, 1) == 0
    with Store(tmp_path / "d") as s:
        assert offsets(s.read("db", 0, 0, 1 << 20)) == [0]
        assert s.next_version("db", 0) == 1
        # nothing of the old id remains
        for prefix in keys.PER_DB_PREFIXES:
            assert list(s.core.db.iterator(prefix=keys.db_prefix(prefix, old.id))) == []


def test_orphaned_data_collected_on_open(tmp_path: Path) -> None:
    """A crash between the catalog delete and the range delete leaves data that open removes."""
    with Store(tmp_path / "d") as s:
        info = s.create_database("db", 1)
        put(s, "db", 0, 3)
        s.core.db.delete(keys.dbinfo_key(info.id))
        s.core.db.delete(keys.name_key("db"))
    with Store(tmp_path / "d") as s:
        assert s.databases() == []
        for prefix in keys.PER_DB_PREFIXES:
            assert list(s.core.db.iterator(prefix=keys.db_prefix(prefix, info.id))) == []


def test_add_vnodes(tmp_path: Path) -> None:
    with Store(tmp_path / "d") as s:
        s.create_database("db", 1)
        put(s, "db", 0, 2)
        with pytest.raises(UnknownVnode):
            put(s, "db", 1, 1)
        assert s.add_vnodes("db", 3).vgroups == 3
        with pytest.raises(ValueError):
            s.add_vnodes("db", 3)
        assert put(s, "db", 2, 1) == 0
        assert s.next_version("db", 0) == 2
    with Store(tmp_path / "d") as s:
        info = s.get_database("db")
        assert info is not None and info.vgroups == 3
        assert s.next_version("db", 0) == 2
        assert s.next_version("db", 1) == 0
        assert s.next_version("db", 2) == 1


def test_producer_window(tmp_path: Path) -> None:
    """append stores the window it is handed (after the batch, at the base it assigns) in the
    batch's WriteBatch; it survives a reopen."""
    with Store(tmp_path / "d") as s:
        s.create_database("db", 2)
        assert s.producer_window("db", 0, 5) is None
        for i in range(7):
            pending = ProducerAppend(5, 1, 2 * i, 2, s.producer_window("db", 0, 5))
            assert s.append("db", 0, make_batch(2), 2, 0, producer=pending).base == 3 * i
            s.append("db", 0, make_batch(1), 1, 0)  # others interleave
        last5 = ProducerWindow(1, tuple(BatchMeta(2 * i, 2 * i + 1, 3 * i, 3 * i + 1) for i in range(2, 7)))
        assert s.producer_window("db", 0, 5) == last5
        assert s.producer_window("db", 1, 5) is None
    with Store(tmp_path / "d") as s:
        assert s.producer_window("db", 0, 5) == last5
        pending = ProducerAppend(5, 2, 2**31 - 2, 3, s.producer_window("db", 0, 5))
        s.append("db", 0, make_batch(3), 3, 0, producer=pending)
        assert s.producer_window("db", 0, 5) == ProducerWindow(2, (BatchMeta(2**31 - 2, 0, 21, 23),))


def test_group_offsets(tmp_path: Path) -> None:
    with Store(tmp_path / "d") as s:
        s.commit_offset("g1", "t", 0, 10, commit_ms=5)
        s.commit_offsets("g1", [("t", 1, 20, 3, "m"), ("u", 0, 7, -1, "")], commit_ms=6)
        s.commit_offset("g2", "t", 0, 99, metadata="x", commit_ms=7)
        s.commit_offset("g", "t", 0, 1, commit_ms=8)  # a prefix of g1's name
        s.commit_offset("g1", "t", 0, 11, commit_ms=9)  # overwrite
    with Store(tmp_path / "d") as s:
        got = s.fetch_offsets("g1")
        assert got == {
            ("t", 0): (11, -1, None, 9),
            ("t", 1): (20, 3, "m", 6),
            ("u", 0): (7, -1, "", 6),
        }
        assert got[("t", 1)].leader_epoch == 3
        assert s.fetch_offsets("g1", ["u"]) == {("u", 0): (7, -1, "", 6)}
        assert s.fetch_offsets("g1", ["nope"]) == {}
        assert s.offset_groups() == ["g", "g1", "g2"]
        assert s.delete_offsets("g1", "t", [1, 5]) == 1
        assert set(s.fetch_offsets("g1")) == {("t", 0), ("u", 0)}
        assert s.delete_offsets("g1", "t") == 1
        assert s.delete_offsets("g1") == 1
        assert s.fetch_offsets("g1") == {}
        assert s.fetch_offsets("g") == {("t", 0): (1, -1, None, 8)}
        s.put_group_metadata("g2", b"\x00state")
        assert s.get_group_metadata("g2") == b"\x00state"
        assert s.group_metadata() == {"g2": b"\x00state"}
        s.delete_group_metadata("g2")
        assert s.get_group_metadata("g2") is None


@pytest.mark.parametrize(("wal_level", "period"), [(1, 3000), (2, 0), (2, 100)])
def test_fsync_policies(tmp_path: Path, wal_level: int, period: int) -> None:
    with Store(tmp_path / "d", wal_level=wal_level, fsync_period_ms=period) as s:
        assert s.needs_periodic_sync == (wal_level == 2 and period > 0)
        s.create_database("db", 1)
        put(s, "db", 0, 2)
        s.sync()
        put(s, "db", 0, 2)
    with Store(tmp_path / "d", wal_level=wal_level, fsync_period_ms=period) as s:
        assert s.next_version("db", 0) == 4


def test_errors(store: Store) -> None:
    with pytest.raises(UnknownDatabase):
        store.next_version("nope", 0)
    store.create_database("db", 1)
    with pytest.raises(UnknownVnode):
        store.read("db", 1, 0, 10)
    with pytest.raises(ValueError):
        store.append("db", 0, b"short", 1, 0)
    with pytest.raises(ValueError):
        store.append("db", 0, make_batch(1), 0, 0)
    with pytest.raises(ValueError):
        Store(store.path + "x", wal_level=3)


def test_reads_match_a_model(store: Store) -> None:
    """Random appends, meta entries and head deletions; every read agrees with a plain model."""
    rng = random.Random(7)
    store.create_database("db", 1)
    model: list[tuple[int, int, bool, int]] = []  # base, count, is_meta, stored size
    for step in range(300):
        r = rng.random()
        if r < 0.1:
            v = store.append_meta("db", 0, b"m" * rng.randrange(1, 50))
            model.append((v, 1, True, 0))
        elif r < 0.13 and model:
            target = rng.randrange(store.log_start("db", 0), store.next_version("db", 0) + 1)
            store.delete_before("db", 0, target)
            model = [m for m in model if m[0] + m[1] > target]
        else:
            n = rng.randrange(1, 6)
            batch = make_batch(n, ts=step, value_size=rng.randrange(1, 800))
            v = store.append("db", 0, batch, n, step + n - 1).base
            model.append((v, n, False, len(batch)))
        if step % 10 == 0 or step == 299:
            hw = store.next_version("db", 0)
            for start in range(max(0, hw - 40), hw + 1):
                max_bytes = rng.choice([1, 1000, 5000, 1 << 20])
                want: list[int] = []
                total = 0
                for base, n, is_meta, size in model:
                    if base + n <= start or is_meta:
                        continue
                    if want and total + size > max_bytes:
                        break
                    want.append(base)
                    total += size
                    if total >= max_bytes:
                        break
                assert offsets(store.read("db", 0, start, max_bytes)) == want, (step, start, max_bytes)
                entries = store.read_entries("db", 0, start, 1 << 30)
                assert [e.version for e in entries] == [m[0] for m in model if m[0] + m[1] > start]


def test_removals_are_logged(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Retention, the archiver and DeleteRecords each say what they removed (one INFO line per
    vnode and reason), with the offsets, entries and bytes as fields for a JSON log."""
    import logging

    with Store(tmp_path / "d") as store, caplog.at_level(logging.INFO, logger="tmqgate.storage"):
        store.create_database("db", 1, {"retention.ms": "1000"})
        for ts in (1000, 1100, 5000, 5100, 5200):  # entries of offsets 0-1, 2-3, 4-5, 6-7, 8-9
            put(store, "db", 0, 2, ts=ts)
        assert store.enforce_retention(now_ms=3000) == 2
        store.delete_before("db", 0, 6)
        assert [r["reason"] for r in store.collect(now_ms=6000, max_total_bytes=1)] == ["archiver_size"]
    lines = [r for r in caplog.records if getattr(r, "event", None) == "removal"]
    assert [(r.reason, r.topic, r.partition, r.first_offset, r.last_offset, r.entries) for r in lines] == [
        ("retention.ms", "db", 0, 0, 3, 2), ("delete_records", "db", 0, 4, 5, 1), ("archiver_size", "db", 0, 6, 7, 1)]
    assert lines[0].getMessage() == f"retention.ms removed offsets 0..3 of db-0: 2 entries, {lines[0].bytes} bytes"
    assert lines[0].bytes > 0
    assert [r.getMessage() for r in caplog.records if getattr(r, "event", None) == "topic_created"] == [
        "created topic db with 1 partition(s)"]


def test_a_cluster_nodes_producer_ids_are_its_own_residue_and_never_repeat(tmp_path: Path) -> None:
    from tmqgate.storage.producers import PRODUCER_ID_STRIDE

    with Store(tmp_path / "s") as s:
        single = s.allocate_producer_id()
        s.producers.use_slot(5)
        ids = [s.allocate_producer_id() for _ in range(3)]
    assert all(i % PRODUCER_ID_STRIDE == 5 and i > single for i in ids)
    assert ids[1] - ids[0] == ids[2] - ids[1] == PRODUCER_ID_STRIDE
    with Store(tmp_path / "s") as s:  # persisted: a restart goes on after the last one
        s.producers.use_slot(5)
        assert s.allocate_producer_id() == ids[2] + PRODUCER_ID_STRIDE
