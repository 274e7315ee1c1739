"""WAL retention and the archiver's disk guard, seen through Kafka clients and `GET /log-history`.

- A database with `WAL_RETENTION_PERIOD 1` on a broker checking retention every 500 ms: old
  entries go, ListOffsets earliest moves to the new log start, and a consumer positioned
  before it gets OFFSET_OUT_OF_RANGE and resets as its auto.offset.reset says (earliest → the
  new log start; none/error → an error to the application).
- `retention.ms` on a plain Kafka topic does the same.
- The disk guard (003's archiver) on a broker with a small simulated volume: once more than
  the limit is written the oldest entries are collected, and the log history lists each
  collected range (reason, versions, entries, bytes, times) and each vnode's live range.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from .helpers import wait_until
from .tdengine_helpers import (
    METERS_DDL,
    CkConsumer,
    Rec,
    TdBroker,
    beginning_offsets,
    end_offsets,
    td_broker_fixture,
    unique,
)

pytestmark = pytest.mark.tmqgate_only

VG = 2


@pytest.fixture(scope="module")
def td(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TdBroker]:
    # disk guard off (100% of the real filesystem), so only retention removes entries here
    yield from td_broker_fixture(tmp_path_factory, "td-retention",
                                 {"retention_check_interval_ms": 500, "disk_usage_max_percent": 100.0})


VOLUME = 400_000
MAX_PERCENT = 50
ALLOWED = VOLUME * MAX_PERCENT // 100


@pytest.fixture(scope="module")
def td_disk(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TdBroker]:
    yield from td_broker_fixture(tmp_path_factory, "td-diskguard",
                                 {"disk_volume_bytes": VOLUME, "disk_usage_max_percent": MAX_PERCENT,
                                  "archiver_interval_ms": 300})


def _history(td: TdBroker, db: str) -> dict[int, dict[str, Any]]:
    return {v["vnode"]: v for v in td.log_history(db)}


def _check_history_covers(vnode: dict[str, Any], reasons: set[str]) -> None:
    """Collected ranges are contiguous from version 0 and end where the live range starts."""
    collected = vnode["collected"]
    assert collected, vnode
    expect_first = 0
    for c in collected:
        assert c["reason"] in reasons, c
        assert c["first_version"] == expect_first, (vnode["vnode"], collected)
        assert c["last_version"] >= c["first_version"] and c["entries"] >= 1 and c["bytes"] > 0, c
        assert c["first_ts"] <= c["last_ts"] <= c["removed_ms"], c
        expect_first = c["last_version"] + 1
    assert vnode["log_start"] == expect_first, vnode
    if vnode["live"]["entries"]:
        assert vnode["live"]["first_version"] == expect_first, vnode
        assert vnode["live"]["last_version"] == vnode["next_version"] - 1, vnode


def _insert(td: TdBroker, db: str, tables: list[str], ts0: int, n: int = 3) -> list[tuple[str, int]]:
    """One multi-table INSERT of `n` rows per table; the (table, ts) written."""
    parts, out = [], []
    for t in tables:
        vals = " ".join(f"({ts0 + i}, {1.5 + i}, {220 + i}, 0.5)" for i in range(n))
        parts.append(f"{db}.{t} USING {db}.meters TAGS ('SF', 1) VALUES {vals}")
        out += [(t, ts0 + i) for i in range(n)]
    assert td.affected("INSERT INTO " + " ".join(parts)) == len(out)
    return out


def _kp(td: TdBroker, reset: str) -> Any:
    from kafka import KafkaConsumer

    return KafkaConsumer(bootstrap_servers=td.bootstrap, enable_auto_commit=False, auto_offset_reset=reset,
                         fetch_max_wait_ms=200)


def test_wal_retention_period_moves_log_start_and_resets_lagging_consumers(td: TdBroker) -> None:
    from confluent_kafka import Consumer, KafkaError
    from confluent_kafka import TopicPartition as CkTP
    from kafka import TopicPartition
    from kafka.errors import OffsetOutOfRangeError

    db = unique("ret")
    tables = ["a1", "b2", "c3", "d4"]
    td.sql(f"CREATE DATABASE {db} VGROUPS {VG} WAL_RETENTION_PERIOD 1")
    info = next(d for d in td.rows("SHOW DATABASES") if d["name"] == db)
    assert (info["vgroups"], info["wal_retention_period"], info["wal_retention_size"]) == (VG, 1, -1)
    probe = _kp(td, "earliest")  # connected before the writes, so the offsets come back quickly
    tps = [TopicPartition(db, p) for p in range(VG)]
    try:
        probe.beginning_offsets(tps)
        first_write = time.monotonic()
        td.sql(METERS_DDL.format(db=db))
        for k in range(3):
            _insert(td, db, tables, 1000 + 10 * k)
        begin0 = {tp.partition: o for tp, o in probe.beginning_offsets(tps).items()}
        elapsed = time.monotonic() - first_write
        ends1 = {tp.partition: o for tp, o in probe.end_offsets(tps).items()}
    finally:
        probe.close()
    assert all(e > 0 for e in ends1.values()), ends1
    if elapsed < 1.0:  # nothing can have expired yet (a loaded machine may take longer)
        assert begin0 == {p: 0 for p in range(VG)}, (begin0, elapsed)

    # after ~1 s + a retention check, every entry is gone: log start = next version
    wait_until(lambda: beginning_offsets(td.bootstrap, db, VG) == ends1, 15, 0.2,
               "earliest offsets to move to the end")
    assert end_offsets(td.bootstrap, db, VG) == ends1  # versions are never reused
    hist = _history(td, db)
    for v in range(VG):
        _check_history_covers(hist[v], {"wal_retention_period"})
        assert hist[v]["log_start"] == hist[v]["next_version"] == ends1[v]
        assert hist[v]["live"]["entries"] == 0 and hist[v]["live"]["bytes"] == 0
        assert sum(c["entries"] for c in hist[v]["collected"]) >= 2  # the create-stable meta entry + rows

    # kafka-python, auto.offset.reset=earliest: positioned at 0 (before the log start), the
    # fetch is OFFSET_OUT_OF_RANGE and the consumer resets to the new log start
    c = _kp(td, "earliest")
    try:
        c.assign(tps)
        for tp in tps:
            c.seek(tp, 0)
        assert c.poll(timeout_ms=1000) == {}
        wait_until(lambda: (c.poll(timeout_ms=100) == {}) and all(c.position(tp) == ends1[tp.partition] for tp in tps),
                   10, 0, "kafka-python positions to reset to the log start")
        # what is written now arrives, at versions from the old end on
        written = set(_insert(td, db, tables, 5000))
        got: list[Rec] = []
        deadline = time.monotonic() + 10
        while len(got) < len(written):
            for tp, msgs in c.poll(timeout_ms=200).items():
                got += [Rec(tp.partition, m.offset, m.key.decode(), m.value, m.timestamp, dict(m.headers))
                        for m in msgs]
            assert time.monotonic() < deadline, got
        assert {(r.key, r.timestamp) for r in got} == written and len(got) == len(written)
        assert all(r.offset >= ends1[r.partition] for r in got)
    finally:
        c.close()

    wait_until(lambda: all(b == e for b, e in zip(beginning_offsets(td.bootstrap, db, VG).values(),
                                                  end_offsets(td.bootstrap, db, VG).values(), strict=True)),
               15, 0.2, "the second batch to expire too")
    ends2 = end_offsets(td.bootstrap, db, VG)

    # kafka-python, auto.offset.reset=none: the application gets OffsetOutOfRangeError
    c = _kp(td, "none")
    try:
        c.assign(tps)
        for tp in tps:
            c.seek(tp, 1)
        with pytest.raises(OffsetOutOfRangeError):
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                c.poll(timeout_ms=200)
    finally:
        c.close()

    # confluent-kafka: auto.offset.reset=earliest resets to the log start (its fetch position,
    # from its statistics: no record has come, so it has no application position) ...
    ck1 = CkConsumer(td.bootstrap, db, **{"auto.offset.reset": "earliest"})
    try:
        ck1.c.assign([CkTP(db, p, 1) for p in range(VG)])

        def reset() -> bool:
            assert ck1.c.consume(10, 0.1) == []
            return ck1.fetched == ends2
        wait_until(reset, 15, 0, "confluent-kafka to reset to the log start")
    finally:
        ck1.close()
    # ... and =error reports it to the application
    ck = Consumer({"bootstrap.servers": td.bootstrap, "group.id": unique("unused"), "enable.auto.commit": False,
                   "auto.offset.reset": "error", "fetch.wait.max.ms": 100})
    try:
        ck.assign([CkTP(db, p, 1) for p in range(VG)])
        errors = []
        deadline = time.monotonic() + 15
        while not errors and time.monotonic() < deadline:
            errors = [m.error() for m in ck.consume(10, 0.2) if m.error() is not None]
        assert errors, "no error for an out-of-range position with auto.offset.reset=error"
        assert errors[0].code() == KafkaError._AUTO_OFFSET_RESET, errors
        assert "out of range" in errors[0].str().lower() or "offset" in errors[0].str().lower(), errors
    finally:
        ck.close()


def test_retention_ms_on_a_plain_kafka_topic(td: TdBroker) -> None:
    from kafka import KafkaAdminClient, KafkaProducer, TopicPartition
    from kafka.admin import NewTopic

    topic = unique("plain-ret")
    admin = KafkaAdminClient(bootstrap_servers=td.bootstrap)
    try:
        admin.create_topics([NewTopic(topic, 2, 1, topic_configs={"retention.ms": "1000"})])
    finally:
        admin.close()
    p = KafkaProducer(bootstrap_servers=td.bootstrap, acks="all", linger_ms=0)
    try:
        for i in range(20):
            p.send(topic, key=b"k%d" % i, value=b"v%d" % i, partition=i % 2)  # timestamps: now
            p.flush()
    finally:
        p.close()
    ends = end_offsets(td.bootstrap, topic, 2)
    assert ends == {0: 10, 1: 10}
    wait_until(lambda: beginning_offsets(td.bootstrap, topic, 2) == ends, 15, 0.2, "retention.ms to remove all")
    hist = _history(td, topic)
    for v in range(2):
        _check_history_covers(hist[v], {"retention.ms"})
        assert sum(c["entries"] for c in hist[v]["collected"]) == 10  # one batch per flushed send
    # a consumer behind the log start resets to it (earliest) ...
    c = _kp(td, "earliest")
    try:
        tps = [TopicPartition(topic, p) for p in range(2)]
        c.assign(tps)
        for tp in tps:
            c.seek(tp, 3)
        wait_until(lambda: (c.poll(timeout_ms=100) == {}) and all(c.position(tp) == 10 for tp in tps), 10, 0,
                   "reset to the log start")
    finally:
        c.close()
    # ... and records produced with old timestamps are already past retention
    p = KafkaProducer(bootstrap_servers=td.bootstrap, acks="all")
    try:
        md = p.send(topic, value=b"old", partition=0, timestamp_ms=int(time.time() * 1000) - 3_600_000).get(10)
    finally:
        p.close()
    assert md.offset == 10
    wait_until(lambda: beginning_offsets(td.bootstrap, topic, 2)[0] == 11, 10, 0.2, "the old record to go")


def test_disk_guard_collects_the_oldest_entries(td_disk: TdBroker) -> None:
    td = td_disk
    db = unique("disk")
    td.sql(f"CREATE DATABASE {db} VGROUPS {VG}")
    td.sql(f"CREATE STABLE {db}.logs (ts TIMESTAMP, msg VARCHAR(200), n INT) TAGS (k INT)")
    tables = ["t1", "t2", "t3", "t4"]
    written = 0
    per_statement = 200
    for k in range(40):
        parts = []
        for t in tables:
            vals = " ".join(f"({k * 1000 + i}, '{'x' * 150}{k:04d}{i:04d}', {i})" for i in range(per_statement // 4))
            parts.append(f"{db}.{t} USING {db}.logs TAGS (1) VALUES {vals}")
        assert td.affected("INSERT INTO " + " ".join(parts)) == per_statement
        written += 1
    total_written = sum(v["live"]["bytes"] + sum(c["bytes"] for c in v["collected"])
                        for v in td.log_history(db))
    assert total_written > 2 * ALLOWED, total_written  # well over the limit

    def settled() -> bool:
        hist = td.log_history()
        return sum(v["live"]["bytes"] for v in hist) <= ALLOWED and any(v["collected"] for v in hist)

    wait_until(settled, 15, 0.3, "the archiver to bring the WAL under the limit")
    time.sleep(1.0)  # a few more archiver turns: nothing more to do
    hist = _history(td, db)
    begin = beginning_offsets(td.bootstrap, db, VG)
    ends = end_offsets(td.bootstrap, db, VG)
    live_total = sum(v["live"]["bytes"] for v in td.log_history())
    assert live_total <= ALLOWED
    entry_bytes = max(c["bytes"] / c["entries"] for v in hist.values() for c in v["collected"])
    # oldest first, and no more than needed: what stays is within one entry or so of the limit
    assert live_total > ALLOWED - 3 * entry_bytes, (live_total, ALLOWED, entry_bytes)
    print(f"[disk guard] written {total_written} B, limit {ALLOWED} B, live {live_total} B, "
          f"largest entry ~{entry_bytes:.0f} B, collected ranges {sum(len(v['collected']) for v in hist.values())}")
    for v in range(VG):
        vh = hist[v]
        _check_history_covers(vh, {"archiver_disk"})
        assert vh["live"]["entries"] >= 1 and vh["live"]["bytes"] > 0  # the newest entry always stays
        assert begin[v] == vh["log_start"] == vh["live"]["first_version"]
        assert ends[v] == vh["next_version"] == vh["live"]["last_version"] + 1
        for c in vh["collected"]:
            assert c["removed_ms"] >= c["last_ts"]
    # oldest first across the vnodes: everything collected is older than everything live
    newest_collected = max(c["last_ts"] for v in hist.values() for c in v["collected"])
    oldest_live = min(v["live"]["first_ts"] for v in hist.values() if v["live"]["entries"])
    assert newest_collected <= oldest_live
    # one vnode's view, filtered with ?db=, agrees with the full listing
    full = [v for v in td.log_history() if v["db"] == db]
    assert full == list(hist.values())
