"""TDengine's `power.meters` example at scale: 100,000 rows by multi-table INSERT through
`POST /rest/sql` and 100,000 rows by InfluxDB line protocol through a Kafka producer, then a
query topic read by kafka-python and confluent-kafka must deliver exactly the rows an
independent Python filter of the generated data selects, each at its WAL version (the offset
the same row has in a database topic over `power`).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from kafka.partitioner.default import murmur2

from .tdengine_helpers import (
    BASE_TS,
    METERS_DDL,
    VGROUPS,
    Rec,
    TdBroker,
    assert_strictly_increasing,
    expected_query,
    f32,
    insert_rows,
    make_children,
    make_rows,
    produce_lines,
    read_confluent,
    read_kafka_python,
    td_broker_fixture,
)

pytestmark = pytest.mark.tmqgate_only

SQL_TABLES = [f"d{i:03d}" for i in range(100)]  # created and written by INSERT
LP_TABLES = [f"d{i:03d}" for i in range(50, 150)]  # d050..d099 exist already; d100..d149 are new
QUERY = "SELECT ts, current, voltage, location FROM meters WHERE voltage > 220 AND groupid = 2"


@pytest.fixture(scope="module")
def td(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TdBroker]:
    yield from td_broker_fixture(tmp_path_factory, "td-power")


def _check_query_records(name: str, got: list[Rec], expected: dict[tuple[str, int], dict[str, Any]],
                         db_offsets: dict[tuple[str, int], tuple[int, int]]) -> None:
    keys = [(r.key, r.json()["ts"]) for r in got]
    assert len(keys) == len(set(keys)), f"{name}: duplicate rows"
    missing = set(expected) - set(keys)
    extra = set(keys) - set(expected)
    assert not missing and not extra, (f"{name}: {len(missing)} rows missing (e.g. {sorted(missing)[:3]}), "
                                       f"{len(extra)} unexpected (e.g. {sorted(extra)[:3]})")
    for r in got:
        value = r.json()
        want = expected[(r.key, value["ts"])]
        assert list(value) == ["ts", "current", "voltage", "location"], value
        assert value["ts"] == want["ts"] and value["voltage"] == want["voltage"], (value, want)
        assert value["location"] == want["location"], (value, want)
        assert isinstance(value["current"], float | int) and f32(value["current"]) == f32(want["current"]), \
            (value, want)
        assert r.timestamp == want["ts"], r
        assert r.headers == {"tmq.db": b"power", "tmq.stable": b"meters", "tmq.table": r.key.encode(),
                             "tmq.type": b"data"}, r.headers
        # the row's WAL version: the offset the same row has in the database topic
        assert (r.partition, r.offset) == db_offsets[(r.key, value["ts"])], (name, r)
    assert_strictly_increasing(got)


def test_power_meters_query_topic_exact_rows_at_wal_versions(td: TdBroker) -> None:
    timings: dict[str, float] = {}
    children = make_children([f"d{i:03d}" for i in range(150)], seed=2024)
    sql_rows = make_rows(SQL_TABLES, 1000, seed=1)
    lp_rows = make_rows(LP_TABLES, 1000, seed=2, ts_base=BASE_TS + 2_000_000)
    assert len(sql_rows) == len(lp_rows) == 100_000

    td.sql(f"CREATE DATABASE power VGROUPS {VGROUPS}")
    td.sql(METERS_DDL.format(db="power"))

    t0 = time.monotonic()
    insert_rows(td, "power", sql_rows, children, batch=5000)
    timings["insert 100k rows (20 statements)"] = time.monotonic() - t0

    t0 = time.monotonic()
    partitions = produce_lines(td.bootstrap, "power", lp_rows, children, lines_per_record=50)
    timings["line protocol 100k rows (2000 records)"] = time.monotonic() - t0

    # Every table lives in one vnode: murmur2(name) mod 4, for SQL writes and for the Java/
    # kafka-python default partitioner alike (so keyed line-protocol records agree).
    tables = {t["table_name"]: t for t in td.rows("SHOW power.TABLES")}
    assert sorted(tables) == [f"d{i:03d}" for i in range(150)]
    for name, t in tables.items():
        assert t["stable_name"] == "meters" and t["db_name"] == "power"
        assert t["vgroup_id"] == (murmur2(name.encode()) & 0x7FFFFFFF) % VGROUPS, t
        if name in partitions:
            assert partitions[name] == {t["vgroup_id"]}, (name, partitions[name], t)
    # line protocol tags (strings) took the existing tag types; new tables got the given tags
    desc = {r["field"]: r for r in td.rows("DESCRIBE power.meters")}
    assert [(f, r["type"], r["note"]) for f, r in desc.items()] == [
        ("ts", "TIMESTAMP", ""), ("current", "FLOAT", ""), ("voltage", "INT", ""), ("phase", "FLOAT", ""),
        ("location", "VARCHAR", "TAG"), ("groupid", "INT", "TAG")]

    td.sql(f"CREATE TOPIC q AS {QUERY}", db="power")
    td.sql("CREATE TOPIC alldb AS DATABASE power")

    # The database topic: every row once, columns and tags, at increasing versions.
    t0 = time.monotonic()
    alldb = read_confluent(td.bootstrap, "alldb", timeout=120)
    timings["read alldb (200k records, confluent-kafka)"] = time.monotonic() - t0
    assert len(alldb) == 200_000
    all_rows = {(r.table, r.ts): r for r in sql_rows + lp_rows}
    db_offsets: dict[tuple[str, int], tuple[int, int]] = {}
    for r in alldb:
        value = r.json()
        row = all_rows[(r.key, value["ts"])]
        c = children[r.key]
        assert value == {"ts": row.ts, "current": value["current"], "voltage": row.voltage,
                         "phase": value["phase"], "location": c.location, "groupid": c.groupid}, value
        assert f32(value["current"]) == f32(row.current) and f32(value["phase"]) == f32(row.phase), (value, row)
        assert r.partition == tables[r.key]["vgroup_id"]
        assert (r.key, row.ts) not in db_offsets, f"row delivered twice: {r}"
        db_offsets[(r.key, row.ts)] = (r.partition, r.offset)
    assert_strictly_increasing(alldb)

    expected = expected_query(sql_rows + lp_rows, children)
    assert 20_000 < len(expected) < 50_000  # groupid 2 is about a quarter, voltage > 220 about 70%

    t0 = time.monotonic()
    got_kp = read_kafka_python(td.bootstrap, "q", timeout=120)
    timings[f"read q ({len(expected)} records, kafka-python)"] = time.monotonic() - t0
    _check_query_records("kafka-python", got_kp, expected, db_offsets)

    t0 = time.monotonic()
    got_ck = read_confluent(td.bootstrap, "q", timeout=120)
    timings[f"read q ({len(expected)} records, confluent-kafka)"] = time.monotonic() - t0
    _check_query_records("confluent-kafka", got_ck, expected, db_offsets)
    # both clients read the same bytes
    assert sorted((r.partition, r.offset, r.key, r.value) for r in got_kp) == \
        sorted((r.partition, r.offset, r.key, r.value) for r in got_ck)

    for what, seconds in timings.items():
        print(f"[timing] {what}: {seconds:.1f} s")
