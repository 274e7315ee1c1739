"""SQL on a cluster (issue 16, step 5): three `tmqgate serve --cluster` nodes and a real etcd.
A SQL database made on one node is known to every node (SHOW DATABASES, Metadata with one
topic id, SHOW VGROUPS); its DDL, INSERT and SELECT are accepted on any node and run on the
node leading it; a TDengine topic made on any node is evaluated on that leader, and a Kafka
client bootstrapped anywhere reads it; DROP on any node removes it everywhere.

tmqgate only: the reference Kafka has no SQL.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from .clusters import metadata, tmqgate_cluster
from .etcd import require_etcd
from .helpers import wait_until
from .raw import RawConn
from .tdengine_helpers import BASE_TS, METERS_DDL, TdBroker, read_kafka_python, unique

pytestmark = [pytest.mark.serial, pytest.mark.tmqgate_only]


@pytest.fixture(autouse=True)
def _etcd() -> None:
    require_etcd()


def _names(td: TdBroker, what: str) -> set[str]:
    return {r.get("name") or r.get("topic_name") or r["stable_name"] for r in td.rows(f"SHOW {what}")}


def _placement(bootstrap: str, topic: str) -> tuple[bytes, list[tuple[int, int, list[int]]]]:
    """A topic's id and each partition's (index, leader, replicas) as one broker's Metadata has them."""
    [t] = metadata(bootstrap, [topic])["topics"]
    return t["topic_id"], sorted((p["partition_index"], p["leader_id"], p["replica_nodes"]) for p in t["partitions"])


def _etcd_stables(nodes: Any, db: str) -> dict[str, Any]:
    """The supertables etcd records with the database's placement (name → columns and tags)."""
    from etcd3gw.client import Etcd3Client

    found = Etcd3Client(host="127.0.0.1", port=nodes.etcd.client_port, api_path="/v3/").get(f"/tmqgate/topics/{db}")
    if not found:
        return {}
    value = found[0].decode() if isinstance(found[0], bytes) else found[0]
    definition = json.loads(json.loads(value)["configs"]["tmqgate.definition"])
    return {n: (s["columns"], s["tags"]) for n, s in definition.get("stables", {}).items()}


def _tables(td: TdBroker, db: str) -> dict[str, str]:
    return {r["table_name"]: r["stable_name"] for r in td.rows(f"SHOW {db}.TABLES")}


