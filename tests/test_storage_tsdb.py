"""The TDengine model in storage, against a real LevelDB in tmp_path: catalog (database kind
and options, supertables, child tables, TDengine topics), transactions, rows entries,
retention of tsdb databases, the archiver and the log history."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from kafka.record.default_records import DefaultRecordBatch
from test_storage import offsets, put

from tmqgate.storage import (
    ChildTable,
    StableExists,
    StorageError,
    Store,
    TableExists,
    TmqTopic,
    TopicExists,
    TransactionConflict,
    UnknownStable,
    UnknownTable,
    UnknownTopic,
    UnknownVnode,
    WalEntry,
    keys,
)

SCHEMA = {
    "name": "meters",
    "columns": [["ts", "TIMESTAMP"], ["current", "FLOAT"], ["voltage", "INT"]],
    "tags": [["location", "VARCHAR(64)"], ["groupid", "INT"]],
}
SCHEMA2 = {**SCHEMA, "columns": [*SCHEMA["columns"], ["phase", "FLOAT"]]}


@pytest.fixture(params=[0, 4096, 2 << 20], ids=["nocache", "tinycache", "cache"])
def store(tmp_path: Path, request: pytest.FixtureRequest) -> Store:
    """Every store test runs with the hot-tail cache off, thrashing, and roomy."""
    s = Store(tmp_path / "data", tail_cache_bytes=request.param)
    yield s
    s.close()


def meta(store: Store, db: str, vnode: int, size: int, ts: int) -> int:
    """A meta entry whose stored value is exactly ``size`` bytes (8-byte time + payload)."""
    return store.append_meta(db, vnode, b"m" * (size - 8), timestamp_ms=ts)


def rows(store: Store, db: str, vnode: int, size: int, ts: int, n: int = 1, max_ts: int = 0) -> int:
    """A rows entry whose stored value is exactly ``size`` bytes (24-byte header + payload)."""
    return store.append_rows(db, vnode, b"r" * (size - 24), n, max_ts, max_ts, timestamp_ms=ts)


# catalog ---------------------------------------------------------------------------------


def test_catalog_round_trip_and_reopen(tmp_path: Path) -> None:
    path = tmp_path / "d"
    opts = {"precision": "ms", "wal_retention_period": 3600, "wal_retention_size": -1, "keep": "3650d"}
    definition = {
        "kind": "stable",
        "db": "power",
        "stable": "meters",
        "meta": None,
        "sql": "AS STABLE meters",
    }
    with Store(path) as s:
        k = s.create_database("plain", 1)
        assert (k.kind, k.options) == ("kafka", {})
        t = s.create_database("power", 4, kind="tsdb", options=opts)
        assert (t.kind, t.options) == ("tsdb", opts)
        s.create_stable("power", "meters", SCHEMA)
        s.create_stable("power", "other", {"name": "other"})
        assert s.create_child_table(
            "power", "d1001", "meters", {"location": "SF", "groupid": 2}, 1
        ) == ChildTable("d1001", "meters", {"location": "SF", "groupid": 2}, 1)
        s.create_child_table("power", "d1002", "meters", {"location": "LA", "groupid": 3}, 3)
        s.create_child_table("power", "o1", "other", {}, 0)
        s.alter_stable("power", "meters", SCHEMA2)
        assert s.set_child_tags("power", "d1001", {"groupid": 7}) == ChildTable(
            "d1001", "meters", {"location": "SF", "groupid": 7}, 1
        )
        assert s.set_child_tags("power", "d1002", {"location": "NY"}, merge=False).tags == {"location": "NY"}
        tid = s.create_tmq_topic("topic_meters", definition, created_ms=5)
        assert len(tid) == 16
        fixed = s.create_tmq_topic(
            "t2", {"kind": "database", "db": "power"}, topic_id=b"\x01" * 16, created_ms=6
        )
        assert fixed == b"\x01" * 16
        info = s.set_options("power", {"wal_retention_period": 60, "keep": None})
        assert info.options == {"precision": "ms", "wal_retention_period": 60, "wal_retention_size": -1}
        assert s.drop_child_table("power", "o1").stable == "other"
    with Store(path) as s:
        assert s.get_database("plain").kind == "kafka"  # type: ignore[union-attr]
        power = s.get_database("power")
        assert power is not None and power.kind == "tsdb" and power.vgroups == 4
        assert power.options == {"precision": "ms", "wal_retention_period": 60, "wal_retention_size": -1}
        assert dict(s.stables("power")) == {"meters": SCHEMA2, "other": {"name": "other"}}
        assert s.stable("power", "meters") == SCHEMA2
        assert s.stables("plain") == {}
        assert dict(s.child_tables("power")) == {
            "d1001": ChildTable("d1001", "meters", {"location": "SF", "groupid": 7}, 1),
            "d1002": ChildTable("d1002", "meters", {"location": "NY"}, 3),
        }
        assert s.child_table("power", "o1") is None
        assert s.tmq_topics() == {
            "topic_meters": TmqTopic(tid, definition, 5),
            "t2": TmqTopic(b"\x01" * 16, {"kind": "database", "db": "power"}, 6),
        }
        assert s.tmq_topic_by_id(tid) == ("topic_meters", TmqTopic(tid, definition, 5))
        assert s.tmq_topic_by_id(b"\x02" * 16) is None
        assert s.drop_stable("power", "meters") == 2  # child tables go with their supertable
        assert s.drop_tmq_topic("t2").created_ms == 6
        assert s.tmq_topic("t2") is None
    with Store(path) as s:
        assert dict(s.stables("power")) == {"other": {"name": "other"}}
        assert s.child_tables("power") == {}
        assert list(s.tmq_topics()) == ["topic_meters"]


def test_catalog_errors_leave_nothing_behind(store: Store) -> None:
    store.create_database("power", 2, kind="tsdb")
    store.create_stable("power", "meters", SCHEMA)
    store.create_child_table("power", "d1", "meters", {}, 0)
    with pytest.raises(StableExists):
        store.create_stable("power", "meters", SCHEMA)
    with pytest.raises(TableExists):
        store.create_stable("power", "d1", SCHEMA)  # tables and supertables share names
    with pytest.raises(StableExists):
        store.create_child_table("power", "meters", "meters", {}, 0)
    with pytest.raises(TableExists):
        store.create_child_table("power", "d1", "meters", {}, 1)
    with pytest.raises(UnknownStable):
        store.create_child_table("power", "d2", "nope", {}, 0)
    with pytest.raises(UnknownVnode):
        store.create_child_table("power", "d2", "meters", {}, 2)
    with pytest.raises(UnknownStable):
        store.alter_stable("power", "nope", SCHEMA)
    with pytest.raises(UnknownStable):
        store.drop_stable("power", "nope")
    with pytest.raises(UnknownTable):
        store.drop_child_table("power", "d2")
    with pytest.raises(UnknownTable):
        store.set_child_tags("power", "d2", {})
    with pytest.raises(TypeError):  # tags must be JSON-able
        store.create_child_table("power", "d2", "meters", {"x": object()}, 0)
    store.create_tmq_topic("t", {})
    with pytest.raises(TopicExists):
        store.create_tmq_topic("t", {})
    with pytest.raises(UnknownTopic):
        store.drop_tmq_topic("u")
    # a batch with one bad table creates none of them
    with pytest.raises(TableExists):
        store.create_child_tables("power", [("d2", "meters", {}, 0), ("d1", "meters", {}, 0)])
    assert list(store.child_tables("power")) == ["d1"]
    assert store.create_child_tables("power", [(f"x{i}", "meters", {"i": i}, i % 2) for i in range(3)]) == 3
    assert sorted(store.child_tables("power")) == ["d1", "x0", "x1", "x2"]
    assert sorted(k[5:] for k in store.core.db.iterator(prefix=keys.CTABLE, include_value=False)) == [
        b"d1",
        b"x0",
        b"x1",
        b"x2",
    ]


def test_drop_database_drops_its_catalog(tmp_path: Path) -> None:
    with Store(tmp_path / "d") as s:
        old = s.create_database("power", 1, kind="tsdb")
        s.create_stable("power", "meters", SCHEMA)
        s.create_child_table("power", "d1", "meters", {}, 0)
        s.drop_database("power")
        s.create_database("power", 1, kind="tsdb")
        assert s.stables("power") == {} and s.child_tables("power") == {}
        for prefix in (keys.STABLE, keys.CTABLE):
            assert list(s.core.db.iterator(prefix=keys.db_prefix(prefix, old.id))) == []
    with Store(tmp_path / "d") as s:
        assert s.stables("power") == {} and s.child_tables("power") == {}


def test_databases_written_before_kind_and_entry_counts_load_as_kafka(tmp_path: Path) -> None:
    """Stores from before this change: DBINFO without kind/options, 24-byte VNODE values."""
    with Store(tmp_path / "d") as s:
        info = s.create_database("old", 1, {"retention.ms": "5"})
        put(s, "old", 0, 2)
        s.append_meta("old", 0, b"m")
        put(s, "old", 0, 1)
        raw = json.loads(s.core.db.get(keys.dbinfo_key(info.id)))
        del raw["kind"], raw["options"]
        s.core.db.put(keys.dbinfo_key(info.id), json.dumps(raw).encode())
        nxt, start, size, _ = keys.unpack_vnode_state(s.core.db.get(keys.vnode_key(info.id, 0)))
        s.core.db.put(keys.vnode_key(info.id, 0), struct_old(nxt, start, size))
    with Store(tmp_path / "d") as s:
        again = s.get_database("old")
        assert again is not None and again.kind == "kafka" and again.options == {}
        assert again.configs == {"retention.ms": "5"}
        assert s.log_entries("old", 0) == 3
        assert s.next_version("old", 0) == 4
        assert put(s, "old", 0, 1) == 4
        assert s.log_entries("old", 0) == 4
    with Store(tmp_path / "d") as s:
        assert s.log_entries("old", 0) == 4
        assert len(s.core.db.get(keys.vnode_key(info.id, 0))) == 32


def struct_old(nxt: int, start: int, size: int) -> bytes:
    import struct

    return struct.pack(">QQQ", nxt, start, size)


# transactions ----------------------------------------------------------------------------


def test_transaction_writes_catalog_and_meta_together(tmp_path: Path) -> None:
    with Store(tmp_path / "d") as s:
        s.create_database("power", 2, kind="tsdb")
        put(s, "power", 1, 3)  # versions 0..2 on vnode 1
        with s.transaction() as tx:
            tx.create_stable("power", "meters", SCHEMA)
            assert tx.stable("power", "meters") == SCHEMA  # the transaction sees its own changes
            assert s.stable("power", "meters") is None  # the store does not, yet
            tx.create_child_table("power", "d1", "meters", {"g": 1}, 1)
            assert tx.append_meta("power", 0, b'{"type":"create","stable":"meters"}', timestamp_ms=1) == 0
            assert tx.append_meta("power", 1, b'{"type":"create","stable":"meters"}', timestamp_ms=1) == 3
            assert tx.append_meta("power", 1, b'{"type":"create","table":"d1"}', timestamp_ms=2) == 4
            assert tx.append_rows("power", 1, b"arrow", 5, 5000, 4990, timestamp_ms=3) == 5
            assert s.next_version("power", 1) == 3
        assert s.next_version("power", 0) == 1
        assert s.next_version("power", 1) == 10
        assert s.child_table("power", "d1") == ChildTable("d1", "meters", {"g": 1}, 1)
    with Store(tmp_path / "d") as s:
        assert s.stable("power", "meters") == SCHEMA
        assert [(e.version, e.kind, e.count, e.data) for e in s.read_entries("power", 1, 3, 1 << 20)] == [
            (3, "meta", 1, b'{"type":"create","stable":"meters"}'),
            (4, "meta", 1, b'{"type":"create","table":"d1"}'),
            (5, "rows", 5, b"arrow"),
        ]
        assert s.offset_for_timestamp("power", 1, 0) == (0, 1002)
        assert s.offset_for_timestamp("power", 1, 1003) == (5, 5000)


def test_transaction_sees_its_own_staged_changes(store: Store) -> None:
    store.create_database("power", 2, kind="tsdb")
    store.create_stable("power", "old", {"name": "old"})
    store.create_child_table("power", "o1", "old", {}, 0)
    with store.transaction() as tx:
        tx.create_stable("power", "meters", SCHEMA)
        assert tx.create_child_tables("power", [("d1", "meters", {}, 0), ("d2", "meters", {}, 1)]) == 2
        tx.drop_child_table("power", "d1")
        assert tx.child_table("power", "d1") is None
        tx.create_child_table("power", "d1", "meters", {"again": True}, 1)  # the name is free again
        tx.drop_child_table("power", "o1")
        tx.create_child_table("power", "o1", "meters", {}, 0)  # now a child of meters
        assert tx.drop_stable("power", "old") == 0  # o1 no longer belongs to it
        assert tx.drop_stable("power", "meters") == 3  # d1, d2, o1: staged and stored alike
        tx.create_stable("power", "meters", SCHEMA2)
        tx.create_child_table("power", "d9", "meters", {}, 1)
        with pytest.raises(UnknownStable):
            tx.create_child_table("power", "x", "old", {}, 0)
    assert dict(store.stables("power")) == {"meters": SCHEMA2}
    assert dict(store.child_tables("power")) == {"d9": ChildTable("d9", "meters", {}, 1)}
    assert sorted(k[5:] for k in store.core.db.iterator(prefix=keys.CTABLE, include_value=False)) == [b"d9"]
    tx2 = store.transaction()
    tx2.commit()  # an empty transaction writes nothing
    with pytest.raises(StorageError):
        tx2.create_stable("power", "late", {})


def test_transaction_failure_keeps_nothing(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    store.create_database("power", 1, kind="tsdb")
    meta(store, "power", 0, 20, 1)
    before = list(store.core.db.iterator())
    with pytest.raises(RuntimeError):
        with store.transaction() as tx:
            tx.create_stable("power", "meters", SCHEMA)
            tx.create_child_table("power", "d1", "meters", {}, 0)
            tx.append_meta("power", 0, b"create")
            raise RuntimeError("broker failed half way")
    assert list(store.core.db.iterator()) == before
    assert store.stables("power") == {} and store.child_tables("power") == {}
    assert store.next_version("power", 0) == 1

    def broken_write(wb: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(store.core, "write", broken_write)
    with pytest.raises(OSError):
        with store.transaction() as tx:
            tx.create_stable("power", "meters", SCHEMA)
            tx.append_meta("power", 0, b"create")
    monkeypatch.undo()
    assert list(store.core.db.iterator()) == before
    assert store.stables("power") == {}
    assert store.next_version("power", 0) == 1 and store.log_entries("power", 0) == 1
    assert [e.version for e in store.read_entries("power", 0, 0, 1 << 20)] == [0]


def test_transaction_conflict_with_a_direct_append(store: Store) -> None:
    store.create_database("power", 1, kind="tsdb")
    with pytest.raises(TransactionConflict):
        with store.transaction() as tx:
            tx.create_stable("power", "meters", SCHEMA)
            assert tx.append_meta("power", 0, b"create") == 0
            assert put(store, "power", 0, 2) == 0  # someone else took version 0 meanwhile
    assert store.stables("power") == {}
    assert store.next_version("power", 0) == 2
    assert [(e.version, e.kind) for e in store.read_entries("power", 0, 0, 1 << 20)] == [(0, "data")]


# rows entries ----------------------------------------------------------------------------


def test_rows_entries_versions_and_reads_mixed_with_data_and_meta(store: Store) -> None:
    store.create_database("power", 1, kind="tsdb")
    assert put(store, "power", 0, 2, ts=1000) == 0  # 0..1, max 1001
    assert store.append_meta("power", 0, b'{"create":"d1"}', timestamp_ms=5) == 2
    assert store.append_rows("power", 0, b"ARROW-1", 3, 2000, 1500, timestamp_ms=10) == 3  # 3..5
    assert put(store, "power", 0, 1, ts=1500) == 6  # not indexed (1500 < 2000)
    assert store.append_rows("power", 0, b"ARROW-2", 2, 3000, 2500) == 7  # 7..8
    assert store.next_version("power", 0) == 9
    assert store.log_entries("power", 0) == 5
    entries = store.read_entries("power", 0, 0, 1 << 20)
    assert [(e.version, e.kind, e.is_meta, e.count) for e in entries] == [
        (0, "data", False, 2),
        (2, "meta", True, 1),
        (3, "rows", False, 3),
        (6, "data", False, 1),
        (7, "rows", False, 2),
    ]
    assert entries[1] == WalEntry(2, True, b'{"create":"d1"}')
    assert entries[2] == WalEntry(3, False, b"ARROW-1", "rows", 3)
    assert entries[4].data == b"ARROW-2"
    assert DefaultRecordBatch(entries[0].data).base_offset == 0
    # from the middle of a rows entry: that entry first
    assert [e.version for e in store.read_entries("power", 0, 4, 1 << 20)] == [3, 6, 7]
    assert [e.version for e in store.read_entries("power", 0, 8, 1 << 20)] == [7]
    assert [e.version for e in store.read_entries("power", 0, 0, 1 << 20, include_meta=False)] == [0, 3, 6, 7]
    # max_bytes counts returned payloads; at least one entry
    assert [e.version for e in store.read_entries("power", 0, 3, 1)] == [3]
    assert [e.version for e in store.read_entries("power", 0, 2, 15 + 7)] == [2, 3]
    # plain Kafka reads skip meta and rows entries
    assert offsets(store.read("power", 0, 0, 1 << 20)) == [0, 6]
    assert offsets(store.read("power", 0, 3, 1 << 20)) == [6]
    assert store.read("power", 0, 7, 1 << 20) == []
    # the time index covers rows entries (their max timestamp), not meta entries
    assert store.offset_for_timestamp("power", 0, 0) == (0, 1001)
    assert store.offset_for_timestamp("power", 0, 1002) == (3, 2000)
    assert store.offset_for_timestamp("power", 0, 2001) == (7, 3000)
    assert store.offset_for_timestamp("power", 0, 3001) is None
    assert store.max_timestamp_offset("power", 0) == (7, 3000)
    with pytest.raises(ValueError):
        store.append_rows("power", 0, b"x", 0, 0, 0)


def test_rows_time_index_repaired_after_head_removal(store: Store) -> None:
    store.create_database("power", 1, kind="tsdb")
    store.append_rows("power", 0, b"a", 2, 5000, 4000)  # 0..1 indexed
    store.append_rows("power", 0, b"b", 2, 4500, 4400)  # 2..3 hidden behind 5000
    store.append_meta("power", 0, b"m")  # 4
    store.append_rows("power", 0, b"c", 1, 4700, 4700)  # 5 hidden
    assert store.delete_before("power", 0, 2) == 2
    assert store.offset_for_timestamp("power", 0, 0) == (2, 4500)
    assert store.offset_for_timestamp("power", 0, 4600) == (5, 4700)
    assert store.max_timestamp_offset("power", 0) == (5, 4700)


def test_rows_entries_persist(tmp_path: Path) -> None:
    with Store(tmp_path / "d") as s:
        s.create_database("power", 2, kind="tsdb")
        s.append_rows("power", 1, b"p" * 70_000, 1000, 9, 1)
        put(s, "power", 1, 1)
    with Store(tmp_path / "d") as s:
        got = s.read_entries("power", 1, 500, 1)
        assert got == [WalEntry(0, False, b"p" * 70_000, "rows", 1000)]
        assert s.next_version("power", 1) == 1001
        assert s.log_size("power", 1) == 70_024 + len(s.read("power", 1, 0, 1)[0])
        assert s.append_rows("power", 1, b"q", 2, 10, 10) == 1001


# retention of tsdb databases -------------------------------------------------------------


def test_tsdb_retention_by_period(store: Store) -> None:
    # option names as the broker gives them, in any case; Kafka defaults never apply to tsdb
    store.create_database("power", 2, kind="tsdb", options={"WAL_RETENTION_PERIOD": 10})
    store.create_database("keep", 1, kind="tsdb", options={"wal_retention_period": -1})
    store.create_database("unset", 1, kind="tsdb")
    store.create_database("kafka", 1)
    rows(store, "power", 0, 100, ts=1000, n=2, max_ts=0)  # 0..1: row time 0 (back-filled)
    meta(store, "power", 0, 50, ts=5000)  # 2
    rows(store, "power", 0, 100, ts=12_000, n=3, max_ts=0)  # 3..5
    rows(store, "power", 1, 100, ts=20_000)
    rows(store, "keep", 0, 100, ts=0)
    rows(store, "unset", 0, 100, ts=0)
    put(store, "kafka", 0, 1, ts=14_900)  # kept by retention.ms=1000 at 15001? 14900 < 14001 is false
    defaults = {"retention.ms": "1000", "retention.bytes": "-1"}
    assert store.enforce_retention(now_ms=15_001, defaults=defaults) == 2  # limit 5001: ages 1000, 5000
    assert store.log_start("power", 0) == 3
    assert store.log_size("power", 0) == 100
    assert store.log_entries("power", 0) == 1
    assert [e.version for e in store.read_entries("power", 0, 0, 1 << 20)] == [3]
    assert store.log_start("power", 1) == 0
    assert store.log_start("keep", 0) == store.log_start("unset", 0) == store.log_start("kafka", 0) == 0
    assert store.enforce_retention(now_ms=30_001, defaults=defaults) == 1 + 1 + 1  # power/0, power/1, kafka
    assert store.log_start("power", 0) == 6 and store.log_size("power", 0) == 0
    assert store.log_start("power", 1) == 1
    assert store.log_start("keep", 0) == 0 and store.log_start("unset", 0) == 0
    assert store.append_rows("power", 0, b"x", 1, 0, 0) == 6  # versions never reused


def test_tsdb_retention_by_size(store: Store) -> None:
    store.create_database(
        "power", 1, kind="tsdb", options={"wal_retention_size": 2, "wal_retention_period": -1}
    )
    for i in range(5):
        rows(store, "power", 0, 1024, ts=i, n=2)
    assert store.log_size("power", 0) == 5120
    # as retention.bytes: drop the oldest while what remains is still >= 2 KB
    assert store.enforce_retention(now_ms=10**12) == 3
    assert store.log_size("power", 0) == 2048
    assert store.log_start("power", 0) == 6
    store.set_options("power", {"wal_retention_size": 0})
    assert store.enforce_retention(now_ms=0) == 2
    assert store.log_start("power", 0) == 10 and store.log_entries("power", 0) == 0


# the archiver ----------------------------------------------------------------------------


def archive_fixture(store: Store) -> None:
    """Seven 100-byte entries over three vnodes of two databases, ages 10..70."""
    store.create_database("a", 2)
    store.create_database("b", 1, kind="tsdb")
    meta(store, "a", 0, 100, 10)  # a/0 v0
    meta(store, "a", 1, 100, 20)  # a/1 v0
    rows(store, "b", 0, 100, 30, n=5)  # b/0 v0..4
    meta(store, "a", 0, 100, 40)  # a/0 v1
    meta(store, "a", 1, 100, 50)  # a/1 v1
    rows(store, "b", 0, 100, 60, n=5)  # b/0 v5..9
    meta(store, "a", 0, 100, 70)  # a/0 v2
    assert store.total_bytes() == 700


def rec(
    db: str, vnode: int, first: int, last: int, n: int, ts0: int, ts1: int, now: int, reason: str
) -> dict:
    return {
        "db": db,
        "vnode": vnode,
        "first_version": first,
        "last_version": last,
        "entries": n,
        "bytes": 100 * n,
        "first_ts": ts0,
        "last_ts": ts1,
        "removed_ms": now,
        "reason": reason,
    }


def test_archiver_by_total_bytes_keeps_each_vnodes_newest_entry(store: Store) -> None:
    archive_fixture(store)
    assert store.collect(1000, max_total_bytes=700) == []
    got = store.collect(1000, max_total_bytes=350)
    assert got == [
        rec("a", 0, 0, 1, 2, 10, 40, 1000, "archiver_size"),
        rec("a", 1, 0, 0, 1, 20, 20, 1000, "archiver_size"),
        rec("b", 0, 0, 4, 1, 30, 30, 1000, "archiver_size"),
    ]
    assert store.total_bytes() == 300
    assert (store.log_start("a", 0), store.log_start("a", 1), store.log_start("b", 0)) == (2, 1, 5)
    assert [e.version for e in store.read_entries("b", 0, 0, 1 << 20)] == [5]
    # only newest entries are left: nothing more to collect even though 300 > 100
    assert store.collect(2000, max_total_bytes=100) == []
    assert store.total_bytes() == 300


def test_archiver_by_simulated_volume_percentage(store: Store) -> None:
    archive_fixture(store)
    assert store.collect(5, disk_usage_max_percent=70.0, volume_bytes=1000) == []
    # 700 of 1000 bytes used, 50 % allowed: free 200 bytes, oldest first
    assert store.collect(5, disk_usage_max_percent=50.0, volume_bytes=1000) == [
        rec("a", 0, 0, 0, 1, 10, 10, 5, "archiver_disk"),
        rec("a", 1, 0, 0, 1, 20, 20, 5, "archiver_disk"),
    ]
    assert store.total_bytes() == 500


def test_archiver_size_then_disk_then_age(store: Store) -> None:
    archive_fixture(store)
    # size needs 50 bytes (one entry), disk 200 (two): the first is charged to size
    assert store.collect(7, max_total_bytes=650, disk_usage_max_percent=50, volume_bytes=1000) == [
        rec("a", 0, 0, 0, 1, 10, 10, 7, "archiver_size"),
        rec("a", 1, 0, 0, 1, 20, 20, 7, "archiver_disk"),
    ]
    # age: everything older than 100 - 65 = 35 that is not a vnode's newest entry
    assert store.collect(100, max_age_ms=65) == [rec("b", 0, 0, 4, 1, 30, 30, 100, "archiver_age")]
    assert store.collect(100, max_age_ms=1) == [rec("a", 0, 1, 1, 1, 40, 40, 100, "archiver_age")]
    assert store.total_bytes() == 300


def test_archiver_on_the_real_filesystem(store: Store) -> None:
    archive_fixture(store)
    assert store.collect(9, disk_usage_max_percent=100.0) == []
    got = store.collect(9, disk_usage_max_percent=0.0)  # any use is too much: all but the newest
    assert [(r["db"], r["vnode"], r["entries"], r["reason"]) for r in got] == [
        ("a", 0, 2, "archiver_disk"),
        ("a", 1, 1, "archiver_disk"),
        ("b", 0, 1, "archiver_disk"),
    ]
    assert store.total_bytes() == 300
    assert store.collect(9, max_total_bytes=None, disk_usage_max_percent=None) == []


def test_archiver_works_with_data_batches_and_reads_after(store: Store) -> None:
    store.create_database("k", 1)
    for ts in (100, 200, 300):
        put(store, "k", 0, 2, ts=ts, value_size=50)
    one = store.log_size("k", 0) // 3
    got = store.collect(0, max_total_bytes=one)
    assert [(r["first_version"], r["last_version"], r["first_ts"], r["last_ts"]) for r in got] == [
        (0, 3, 101, 201)
    ]
    assert offsets(store.read("k", 0, 0, 1 << 20)) == [4]
    assert store.offset_for_timestamp("k", 0, 0) == (4, 301)


# log history -----------------------------------------------------------------------------


def test_log_history_after_each_kind_of_removal(tmp_path: Path) -> None:
    path = tmp_path / "d"
    with Store(path) as s:
        s.create_database("k", 1, {"retention.ms": "1000"})
        s.create_database("t", 1, kind="tsdb", options={"wal_retention_size": 1})  # 1024 bytes
        meta(s, "k", 0, 100, 10)  # k v0
        meta(s, "k", 0, 100, 20)  # k v1
        meta(s, "k", 0, 100, 5000)  # k v2
        meta(s, "k", 0, 100, 6000)  # k v3
        meta(s, "k", 0, 100, 7000)  # k v4
        for ts in (1, 2, 3, 4):
            rows(s, "t", 0, 1000, ts, n=10)  # t v0..39
        before = int(time.time() * 1000)
        assert s.delete_before("k", 0, 1) == 1
        after = int(time.time() * 1000)
        assert s.enforce_retention(now_ms=5500) == 1 + 2  # k: age 20 < 4500; t: 4000 -> 2000 bytes
        s.set_configs("k", {"retention.bytes": "100"})  # and no retention.ms any more
        assert s.enforce_retention(now_ms=6600) == 2  # k: 300 -> 100 bytes; t: 2000 - 1000 < 1024
        assert len(s.collect(7000, max_total_bytes=0)) == 1  # t: v20..29 (k has only its newest)
        history = s.log_history()
        removed_ms = history[0]["collected"][0]["removed_ms"]
        assert before <= removed_ms <= after
    expect = [
        {
            "db": "k",
            "kind": "kafka",
            "vnode": 0,
            "log_start": 4,
            "next_version": 5,
            "live": {
                "first_version": 4,
                "last_version": 4,
                "entries": 1,
                "bytes": 100,
                "first_ts": 7000,
                "last_ts": 7000,
            },
            "collected": [
                c(0, 0, 1, 100, 10, 10, removed_ms, "delete_records"),
                c(1, 1, 1, 100, 20, 20, 5500, "retention.ms"),
                c(2, 3, 2, 200, 5000, 6000, 6600, "retention.bytes"),
            ],
        },
        {
            "db": "t",
            "kind": "tsdb",
            "vnode": 0,
            "log_start": 30,
            "next_version": 40,
            "live": {
                "first_version": 30,
                "last_version": 39,
                "entries": 1,
                "bytes": 1000,
                "first_ts": 4,
                "last_ts": 4,
            },
            "collected": [
                c(0, 19, 2, 2000, 1, 2, 5500, "wal_retention_size"),
                c(20, 29, 1, 1000, 3, 3, 7000, "archiver_size"),
            ],
        },
    ]
    with Store(path) as s:  # persistent, and the same after reopen
        assert s.log_history() == expect
        assert s.log_history("t") == expect[1:]
        assert json.loads(json.dumps(s.log_history())) == expect
        assert [r.reason for r in s.history("k")] == ["delete_records", "retention.ms", "retention.bytes"]
        s.drop_database("k")  # its history goes with it
        assert [r.reason for r in s.history()] == ["wal_retention_size", "archiver_size"]
    with Store(path) as s:
        assert s.log_history() == expect[1:]


def c(first: int, last: int, n: int, size: int, ts0: int, ts1: int, removed: int, reason: str) -> dict:
    return {
        "first_version": first,
        "last_version": last,
        "entries": n,
        "bytes": size,
        "first_ts": ts0,
        "last_ts": ts1,
        "removed_ms": removed,
        "reason": reason,
    }


def test_log_history_of_empty_and_untouched_vnodes(store: Store) -> None:
    store.create_database("k", 2)
    put(store, "k", 1, 3, ts=50)
    assert store.log_history() == [
        {
            "db": "k",
            "kind": "kafka",
            "vnode": 0,
            "log_start": 0,
            "next_version": 0,
            "live": {
                "first_version": None,
                "last_version": None,
                "entries": 0,
                "bytes": 0,
                "first_ts": None,
                "last_ts": None,
            },
            "collected": [],
        },
        {
            "db": "k",
            "kind": "kafka",
            "vnode": 1,
            "log_start": 0,
            "next_version": 3,
            "live": {
                "first_version": 0,
                "last_version": 2,
                "entries": 1,
                "bytes": store.log_size("k", 1),
                "first_ts": 52,
                "last_ts": 52,
            },
            "collected": [],
        },
    ]


def test_log_history_is_bounded(tmp_path: Path) -> None:
    with Store(tmp_path / "d", history_limit=3) as s:
        s.create_database("k", 1)
        for i in range(6):
            meta(s, "k", 0, 100, i)
        for v in range(1, 6):
            s.delete_before("k", 0, v)
        assert [r.first_version for r in s.history()] == [2, 3, 4]
    with Store(tmp_path / "d", history_limit=3) as s:
        assert [r.first_version for r in s.history()] == [2, 3, 4]
        assert len(list(s.core.db.iterator(prefix=keys.HISTORY))) == 3
    with Store(tmp_path / "d", history_limit=0) as s:  # 0: no new history (old records kept)
        s.delete_before("k", 0, -1)
        assert [r.first_version for r in s.history()] == [2, 3, 4]
