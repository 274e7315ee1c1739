"""Query topics from Kafka tooling (issue 13).

What the Kafka 4.3 tools let through, on both brokers:
* `kafka-topics --create --config tmq.as=…` is refused by the tool ("Unknown topic config
  name: tmq.as", client-side, before the broker is asked);
* `kafka-configs --alter --entity-type topics --add-config tmq.as=…` on a topic that does not
  exist is refused by the broker with INVALID_CONFIG, "Unknown topic config name: tmq.as" (Kafka
  validates the configs before it looks the topic up; tmqgate does the same).
The route that works is an admin client's CreateTopics with the `tmq.as` config (the Java
AdminClient, kafka-python, confluent-kafka, …; tmqgate only): partitions and replication
factor -1 (Kafka's "broker default") take the database's vnodes; DescribeConfigs, and so
`kafka-topics --describe` and `kafka-configs --describe`, show the SELECT as given; an error in
it names a position counted in that text.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from .cli_helpers import parse_config_describe, parse_get_offsets, require_tools, run
from .conftest import Broker
from .helpers import unique_topic
from .raw import RawConn
from .tdengine_helpers import TdBroker, td_broker_fixture, unique

INVALID_CONFIG = 40
TOPIC = 2


@pytest.fixture(scope="module")
def td(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TdBroker]:
    yield from td_broker_fixture(tmp_path_factory, "td-query-tools")


@pytest.fixture(scope="module")
def db(td: TdBroker) -> str:
    name = unique("qt")
    td.sql(f"CREATE DATABASE {name} VGROUPS 3")
    td.sql(f"CREATE STABLE {name}.meters (ts TIMESTAMP, current FLOAT, voltage INT) TAGS (groupid INT)")
    return name


def _create(c: RawConn, name: str, configs: dict[str, str], partitions: int = -1,
            replication: int = -1) -> dict:
    body = c.request(19, 7, {
        "topics": [{"name": name, "num_partitions": partitions, "replication_factor": replication,
                    "assignments": [], "configs": [{"name": k, "value": v} for k, v in configs.items()]}],
        "timeout_ms": 30000, "validate_only": False})
    [result] = body["topics"]
    return result


def _describe_configs(c: RawConn, name: str) -> dict[str, str]:
    body = c.request(32, 4, {"resources": [{"resource_type": TOPIC, "resource_name": name,
                                            "configuration_keys": None}],
                             "include_synonyms": False, "include_documentation": False})
    [result] = body["results"]
    assert result["error_code"] == 0, result
    return {e["name"]: e["value"] for e in result["configs"]}


@pytest.mark.tmqgate_only
def test_create_topics_with_defaults_makes_a_query_topic_over_the_vnodes(td: TdBroker, db: str) -> None:
    """partitions -1 and replication factor -1, as Kafka's admin clients send when the user
    gives neither: the topic has the database's 3 vnodes, replication factor 1."""
    name = unique_topic("q-default")
    query = f"SELECT ts, current FROM {db}.meters WHERE voltage > 220"
    with RawConn(td.bootstrap) as c:
        result = _create(c, name, {"tmq.as": query})
        assert (result["error_code"], result["num_partitions"], result["replication_factor"]) == (0, 3, 1), result
        meta = c.request(3, 12, {"topics": [{"name": name, "topic_id": bytes(16)}],
                                 "allow_auto_topic_creation": False, "include_topic_authorized_operations": False})
        assert [p["partition_index"] for p in meta["topics"][0]["partitions"]] == [0, 1, 2]


@pytest.mark.tmqgate_only
def test_describe_configs_shows_the_select_as_given(td: TdBroker, db: str) -> None:
    name = unique_topic("q-describe")
    query = "SELECT ts, current FROM meters WHERE voltage > 220"
    with RawConn(td.bootstrap) as c:
        assert _create(c, name, {"tmq.as": query, "tmq.db": db})["error_code"] == 0
        configs = _describe_configs(c, name)
    assert (configs["tmq.as"], configs["tmq.db"]) == (query, db)
    assert "tmq.meta" not in configs
    # the same through SQL: the query after AS
    sql_topic = unique("q_sql")
    td.sql(f"CREATE TOPIC {sql_topic} WITH META AS STABLE {db}.meters")
    with RawConn(td.bootstrap) as c:
        configs = _describe_configs(c, sql_topic)
    assert (configs["tmq.as"], configs["tmq.db"], configs["tmq.meta"]) == (f"STABLE {db}.meters", db, "with")