def test_sql_on_any_node_runs_on_the_databases_leader(tmp_path: Path) -> None:
    with tmqgate_cluster(tmp_path, {}) as nodes:
        tds = {n: TdBroker(p) for n, p in nodes.items()}
        wait_until(lambda: len(metadata(nodes[0].bootstrap, [])["brokers"]), 30, 0.2, "three brokers listed",
                   ok=lambda n: n == 3)
        db = unique("shared")
        assert tds[1].affected(f"CREATE DATABASE {db} VGROUPS 3") == 0

        # every node knows it: the same topic id, every vnode led by the node that made it
        for n, td in tds.items():
            wait_until(lambda td=td: _names(td, "DATABASES"), 30, 0.2, f"{db} on node {n}",
                       ok=lambda names: db in names)
        placed = {n: _placement(nodes[n].bootstrap, db) for n in nodes}
        assert len({topic_id for topic_id, _ in placed.values()}) == 1
        assert all(parts == [(v, 1, [1]) for v in range(3)] for _, parts in placed.values()), placed
        for td in tds.values():
            assert [[(r["v1_dnode"], r["v1_status"])] for r in td.rows(f"SHOW {db}.VGROUPS")] == [[(1, "leader")]] * 3
        status, answer = tds[0].post(f"CREATE DATABASE {db}")  # taken: on every node
        assert (status, answer["code"], answer["desc"]) == (400, 0x0382, f"Database already exists: {db}"), answer

        # DDL and INSERT on node 2, SELECT on every node: one database, at its leader
        tds[2].sql(METERS_DDL.format(db=db))
        tds[2].sql(f"INSERT INTO {db}.d1 USING {db}.meters TAGS ('sf', 1) VALUES ({BASE_TS}, 1.5, 220, 0.5) "
                   f"({BASE_TS + 1}, 2.5, 230, 0.5) {db}.d2 USING {db}.meters TAGS ('la', 2) "
                   f"VALUES ({BASE_TS + 2}, 3.5, 240, 0.25)")
        tds[0].sql(f"INSERT INTO d2 VALUES ({BASE_TS + 3}, 4.5, 250, 0.25)", db)  # the session's database
        for td in tds.values():
            assert _names(td, f"{db}.STABLES") == {"meters"}
            assert _tables(td, db) == {"d1": "meters", "d2": "meters"}
            assert [r["field"] for r in td.rows(f"DESCRIBE {db}.d1")] == \
                ["ts", "current", "voltage", "phase", "location", "groupid"]
        # the cluster's catalog in etcd has the supertable, altered through node 0 too
        tds[0].sql(f"ALTER STABLE {db}.meters ADD COLUMN note VARCHAR(8)")
        columns = [["ts", "TIMESTAMP"], ["current", "FLOAT"], ["voltage", "INT"], ["phase", "FLOAT"]]
        tags = [["location", "VARCHAR(64)"], ["groupid", "INT"]]
        wait_until(lambda: _etcd_stables(nodes, db), 30, 0.2, "the supertable recorded in etcd",
                   ok=lambda st: st == {"meters": ([*columns, ["note", "VARCHAR(8)"]], tags)})
        assert sum(r["tables"] for r in tds[0].rows(f"SHOW {db}.VGROUPS")) == 2  # counted at the leader
        # errors are the leader's, as it answered them
        status, answer = tds[0].post(f"INSERT INTO {db}.nosuch VALUES ({BASE_TS}, 1.0, 1, 1.0)")
        assert status == 400 and "Table does not exist: nosuch" in answer["desc"], answer

        # a TDengine topic made on node 0 is evaluated on the leader; read through node 2's bootstrap
        topic = unique("hot")
        tds[0].sql(f"CREATE TOPIC {topic} AS SELECT ts, voltage FROM {db}.meters WHERE voltage >= 230")
        for n, td in tds.items():
            wait_until(lambda td=td: _names(td, "TOPICS"), 30, 0.2, f"{topic} on node {n}",
                       ok=lambda names: topic in names)
        topic_placed = {n: _placement(nodes[n].bootstrap, topic) for n in nodes}
        assert len({topic_id for topic_id, _ in topic_placed.values()}) == 1
        assert all(parts == [(v, 1, [1]) for v in range(3)] for _, parts in topic_placed.values()), topic_placed
        read = read_kafka_python(nodes[2].bootstrap, topic, partitions=3)
        assert sorted((r.json()["ts"], r.json()["voltage"]) for r in read) == \
            [(BASE_TS + 1, 230), (BASE_TS + 2, 240), (BASE_TS + 3, 250)]
        assert {r.headers["tmq.table"] for r in read} == {b"d1", b"d2"}

        # the database topic too: every row, in one vnode per child table, whichever node took the INSERT
        rows = read_kafka_python(nodes[0].bootstrap, db, partitions=3)
        assert sorted((r.key, r.json()["ts"], r.json()["voltage"]) for r in rows) == \
            [("d1", BASE_TS, 220), ("d1", BASE_TS + 1, 230), ("d2", BASE_TS + 2, 240), ("d2", BASE_TS + 3, 250)]
        assert len({r.partition for r in rows if r.key == "d1"}) == \
            len({r.partition for r in rows if r.key == "d2"}) == 1

        # DROP on another node than the leader: gone everywhere (the topic first, as TDengine asks)
        status, answer = tds[2].post(f"DROP DATABASE {db}")
        assert status == 400 and f"Topic must be dropped first: {topic}" in answer["desc"], answer
        tds[2].sql(f"DROP TOPIC {topic}")
        tds[0].sql(f"DROP DATABASE {db}")
        for n, td in tds.items():
            wait_until(lambda td=td: _names(td, "DATABASES") | _names(td, "TOPICS"), 30, 0.2,
                       f"{db} and {topic} gone from node {n}",
                       ok=lambda names: db not in names and topic not in names)
        assert metadata(nodes[1].bootstrap, [db])["topics"][0]["error_code"] == 3  # UNKNOWN_TOPIC_OR_PARTITION


