"""controller_mutation_rate (KIP-599) as a user meets it: `kafka-configs --alter --add-config
controller_mutation_rate=R` on a client id, then CreateTopics, CreatePartitions and DeleteTopics
bursts over raw Kafka protocol.

The quota is a token bucket per client of R x 11 windows x 1 s (Kafka's controller.quota.window.*
defaults) partition mutations, refilled at R per second; a topic is refused while the bucket is
below zero. With R = 5 the bucket holds 55: three topics of 20 partitions pass (55 -> -5), the
fourth is refused with THROTTLING_QUOTA_EXCEEDED (89) and the answer's throttle_time_ms says
when the bucket is back at zero (1 s). Old request versions are never refused, only throttled.
Every quota is set on a client id of the test's own (the session broker is shared).
"""

from __future__ import annotations

import time
import uuid

import pytest

from .brokers import BrokerProcess
from .cli_helpers import require_tools, run
from .conftest import Broker
from .helpers import unique_topic, wait_until
from .raw import RawConn
from .test_client_quotas import MATCH_EXACT, describe, quotas_of

CREATE_TOPICS, DELETE_TOPICS, CREATE_PARTITIONS = 19, 20, 37
THROTTLING_QUOTA_EXCEEDED = 89
RATE = 5.0  # bucket of 55 partition mutations
PARTITIONS = 20


@pytest.fixture
def tools() -> None:
    require_tools()


def _limited_client(bootstrap: str, prefix: str) -> str:
    """A new client id with controller_mutation_rate = RATE, set with kafka-configs."""
    client = f"{prefix}-{uuid.uuid4().hex[:10]}"
    run("kafka-configs", "--bootstrap-server", bootstrap, "--alter", "--entity-type", "clients",
        "--entity-name", client, "--add-config", f"controller_mutation_rate={RATE}")
    wait_until(lambda: quotas_of(describe(bootstrap, [("client-id", MATCH_EXACT, client)])), 15,
               what=f"the quota of {client}",
               ok=lambda q: q == {(("client-id", client),): {"controller_mutation_rate": RATE}})
    time.sleep(0.5)  # Kafka's broker applies the quota as it publishes the metadata image
    return client


def _create(bootstrap: str, client: str, names: list[str], version: int = 7,
            partitions: int = PARTITIONS) -> tuple[list[tuple[str, int, str | None]], int]:
    """CreateTopics as `client`: ([(name, error code, message)], throttle_time_ms)."""
    with RawConn(bootstrap, client_id=client) as conn:
        body = conn.request(CREATE_TOPICS, version, {"topics": [
            {"name": n, "num_partitions": partitions, "replication_factor": 1, "assignments": [], "configs": []}
            for n in names], "timeout_ms": 30000, "validate_only": False})
    return [(t["name"], t["error_code"], t["error_message"]) for t in body["topics"]], body["throttle_time_ms"]


def _partitions(bootstrap: str, names: list[str]) -> dict[str, int]:
    with RawConn(bootstrap) as conn:
        body = conn.request(3, 12, {"topics": [{"name": n, "topic_id": bytes(16)} for n in names],
                                    "allow_auto_topic_creation": False, "include_topic_authorized_operations": False})
    return {t["name"]: len(t["partitions"]) for t in body["topics"] if t["error_code"] == 0}


def _wait_created(bootstrap: str, names: list[str], partitions: int) -> None:
    wait_until(lambda: _partitions(bootstrap, names), 15, what=f"{names} with {partitions} partitions",
               ok=lambda got: got == dict.fromkeys(names, partitions))


def test_create_topics_over_the_quota_get_89(broker: Broker, tools: None) -> None:
    b = broker.bootstrap
    client = _limited_client(b, "cmq-create")
    names = [unique_topic("cmq") for _ in range(4)]
    results, throttle = _create(b, client, names)
    # three pass (the bucket is not below zero before each), the fourth is refused
    assert results == [(n, 0, None) for n in names[:3]] + [(names[3], THROTTLING_QUOTA_EXCEEDED, None)]
    assert throttle > 0
    first_throttle = throttle
    _wait_created(b, names[:3], PARTITIONS)
    assert _partitions(b, [names[3]]) == {}
    # another client id has no quota: the same burst passes, unthrottled
    others = [unique_topic("cmq-other") for _ in range(4)]
    results, throttle = _create(b, f"cmq-free-{uuid.uuid4().hex[:8]}", others)
    assert results == [(n, 0, None) for n in others] and throttle == 0
    # after the throttle time (as a client backs off, KIP-219) the refused topic is created
    time.sleep(first_throttle / 1000)
    results, _ = _create(b, client, [names[3]])
    assert results == [(names[3], 0, None)]
    _wait_created(b, [names[3]], PARTITIONS)


