"""SHOW DNODES and SHOW VGROUPS (issue 16, step 5): the brokers and where each vnode's replicas
are, in what role — on one node, and on three `tmqgate serve --cluster` nodes with a real etcd,
where every node's answer must agree with the cluster's Metadata, through a leader's kill -9
and its restart.

tmqgate only: the reference Kafka has no SQL (its placement is Metadata's, checked beside).
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.partitioner.default import murmur2

from .brokers import TmqgateProcess
from .clusters import metadata, tmqgate_cluster
from .etcd import require_etcd
from .helpers import wait_until
from .tdengine_helpers import METERS_DDL, TdBroker, unique

pytestmark = pytest.mark.tmqgate_only

VGROUP_COLUMNS = ["vgroup_id", "db_name", "tables", "v1_dnode", "v1_status", "v2_dnode", "v2_status", "v3_dnode",
                  "v3_status", "v4_dnode", "v4_status", "cacheload", "cacheelements", "tsma"]
OUT_OF_DNODES = 0x0334  # TDengine's TSDB_CODE_MND_NO_ENOUGH_DNODES
DNODE_COLUMNS = ["id", "endpoint", "vnodes", "support_vnodes", "status", "create_time", "reboot_time", "note"]


def _now_ms() -> int:
    return int(time.time() * 1000)


def _columns(td: TdBroker, text: str) -> list[str]:
    return [c[0] for c in td.sql(text)["column_meta"]]


def _replicas(row: dict[str, Any]) -> list[tuple[int, str]]:
    """A SHOW VGROUPS row's (dnode, status) pairs, v1 first."""
    return [(row[f"v{i}_dnode"], row[f"v{i}_status"]) for i in range(1, 5) if row[f"v{i}_dnode"] is not None]


def _held(bootstrap: str) -> Counter[int]:
    """How many vnode replicas each broker holds, by one broker's Metadata of every topic."""
    held: Counter[int] = Counter()
    for t in metadata(bootstrap, None)["topics"]:
        for p in t["partitions"]:
            held.update(p["replica_nodes"])
    return held


def test_one_node_shows_itself_and_leads_every_vnode(tmp_path: Path) -> None:
    before = _now_ms()
    td = TdBroker(TmqgateProcess(tmp_path / "td", config={"node_id": 7, "max_partitions": 500}))
    td.proc.start()
    try:
        db = unique("placed")
        td.sql(f"CREATE DATABASE {db} VGROUPS 3")
        td.sql(METERS_DDL.format(db=db))
        tables = [f"d{i}" for i in range(11)]
        td.sql("CREATE TABLE " + " ".join(f"{db}.{t} USING {db}.meters TAGS ('here', {i})"
                                          for i, t in enumerate(tables)))
        homes = Counter((murmur2(t.encode()) & 0x7FFFFFFF) % 3 for t in tables)  # the Java partitioner's vnode

        assert _columns(td, f"SHOW {db}.VGROUPS") == VGROUP_COLUMNS
        vgroups = td.rows(f"SHOW {db}.VGROUPS")
        assert [(r["vgroup_id"], r["db_name"], r["tables"]) for r in vgroups] == [(v, db, homes[v]) for v in range(3)]
        assert [_replicas(r) for r in vgroups] == [[(7, "leader")]] * 3
        assert td.rows("SHOW VGROUPS", db) == vgroups  # the session's database (USE db)

        assert _columns(td, "SHOW DNODES") == DNODE_COLUMNS
        [me] = td.rows("SHOW DNODES")
        assert (me["id"], me["endpoint"], me["status"], me["note"], me["support_vnodes"]) == \
            (7, td.bootstrap, "ready", "", 500)
        assert me["vnodes"] == sum(_held(td.bootstrap).values()) >= 3  # every topic's vnodes, this database's too
        assert before <= me["create_time"] <= me["reboot_time"] <= _now_ms()

        # restarted on its data: the same creation, a later start
        td.proc.stop()
        restarted = _now_ms()
        td.proc.start()
        [again] = td.rows("SHOW DNODES")
        assert again["create_time"] == me["create_time"]
        assert restarted <= again["reboot_time"] <= _now_ms()
        assert again["vnodes"] == me["vnodes"]

        # REPLICA: one node holds one copy; more is TDengine's "Out of dnodes", never a silent single copy
        assert td.affected(f"CREATE DATABASE {db}_r1 VGROUPS 1 REPLICA 1") == 0
        assert [_replicas(r) for r in td.rows(f"SHOW {db}_r1.VGROUPS")] == [[(7, "leader")]]
        status, answer = td.post(f"CREATE DATABASE {db}_r3 REPLICA 3")
        assert (status, answer["code"], answer["desc"]) == (400, OUT_OF_DNODES, "Out of dnodes"), answer
        assert f"{db}_r3" not in [r["name"] for r in td.rows("SHOW DATABASES")]

        # errors as TDengine's: an unknown database, no database at all
        status, answer = td.post("SHOW nosuchdb.VGROUPS")
        assert status == 400 and "Database not exist: nosuchdb" in answer["desc"], answer
        status, answer = td.post("SHOW VGROUPS")
        assert status == 400 and "Database not specified" in answer["desc"], answer
    finally:
        td.proc.stop()


