"""The coordinator wired into a real Broker: group APIs over TCP with our own codec, and a restart."""

from __future__ import annotations

import asyncio
import struct
from typing import Any

from tests.broker_conn import Conn
from tests.test_coordinator import subscription
from tmqgate.broker.configs.config import BrokerConfig
from tmqgate.broker.server import Broker
from tmqgate.protocol.errors import ErrorCode

E = ErrorCode


def assignment(*partitions: int, topic: str = "t") -> bytes:
    out = struct.pack(">hi", 0, 1) + struct.pack(">h", len(topic)) + topic.encode()
    out += struct.pack(">i", len(partitions)) + b"".join(struct.pack(">i", p) for p in partitions)
    return out + struct.pack(">i", -1)


async def start(data_dir: str) -> Broker:
    broker = Broker(BrokerConfig(listen="127.0.0.1:0", data_dir=data_dir, group_initial_rebalance_delay_ms=0))
    await broker.start()
    if broker.topics.get("t") is None:
        broker.topics.create("t", 4, {})
    return broker


def join_body(member_id: str = "") -> dict[str, Any]:
    return {"group_id": "g", "session_timeout_ms": 10_000, "rebalance_timeout_ms": 20_000, "member_id": member_id,
            "group_instance_id": None, "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": subscription("t")}]}


async def classic_and_kip848(data_dir: str) -> None:
    broker = await start(data_dir)
    try:
        port = broker.port
        a = await Conn.open(port, "client-a")
        b = await Conn.open(port, "client-b")
        versions = {k["api_key"]: (k["min_version"], k["max_version"])
                    for k in (await a.call(18, 3,
                                           {"client_software_name": "t", "client_software_version": "1"}))["api_keys"]}
        assert versions[68] == (0, 1) and versions[69] == (0, 1) and versions[11] == (0, 9)

        fc = await a.call(10, 3, {"key": "g", "key_type": 0})
        assert (fc["error_code"], fc["node_id"], fc["port"]) == (0, 1, port)
        fc = await a.call(10, 4, {"key_type": 1, "coordinator_keys": ["txn-1", "txn-2"]})
        assert [(c["key"], c["node_id"], c["port"], c["error_code"]) for c in fc["coordinators"]] == [
            ("txn-1", 1, port, 0), ("txn-2", 1, port, 0)]

        first = await a.call(11, 7, join_body())
        assert first["error_code"] == E.MEMBER_ID_REQUIRED
        ma = first["member_id"]
        ja = await a.call(11, 7, join_body(ma))
        assert (ja["error_code"], ja["generation_id"], ja["leader"], ja["protocol_name"]) == (0, 1, ma, "range")
        sa = await a.call(14, 5, {"group_id": "g", "generation_id": 1, "member_id": ma, "protocol_type": "consumer",
                                  "protocol_name": "range",
                                  "assignments": [{"member_id": ma, "assignment": assignment(0, 1, 2, 3)}]})
        assert sa["error_code"] == 0 and sa["assignment"] == assignment(0, 1, 2, 3)

        mb = (await b.call(11, 7, join_body()))["member_id"]
        jb_task = asyncio.create_task(b.call(11, 7, join_body(mb)))  # delayed until A rejoins
        await asyncio.sleep(0.05)
        assert not jb_task.done()
        hb = await a.call(12, 4, {"group_id": "g", "generation_id": 1, "member_id": ma})
        assert hb["error_code"] == E.REBALANCE_IN_PROGRESS
        ja = await a.call(11, 7, join_body(ma))
        jb = await jb_task
        assert ja["generation_id"] == jb["generation_id"] == 2
        assert [m["member_id"] for m in ja["members"]] == [ma, mb] and jb["members"] == []
        sb_task = asyncio.create_task(b.call(14, 5, {"group_id": "g", "generation_id": 2, "member_id": mb,
                                                     "assignments": []}))
        await asyncio.sleep(0.05)
        assert not sb_task.done()
        sa = await a.call(14, 5, {"group_id": "g", "generation_id": 2, "member_id": ma, "assignments": [
            {"member_id": ma, "assignment": assignment(0, 1)}, {"member_id": mb, "assignment": assignment(2, 3)}]})
        sb = await sb_task
        assert sa["assignment"] == assignment(0, 1) and sb["assignment"] == assignment(2, 3)

        commit = await a.call(8, 8, {"group_id": "g", "generation_id_or_member_epoch": 2, "member_id": ma,
                                     "topics": [{"name": "t", "partitions": [
                                         {"partition_index": 0, "committed_offset": 17, "committed_leader_epoch": 4,
                                          "committed_metadata": "meta"},
                                         {"partition_index": 9, "committed_offset": 1, "committed_metadata": None}]}]})
        assert [p["error_code"] for p in commit["topics"][0]["partitions"]] == [0, E.UNKNOWN_TOPIC_OR_PARTITION]
        stale = await a.call(8, 8, {"group_id": "g", "generation_id_or_member_epoch": 1, "member_id": ma,
                                    "topics": [{"name": "t",
                                                "partitions": [{"partition_index": 0, "committed_offset": 1}]}]})
        assert stale["topics"][0]["partitions"][0]["error_code"] == E.ILLEGAL_GENERATION

        desc = await a.call(15, 5, {"groups": ["g"]})
        g = desc["groups"][0]
        assert (g["group_state"], g["protocol_type"], g["protocol_data"]) == ("Stable", "consumer", "range")
        assert [(m["member_id"], m["client_id"], m["client_host"], m["member_assignment"]) for m in g["members"]] == [
            (ma, "client-a", "/127.0.0.1", assignment(0, 1)), (mb, "client-b", "/127.0.0.1", assignment(2, 3))]

        # KIP-848 on its own group: the second member's target is known on its joining heartbeat.
        c1 = await Conn.open(port, "kip-1")
        c2 = await Conn.open(port, "kip-2")
        tid = broker.topics.get("t").topic_id  # type: ignore[union-attr]

        def cgh(member: str, epoch: int, owned: list[int] | None, join: bool = False) -> dict[str, Any]:
            return {"group_id": "k", "member_id": member, "member_epoch": epoch,
                    "rebalance_timeout_ms": 30_000 if join else -1,
                    "subscribed_topic_names": ["t"] if join else None,
                    "topic_partitions": None if owned is None else [{"topic_id": tid, "partitions": owned}]}

        r1 = await c1.call(68, 1, cgh("member-1", 0, [], join=True))
        assert (r1["error_code"], r1["member_id"], r1["member_epoch"], r1["heartbeat_interval_ms"]) == (
            0, "member-1", 1, 1000)
        assert r1["assignment"]["topic_partitions"] == [{"topic_id": tid, "partitions": [0, 1, 2, 3]}]
        r2 = await c2.call(68, 1, cgh("member-2", 0, [], join=True))
        assert r2["member_epoch"] == 2 and r2["assignment"]["topic_partitions"] == []
        r1 = await c1.call(68, 1, cgh("member-1", 1, [0, 1, 2, 3]))
        assert r1["member_epoch"] == 1 and r1["assignment"]["topic_partitions"][0]["partitions"] == [0, 1]
        r1 = await c1.call(68, 1, cgh("member-1", 1, [0, 1]))
        assert r1["member_epoch"] == 2
        r2 = await c2.call(68, 1, cgh("member-2", 2, []))
        assert r2["assignment"]["topic_partitions"][0]["partitions"] == [2, 3]
        assert (await c2.call(68, 1, cgh("member-2", 9, None)))["error_code"] == E.FENCED_MEMBER_EPOCH
        commit = await c1.call(8, 9, {"group_id": "k", "generation_id_or_member_epoch": 2, "member_id": "member-1",
                                      "topics": [{"name": "t",
                                                  "partitions": [{"partition_index": 1, "committed_offset": 5}]}]})
        assert commit["topics"][0]["partitions"][0]["error_code"] == 0
        d = (await c1.call(69, 0, {"group_ids": ["k"]}))["groups"][0]
        assert (d["group_state"], d["group_epoch"], d["assignment_epoch"]) == ("Stable", 2, 2)
        assert {m["member_id"]: (m["client_id"], m["client_host"]) for m in d["members"]} == {
            "member-1": ("kip-1", "/127.0.0.1"), "member-2": ("kip-2", "/127.0.0.1")}
        listed = await a.call(16, 5, {"states_filter": [], "types_filter": ["consumer"]})
        assert [(x["group_id"], x["group_type"]) for x in listed["groups"]] == [("k", "consumer")]
        for conn in (a, b, c1, c2):
            conn.close()
    finally:
        await broker.stop()