def test_create_topics_v5_is_throttled_not_refused(broker: Broker, tools: None) -> None:
    """Before CreateTopics v6 the quota is permissive: every topic is created and the answer is
    throttled once the bucket is below zero."""
    b = broker.bootstrap
    client = _limited_client(b, "cmq-v5")
    names = [unique_topic("cmq-v5") for _ in range(4)]
    results, throttle = _create(b, client, names, version=5)
    assert results == [(n, 0, None) for n in names]
    assert throttle > 0
    _wait_created(b, names, PARTITIONS)


def _add_partitions(bootstrap: str, client: str, names: list[str], count: int,
                    version: int) -> tuple[list[tuple[str, int]], int]:
    with RawConn(bootstrap, client_id=client) as conn:
        body = conn.request(CREATE_PARTITIONS, version, {"topics": [
            {"name": n, "count": count, "assignments": None} for n in names],
            "timeout_ms": 30000, "validate_only": False})
    return [(r["name"], r["error_code"]) for r in body["results"]], body["throttle_time_ms"]


def _delete(bootstrap: str, client: str, names: list[str]) -> tuple[list[tuple[str, int]], int]:
    with RawConn(bootstrap, client_id=client) as conn:
        body = conn.request(DELETE_TOPICS, 6, {"topics": [{"name": n, "topic_id": bytes(16)} for n in names],
                                               "timeout_ms": 30000})
    return sorted((r["name"], r["error_code"]) for r in body["responses"]), body["throttle_time_ms"]


def _codes(results: list[tuple[str, int]]) -> list[int]:
    return sorted(code for _, code in results)


def test_create_partitions_and_delete_topics_count_partitions(broker: Broker, tools: None) -> None:
    """CreatePartitions v3 counts the partitions added, DeleteTopics v6 the partitions deleted;
    CreatePartitions v2 is throttled, never refused."""
    b = broker.bootstrap
    free = f"cmq-free-{uuid.uuid4().hex[:8]}"
    names = [unique_topic("cmq-grow") for _ in range(4)]
    assert [code for _, code, _ in _create(b, free, names, partitions=1)[0]] == [0, 0, 0, 0]
    _wait_created(b, names, 1)

    grower = _limited_client(b, "cmq-grow")
    results, throttle = _add_partitions(b, grower, names, 1 + PARTITIONS, version=3)
    assert _codes(results) == [0, 0, 0, THROTTLING_QUOTA_EXCEEDED] and throttle > 0
    grown = [n for n, code in results if code == 0]
    [refused] = [n for n, code in results if code == THROTTLING_QUOTA_EXCEEDED]
    _wait_created(b, grown, 1 + PARTITIONS)
    assert _partitions(b, [refused]) == {refused: 1}

    old = _limited_client(b, "cmq-grow-v2")
    results, throttle = _add_partitions(b, old, grown, 1 + 2 * PARTITIONS, version=2)
    assert _codes(results) == [0, 0, 0] and throttle > 0  # 60 of 55: all added, throttled
    _wait_created(b, grown, 1 + 2 * PARTITIONS)

    deleter = _limited_client(b, "cmq-delete")
    doomed = [unique_topic("cmq-del") for _ in range(4)]
    assert [code for _, code, _ in _create(b, free, doomed)[0]] == [0, 0, 0, 0]
    _wait_created(b, doomed, PARTITIONS)
    results, throttle = _delete(b, deleter, doomed)
    assert _codes(results) == [0, 0, 0, THROTTLING_QUOTA_EXCEEDED] and throttle > 0
    [kept] = [n for n, code in results if code == THROTTLING_QUOTA_EXCEEDED]
    assert kept in _partitions(b, doomed)


def test_user_quota_is_shared_by_its_client_ids(restartable_broker: BrokerProcess, tools: None) -> None:
    """A user quota (`--entity-type users`; on PLAINTEXT every client is User:ANONYMOUS, so on a
    broker of the test's own) is one bucket for all the user's client ids: what one client id
    took, another finds gone."""
    b = restartable_broker.bootstrap
    run("kafka-configs", "--bootstrap-server", b, "--alter", "--entity-type", "users", "--entity-name",
        "ANONYMOUS", "--add-config", f"controller_mutation_rate={RATE}")
    wait_until(lambda: quotas_of(describe(b, [("user", MATCH_EXACT, "ANONYMOUS")])), 15, what="the user quota",
               ok=lambda q: q == {(("user", "ANONYMOUS"),): {"controller_mutation_rate": RATE}})
    time.sleep(0.5)  # Kafka's broker applies the quota as it publishes the metadata image
    first = [unique_topic("cmq-user") for _ in range(3)]
    results, throttle = _create(b, "cmq-user-a", first)
    assert results == [(n, 0, None) for n in first] and throttle == 0  # 55 -> -5
    second = unique_topic("cmq-user")
    results, throttle = _create(b, "cmq-user-b", [second])  # another client id, the same bucket
    assert results == [(second, THROTTLING_QUOTA_EXCEEDED, None)] and throttle > 0
