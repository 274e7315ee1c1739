"""Compacted topics as Apache Kafka has them (issue 15, point 1).

``cleanup.policy`` takes ``compact``, ``delete`` or both, validated and shown as Kafka's
LogConfig does; a record without a key produced to a topic whose policy includes compact is
refused (INVALID_RECORD, every keyless record named in record_errors, Kafka's LogValidator
messages) and the batch is not stored.
"""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

from tmqgate.protocol.records import build_batch

from .conftest import Broker
from .helpers import unique_topic
from .raw import RawConn

TIMEOUT = 30
INVALID_RECORD = 87


def _admin(broker: Broker) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap})


def _create(admin: AdminClient, config: dict[str, str], partitions: int = 1) -> str:
    name = unique_topic("compact")
    admin.create_topics([NewTopic(name, partitions, 1, config=config)])[name].result(TIMEOUT)
    return name


def _described(admin: AdminClient, topic: str, key: str) -> str:
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    configs = admin.describe_configs([resource])[resource].result(TIMEOUT)
    return str(configs[key].value)


@pytest.mark.parametrize(("given", "shown"), [
    ("compact", "compact"),
    ("delete", "delete"),
    ("compact,delete", "compact,delete"),
    ("delete, compact", "delete,compact"),
    ("compact,compact", "compact"),
    ("", ""),
])
def test_cleanup_policy_accepted_and_shown(broker: Broker, given: str, shown: str) -> None:
    admin = _admin(broker)
    topic = _create(admin, {"cleanup.policy": given})
    assert _described(admin, topic, "cleanup.policy") == shown


@pytest.mark.parametrize(("given", "message"), [
    ("compact,tidy", "Invalid value tidy for configuration cleanup.policy: String must be one of: compact, delete"),
    ("compact,", "Configuration 'cleanup.policy' values must not be empty."),
])
def test_cleanup_policy_refused(broker: Broker, given: str, message: str) -> None:
    admin = _admin(broker)
    name = unique_topic("compact-bad")
    with pytest.raises(KafkaException) as info:
        admin.create_topics([NewTopic(name, 1, 1, config={"cleanup.policy": given})])[name].result(TIMEOUT)
    err = info.value.args[0]
    assert err.code() == KafkaError.INVALID_CONFIG, err
    assert err.str() == message, err


def test_cleanup_policy_altered_both_ways(broker: Broker) -> None:
    admin = _admin(broker)
    topic = _create(admin, {})
    assert _described(admin, topic, "cleanup.policy") == "delete"
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND)])
    admin.incremental_alter_configs([resource])[resource].result(TIMEOUT)
    assert _described(admin, topic, "cleanup.policy") == "delete,compact"
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([resource])[resource].result(TIMEOUT)
    assert _described(admin, topic, "cleanup.policy") == "compact"


@pytest.mark.parametrize("policy", ["compact", "delete,compact"])
def test_keyless_record_refused_on_compacted_topic(broker: Broker, policy: str) -> None:
    admin = _admin(broker)
    topic = _create(admin, {"cleanup.policy": policy})
    batch = build_batch([(b"k0", b"v0"), (None, b"no key"), (b"k2", b"v2"), (None, b"none either")])
    expected = f"Compacted topic cannot accept message without key in topic partition {topic}-0"
    with RawConn(broker.bootstrap) as conn:
        p = conn.produce(topic, 0, batch)
        assert p["error_code"] == INVALID_RECORD, p
        assert p["base_offset"] == -1, p
        assert [(e["batch_index"], e["batch_index_error_message"]) for e in p["record_errors"]] == [
            (1, expected), (3, expected)]
        assert p["error_message"] == (
            "One or more records have been rejected due to 2 record errors in total, and only showing the "
            f"first three errors at most: [RecordError(batchIndex=1, message='{expected}'), "
            f"RecordError(batchIndex=3, message='{expected}')]")
        # Nothing of the batch is stored: a keyed batch afterwards takes offset 0.
        p = conn.produce(topic, 0, build_batch([(b"k", b"v")]))
        assert (p["error_code"], p["base_offset"]) == (0, 0), p


def test_keyless_record_accepted_on_delete_topic(broker: Broker) -> None:
    admin = _admin(broker)
    topic = _create(admin, {"cleanup.policy": "delete"})
    with RawConn(broker.bootstrap) as conn:
        p = conn.produce(topic, 0, build_batch([(None, b"no key")]))
        assert (p["error_code"], p["base_offset"], p["record_errors"]) == (0, 0, []), p