async def after_restart(data_dir: str) -> None:
    broker = await start(data_dir)
    try:
        a = await Conn.open(broker.port)
        fetched = await a.call(9, 8, {"groups": [
            {"group_id": "g", "topics": [{"name": "t", "partition_indexes": [0, 1]}]},
            {"group_id": "k", "topics": None},
            {"group_id": "nobody", "topics": [{"name": "t", "partition_indexes": [0]}]}]})
        by_group = {g["group_id"]: g for g in fetched["groups"]}
        parts = by_group["g"]["topics"][0]["partitions"]
        assert [(p["partition_index"], p["committed_offset"], p["committed_leader_epoch"], p["metadata"])
                for p in parts] == [
            (0, 17, 4, "meta"), (1, -1, -1, "")]
        assert by_group["k"]["topics"][0]["partitions"][0]["committed_offset"] == 5
        assert by_group["nobody"]["topics"][0]["partitions"][0]["committed_offset"] == -1
        old = await a.call(9, 1, {"group_id": "g", "topics": [{"name": "t", "partition_indexes": [0]}]})
        assert old["topics"][0]["partitions"][0]["committed_offset"] == 17
        g = (await a.call(15, 5, {"groups": ["g"]}))["groups"][0]
        assert g["group_state"] == "Stable" and len(g["members"]) == 2
        d = (await a.call(69, 0, {"group_ids": ["k"]}))["groups"][0]
        assert (d["group_epoch"], d["assignment_epoch"], len(d["members"])) == (2, 2, 2)
        assert (await a.call(42, 2, {"groups_names": ["g"]}))["results"][0]["error_code"] == E.NON_EMPTY_GROUP
        a.close()
    finally:
        await broker.stop()


def test_group_apis_over_tcp_and_restart(tmp_path: Any) -> None:
    data_dir = str(tmp_path / "data")
    asyncio.run(classic_and_kip848(data_dir))
    asyncio.run(after_restart(data_dir))
