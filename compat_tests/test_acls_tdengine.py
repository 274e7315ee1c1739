"""ACLs over the TDengine side (issue 12, point 4): a database, a database topic and a query
topic are Kafka topics, so reading one needs READ on it; making a TDengine topic (over HTTP
SQL or with CreateTopics' tmq.as) needs READ on the database it reads; SQL runs as a principal
(User:ANONYMOUS until the HTTP front authenticates); GRANT / REVOKE are Kafka ACLs.
tmqgate only (the reference broker has no SQL front)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from .raw import RawConn
from .tdengine_helpers import METERS_DDL, TdBroker, td_broker_fixture, unique
from .test_acls import (
    ALLOW,
    ANON,
    DENY,
    DESCRIBE,
    LITERAL,
    READ,
    TOPIC,
    TOPIC_AUTHORIZATION_FAILED,
    create_acls,
    deny,
)

pytestmark = pytest.mark.tmqgate_only

PERMISSION_DENIED = 0x2644  # TDengine's TSDB_CODE_PAR_PERMISSION_DENIED


@pytest.fixture(scope="module")
def td(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TdBroker]:
    yield from td_broker_fixture(tmp_path_factory, "td-acl",
                                 {"authorizer": "acl", "allow_everyone_if_no_acl_found": True})


def _database(td: TdBroker) -> str:
    db = unique("acldb")
    td.sql(f"CREATE DATABASE {db} VGROUPS 1")
    td.sql(METERS_DDL.format(db=db))
    td.sql(f"INSERT INTO {db}.d1 USING {db}.meters TAGS ('SF', 1) VALUES (1000, 1.5, 220, 0.5) (2000, 2.5, 221, 0.5)")
    return db


def _fetch(td: TdBroker, topic: str) -> tuple[int, int]:
    """(error code, bytes of records) of a Fetch of partition 0 from offset 0."""
    with RawConn(td.bootstrap) as c:
        p = c.fetch(topic, 0, 0)
    records = p["records"] or b""
    return p["error_code"], len(records if isinstance(records, bytes) else b"".join(records))


def test_reading_database_and_query_topics_needs_read(td: TdBroker) -> None:
    db = _database(td)
    db_topic, query_topic = f"{db}_all", f"{db}_q"
    td.sql(f"CREATE TOPIC {db_topic} AS DATABASE {db}")
    td.sql(f"CREATE TOPIC {query_topic} AS SELECT ts, current FROM {db}.meters WHERE current > 2")
    for t in (db, db_topic, query_topic):
        code, size = _fetch(td, t)
        assert code == 0 and size > 0, (t, code, size)
    assert td.sql(f"SELECT ts, current FROM {db}.meters ORDER BY ts")["data"] == [[1000, 1.5], [2000, 2.5]]
    deny(td.bootstrap, TOPIC, query_topic, READ)
    assert _fetch(td, query_topic) == (TOPIC_AUTHORIZATION_FAILED, 0)
    assert _fetch(td, db_topic)[0] == 0  # the others are untouched
    deny(td.bootstrap, TOPIC, db_topic, READ)
    assert _fetch(td, db_topic) == (TOPIC_AUTHORIZATION_FAILED, 0)
    deny(td.bootstrap, TOPIC, db, READ)
    assert _fetch(td, db) == (TOPIC_AUTHORIZATION_FAILED, 0)
    # and SQL reads the database as the same principal: no way around the ACL
    status, answer = td.post(f"SELECT * FROM {db}.meters")
    assert status == 400 and answer["code"] == PERMISSION_DENIED, answer
    assert answer["desc"] == f"Permission denied: {ANON} may not READ topic '{db}'"


def test_a_databases_placement_needs_describe_as_metadatas(td: TdBroker) -> None:
    db = _database(td)
    assert [r["v1_status"] for r in td.rows(f"SHOW {db}.VGROUPS")] == ["leader"]
    deny(td.bootstrap, TOPIC, db, DESCRIBE)
    status, answer = td.post(f"SHOW {db}.VGROUPS")
    assert status == 400 and answer["code"] == PERMISSION_DENIED, answer
    assert answer["desc"] == f"Permission denied: {ANON} may not DESCRIBE topic '{db}'"
    # the brokers are anyone's to see, as Metadata's broker list
    assert [r["status"] for r in td.rows("SHOW DNODES")] == ["ready"]


def test_making_a_topic_over_a_database_needs_read_on_it(td: TdBroker) -> None:
    db = _database(td)
    deny(td.bootstrap, TOPIC, db, READ)
    status, answer = td.post(f"CREATE TOPIC {db}_view AS SELECT ts, current FROM {db}.meters")
    assert status == 400 and answer["code"] == PERMISSION_DENIED, answer
    assert answer["desc"] == f"Permission denied: {ANON} may not READ topic '{db}'"
    with RawConn(td.bootstrap) as c:
        body = c.request(19, 7, {"topics": [{"name": f"{db}_kview", "num_partitions": -1, "replication_factor": -1,
                                             "assignments": [], "configs": [
                                                 {"name": "tmq.as", "value": f"SELECT ts FROM {db}.meters"}]}],
                                 "timeout_ms": 30000, "validate_only": False})
    [result] = body["topics"]
    assert (result["error_code"], result["error_message"]) == (
        TOPIC_AUTHORIZATION_FAILED, f"Authorization failed: a topic over '{db}' needs READ on it.")
    assert not [t for t in td.rows("SHOW TOPICS") if t["topic_name"].startswith(db)]
    # with READ allowed it is made
    assert create_acls(td.bootstrap, (TOPIC, db, LITERAL, ANON, "*", READ, ALLOW)) == [(0, "")]
    status, answer = td.post(f"CREATE TOPIC {db}_view AS SELECT ts, current FROM {db}.meters")
    assert status == 400 and answer["code"] == PERMISSION_DENIED  # DENY still wins over ALLOW


def test_grant_and_revoke_are_acls(td: TdBroker) -> None:
    db = _database(td)
    flt = {"resource_type_filter": TOPIC, "resource_name_filter": db, "pattern_type_filter": LITERAL,
           "principal_filter": None, "host_filter": None, "operation": 1, "permission_type": 1}

    def acls() -> list[tuple[str, str, int, int]]:
        with RawConn(td.bootstrap) as c:
            body = c.request(29, 3, flt)
        return sorted((a["principal"], a["host"], a["operation"], a["permission_type"])
                      for r in body["resources"] for a in r["acls"])

    td.sql(f"GRANT read ON {db}.* TO alice")
    td.sql(f"GRANT all ON {db}.* TO bob")
    assert acls() == [("User:alice", "*", READ, ALLOW), ("User:bob", "*", 2, ALLOW)]
    td.sql(f"REVOKE read ON {db}.* FROM alice")
    assert acls() == [("User:bob", "*", 2, ALLOW)]
    status, answer = td.post(f"GRANT write ON {unique('nodb')}.* TO alice")
    assert status == 400 and "Database not exist" in answer["desc"]
    # GRANT needs ALTER on the cluster, as CreateAcls does (the last test of the module: after
    # this, this principal changes no ACL)
    assert create_acls(td.bootstrap, (4, "kafka-cluster", LITERAL, ANON, "*", 2, ALLOW),
                       (4, "kafka-cluster", LITERAL, ANON, "*", 7, DENY)) == [(0, "")] * 2
    status, answer = td.post(f"GRANT read ON {db}.* TO carol")
    assert status == 400 and answer["code"] == PERMISSION_DENIED, answer
    assert answer["desc"] == f"Permission denied: {ANON} may not ALTER cluster 'kafka-cluster'"
