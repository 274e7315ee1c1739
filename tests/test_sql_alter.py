"""ALTER DATABASE … WAL_RETENTION_PERIOD | WAL_RETENTION_SIZE and ALTER STABLE … DROP COLUMN /
MODIFY COLUMN / DROP TAG / RENAME TAG (issue 29): the catalog, what SELECT and DESCRIBE then
show, the meta records a WITH META topic delivers, TDengine's refusals, and a replica that
applies the same meta entries ending with the same schema and tags."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tmqgate.broker.configs.config import BrokerConfig
from tmqgate.broker.server import Broker
from tmqgate.broker.sql.ast import SqlError
from tmqgate.broker.tsdb.catalog import TsdbCatalog, schema_from_json
from tmqgate.broker.tsdb.replica import append_replicated
from tmqgate.storage import Store


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    b = Broker(BrokerConfig(listen="127.0.0.1:0", data_dir=str(tmp_path / "data")))
    b.executor.execute(
        "CREATE DATABASE power VGROUPS 2; USE power; "
        "CREATE STABLE meters (ts TIMESTAMP, current FLOAT, voltage INT, note VARCHAR(8)) "
        "TAGS (location VARCHAR(32), groupid INT); "
        "INSERT INTO d1 USING meters TAGS ('SF', 1) VALUES (1000, 1.5, 220, 'a') (2000, 2.5, 221, 'b'); "
        "INSERT INTO d2 USING meters TAGS ('LA', 2) VALUES (1500, 3.5, 230, NULL)")
    yield b
    b.executor.close()
    b.store.close()


def _sql(b: Broker, text: str) -> Any:
    return b.executor.execute(text, "power")


def _describe(b: Broker) -> list[tuple[str, str, str]]:
    return [(r[0], r[1] if r[1] not in ("VARCHAR", "NCHAR") else f"{r[1]}({r[2]})", r[3])
            for r in _sql(b, "DESCRIBE meters").rows]


def _meta(b: Broker, vnode: int) -> list[dict[str, Any]]:
    return [json.loads(e.data) for e in b.store.read_entries("power", vnode, 0, 1 << 30) if e.kind == "meta"]


def test_alter_database_sets_wal_retention(broker: Broker) -> None:
    _sql(broker, "ALTER DATABASE power WAL_RETENTION_PERIOD 3600 WAL_RETENTION_SIZE 2048")
    [row] = [r for r in _sql(broker, "SHOW DATABASES").rows if r[0] == "power"]
    assert row[3:] == [3600, 2048]
    info = broker.store.get_database("power")
    assert info is not None and (info.options["wal_retention_period"], info.options["wal_retention_size"]) == (
        3600, 2048)
    _sql(broker, "ALTER DATABASE power WAL_RETENTION_SIZE -1")  # one option: the other kept
    [row] = [r for r in _sql(broker, "SHOW DATABASES").rows if r[0] == "power"]
    assert row[3:] == [3600, -1]


@pytest.mark.parametrize(("text", "message"), [
    ("ALTER DATABASE nope WAL_RETENTION_PERIOD 1", "Database not exist: nope"),
    ("ALTER DATABASE power VGROUPS 4", "ALTER DATABASE ... VGROUPS is not supported at position 21"),
    ("ALTER DATABASE power WAL_RETENTION_PERIOD -2", "WAL_RETENTION_PERIOD needs an integer in [-1, 2147483647]"),
    ("ALTER DATABASE power", "expected WAL_RETENTION_PERIOD or WAL_RETENTION_SIZE"),
    ("ALTER STABLE meters DROP COLUMN ts", "Primary timestamp column cannot be dropped"),
    ("ALTER STABLE meters DROP COLUMN nope", "Invalid column name: nope"),
    ("ALTER STABLE meters DROP COLUMN location", "Invalid column name: location"),
    ("ALTER STABLE meters DROP TAG voltage", "Invalid tag name: voltage"),
    ("ALTER STABLE meters MODIFY COLUMN note VARCHAR(4)", "The length of note can only be increased (now 8)"),
    ("ALTER STABLE meters MODIFY COLUMN voltage BIGINT", "Only the length of a VARCHAR or NCHAR column"),
    ("ALTER STABLE meters MODIFY COLUMN note NCHAR(16)", "Only the length of a VARCHAR or NCHAR column"),
    ("ALTER STABLE meters RENAME TAG location groupid", "Duplicated column names: groupid"),
    ("ALTER STABLE meters RENAME TAG location current", "Duplicated column names: current"),
    ("ALTER STABLE meters RENAME COLUMN note memo", "ALTER STABLE ... RENAME COLUMN is not supported"),
])
def test_refusals(broker: Broker, text: str, message: str) -> None:
    before = _describe(broker)
    with pytest.raises(SqlError) as refused:
        _sql(broker, text)
    assert message in refused.value.message
    assert _describe(broker) == before


def test_drop_and_modify_columns(broker: Broker) -> None:
    _sql(broker, "ALTER STABLE meters DROP COLUMN current")
    _sql(broker, "ALTER STABLE meters MODIFY COLUMN note VARCHAR(32)")
    assert _describe(broker) == [("ts", "TIMESTAMP", ""), ("voltage", "INT", ""), ("note", "VARCHAR(32)", ""),
                                 ("location", "VARCHAR(32)", "TAG"), ("groupid", "INT", "TAG")]
    _sql(broker, "INSERT INTO d1 VALUES (3000, 222, 'a longer note than 8')")
    # rows written before and after, under the schema of now
    assert _sql(broker, "SELECT * FROM meters ORDER BY ts").rows == [
        [1000, 220, "a", "SF", 1], [1500, 230, None, "LA", 2], [2000, 221, "b", "SF", 1],
        [3000, 222, "a longer note than 8", "SF", 1]]
    with pytest.raises(SqlError, match="a supertable keeps its timestamp and at least one more column"):
        _sql(broker, "ALTER STABLE meters DROP COLUMN voltage; ALTER STABLE meters DROP COLUMN note")
    for vnode in (0, 1):  # logged on every vnode, for WITH META topics and replicas
        alters = [(m["alterType"], m["colName"], m.get("colType")) for m in _meta(broker, vnode)
                  if m["type"] == "alter"]
        assert alters == [("drop_column", "current", None), ("modify_column", "note", "VARCHAR(32)"),
                          ("drop_column", "voltage", None)]


def test_drop_and_rename_tags(broker: Broker) -> None:
    _sql(broker, "ALTER STABLE meters RENAME TAG location city")
    _sql(broker, "ALTER STABLE meters DROP TAG groupid")
    assert [r[0] for r in _sql(broker, "DESCRIBE meters").rows if r[3] == "TAG"] == ["city"]
    assert _sql(broker, "SELECT tbname, city FROM meters WHERE city = 'SF' ORDER BY ts").rows == [
        ["d1", "SF"], ["d1", "SF"]]
    assert broker.store.child_table("power", "d2").tags == {"city": "LA"}  # type: ignore[union-attr]
    _sql(broker, "INSERT INTO d3 USING meters TAGS ('NY') VALUES (4000, 1.0, 200, 'x')")
    assert _sql(broker, "SELECT city, count(*) FROM meters GROUP BY city ORDER BY city").rows == [
        ["LA", 1], ["NY", 1], ["SF", 2]]
    with pytest.raises(SqlError, match="a supertable keeps at least one tag"):
        _sql(broker, "ALTER STABLE meters DROP TAG city")


def test_a_column_a_topic_uses_cannot_be_dropped(broker: Broker) -> None:
    _sql(broker, "CREATE TOPIC hot AS SELECT ts, voltage FROM power.meters WHERE groupid = 2")
    for text in ("ALTER STABLE meters DROP COLUMN voltage", "ALTER STABLE meters DROP TAG groupid",
                 "ALTER STABLE meters RENAME TAG groupid grp"):
        with pytest.raises(SqlError, match="Column referenced by topic: hot uses"):
            _sql(broker, text)
    _sql(broker, "ALTER STABLE meters DROP COLUMN note")  # one it does not use
    assert "note" not in [r[0] for r in _sql(broker, "DESCRIBE meters").rows]


def test_a_with_meta_topic_delivers_the_alters(broker: Broker) -> None:
    from tmqgate.broker.sql.views import TopicDef, View

    _sql(broker, "CREATE TOPIC m WITH META AS STABLE power.meters")
    _sql(broker, "ALTER STABLE meters DROP COLUMN note; ALTER STABLE meters RENAME TAG location city")
    topic = TopicDef("m", "stable", "power", "meters", "with", "CREATE TOPIC m WITH META AS STABLE power.meters")
    view = View(topic, broker.store, broker.catalog)
    values = []
    for batch in view.read(0, 0, 1 << 20):
        values += [v for v in (broker_records(batch)) if b'"alter"' in v]
    assert [(json.loads(v)["alterType"], json.loads(v).get("colNewName")) for v in values] == [
        ("drop_column", None), ("rename_tag", "city")]


def broker_records(batch: bytes) -> list[bytes]:
    """The values of a record batch's records (kafka-python's reader, an independent codec)."""
    from kafka.record.default_records import DefaultRecordBatch

    return [r.value for r in DefaultRecordBatch(bytearray(batch))]


def test_a_replica_applies_the_alters(broker: Broker, tmp_path: Path) -> None:
    _sql(broker, "ALTER STABLE meters DROP COLUMN current; ALTER STABLE meters MODIFY COLUMN note VARCHAR(40); "
                 "ALTER STABLE meters RENAME TAG location city; ALTER STABLE meters DROP TAG groupid")
    with Store(tmp_path / "replica") as replica:
        replica.create_database("power", 2, kind="tsdb")
        catalog = TsdbCatalog(replica)
        for vnode in (0, 1):  # every entry as stored, as a follower's fetch copies them
            for version, kind, value, count in broker.store.raw_entries("power", vnode, 0, 1 << 30):
                append_replicated(replica, catalog, "power", vnode, version, kind, value, count)
        leader, copy = broker.store.stable("power", "meters"), replica.stable("power", "meters")
        assert leader is not None and copy is not None and schema_from_json(copy) == schema_from_json(leader)
        assert {n: c.tags for n, c in replica.child_tables("power").items()} == {
            "d1": {"city": "SF"}, "d2": {"city": "LA"}}
        assert {n: c.tags for n, c in broker.store.child_tables("power").items()} == {
            "d1": {"city": "SF"}, "d2": {"city": "LA"}}
