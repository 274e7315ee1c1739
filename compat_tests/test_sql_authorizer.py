"""The SQL front and the HTTP paths under the same authorizer as the Kafka APIs (issue 25,
point 4), against one broker set up as the attacker found it: SASL/SCRAM, ACLs with
`allow_everyone_if_no_acl_found = false` and one super user (admin), the HTTP front on Basic
auth (`metrics_auth = true`). alice and bob are plain users.

- DROP CONSUMER GROUP needs what OffsetDelete needs (DELETE on the group, READ on the topic):
  bob, whom OffsetDelete refuses, cannot erase alice's group's offsets over SQL either;
- SHOW DATABASES / TOPICS / CONSUMERS / SUBSCRIPTIONS list only what the caller may DESCRIBE,
  SHOW db.STABLES / TABLES and USE db need DESCRIBE on db (as Metadata and ListGroups);
- /log-history lists only the databases the caller may DESCRIBE; /metrics only the series of
  topics, databases and groups it may DESCRIBE (the super user sees all);
- a view (a TDengine topic) stops serving when its owner loses READ on its database: the
  Fetch answers TOPIC_AUTHORIZATION_FAILED for its partitions, as for a topic the fetcher
  may not read, whichever way it was made (CREATE TOPIC, CreateTopics' tmq.as).

tmqgate only: the reference broker has no SQL or HTTP front.
"""

from __future__ import annotations

import base64
import http.client
import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pytest

from .brokers import TmqgateProcess
from .raw import RawConn
from .tdengine_helpers import METERS_DDL, unique
from .test_acls import ALLOW, DESCRIBE, GROUP, LITERAL, READ, TOPIC, TOPIC_AUTHORIZATION_FAILED
from .test_http_auth import _tmqgate
from .test_sasl import _scram_auth

pytestmark = pytest.mark.tmqgate_only

PERMISSION_DENIED = 0x2644  # TDengine's TSDB_CODE_PAR_PERMISSION_DENIED
GROUP_AUTHORIZATION_FAILED = 30
CREATE, DELETE = 5, 6  # AclOperation
USERS = ("admin", "alice", "bob")


def _password(user: str) -> str:
    return f"{user}-secret"


@dataclass
class Secured:
    proc: TmqgateProcess

    def http(self, user: str, method: str, path: str, body: bytes | None = None) -> tuple[int, bytes]:
        auth = base64.b64encode(f"{user}:{_password(user)}".encode()).decode()
        conn = http.client.HTTPConnection("127.0.0.1", self.proc.http_port, timeout=60)
        try:
            conn.request(method, path, body=body, headers={"Authorization": f"Basic {auth}"})
            resp = conn.getresponse()
            return resp.status, resp.read()
        finally:
            conn.close()

    def sql(self, user: str, text: str) -> tuple[int, dict[str, Any]]:
        status, body = self.http(user, "POST", "/rest/sql", text.encode())
        return status, json.loads(body)

    def ok(self, user: str, text: str) -> list[dict[str, Any]]:
        status, answer = self.sql(user, text)
        assert (status, answer["code"]) == (200, 0), (text, answer)
        names = [c[0] for c in answer["column_meta"]]
        return [dict(zip(names, row, strict=True)) for row in answer["data"]]

    def denied(self, user: str, text: str) -> str:
        status, answer = self.sql(user, text)
        assert (status, answer["code"]) == (400, PERMISSION_DENIED), (text, answer)
        return str(answer["desc"])

    @contextmanager
    def kafka(self, user: str) -> Iterator[RawConn]:
        with RawConn(f"127.0.0.1:{self.proc.listener_ports['SASL_PLAINTEXT']}") as c:
            assert _scram_auth(c, user, _password(user))["error_code"] == 0
            yield c

    def allow(self, principal_user: str, rt: int, name: str, op: int) -> None:
        """An ALLOW ACL made by the super user over SASL (CreateAcls)."""
        with self.kafka("admin") as c:
            body = c.request(30, 3, {"creations": [
                {"resource_type": rt, "resource_name": name, "resource_pattern_type": LITERAL,
                 "principal": f"User:{principal_user}", "host": "*", "operation": op, "permission_type": ALLOW}]})
        assert [r["error_code"] for r in body["results"]] == [0], body

    def database(self, prefix: str) -> str:
        db = unique(prefix)
        self.ok("admin", f"CREATE DATABASE {db} VGROUPS 1")
        self.ok("admin", METERS_DDL.format(db=db))
        self.insert(db, 1000)
        return db

    def insert(self, db: str, ts: int) -> None:
        self.ok("admin", f"INSERT INTO {db}.d1 USING {db}.meters TAGS ('SF', 1) VALUES ({ts}, 1.5, 220, 0.5)")