def test_a_database_whose_leader_died_is_refused_on_the_others_until_it_returns(tmp_path: Path) -> None:
    with tmqgate_cluster(tmp_path, {}) as nodes:
        tds = {n: TdBroker(p) for n, p in nodes.items()}
        wait_until(lambda: len(metadata(nodes[0].bootstrap, [])["brokers"]), 30, 0.2, "three brokers listed",
                   ok=lambda n: n == 3)
        db = unique("single")
        tds[0].sql(f"CREATE DATABASE {db} VGROUPS 2")
        tds[0].sql(METERS_DDL.format(db=db))
        tds[0].sql(f"INSERT INTO {db}.d1 USING {db}.meters TAGS ('sf', 1) VALUES ({BASE_TS}, 1.5, 220, 0.5)")
        wait_until(lambda: _names(tds[1], "DATABASES"), 30, 0.2, f"{db} on node 1",
                   ok=lambda names: db in names)

        nodes[0].kill()  # REPLICA 1: its vnodes go offline with it, never served from an empty copy
        # refused at once (its leader does not answer), then — its lease lapsed — as having no leader
        status, answer = tds[1].post(f"SHOW {db}.TABLES")
        assert status == 400 and "dnode 0" in answer["desc"], answer
        status, answer = wait_until(lambda: tds[1].post(f"SHOW {db}.TABLES"), 30, 0.2,
                                    "refused while its leader is dead",
                                    ok=lambda a: "no live leader" in a[1]["desc"])
        assert (status, answer["desc"]) == (400, f"Database {db} has no live leader now (its dnode is offline)")
        assert _names(tds[2], "DATABASES") >= {db}  # still known

        nodes[0].start()  # back with its data: served again from every node
        wait_until(lambda: tds[2].post(f"SHOW {db}.TABLES"), 30, 0.2, "served again", ok=lambda a: a[0] == 200)
        assert _tables(tds[2], db) == {"d1": "meters"}
        tds[2].sql(f"INSERT INTO {db}.d1 VALUES ({BASE_TS + 1}, 2.5, 230, 0.5)")
        assert sorted(r.json()["voltage"]
                      for r in read_kafka_python(nodes[1].bootstrap, db, partitions=2)) == [220, 230]


def _vgroups(td: TdBroker, db: str) -> list[list[tuple[int, str]]]:
    return [[(r[f"v{i}_dnode"], r[f"v{i}_status"]) for i in range(1, 4) if r[f"v{i}_dnode"] is not None]
            for r in td.rows(f"SHOW {db}.VGROUPS")]


def _records(bootstrap: str, topic: str) -> list[tuple[int, int, str | None, Any]]:
    """Every record of the topic as (partition, offset, key, JSON value), in order."""
    return sorted((r.partition, r.offset, r.key, r.json()) for r in read_kafka_python(bootstrap, topic, partitions=2))


def _insert(td: TdBroker, db: str, first: int, n: int, extra: bool = False) -> None:
    """n rows over d1..d3 (USING: each made on first sight), voltage 200 + i; with ``extra`` the
    column ALTER added (``note``)."""
    values = " ".join(
        f"{db}.d{i % 3 + 1} USING {db}.meters TAGS ('loc{i % 3 + 1}', {i % 3 + 1}) "
        + (f"(ts, current, voltage, phase, note) VALUES ({BASE_TS + i}, {i}.5, {200 + i}, 0.5, 'n{i}')" if extra
           else f"VALUES ({BASE_TS + i}, {i}.5, {200 + i}, 0.5)")
        for i in range(first, first + n))
    td.sql(f"INSERT INTO {values}")


