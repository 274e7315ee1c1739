"""Spark reads a TDengine query topic with its Kafka source and default options (batch read:
earliest to latest, failOnDataLoss=true) and gets exactly the rows the query selects — key,
JSON value, partition, offset (the row's WAL version, gaps and all), timestamp, headers —
even where a vnode's last versions are rows the filter leaves out.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from .spark_helpers import spark_session
from .tdengine_helpers import (
    BASE_TS,
    METERS_DDL,
    VGROUPS,
    Row,
    TdBroker,
    expected_query,
    f32,
    insert_rows,
    make_children,
    make_rows,
    read_confluent,
    td_broker_fixture,
    unique,
)

pytestmark = pytest.mark.tmqgate_only

QUERY = "SELECT ts, current, voltage, location FROM meters WHERE voltage > 220 AND groupid = 2"


@pytest.fixture(scope="module")
def td(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TdBroker]:
    yield from td_broker_fixture(tmp_path_factory, "td-spark")


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    session = spark_session("compat-tdengine-spark")
    try:
        yield session
    finally:
        session.stop()


def test_spark_reads_a_query_topic_exactly(td: TdBroker, spark: Any) -> None:
    from pyspark.sql import functions as F

    db, topic = unique("sparkdb"), unique("q")
    tables = [f"s{i:02d}" for i in range(40)]
    children = make_children(tables, seed=9)
    assert {c.groupid for c in children.values()} >= {2}
    rows = make_rows(tables, 100, seed=10)
    # each vnode ends with rows the query leaves out (voltage 215): the topic's end offset is
    # past its last record, which Spark must not take for data loss
    tail = [Row(t, BASE_TS + 10_000_000, 5.0, 215, 0.5) for t in tables]
    td.sql(f"CREATE DATABASE {db} VGROUPS {VGROUPS}")
    td.sql(METERS_DDL.format(db=db))
    insert_rows(td, db, rows, children, batch=1000)
    insert_rows(td, db, tail, children, batch=1000)
    td.sql(f"CREATE TOPIC {topic} AS {QUERY}", db=db)
    expected = expected_query(rows + tail, children)
    assert expected

    df = spark.read.format("kafka").option("kafka.bootstrap.servers", td.bootstrap).option("subscribe", topic).load()
    got = df.select("topic", "partition", "offset", "key", "value", F.unix_millis("timestamp").alias("ts_ms"),
                    "timestampType").collect()
    assert {r["topic"] for r in got} == {topic}
    keys = [(bytes(r["key"]).decode(), json.loads(bytes(r["value"]))["ts"]) for r in got]
    assert len(keys) == len(set(keys)) == len(expected), (len(keys), len(set(keys)), len(expected))
    assert set(keys) == set(expected)
    for r, k in zip(got, keys, strict=True):
        value = json.loads(bytes(r["value"]))
        want = expected[k]
        assert list(value) == ["ts", "current", "voltage", "location"]
        assert (value["ts"], value["voltage"], value["location"]) == (want["ts"], want["voltage"], want["location"])
        assert f32(value["current"]) == f32(want["current"])
        assert r["ts_ms"] == want["ts"] and r["timestampType"] == 0

    # the same records, at the same partitions and offsets, as confluent-kafka reads them
    ref = read_confluent(td.bootstrap, topic)
    assert sorted((r["partition"], r["offset"], bytes(r["key"]), bytes(r["value"])) for r in got) == \
        sorted((r.partition, r.offset, r.key.encode(), r.value) for r in ref)
    # the offsets are WAL versions: gaps where rows were filtered out
    offsets = sorted((r["partition"], r["offset"]) for r in got)
    assert any(b[1] - a[1] > 1 for a, b in zip(offsets, offsets[1:], strict=False) if a[0] == b[0])

    # headers on request
    hdf = (spark.read.format("kafka").option("kafka.bootstrap.servers", td.bootstrap).option("subscribe", topic)
           .option("includeHeaders", "true").load())
    for r in hdf.select("key", "headers").collect():
        headers = {h["key"]: bytes(h["value"]) for h in r["headers"]}
        assert headers == {"tmq.db": db.encode(), "tmq.stable": b"meters", "tmq.table": bytes(r["key"]),
                           "tmq.type": b"data"}, headers

    # a filter pushed to Spark over the topic's JSON agrees with the independent filter too
    parsed = df.select(F.get_json_object(F.col("value").cast("string"), "$.location").alias("loc"))
    assert parsed.where(F.col("loc") == "California.SanFrancisco").count() == \
        sum(1 for v in expected.values() if v["location"] == "California.SanFrancisco")