@pytest.fixture(scope="module")
def sb(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    workdir = tmp_path_factory.mktemp("sql-authorizer")
    proc = TmqgateProcess(workdir, config={
        "authorizer": "acl", "allow_everyone_if_no_acl_found": False, "super_users": ["User:admin"],
        "sasl_enabled_mechanisms": ["SCRAM-SHA-512"], "http_auth": "basic", "metrics_auth": True,
    }, extra_listeners={"SASL_PLAINTEXT": "SASL_PLAINTEXT"})
    proc.data_dir.mkdir(parents=True)  # the super user, made offline before the first start
    added = _tmqgate("user", "add", "admin", "--mechanism", "SCRAM-SHA-512", "--iterations", "4096",
                     "--data-dir", str(proc.data_dir), stdin=f"{_password('admin')}\n")
    assert added.returncode == 0, added.stderr
    proc.start()
    try:
        s = Secured(proc)
        for user in USERS[1:]:
            s.ok("admin", f"CREATE USER {user} PASS '{_password(user)}'")
        yield s
    finally:
        proc.stop()


def _commit(c: RawConn, group: str, topic: str, offset: int) -> int:
    body = c.request(8, 8, {"group_id": group, "generation_id_or_member_epoch": -1, "member_id": "",
                            "group_instance_id": None, "topics": [
                                {"name": topic, "partitions": [{"partition_index": 0, "committed_offset": offset,
                                                                "committed_leader_epoch": -1,
                                                                "committed_metadata": None}]}]})
    return int(body["topics"][0]["partitions"][0]["error_code"])


def _committed(c: RawConn, group: str, topic: str) -> int:
    body = c.request(9, 8, {"groups": [{"group_id": group, "topics": [{"name": topic, "partition_indexes": [0]}]}],
                            "require_stable": False})
    [g] = body["groups"]
    assert g["error_code"] == 0, body
    return int(g["topics"][0]["partitions"][0]["committed_offset"])


def test_drop_consumer_group_needs_what_offset_delete_needs(sb: Secured) -> None:
    db, group = sb.database("dcg"), unique("ga")
    for user in ("alice", "bob"):
        sb.ok("admin", f"GRANT read ON {db}.* TO {user}")
    sb.allow("alice", GROUP, group, READ)
    with sb.kafka("alice") as alice:
        assert _commit(alice, group, db, 1) == 0
    # bob may read the topic but has nothing on alice's group: Kafka's OffsetDelete refuses him
    with sb.kafka("bob") as bob:
        body = bob.request(47, 0, {"group_id": group, "topics": [{"name": db, "partitions": [{"partition_index": 0}]}]})
    assert body["error_code"] == GROUP_AUTHORIZATION_FAILED, body
    # and so does SQL now (it answered 200 and erased the offsets)
    assert sb.denied("bob", f"DROP CONSUMER GROUP {group} ON {db}") == (
        f"Permission denied: User:bob may not DELETE group '{group}'")
    with sb.kafka("alice") as alice:
        assert _committed(alice, group, db) == 1
    # with DELETE on the group (and READ on the topic) it is OffsetDelete's equal
    sb.allow("bob", GROUP, group, DELETE)
    assert sb.ok("bob", f"DROP CONSUMER GROUP {group} ON {db}") == [{"affected_rows": 0}]
    with sb.kafka("alice") as alice:
        assert _committed(alice, group, db) == -1


def _subscription(topics: list[str]) -> bytes:
    """ConsumerProtocolSubscription v0: the topics, no user data."""
    out = (0).to_bytes(2, "big") + len(topics).to_bytes(4, "big")
    for t in topics:
        out += len(t).to_bytes(2, "big") + t.encode()
    return out + (-1).to_bytes(4, "big", signed=True)


def _join(c: RawConn, group: str, topics: list[str]) -> None:
    """A classic member of `group` subscribed to `topics` (JoinGroup twice: KIP-394's member id)."""
    body = {"group_id": group, "session_timeout_ms": 60000, "rebalance_timeout_ms": 60000, "member_id": "",
            "group_instance_id": None, "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": _subscription(topics)}]}
    first = c.request(11, 5, body)
    assert first["error_code"] == 79, first  # MEMBER_ID_REQUIRED
    joined = c.request(11, 5, {**body, "member_id": first["member_id"]})
    assert joined["error_code"] == 0, joined