def test_a_replicated_sql_database_keeps_its_catalog_and_rows_through_its_leaders_kill(tmp_path: Path) -> None:
    with tmqgate_cluster(tmp_path, {"replica_lag_time_max_ms": 3000}) as nodes:
        tds = {n: TdBroker(p) for n, p in nodes.items()}
        wait_until(lambda: len(metadata(nodes[0].bootstrap, [])["brokers"]), 30, 0.2, "three brokers listed",
                   ok=lambda n: n == 3)
        db = unique("copied")
        tds[1].sql(f"CREATE DATABASE {db} VGROUPS 2 REPLICA 3")
        assert _vgroups(tds[0], db) == [[(1, "leader"), (2, "follower"), (0, "follower")]] * 2
        assert _placement(nodes[2].bootstrap, db)[1] == [(0, 1, [1, 2, 0]), (1, 1, [1, 2, 0])]

        # DDL and rows through node 2 (answered once every in-sync replica has them), a column
        # added, more rows, a table dropped: each change a meta entry the followers apply
        tds[2].sql(METERS_DDL.format(db=db))
        _insert(tds[2], db, 0, 30)
        tds[0].sql(f"ALTER STABLE {db}.meters ADD COLUMN note VARCHAR(16)")
        _insert(tds[0], db, 30, 15, extra=True)
        tds[2].sql(f"CREATE TABLE {db}.gone USING {db}.meters TAGS ('x', 9)")
        tds[2].sql(f"INSERT INTO {db}.gone VALUES ({BASE_TS + 99}, 9.5, 299, 0.5, 'g')")
        tds[2].sql(f"DROP TABLE {db}.gone")
        # schemaless rows produced with acks=all through Kafka: a supertable and child tables made by the leader
        from kafka import KafkaProducer

        producer = KafkaProducer(bootstrap_servers=nodes[0].bootstrap, acks="all")
        for i, key in enumerate((b"s1", b"s2")):
            producer.send(db, key=key, value=f"sensors,site=x{i} temp={20 + i}.5 {BASE_TS + i}".encode(),
                          headers=[("tmq.precision", b"ms")]).get(30)
        producer.close(10)
        topic = unique("hot")
        tds[0].sql(f"CREATE TOPIC {topic} AS SELECT ts, voltage, note FROM {db}.meters WHERE voltage >= 240")
        before = _records(nodes[0].bootstrap, db)
        hot_before = _records(nodes[2].bootstrap, topic)
        assert sorted(v["voltage"] for _, _, _, v in before if "voltage" in v) == [*range(200, 245), 299]
        assert sorted((k, v["temp"]) for _, _, k, v in before if "temp" in v) == [("s1", 20.5), ("s2", 21.5)]
        assert sorted((v["voltage"], v["note"]) for _, _, _, v in hot_before) == \
            [(240 + i, f"n{40 + i}") for i in range(5)] + [(299, "g")]

        # the leader killed: another replica leads every vnode, with the catalog and every row
        nodes[1].kill()
        wait_until(lambda: _vgroups(tds[0], db), 60, 0.2, "node 2, first of the rest in every ISR, leads",
                   ok=lambda v: all(p[0] == (1, "offline") and (2, "leader") in p for p in v),
                   retry_errors=True)
        for td in (tds[0], tds[2]):
            assert _tables(td, db) == {"d1": "meters", "d2": "meters", "d3": "meters", "s1": "sensors", "s2": "sensors"}
            assert [r["field"] for r in td.rows(f"DESCRIBE {db}.meters")][-3:] == ["note", "location", "groupid"]
        assert _records(nodes[0].bootstrap, db) == before  # the same records at the same offsets
        assert _records(nodes[0].bootstrap, topic) == hot_before
        _insert(tds[0], db, 45, 6, extra=True)  # the new leader writes; its followers (node 0) copy it
        after = _records(nodes[2].bootstrap, db)
        assert [r for r in after if r in before] == before and len(after) == len(before) + 6
        assert sorted((r[2], r[3]["voltage"]) for r in after if r not in before) == \
            [(f"d{i % 3 + 1}", 200 + i) for i in sorted(range(45, 51), key=lambda i: (i % 3, i))]

        # back: it truncates what it may hold beyond the new leader's log and catches up
        nodes[1].start()
        wait_until(lambda: _vgroups(tds[2], db), 60, 0.2, "node 1 back in sync",
                   ok=lambda v: all(s in ("leader", "follower") for p in v for _, s in p))
        nodes[2].kill()  # now node 1 or 0 leads, with everything, node 1's copy made after its return
        wait_until(lambda: _vgroups(tds[0], db), 60, 0.2, "a new leader",
                   ok=lambda v: all((2, "offline") in p and any(s == "leader" for _, s in p)
                                    for p in v), retry_errors=True)
        assert _records(nodes[0].bootstrap, db) == after
        tds[0].sql(f"INSERT INTO {db}.d1 VALUES ({BASE_TS + 500}, 1.0, 500, 0.5, 'last')")
        assert sorted(v.get("voltage", 0) for _, _, _, v in _records(nodes[1].bootstrap, db))[-1] == 500