def _vgroups_as_metadata(bootstrap: str, topic: str) -> list[list[tuple[int, str]]]:
    """What SHOW VGROUPS must show of ``topic``, from Metadata: its replicas in order, the leader
    ``leader``, the rest of the ISR ``follower``, a replica on a broker not listed ``offline``."""
    meta = metadata(bootstrap, [topic])
    live = {b["node_id"] for b in meta["brokers"]}
    [t] = meta["topics"]
    out = []
    for p in sorted(t["partitions"], key=lambda p: p["partition_index"]):
        out.append([(r, "offline" if r not in live else "leader" if r == p["leader_id"]
                     else "follower" if r in p["isr_nodes"] else "learner") for r in p["replica_nodes"]])
    return out


def _dnodes(td: TdBroker) -> dict[int, dict[str, Any]]:
    return {r["id"]: r for r in td.rows("SHOW DNODES")}


def test_a_cluster_shows_every_node_and_each_vnodes_roles_through_a_leader_kill(tmp_path: Path) -> None:
    require_etcd()
    with tmqgate_cluster(tmp_path, {}) as nodes:
        tds = {n: TdBroker(p) for n, p in nodes.items()}
        wait_until(lambda: len(metadata(nodes[0].bootstrap, [])["brokers"]), 30, 0.2, "three brokers listed",
                   ok=lambda n: n == 3)
        topic = unique("placed")
        admin = AdminClient({"bootstrap.servers": nodes[1].bootstrap})
        admin.create_topics([NewTopic(topic, 3, 3)])[topic].result(30)
        for n in nodes:
            wait_until(lambda n=n: _vgroups_as_metadata(nodes[n].bootstrap, topic), 30, 0.2,
                       f"{topic} in sync on {n}",
                       ok=lambda v: all(s in ("leader", "follower") for p in v for _, s in p))

        # every node: three ready dnodes holding what Metadata places on them; each vnode's roles as Metadata's
        held = _held(nodes[0].bootstrap)
        for n, td in tds.items():
            shown = _dnodes(td)
            assert sorted(shown) == [0, 1, 2]
            assert {i: (r["endpoint"], r["status"], r["vnodes"]) for i, r in shown.items()} == \
                {i: (nodes[i].bootstrap, "ready", held[i]) for i in (0, 1, 2)}
            assert all(r["create_time"] <= r["reboot_time"] for r in shown.values())
            assert [_replicas(r) for r in td.rows(f"SHOW {topic}.VGROUPS")] == \
                _vgroups_as_metadata(nodes[n].bootstrap, topic)
        first = _dnodes(tds[0])

        # REPLICA 1 is one copy, on the node that made it and leads it; REPLICA 3 a copy on
        # every node, led by the one that made it; 4 is more than TDengine takes
        db = unique("sqldb")
        status, answer = tds[2].post(f"CREATE DATABASE {db} REPLICA 4")
        assert status == 400 and "REPLICA needs 1, 2 or 3" in answer["desc"], answer
        tds[2].sql(f"CREATE DATABASE {db} VGROUPS 2 REPLICA 1")
        assert [_replicas(r) for r in tds[2].rows(f"SHOW {db}.VGROUPS")] == [[(2, "leader")]] * 2
        assert _dnodes(tds[2])[2]["vnodes"] == held[2] + 2
        tds[1].sql(f"CREATE DATABASE {db}_r3 VGROUPS 2 REPLICA 3")
        assert [_replicas(r) for r in tds[0].rows(f"SHOW {db}_r3.VGROUPS")] == \
            [[(1, "leader"), (2, "follower"), (0, "follower")]] * 2
        held.update({0: 2, 1: 2, 2: 4})

        # kill -9 the leader of vnode 0: a survivor shows it offline (its endpoint as last seen)
        # and its replicas offline, the new leaders as Metadata's
        [victim] = [r for r, s in _replicas(tds[0].rows(f"SHOW {topic}.VGROUPS")[0]) if s == "leader"]
        nodes[victim].kill()
        survivor = tds[(victim + 1) % 3]
        wait_until(lambda: _dnodes(survivor)[victim]["status"], 30, 0.2, "the killed node offline",
                   ok=lambda s: s == "offline")
        wait_until(lambda: _vgroups_as_metadata(survivor.bootstrap, topic), 30, 0.2, "new leaders elected",
                   ok=lambda v: all((victim, "offline") in p and any(s == "leader" for _, s in p) for p in v))
        gone = _dnodes(survivor)[victim]
        assert (gone["endpoint"], gone["note"], gone["reboot_time"]) == \
            (nodes[victim].bootstrap, "no live registration in etcd", first[victim]["reboot_time"])
        shown_vgroups = [_replicas(r) for r in survivor.rows(f"SHOW {topic}.VGROUPS")]
        assert shown_vgroups == _vgroups_as_metadata(survivor.bootstrap, topic)
        assert all(s != "leader" for p in shown_vgroups for r, s in p if r == victim)

        # restarted: ready again, a later start, the same data directory
        nodes[victim].start()
        back = wait_until(lambda: _dnodes(survivor)[victim], 30, 0.2, "the node back",
                          ok=lambda r: r["status"] == "ready")
        assert back["reboot_time"] > first[victim]["reboot_time"]
        assert back["create_time"] == first[victim]["create_time"]