def test_show_lists_only_what_the_caller_may_describe(sb: Secured) -> None:
    mine, theirs = sb.database("mine"), sb.database("theirs")
    my_topic, their_topic = unique("tmine"), unique("ttheirs")
    sb.ok("admin", f"CREATE TOPIC {my_topic} AS SELECT ts, current FROM {mine}.meters")
    sb.ok("admin", f"CREATE TOPIC {their_topic} AS SELECT ts, voltage FROM {theirs}.meters WHERE voltage > 1")
    sb.ok("admin", f"GRANT read ON {mine}.* TO alice")
    sb.ok("admin", f"GRANT read ON {my_topic}.* TO alice")
    my_group, their_group, my_member, their_member = (unique(p) for p in ("gmine", "gtheirs", "cmine", "ctheirs"))
    for g in (my_group, my_member):
        sb.allow("alice", GROUP, g, READ)
    with sb.kafka("alice") as alice, sb.kafka("admin") as admin:
        assert _commit(alice, my_group, my_topic, 0) == 0
        assert _commit(admin, their_group, their_topic, 0) == 0
        _join(alice, my_member, [my_topic, their_topic])
        _join(admin, their_member, [their_topic])

        databases = [r["name"] for r in sb.ok("alice", "SHOW DATABASES")]
        assert mine in databases and theirs not in databases
        assert {mine, theirs} <= {r["name"] for r in sb.ok("admin", "SHOW DATABASES")}

        topics = sb.ok("alice", "SHOW TOPICS")
        assert [t["topic_name"] for t in topics] == [my_topic]
        assert theirs not in json.dumps(topics)  # nor the SELECT text naming its database
        assert {my_topic, their_topic} <= {t["topic_name"] for t in sb.ok("admin", "SHOW TOPICS")}

        consumers = sb.ok("alice", "SHOW CONSUMERS")
        assert [(c["consumer_group"], c["topics"]) for c in consumers] == [(my_member, my_topic)]
        assert {c["consumer_group"] for c in sb.ok("admin", "SHOW CONSUMERS")} >= {my_member, their_member}

        subscriptions = sb.ok("alice", "SHOW SUBSCRIPTIONS")
        assert [(s["topic_name"], s["consumer_group"]) for s in subscriptions] == [(my_topic, my_group)]
        assert {(s["topic_name"], s["consumer_group"]) for s in sb.ok("admin", "SHOW SUBSCRIPTIONS")} >= {
            (my_topic, my_group), (their_topic, their_group)}

    # naming a database the caller may not describe is refused, as Metadata of that topic
    assert [r["stable_name"] for r in sb.ok("alice", f"SHOW {mine}.STABLES")] == ["meters"]
    for text in (f"SHOW {theirs}.STABLES", f"SHOW {theirs}.TABLES", f"USE {theirs}"):
        assert sb.denied("alice", text) == f"Permission denied: User:alice may not DESCRIBE topic '{theirs}'"
    assert [r["table_name"] for r in sb.ok("admin", f"SHOW {theirs}.TABLES")] == ["d1"]