def _post(proc: Any, text: str, auth: tuple[str, str] | None, headers: dict[str, str] | None = None) -> tuple[int, Any]:
    """POST /rest/sql to one node with HTTP Basic credentials (or none)."""
    sent = dict(headers or {})
    if auth is not None:
        sent["Authorization"] = "Basic " + base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
    req = urllib.request.Request(f"http://127.0.0.1:{proc.http_port}/rest/sql", data=text.encode(), method="POST",
                                 headers=sent)
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            return resp.status, json.load(resp)
    except urllib.error.HTTPError as exc:
        return exc.code, json.load(exc)


def test_sql_sent_to_the_leader_carries_the_callers_credentials(tmp_path: Path) -> None:
    with tmqgate_cluster(tmp_path, {"http_auth": "basic"}) as nodes:
        wait_until(lambda: len(metadata(nodes[0].bootstrap, [])["brokers"]), 30, 0.2, "three brokers listed",
                   ok=lambda n: n == 3)
        # a user made through node 0 (AlterUserScramCredentials) is every node's
        salt = os.urandom(16)
        with RawConn(nodes[0].bootstrap) as conn:
            answer = conn.request(51, 0, {"deletions": [], "upsertions": [{
                "name": "alice", "mechanism": 1, "iterations": 4096, "salt": salt,
                "salted_password": hashlib.pbkdf2_hmac("sha256", b"s3cret", salt, 4096)}]})
        assert [r["error_code"] for r in answer["results"]] == [0], answer
        alice = ("alice", "s3cret")
        for n in nodes:
            wait_until(lambda n=n: _post(nodes[n], "SHOW DATABASES", alice)[0], 30, 0.2,
                       f"alice known to node {n}", ok=lambda s: s == 200)

        db = unique("authed")
        assert _post(nodes[1], f"CREATE DATABASE {db} VGROUPS 2", alice)[0] == 200  # node 1 leads it
        status, answer = _post(nodes[2], METERS_DDL.format(db=db), alice)  # sent to node 1 with alice's credentials
        assert status == 200, answer
        status, answer = _post(nodes[2], f"INSERT INTO {db}.d1 USING {db}.meters TAGS ('sf', 1) "
                                         f"VALUES ({BASE_TS}, 1.5, 220, 0.5)", alice)
        assert status == 200 and answer["data"] == [[1]], answer
        status, answer = _post(nodes[0], f"SHOW {db}.TABLES", alice)
        assert status == 200 and [r[0] for r in answer["data"]] == ["d1"], answer

        # refused by the node that took it, never sent on: wrong or no credentials
        assert _post(nodes[2], f"SHOW {db}.TABLES", ("alice", "wrong"))[0] == 401
        assert _post(nodes[2], f"SHOW {db}.TABLES", None)[0] == 401
        # a statement claiming to have been sent by another broker is never run by a non-leader
        status, answer = _post(nodes[2], f"INSERT INTO {db}.d1 VALUES ({BASE_TS + 1}, 2.5, 230, 0.5)", alice,
                               {"X-Tmqgate-Forwarded": "1"})
        assert (status, answer["code"]) == (400, 0x090C), answer
        assert "dnode 1 leads the database" in answer["desc"], answer
        rows = read_kafka_python(nodes[0].bootstrap, db, partitions=2)
        assert [r.json()["voltage"] for r in rows] == [220]  # nothing written by node 2
