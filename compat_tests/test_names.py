"""Names (issue 11, finding 7): one rule for every way a name is made.

* CreateTopics: Kafka's `Topic.validate` — 1..249 characters of [a-zA-Z0-9._-], not "." or
  ".." — else INVALID_TOPIC_EXCEPTION (both targets: the reference broker decides);
* SQL (tmqgate only): a database or TDengine topic is also a Kafka topic, so it must pass
  Kafka's rule besides TDengine's (64 / 192 bytes); supertables, child tables, columns and
  tags follow TDengine's rules (unquoted: ASCII letters, digits, '_'; `backquoted`: anything
  printable but '.' and '`'; 192 bytes for a table, 64 for a column or tag). A refusal is
  HTTP 400 with TDengine's code 0x2617 and "Invalid identifier name";
* schemaless writes (tmqgate only): supertables, columns, tags and child tables a produced
  line would create follow the same rule, else the produce fails with INVALID_RECORD.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from .conftest import Broker
from .helpers import wait_until
from .raw import RawConn, one_record_batch
from .tdengine_helpers import TdBroker, td_broker_fixture, unique

INVALID_TOPIC_EXCEPTION = 17
INVALID_RECORD = 87
INVALID_IDENTIFIER = 0x2617

# the finding's names, and a few more Kafka refuses
BAD_TOPIC_NAMES = ["../../etc", "a/b", "a b", "nul\0db", "ünï😀", ".", "..", "tab\there", "line\n", "x" * 250]


def _create_topics(c: RawConn, names: list[str], validate_only: bool = False) -> dict[str, int]:
    body = c.request(19, 7, {
        "topics": [{"name": n, "num_partitions": 1, "replication_factor": 1, "assignments": [], "configs": []}
                   for n in names],
        "timeout_ms": 30000, "validate_only": validate_only})
    return {t["name"]: t["error_code"] for t in body["topics"]}


def _topic_names(c: RawConn) -> set[str]:
    body = c.request(3, 12, {"topics": None, "allow_auto_topic_creation": False,
                             "include_topic_authorized_operations": False})
    return {t["name"] for t in body["topics"]}


def test_create_topics_enforces_kafkas_topic_name_rule(broker: Broker) -> None:
    tag = uuid.uuid4().hex[:10]
    good = [f"ok.{tag}_A-z", f"{tag}" + "y" * (249 - len(tag))]  # legal characters; the longest name
    with RawConn(broker.bootstrap) as c:
        got = _create_topics(c, BAD_TOPIC_NAMES + good)
        assert got == {**{n: INVALID_TOPIC_EXCEPTION for n in BAD_TOPIC_NAMES}, **{n: 0 for n in good}}, got
        # Kafka answers CreateTopics once the controller has them; its broker's metadata cache
        # learns them a moment later (seen missing under CI's load)
        names = wait_until(lambda: _topic_names(c), 30, 0.2, "the created topics listed",
                           ok=lambda listed: set(good) <= listed)
        assert not names & set(BAD_TOPIC_NAMES), names & set(BAD_TOPIC_NAMES)
        c.request(20, 6, {"topics": [{"name": n, "topic_id": b"\0" * 16} for n in good], "timeout_ms": 30000})


# -- SQL and schemaless (tmqgate only) ------------------------------------------------------


@pytest.fixture(scope="module")
def td(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TdBroker]:
    yield from td_broker_fixture(tmp_path_factory, "td-names")


@pytest.fixture(scope="module")
def db(td: TdBroker) -> str:
    name = unique("names")
    td.sql(f"CREATE DATABASE {name} VGROUPS 2")
    td.sql(f"CREATE STABLE {name}.st (ts TIMESTAMP, v INT) TAGS (k INT)")
    return name


def _q(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _refused(td: TdBroker, text: str) -> str:
    status, answer = td.sql_error(text)
    assert (status, answer["code"]) == (400, INVALID_IDENTIFIER), (text, answer)
    assert answer["desc"].startswith("Invalid identifier name"), answer
    return answer["desc"]


def _kafka_topics(td: TdBroker) -> set[str]:
    with RawConn(td.bootstrap) as c:
        return _topic_names(c)


@pytest.mark.tmqgate_only
def test_sql_databases_and_topics_follow_kafkas_rule(td: TdBroker, db: str) -> None:
    for name in BAD_TOPIC_NAMES:
        _refused(td, f"CREATE DATABASE {_q(name)}")
        _refused(td, f"CREATE TOPIC {_q(name)} AS DATABASE {db}")
        _refused(td, f"CREATE TOPIC IF NOT EXISTS {_q(name)} AS STABLE {db}.st")
    for name in ("x" * 65, "dotted.db"):  # TDengine's database rules: 64 bytes, no '.'
        _refused(td, f"CREATE DATABASE {_q(name)}")
    bad = [*BAD_TOPIC_NAMES, "x" * 65, "dotted.db"]
    _refused(td, "CREATE DATABASE ünï")  # unquoted: ASCII only
    assert not {d["name"] for d in td.rows("SHOW DATABASES")} & set(bad)
    assert not {t["topic_name"] for t in td.rows("SHOW TOPICS")} & set(bad)
    assert not _kafka_topics(td) & set(bad)

    # good names, the longest included: each is a Kafka topic clients can see
    tag = uuid.uuid4().hex[:8]
    good_db = f"Db-{tag}" + "d" * (64 - 3 - len(tag))
    good_topic = f"t.{tag}-" + "t" * (192 - 3 - len(tag))
    td.sql(f"CREATE DATABASE {_q(good_db)}")
    td.sql(f"CREATE TOPIC {_q(good_topic)} AS DATABASE {db}")
    assert {good_db, good_topic} <= _kafka_topics(td)
    _refused(td, f"CREATE TOPIC {_q(good_topic + 't')} AS DATABASE {db}")  # 193 bytes


@pytest.mark.tmqgate_only
def test_sql_tables_columns_and_tags_follow_tdengines_rules(td: TdBroker, db: str) -> None:
    for name in ("../../etc", "nul\0t", "dot.t", "back`tick", "x" * 193, "é" * 97):
        _refused(td, f"CREATE STABLE {db}.{_q(name)} (ts TIMESTAMP, v INT) TAGS (k INT)")
        _refused(td, f"CREATE TABLE {db}.{_q(name)} USING {db}.st TAGS (1)")
        _refused(td, f"INSERT INTO {db}.{_q(name)} USING {db}.st TAGS (1) VALUES (1000, 1)")
    for col in ("nul\0c", "dot.c", "y" * 65):
        _refused(td, f"CREATE STABLE {db}.s2 (ts TIMESTAMP, {_q(col)} INT) TAGS (k INT)")
        _refused(td, f"CREATE STABLE {db}.s2 (ts TIMESTAMP, v INT) TAGS ({_q(col)} INT)")
        _refused(td, f"ALTER STABLE {db}.st ADD COLUMN {_q(col)} INT")
        _refused(td, f"ALTER STABLE {db}.st ADD TAG {_q(col)} INT")
    _refused(td, f"CREATE STABLE {db}.ünï (ts TIMESTAMP, v INT) TAGS (k INT)")  # unquoted: ASCII only
    assert [s["stable_name"] for s in td.rows(f"SHOW {db}.STABLES")] == ["st"]
    assert td.rows(f"SHOW {db}.TABLES") == []
    assert [c["field"] for c in td.rows(f"DESCRIBE {db}.st")] == ["ts", "v", "k"]

    # what TDengine accepts in backquotes, up to the limits (counted in UTF-8 bytes)
    long_table, wide_table = "T" * 192, "é" * 96
    for name in ("a/b", "a b", "ünï😀", long_table, wide_table):
        td.sql(f"INSERT INTO {db}.{_q(name)} USING {db}.st TAGS (1) VALUES (1000, 1)")
    td.sql(f"ALTER STABLE {db}.st ADD COLUMN {_q('c' * 64)} INT")
    td.sql(f"ALTER STABLE {db}.st ADD TAG {_q('Tag ü')} INT")
    assert {t["table_name"] for t in td.rows(f"SHOW {db}.TABLES")} == {"a/b", "a b", "ünï😀", long_table,
                                                                       wide_table}
    assert [c["field"] for c in td.rows(f"DESCRIBE {db}.st")] == ["ts", "v", "c" * 64, "k", "Tag ü"]


def _produce_line(td: TdBroker, db: str, text: str, key: bytes | None = None) -> dict:
    with RawConn(td.bootstrap) as c:
        return c.produce(db, 0, one_record_batch(text.encode(), key))


@pytest.mark.tmqgate_only
def test_schemaless_writes_follow_the_same_rule(td: TdBroker) -> None:
    db = unique("sml")
    td.sql(f"CREATE DATABASE {db} VGROUPS 1")
    for text, key in (("m\x01x,t=a f=1i32", None),   # supertable
                      ("m,t\x00k=a f=1i32", None),   # tag
                      ("m,t=a f\x02=1i32", None),    # column
                      ("m,t=a f`=1i32", None),
                      ("m" * 193 + ",t=a f=1i32", None),
                      ("m,t=a f=1i32", b"nul\0t"),   # child table named by the record key
                      ("m,t=a f=1i32", b"a.b"),
                      ("m,t=a f=1i32", b"x" * 193)):
        p = _produce_line(td, db, text, key)
        assert (p["error_code"], p["base_offset"]) == (INVALID_RECORD, -1), (text, key, p)
        assert "Invalid identifier name" in (p["error_message"] or ""), p
    assert td.rows(f"SHOW {db}.STABLES") == [] and td.rows(f"SHOW {db}.TABLES") == []

    p = _produce_line(td, db, "m.x,t=a f=1i32", b"a b")  # '.' becomes '_', as TDengine's writer does
    assert p["error_code"] == 0, p
    assert [s["stable_name"] for s in td.rows(f"SHOW {db}.STABLES")] == ["m_x"]
    assert [t["table_name"] for t in td.rows(f"SHOW {db}.TABLES")] == ["a b"]


@pytest.mark.tmqgate_only
def test_create_topics_of_tdengine_topics_take_kafka_names(td: TdBroker, db: str) -> None:
    """CreateTopics with `tmq.as` makes a TDengine topic: any legal Kafka name up to TDengine's
    192 bytes ('my-topic' included, which unquoted SQL could not say); longer, or illegal for
    Kafka, is INVALID_TOPIC_EXCEPTION as for any topic."""
    tag = uuid.uuid4().hex[:8]
    ok, too_long = f"tmq-{tag}.x", f"tmq-{tag}" + "z" * (193 - 4 - len(tag))
    config = [{"name": "tmq.as", "value": f"DATABASE {db}"}]
    with RawConn(td.bootstrap) as c:
        body = c.request(19, 7, {
            "topics": [{"name": n, "num_partitions": 2, "replication_factor": 1, "assignments": [],
                        "configs": config} for n in (ok, too_long, "a b")],
            "timeout_ms": 30000, "validate_only": False})
        got = {t["name"]: t["error_code"] for t in body["topics"]}
        assert got == {ok: 0, too_long: INVALID_TOPIC_EXCEPTION, "a b": INVALID_TOPIC_EXCEPTION}, body
        assert ok in _topic_names(c) and too_long not in _topic_names(c)
    assert ok in {t["topic_name"] for t in td.rows("SHOW TOPICS")}