def test_log_history_lists_only_describable_databases(sb: Secured) -> None:
    mine, theirs = sb.database("lhmine"), sb.database("lhtheirs")
    sb.ok("admin", f"GRANT read ON {mine}.* TO alice")
    status, body = sb.http("alice", "GET", "/log-history")
    assert status == 200
    dbs = {v["db"] for v in json.loads(body)["vnodes"]}
    assert mine in dbs and theirs not in dbs
    status, body = sb.http("admin", "GET", "/log-history")
    assert status == 200 and {mine, theirs} <= {v["db"] for v in json.loads(body)["vnodes"]}
    status, body = sb.http("alice", "GET", f"/log-history?db={mine}")
    assert status == 200 and {v["db"] for v in json.loads(body)["vnodes"]} == {mine}
    # a named database the caller may not describe: refused whether it exists or not
    for name in (theirs, unique("nodb")):
        status, body = sb.http("alice", "GET", f"/log-history?db={name}")
        assert (status, json.loads(body)) == (403, {
            "code": PERMISSION_DENIED, "desc": f"Permission denied: User:alice may not DESCRIBE topic '{name}'"})


def test_metrics_show_only_describable_series(sb: Secured) -> None:
    mine, theirs = sb.database("mmine"), sb.database("mtheirs")
    my_group, their_group = unique("mgmine"), unique("mgtheirs")
    sb.ok("admin", f"GRANT read ON {mine}.* TO alice")
    sb.allow("alice", GROUP, my_group, DESCRIBE)
    with sb.kafka("admin") as admin:
        assert _commit(admin, my_group, mine, 0) == 0
        assert _commit(admin, their_group, theirs, 0) == 0
    status, body = sb.http("alice", "GET", "/metrics")
    assert status == 200
    text = body.decode()
    assert f'tmqgate_wal_bytes{{database="{mine}",vnode="0"}}' in text
    assert f'kafka_consumergroup_lag{{consumergroup="{my_group}",partition="0",topic="{mine}"}}' in text
    assert theirs not in text and their_group not in text  # no series, no label naming them
    assert "kafka_network_requestmetrics_requests_total" in text  # the broker's own series stay
    status, body = sb.http("admin", "GET", "/metrics")  # the super user sees every series
    assert status == 200
    assert f'tmqgate_wal_bytes{{database="{theirs}",vnode="0"}}' in body.decode()
    assert f'consumergroup="{their_group}"' in body.decode()


def _fetch(sb: Secured, user: str, topic: str) -> tuple[int, int]:
    """(error code, bytes of records) of `user`'s Fetch of partition 0 from offset 0."""
    with sb.kafka(user) as c:
        p = c.fetch(topic, 0, 0)
    records = p["records"] or b""
    return p["error_code"], len(records if isinstance(records, bytes) else b"".join(records))


def test_a_view_stops_when_its_owner_loses_read(sb: Secured) -> None:
    db = sb.database("vsrc")
    by_sql, by_kafka = unique("vsql"), unique("vkafka")
    sb.ok("admin", f"GRANT read ON {db}.* TO alice")
    for view in (by_sql, by_kafka):
        sb.allow("alice", TOPIC, view, CREATE)
    assert sb.ok("alice", f"CREATE TOPIC {by_sql} AS SELECT ts, current FROM {db}.meters") == [{"affected_rows": 0}]
    with sb.kafka("alice") as alice:
        body = alice.request(19, 7, {"topics": [{"name": by_kafka, "num_partitions": -1, "replication_factor": -1,
                                                 "assignments": [], "configs": [
                                                     {"name": "tmq.as", "value": f"SELECT ts FROM {db}.meters"}]}],
                                     "timeout_ms": 30000, "validate_only": False})
    assert body["topics"][0]["error_code"] == 0, body
    for view in (by_sql, by_kafka):
        sb.ok("admin", f"GRANT read ON {view}.* TO bob")
        code, size = _fetch(sb, "bob", view)
        assert code == 0 and size > 0, (view, code, size)
    # alice loses READ on the database; new rows arrive: her views serve none of them
    sb.ok("admin", f"REVOKE read ON {db}.* FROM alice")
    sb.insert(db, 2000)
    for view in (by_sql, by_kafka):
        assert _fetch(sb, "bob", view) == (TOPIC_AUTHORIZATION_FAILED, 0), view
    # given back, they serve again (the decision is taken at each Fetch, not kept)
    sb.ok("admin", f"GRANT read ON {db}.* TO alice")
    for view in (by_sql, by_kafka):
        code, size = _fetch(sb, "bob", view)
        assert code == 0 and size > 0, (view, code, size)
