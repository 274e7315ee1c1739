"""The Apache Kafka 4.x command-line tools against the broker, checked the way a user reads
their output: kafka-topics, kafka-configs, kafka-console-producer/-consumer,
kafka-get-offsets, kafka-producer-perf-test and kafka-consumer-perf-test.

Each tool is a fresh JVM (1-3 s), so every test uses one topic and as few invocations as
its assertions need.  Consumer-group tooling is in `test_cli_groups.py`.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

from .cli_helpers import (
    client_errors,
    consumer_perf_stats,
    parse_config_describe,
    parse_get_offsets,
    parse_table,
    parse_topic_describe,
    produce,
    producer_perf_sent,
    require_tools,
    run,
)
from .conftest import Broker
from .helpers import unique_topic, wait_until

TIMEOUT = 30


@pytest.fixture(autouse=True)
def _tools_installed() -> None:
    require_tools()


@pytest.fixture
def admin(broker: Broker) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap})


def _new_topic(admin: AdminClient, prefix: str, partitions: int,
               config: dict[str, str] | None = None) -> str:
    name = unique_topic(prefix)
    admin.create_topics([NewTopic(name, partitions, 1, config=config or {})])[name].result(TIMEOUT)
    wait_until(lambda: admin.list_topics(name, timeout=10).topics[name], TIMEOUT, 0.5, f"{name} in metadata",
               ok=lambda t: t.error is None and len(t.partitions) == partitions)
    return name


def _drop_topic(admin: AdminClient, name: str) -> None:
    try:
        admin.delete_topics([name])[name].result(TIMEOUT)
    except Exception:  # noqa: BLE001 - cleanup only; the test may have deleted it
        pass


@pytest.fixture
def topic_factory(admin: AdminClient) -> Iterator:
    made: list[str] = []

    def make(prefix: str, partitions: int, config: dict[str, str] | None = None) -> str:
        name = _new_topic(admin, prefix, partitions, config)
        made.append(name)
        return name

    yield make
    for name in made:
        _drop_topic(admin, name)


# --------------------------------------------------------------------------- kafka-topics


def test_kafka_topics_create_list_describe_alter_delete(broker: Broker, admin: AdminClient) -> None:
    b = broker.bootstrap
    topic = unique_topic("cli-topics")
    broker_ids = set(admin.list_topics(timeout=TIMEOUT).brokers)
    try:
        r = run("kafka-topics", "--bootstrap-server", b, "--create", "--topic", topic,
                "--partitions", "3", "--replication-factor", "1", "--config", "retention.ms=3600000")
        assert f"Created topic {topic}." in r.stdout, r.describe()

        listed = run("kafka-topics", "--bootstrap-server", b, "--list")
        assert topic in listed.lines, listed.describe()

        def describe() -> tuple[str, object]:
            out = run("kafka-topics", "--bootstrap-server", b, "--describe", "--topic", topic)
            return out.stdout, parse_topic_describe(out.stdout, topic)

        text, d = describe()
        assert d.summary["PartitionCount"] == "3", text
        assert d.summary["ReplicationFactor"] == "1", text
        assert d.summary.get("TopicId") not in (None, "", "AAAAAAAAAAAAAAAAAAAAAA"), text
        assert d.configs.get("retention.ms") == "3600000", text
        assert [p["Partition"] for p in d.partitions] == ["0", "1", "2"], text
        for p in d.partitions:
            assert int(p["Leader"]) in broker_ids, (broker_ids, text)
            assert p["Replicas"] == p["Leader"] and p["Isr"] == p["Leader"], text

        r = run("kafka-topics", "--bootstrap-server", b, "--alter", "--topic", topic, "--partitions", "5")
        assert "Error" not in r.stdout + r.stderr, r.describe()
        text, d = wait_until(describe, TIMEOUT, 0.5, "PartitionCount: 5",
                             ok=lambda td: td[1].summary["PartitionCount"] == "5",
                             show=lambda td: td[0])
        assert [p["Partition"] for p in d.partitions] == ["0", "1", "2", "3", "4"], text
        assert all(int(p["Leader"]) in broker_ids for p in d.partitions), text
        assert d.configs.get("retention.ms") == "3600000", text

        # a duplicate create is refused the way Kafka refuses it
        dup = run("kafka-topics", "--bootstrap-server", b, "--create", "--topic", topic,
                  "--partitions", "1", check=False)
        assert f"Topic '{topic}' already exists." in dup.stdout + dup.stderr, dup.describe()

        run("kafka-topics", "--bootstrap-server", b, "--delete", "--topic", topic)
        wait_until(lambda: run("kafka-topics", "--bootstrap-server", b, "--list"), TIMEOUT, 0.5,
                   f"{topic} gone from --list", ok=lambda r: topic not in r.lines,
                   show=lambda r: r.stdout)
    finally:
        _drop_topic(admin, topic)


# --------------------------------------------------------------------------- kafka-configs


def test_kafka_configs_describe_add_delete(broker: Broker, topic_factory) -> None:
    b = broker.bootstrap
    topic = topic_factory("cli-configs", 2, {"retention.ms": "3600000"})
    entity = ("--entity-type", "topics", "--entity-name", topic)

    def describe() -> tuple[str, dict[str, str]]:
        out = run("kafka-configs", "--bootstrap-server", b, "--describe", *entity)
        return out.stdout, parse_config_describe(out.stdout)

    text, cfg = describe()
    assert f"Dynamic configs for topic {topic} are:" in text, text
    assert cfg == {"retention.ms": "3600000"}, text

    r = run("kafka-configs", "--bootstrap-server", b, "--alter", *entity,
            "--add-config", "retention.ms=7200000,retention.bytes=1048576,max.message.bytes=2000000")
    assert f"Completed updating config for topic {topic}." in r.stdout, r.describe()
    want = {"retention.ms": "7200000", "retention.bytes": "1048576", "max.message.bytes": "2000000"}
    wait_until(describe, TIMEOUT, 0.5, f"configs {want}", ok=lambda tc: tc[1] == want, show=lambda tc: tc[0])

    r = run("kafka-configs", "--bootstrap-server", b, "--alter", *entity,
            "--delete-config", "retention.bytes,max.message.bytes")
    assert f"Completed updating config for topic {topic}." in r.stdout, r.describe()
    wait_until(describe, TIMEOUT, 0.5, "only retention.ms=7200000 left",
               ok=lambda tc: tc[1] == {"retention.ms": "7200000"}, show=lambda tc: tc[0])

    # --all shows the defaults the deleted overrides fell back to
    out = run("kafka-configs", "--bootstrap-server", b, "--describe", "--all", *entity)
    every = parse_config_describe(out.stdout)
    assert f"All configs for topic {topic} are:" in out.stdout, out.describe()
    assert every.get("retention.ms") == "7200000", out.stdout
    assert every.get("retention.bytes") == "-1", out.stdout
    assert every.get("max.message.bytes") == "1048588", out.stdout
    assert every.get("cleanup.policy") == "delete", out.stdout


# --------------------------------------------------------------------------- console producer / consumer

# header list | key : value  (custom separators, so values may contain tabs-free text with colons)
CONSOLE_LINES = [
    ("trace=abc-1,src=cli", "k1", "hello world"),
    ("trace=abc-2", "k2", "value:with:colons"),
    ("a=1,a=2,b=", "k3", '{"json": true, "n": 3}'),
    ("h=x", "k4", ""),
    ("h=y", "", "empty key"),
]


def _consumer_line(headers: str, key: str, value: str) -> str:
    # DefaultMessageFormatter: headers as k:v joined by ",", then key, then value, each
    # separated by key.separator (a tab by default)
    return "\t".join([headers.replace("=", ":"), key, value])


def test_console_producer_consumer_keys_headers_and_group_progress(broker: Broker, topic_factory) -> None:
    b = broker.bootstrap
    topic = topic_factory("cli-console", 1)
    group = unique_topic("cli-console-g")
    stdin = "".join(f"{h}|{k}:{v}\n" for h, k, v in CONSOLE_LINES)
    prod = run("kafka-console-producer", "--bootstrap-server", b, "--topic", topic,
        "--reader-property", "parse.key=true", "--reader-property", "key.separator=:",
        "--reader-property", "parse.headers=true", "--reader-property", "headers.delimiter=|",
        "--reader-property", "headers.separator=,", "--reader-property", "headers.key.separator==",
        "--command-property", "acks=all", input=stdin)
    assert not client_errors(prod.stderr), prod.describe()
    expected = [_consumer_line(*line) for line in CONSOLE_LINES]

    def consume(n: int):
        return run("kafka-console-consumer", "--bootstrap-server", b, "--topic", topic, "--group", group,
                   "--from-beginning", "--max-messages", str(n), "--timeout-ms", "30000",
                   "--formatter-property", "print.key=true", "--formatter-property", "print.headers=true")

    first = consume(3)
    assert first.stdout.split("\n")[:-1] == expected[:3], first.describe()
    assert "Processed a total of 3 messages" in first.stderr, first.describe()
    assert not client_errors(first.stderr), first.describe()

    # the group committed exactly the 3 records the consumer processed
    d = run("kafka-consumer-groups", "--bootstrap-server", b, "--describe", "--group", group)
    rows = [r for r in parse_table(d.stdout) if r["TOPIC"] == topic]
    assert [(r["PARTITION"], r["CURRENT-OFFSET"], r["LOG-END-OFFSET"], r["LAG"]) for r in rows] \
        == [("0", "3", "5", "2")], d.describe()

    # the same group resumes where it left off: the remaining two, nothing repeated
    second = consume(2)
    assert second.stdout.split("\n")[:-1] == expected[3:], second.describe()
    assert not client_errors(second.stderr), second.describe()


# --------------------------------------------------------------------------- kafka-get-offsets


def test_kafka_get_offsets_earliest_latest(broker: Broker, admin: AdminClient, topic_factory) -> None:
    b = broker.bootstrap
    topic = topic_factory("cli-offsets", 3)
    base = int(time.time() * 1000) - 600_000  # ten minutes ago: well inside retention
    # partition 0: timestamps rising 1 s apart; partition 1: falling (max timestamp at offset 0)
    produce(b, topic, [(0, None, b"a%d" % i, base + 1000 * i) for i in range(5)]
            + [(1, None, b"b%d" % i, base + 10_000 - 1000 * i) for i in range(2)])
    # move partition 0's log start to 2, so earliest differs from 0 somewhere
    res = admin.delete_records([TopicPartition(topic, 0, 2)])
    for fut in res.values():
        fut.result(TIMEOUT)

    latest = run("kafka-get-offsets", "--bootstrap-server", b, "--topic", topic, "--time", "-1")
    assert parse_get_offsets(latest.stdout) == {(topic, 0): 5, (topic, 1): 2, (topic, 2): 0}, latest.describe()
    earliest = run("kafka-get-offsets", "--bootstrap-server", b, "--topic", topic, "--time", "-2")
    assert parse_get_offsets(earliest.stdout) == {(topic, 0): 2, (topic, 1): 0, (topic, 2): 0}, earliest.describe()
    # a partition filter; the default --time is latest
    some = run("kafka-get-offsets", "--bootstrap-server", b, "--topic-partitions", f"{topic}:0-2")
    assert parse_get_offsets(some.stdout) == {(topic, 0): 5, (topic, 1): 2}, some.describe()
    # by timestamp: the first offset whose timestamp is >= the given one (none in empty partition 2)
    by_ts = run("kafka-get-offsets", "--bootstrap-server", b, "--topic", topic, "--time", str(base + 2500))
    assert parse_get_offsets(by_ts.stdout) == {(topic, 0): 3, (topic, 1): 0}, by_ts.describe()
    # -3 = max-timestamp: the offset of the record with the largest timestamp
    max_ts = run("kafka-get-offsets", "--bootstrap-server", b, "--topic", topic, "--time", "-3")
    assert parse_get_offsets(max_ts.stdout) == {(topic, 0): 4, (topic, 1): 0}, max_ts.describe()


# --------------------------------------------------------------------------- perf tools

PERF_RECORDS = 100_000


def test_producer_and_consumer_perf_test_100k(broker: Broker, admin: AdminClient, topic_factory) -> None:
    b = broker.bootstrap
    topic = topic_factory("cli-perf", 4)
    prod = run("kafka-producer-perf-test", "--bootstrap-server", b, "--topic", topic,
               "--num-records", str(PERF_RECORDS), "--record-size", "100", "--throughput", "-1",
               "--command-property", "acks=all", "linger.ms=5", timeout=180)
    assert producer_perf_sent(prod.stdout) == PERF_RECORDS, prod.describe()
    assert not client_errors(prod.stderr), prod.describe()

    # the log holds exactly what was sent
    ends = admin.list_offsets({TopicPartition(topic, p): OffsetSpec.latest() for p in range(4)})
    assert sum(f.result(TIMEOUT).offset for f in ends.values()) == PERF_RECORDS

    cons = run("kafka-consumer-perf-test", "--bootstrap-server", b, "--topic", topic,
               "--num-records", str(PERF_RECORDS), "--timeout", "30000",
               "--group", unique_topic("cli-perf-g"), timeout=180)
    stats = consumer_perf_stats(cons.stdout)
    assert stats.get("data.consumed.in.nMsg") == str(PERF_RECORDS), cons.describe()
    assert not client_errors(cons.stderr), cons.describe()

