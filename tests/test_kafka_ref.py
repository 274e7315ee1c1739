"""The reference Apache Kafka broker (compat_tests/kafka_ref.py) starts and serves clients.

Skipped when the Kafka jars are not installed (run scripts/install_java.sh); failed then under
CI (compat_tests/helpers.missing_dependency).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic

# compat_tests is not an installed package: make the repo root importable under plain `pytest` too
_ROOT = str(Path(__file__).resolve().parents[1])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from compat_tests import cli_helpers, kafka_ref  # noqa: E402

pytestmark = [
    # kafka-python loads its JSON schemas through a deprecated importlib API: noise only
    pytest.mark.filterwarnings("ignore:read_text is deprecated:DeprecationWarning"),
    pytest.mark.filterwarnings("ignore:open_text is deprecated:DeprecationWarning"),
]


@pytest.fixture(scope="module", autouse=True)
def _jars() -> None:
    kafka_ref.require_jars()


@pytest.fixture(scope="module")
def ref_kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[kafka_ref.RefKafka]:
    with kafka_ref.start_reference_kafka(tmp_path_factory.mktemp("kafka-ref")) as kafka:
        yield kafka
    assert not kafka.alive()


def test_start_layout(ref_kafka: kafka_ref.RefKafka) -> None:
    assert ref_kafka.alive()
    host, _, port = ref_kafka.bootstrap.rpartition(":")
    assert host == "127.0.0.1" and int(port) == ref_kafka.port
    assert ref_kafka.controller_port != ref_kafka.port
    assert (ref_kafka.data_dir / "meta.properties").is_file()
    assert "Kafka Server started" in ref_kafka.log_path.read_text(errors="replace")
    assert kafka_ref.api_versions_ok("127.0.0.1", ref_kafka.port)


def test_produce_consume_round_trip(ref_kafka: kafka_ref.RefKafka) -> None:
    topic = "ref-roundtrip"
    admin = KafkaAdminClient(bootstrap_servers=ref_kafka.bootstrap, request_timeout_ms=30000)
    try:
        admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])
    finally:
        admin.close()

    producer = KafkaProducer(bootstrap_servers=ref_kafka.bootstrap, acks="all", linger_ms=0)
    try:
        metas = [producer.send(topic, key=f"k{i}".encode(), value=f"value-{i}".encode()).get(timeout=30)
                 for i in range(10)]
    finally:
        producer.close()
    assert [m.offset for m in metas] == list(range(10))
    assert {m.partition for m in metas} == {0}

    tp = TopicPartition(topic, 0)
    consumer = KafkaConsumer(bootstrap_servers=ref_kafka.bootstrap, enable_auto_commit=False)
    try:
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        records = []
        deadline = time.monotonic() + 30
        while len(records) < 10 and time.monotonic() < deadline:
            for batch in consumer.poll(timeout_ms=500).values():
                records.extend(batch)
        assert consumer.end_offsets([tp]) == {tp: 10}
    finally:
        consumer.close()
    assert [(r.offset, r.key, r.value) for r in records] == [
        (i, f"k{i}".encode(), f"value-{i}".encode()) for i in range(10)
    ]


def test_kafka_topics_cli_lists_topic(ref_kafka: kafka_ref.RefKafka) -> None:
    topic = "ref-cli-listed"
    admin = KafkaAdminClient(bootstrap_servers=ref_kafka.bootstrap, request_timeout_ms=30000)
    try:
        admin.create_topics([NewTopic(topic, num_partitions=2, replication_factor=1)])
    finally:
        admin.close()
    result = kafka_ref.run_tool("kafka-topics", "--bootstrap-server", ref_kafka.bootstrap, "--list")
    assert topic in result.stdout.split()


def test_the_tools_map_the_class_data_archive_made_for_this_checkout(
        ref_kafka: kafka_ref.RefKafka, monkeypatch: pytest.MonkeyPatch) -> None:
    """A tool run makes (first time) and then maps its AppCDS archive: -Xshare:on stops the JVM
    where it cannot. An archive keyed by the jars alone, made by another checkout whose jars had
    the same sizes and times, was never mapped here (silently), and every tool and test broker
    started in twice the CPU."""
    monkeypatch.delenv("KAFKA_CLI_NO_CDS", raising=False)
    listed = cli_helpers.run("kafka-topics", "--bootstrap-server", ref_kafka.bootstrap, "--list")
    opts, dumping, _ = kafka_ref.cds_opts("kafka-topics")
    assert dumping is None and "-XX:SharedArchiveFile=" in opts, "no archive after a successful run"
    strict = opts.replace("-Xshare:auto", "-Xshare:on").replace("-Xlog:disable", "")
    env = dict(os.environ, KAFKA_HEAP_OPTS=cli_helpers.TOOL_HEAP, KAFKA_OPTS=strict)
    again = subprocess.run([str(kafka_ref.tool("kafka-topics")), "--bootstrap-server", ref_kafka.bootstrap,
                            "--list"], env=env, capture_output=True, text=True, timeout=60)
    assert again.returncode == 0, again.stdout + again.stderr
    assert again.stdout.split() == listed.stdout.split()
