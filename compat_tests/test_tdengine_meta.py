"""WITH META / ONLY META topics: the create and alter meta entries come in their WAL order
among the data, one version each, exactly as the statements that touched each vnode ran.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from kafka.partitioner.default import murmur2

from .tdengine_helpers import (
    Rec,
    TdBroker,
    by_partition,
    read_confluent,
    read_kafka_python,
    td_broker_fixture,
    unique,
)

pytestmark = pytest.mark.tmqgate_only

VG = 2


@pytest.fixture(scope="module")
def td(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TdBroker]:
    yield from td_broker_fixture(tmp_path_factory, "td-meta")


def home(table: str) -> int:
    return (murmur2(table.encode()) & 0x7FFFFFFF) % VG


def _tables_on_both_vnodes(prefix: str, n: int) -> list[str]:
    """`n` table names, at least one in each vnode."""
    names = [f"{prefix}{i}" for i in range(n)]
    while {home(t) for t in names} != set(range(VG)):
        names.append(f"{prefix}{len(names)}")
        names.pop(0)
    return names


def _event(r: Rec) -> tuple[Any, ...]:
    """What a record stands for: a meta change or a row."""
    t = r.headers["tmq.type"]
    if t == b"meta":
        body = r.json()
        return ("meta", body["type"], body["tableType"], body["tableName"])
    assert t == b"data", r
    return ("data", r.key, r.json()["ts"])


class Model:
    """The statements' effect on each vnode's WAL, in order."""

    def __init__(self) -> None:
        self.log: dict[int, list[tuple[Any, ...]]] = {v: [] for v in range(VG)}

    def stable(self, kind: str, name: str) -> None:
        for v in range(VG):
            self.log[v].append(("meta", kind, "super", name))

    def child(self, name: str) -> None:
        self.log[home(name)].append(("meta", "create", "child", name))

    def rows(self, table: str, ts: list[int]) -> None:
        self.log[home(table)].extend(("data", table, t) for t in ts)


def test_with_meta_and_only_meta_in_wal_order(td: TdBroker) -> None:
    db = unique("metadb")
    m = Model()
    t1, t2, t3, t4 = _tables_on_both_vnodes("t", 4)
    td.sql(f"CREATE DATABASE {db} VGROUPS {VG}")
    td.sql(f"CREATE STABLE {db}.meters (ts TIMESTAMP, current FLOAT, voltage INT) TAGS (location VARCHAR(64), "
           "groupid INT)")
    m.stable("create", "meters")
    td.sql(f"CREATE TABLE {db}.{t1} USING {db}.meters TAGS ('SF', 1)")
    m.child(t1)
    td.sql(f"CREATE TABLE {db}.{t2} USING {db}.meters TAGS ('LA', 2)")
    m.child(t2)
    assert td.affected(f"INSERT INTO {db}.{t1} VALUES (1000, 1.5, 220) (1001, 1.25, 221) "
                       f"{db}.{t2} VALUES (1000, 2.5, 230)") == 3
    m.rows(t1, [1000, 1001])
    m.rows(t2, [1000])
    # a second supertable: in the database topic, not in the supertable topic
    td.sql(f"CREATE STABLE {db}.other (ts TIMESTAMP, v INT) TAGS (k INT)")
    m.stable("create", "other")
    # auto-create by INSERT … USING: the child's meta entry precedes its rows
    assert td.affected(f"INSERT INTO {db}.{t3} USING {db}.meters TAGS ('SJ', 3) VALUES (2000, 3.5, 219) "
                       f"{db}.{t4} USING {db}.other TAGS (7) VALUES (2000, 70)") == 2
    m.child(t3)
    m.child(t4)
    m.rows(t3, [2000])
    m.rows(t4, [2000])
    td.sql(f"ALTER STABLE {db}.meters ADD COLUMN extra INT")
    m.stable("alter", "meters")
    assert td.affected(f"INSERT INTO {db}.{t1} (ts, current, voltage, extra) VALUES (3000, 4.5, 222, 42) "
                       f"{db}.{t3} VALUES (3000, 5.5, 223, 43) {db}.{t2} VALUES (3000, 6.5, 224, NULL)") == 3
    m.rows(t1, [3000])
    m.rows(t3, [3000])
    m.rows(t2, [3000])

    with_meta, only_meta, st_meta, plain = (unique(p) for p in ("wm", "om", "sm", "pl"))
    td.sql(f"CREATE TOPIC {with_meta} WITH META AS DATABASE {db}")
    td.sql(f"CREATE TOPIC {only_meta} ONLY META AS DATABASE {db}")
    td.sql(f"CREATE TOPIC {st_meta} WITH META AS STABLE {db}.meters")
    td.sql(f"CREATE TOPIC {plain} AS DATABASE {db}")
    topics = {t["topic_name"]: t for t in td.rows("SHOW TOPICS")}
    assert (topics[with_meta]["type"], topics[with_meta]["meta"]) == ("database", "with")
    assert (topics[only_meta]["type"], topics[only_meta]["meta"]) == ("database", "only")
    assert (topics[st_meta]["type"], topics[st_meta]["meta"]) == ("stable", "with")
    assert (topics[plain]["type"], topics[plain]["meta"]) == ("database", "none")

    # WITH META AS DATABASE: every WAL entry of every vnode, versions 0..n-1 without gaps
    wm = by_partition(read_confluent(td.bootstrap, with_meta, VG))
    for v in range(VG):
        got = wm.get(v, [])
        assert [_event(r) for r in got] == m.log[v], f"vnode {v}"
        assert [r.offset for r in got] == list(range(len(m.log[v]))), f"vnode {v}"
    # the same with kafka-python
    wm_kp = by_partition(read_kafka_python(td.bootstrap, with_meta, VG))
    assert {v: [(r.offset, r.value) for r in rs] for v, rs in wm_kp.items()} == \
        {v: [(r.offset, r.value) for r in rs] for v, rs in wm.items()}

    # meta bodies and headers
    for v in range(VG):
        for r in wm[v]:
            if r.headers["tmq.type"] != b"meta":
                continue
            body = r.json()
            assert r.key == body["tableName"] and r.headers["tmq.table"] == body["tableName"].encode()
            assert r.headers["tmq.db"] == db.encode()
            if body["tableType"] == "super":
                assert r.headers["tmq.stable"] == body["tableName"].encode()
                if body["type"] == "create" and body["tableName"] == "meters":
                    assert body["columns"] == [{"name": "ts", "type": "TIMESTAMP"},
                                               {"name": "current", "type": "FLOAT"},
                                               {"name": "voltage", "type": "INT"}]
                    assert body["tags"] == [{"name": "location", "type": "VARCHAR(64)"},
                                            {"name": "groupid", "type": "INT"}]
                if body["type"] == "alter":
                    assert (body["alterType"], body["colName"], body["colType"]) == ("add_column", "extra", "INT")
            else:
                want_tags = {t1: ["SF", 1], t2: ["LA", 2], t3: ["SJ", 3], t4: [7]}[body["tableName"]]
                assert [t["value"] for t in body["tags"]] == want_tags, body
                assert body["using"] == ("other" if body["tableName"] == t4 else "meters")

    # data values: rows written before ADD COLUMN read back with extra = null
    values = {(r.key, r.json()["ts"]): r.json() for rs in wm.values() for r in rs
              if r.headers["tmq.type"] == b"data"}
    assert values[(t1, 1000)] == {"ts": 1000, "current": 1.5, "voltage": 220, "extra": None,
                                  "location": "SF", "groupid": 1}
    assert values[(t1, 3000)] == {"ts": 3000, "current": 4.5, "voltage": 222, "extra": 42,
                                  "location": "SF", "groupid": 1}
    assert values[(t3, 3000)]["extra"] == 43 and values[(t2, 3000)]["extra"] is None
    assert values[(t4, 2000)] == {"ts": 2000, "v": 70, "k": 7}

    # ONLY META: just the meta records, at the same versions
    om = by_partition(read_confluent(td.bootstrap, only_meta, VG))
    for v in range(VG):
        want = [(i, e) for i, e in enumerate(m.log[v]) if e[0] == "meta"]
        assert [(r.offset, _event(r)) for r in om.get(v, [])] == want, f"vnode {v}"
        assert all(r.headers["tmq.type"] == b"meta" for r in om.get(v, []))

    # WITH META AS STABLE meters: its own meta and rows only, other's left out
    sm = by_partition(read_confluent(td.bootstrap, st_meta, VG))
    for v in range(VG):
        want = [(i, e) for i, e in enumerate(m.log[v])
                if not (e[0] == "meta" and e[3] in ("other", t4)) and not (e[0] == "data" and e[1] == t4)]
        assert [(r.offset, _event(r)) for r in sm.get(v, [])] == want, f"vnode {v}"

    # without META: only the rows
    pl = by_partition(read_confluent(td.bootstrap, plain, VG))
    for v in range(VG):
        want = [(i, e) for i, e in enumerate(m.log[v]) if e[0] == "data"]
        assert [(r.offset, _event(r)) for r in pl.get(v, [])] == want, f"vnode {v}"

    # a meta record's JSON body is the record value, byte for byte valid JSON
    for rs in om.values():
        for r in rs:
            assert isinstance(json.loads(r.value), dict)


def test_drop_table_and_drop_stable_are_logged_as_meta(td: TdBroker) -> None:
    """As TDengine's WAL: DROP TABLE logs a drop of the child table on its vnode, DROP STABLE a
    drop of the supertable (and its child tables) on every vnode — what a WITH META consumer
    sees, and what a replica of the database applies to its catalog (broker/tsdb/replica.py)."""
    db = unique("dropmeta")
    td.sql(f"CREATE DATABASE {db} VGROUPS {VG}")
    td.sql(f"CREATE STABLE {db}.keep (ts TIMESTAMP, v INT) TAGS (k INT)")
    td.sql(f"CREATE STABLE {db}.gone (ts TIMESTAMP, v INT) TAGS (k INT)")
    t1, t2 = unique("t"), unique("u")
    td.sql(f"INSERT INTO {db}.{t1} USING {db}.keep TAGS (1) VALUES (1000, 10) "
           f"{db}.{t2} USING {db}.gone TAGS (2) VALUES (1000, 20)")
    topic = unique("dm")
    td.sql(f"CREATE TOPIC {topic} WITH META AS DATABASE {db}")
    td.sql(f"DROP TABLE {db}.{t1}")
    td.sql(f"DROP STABLE {db}.gone")
    assert {r["table_name"] for r in td.rows(f"SHOW {db}.TABLES")} == set()
    assert {r["stable_name"] for r in td.rows(f"SHOW {db}.STABLES")} == {"keep"}

    got = by_partition(read_confluent(td.bootstrap, topic, VG))
    drops = {v: [r.json() for r in got.get(v, []) if r.headers["tmq.type"] == b"meta" and r.json()["type"] == "drop"]
             for v in range(VG)}
    for v in range(VG):
        want = ([(t1, "child", ["keep"])] if v == home(t1) else []) + [("gone", "super", ["gone"])]
        assert [(d["tableName"], d["tableType"], [d["stable"]]) for d in drops[v]] == want, (v, drops[v])
    [child_drop] = [d for v in range(VG) for d in drops[v] if d["tableType"] == "child"]
    assert child_drop["tableNameList"] == [t1]
    # the drops come after the rows they follow, and nothing is delivered of the dropped table after
    last = {v: got[v][-1].json() for v in range(VG)}
    assert all(last[v]["type"] == "drop" and last[v]["tableName"] == "gone" for v in range(VG))