@pytest.mark.tmqgate_only
def test_an_error_in_tmq_as_names_its_position_in_the_text_given(td: TdBroker, db: str) -> None:
    query = f"SELECT ts FROM {db}.meters WHERE WHERE"
    with RawConn(td.bootstrap) as c:
        result = _create(c, unique_topic("q-bad"), {"tmq.as": query})
    assert result["error_code"] == INVALID_CONFIG, result
    position = query.index("WHERE WHERE") + len("WHERE ")
    assert result["error_message"].startswith("tmq.as: syntax error near"), result
    assert f"at position {position}:" in result["error_message"], (position, result)


@pytest.mark.tmqgate_only
def test_kafka_tools_describe_the_query_topic(td: TdBroker, db: str) -> None:
    require_tools()
    name = unique_topic("q-tools")
    query = f"SELECT ts, current FROM {db}.meters WHERE voltage > 220"
    with RawConn(td.bootstrap) as c:
        assert _create(c, name, {"tmq.as": query})["error_code"] == 0
    topics = run("kafka-topics", "--bootstrap-server", td.bootstrap, "--describe", "--topic", name)
    assert f"tmq.as={query}" in topics.stdout, topics.describe()
    assert "PartitionCount: 3" in topics.stdout, topics.describe()
    configs = run("kafka-configs", "--bootstrap-server", td.bootstrap, "--describe",
                  "--entity-type", "topics", "--entity-name", name)
    got = parse_config_describe(configs.stdout)
    assert (got.get("tmq.as"), got.get("tmq.db")) == (query, db), configs.describe()


def test_kafka_topics_and_kafka_configs_refuse_tmq_as_client_side(broker: Broker) -> None:
    """What the README says the tools cannot do, as they do it against Apache Kafka too."""
    require_tools()
    name = unique_topic("q-refused")
    created = run("kafka-topics", "--bootstrap-server", broker.bootstrap, "--create", "--topic", name,
                  "--config", "tmq.as=SELECT ts FROM power.meters", check=False)
    assert created.returncode != 0, created.describe()
    assert "Unknown topic config name: tmq.as" in created.stdout + created.stderr, created.describe()
    altered = run("kafka-configs", "--bootstrap-server", broker.bootstrap, "--alter", "--entity-type", "topics",
                  "--entity-name", name, "--add-config", "tmq.as=SELECT ts FROM power.meters", check=False)
    assert altered.returncode != 0, altered.describe()
    assert ("InvalidConfigurationException: Unknown topic config name: tmq.as"
            in altered.stdout + altered.stderr), altered.describe()
    listed = run("kafka-topics", "--bootstrap-server", broker.bootstrap, "--list")
    assert name not in listed.lines


# -- kafka-console-producer without --sync: what a user sees when a record is refused ----------


def _end_offset(bootstrap: str, topic: str) -> int:
    got = run("kafka-get-offsets", "--bootstrap-server", bootstrap, "--topic", topic, "--partitions", "0")
    return parse_get_offsets(got.stdout)[(topic, 0)]


def test_console_producer_without_sync_is_silent_about_a_refused_record(broker: Broker) -> None:
    """The README's note, as Apache Kafka's tool behaves: without --sync a record the broker
    refuses (here one over the topic's max.message.bytes: MESSAGE_TOO_LARGE) is dropped
    without a word — nothing on stdout or stderr, exit 0, nothing stored. With --sync the
    same line ends the tool with exit 1 and RecordTooLargeException on stderr.
    (Several lines refused in one batch can also leave the tool waiting forever, on both
    brokers, as the producer splits the batch; so this sends one line.)"""
    require_tools()
    topic = unique_topic("console-refused")
    run("kafka-topics", "--bootstrap-server", broker.bootstrap, "--create", "--topic", topic,
        "--partitions", "1", "--config", "max.message.bytes=200")
    run("kafka-console-producer", "--bootstrap-server", broker.bootstrap, "--topic", topic, input="small\n")
    big = "x" * 400 + "\n"
    prod = run("kafka-console-producer", "--bootstrap-server", broker.bootstrap, "--topic", topic, input=big)
    assert (prod.returncode, prod.stdout.strip(), prod.stderr.strip()) == (0, "", ""), prod.describe()
    assert _end_offset(broker.bootstrap, topic) == 1
    sync = run("kafka-console-producer", "--bootstrap-server", broker.bootstrap, "--topic", topic, "--sync",
               input=big, check=False)
    assert sync.returncode == 1, sync.describe()
    assert "org.apache.kafka.common.errors.RecordTooLargeException" in sync.stderr, sync.describe()
    assert _end_offset(broker.bootstrap, topic) == 1
