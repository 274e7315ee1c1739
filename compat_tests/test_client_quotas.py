"""Client quotas as a Kafka user meets them: `kafka-configs --entity-type clients|users`,
DescribeClientQuotas / AlterClientQuotas answers (exact codes and messages), the quotas kept
across a restart, and the throttling itself: a producer and a consumer held to their byte
rates (within 20%), responses carrying throttle_time_ms, and the throttle lifted when the
quota goes.

The session broker is shared with other tests, so every quota here is set on a client id of
the test's own (or on a default entity that the test removes again before it ends).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from .brokers import BrokerProcess
from .cli_helpers import require_tools, run
from .conftest import Broker
from .helpers import unique_topic, wait_until
from .raw import RawConn, RoutedConn, one_record_batch

DESCRIBE, ALTER = 48, 49
V = 1
INVALID_REQUEST, UNSUPPORTED_VERSION = 42, 35
MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2


def _cid(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def _entity(**names: str | None) -> list[dict[str, Any]]:
    return [{"entity_type": t.replace("_", "-"), "entity_name": n} for t, n in names.items()]


def alter(bootstrap: str, entries: list[tuple[list[dict[str, Any]], dict[str, float | None]]],
          validate_only: bool = False) -> list[tuple[dict[str, str | None], int, str | None]]:
    """AlterClientQuotas v1: [(entity, {key: value or None = remove})] -> [(entity, code, message)]."""
    body = {"validate_only": validate_only, "entries": [
        {"entity": entity, "ops": [{"key": k, "value": 0.0 if v is None else v, "remove": v is None}
                                   for k, v in ops.items()]}
        for entity, ops in entries]}
    with RawConn(bootstrap) as conn:
        resp = conn.request(ALTER, V, body)
    return [({e["entity_type"]: e["entity_name"] for e in r["entity"]}, r["error_code"], r["error_message"])
            for r in resp["entries"]]


def _norm(result: tuple[dict[str, str | None], int, str | None]) -> str:
    """An AlterClientQuotas result, comparable whatever order the answer lists it in."""
    return repr((sorted(result[0].items()), result[1], result[2]))


def describe(bootstrap: str, components: list[tuple[str, int, str | None]], strict: bool = False) -> dict:
    with RawConn(bootstrap) as conn:
        return conn.request(DESCRIBE, V, {"strict": strict, "components": [
            {"entity_type": t, "match_type": m, "match": n} for t, m, n in components]})


def quotas_of(resp: dict) -> dict[tuple[tuple[str, str | None], ...], dict[str, float]]:
    """A DescribeClientQuotas answer as {sorted entity: {key: value}}."""
    assert resp["error_code"] == 0, resp
    return {tuple(sorted((e["entity_type"], e["entity_name"]) for e in entry["entity"])):
            {v["key"]: v["value"] for v in entry["values"]} for entry in resp["entries"]}


# --------------------------------------------------------------------------- kafka-configs


@pytest.fixture
def tools() -> None:
    require_tools()


def _configs(bootstrap: str, *args: str, check: bool = True) -> Any:
    return run("kafka-configs", "--bootstrap-server", bootstrap, *args, check=check)


def test_kafka_configs_client_and_user_quotas(broker: Broker, tools: None) -> None:
    """`kafka-configs --alter/--describe` of client-id, user, <user, client-id> and default
    quotas print what they print against Kafka."""
    b = broker.bootstrap
    client = _cid("cfg")
    user = _cid("alice")
    r = _configs(b, "--alter", "--add-config", "producer_byte_rate=1048576,consumer_byte_rate=2097152",
                 "--entity-type", "clients", "--entity-name", client)
    assert r.stdout.strip() == f"Completed updating config for client {client}.", r.describe()
    r = _configs(b, "--alter", "--add-config", "request_percentage=50.5",
                 "--entity-type", "users", "--entity-name", user)
    assert r.stdout.strip() == f"Completed updating config for user {user}.", r.describe()
    r = _configs(b, "--alter", "--add-config", "producer_byte_rate=4096",
                 "--entity-type", "users", "--entity-name", user, "--entity-type", "clients", "--entity-name", client)
    assert r.stdout.strip() == f"Completed updating config for user {user}.", r.describe()
    try:
        r = _configs(b, "--describe", "--entity-type", "clients", "--entity-name", client)
        assert r.stdout.strip() == (f"Quota configs for client-id '{client}' are "
                                    "consumer_byte_rate=2097152.0, producer_byte_rate=1048576.0"), r.describe()
        got = quotas_of(describe(b, [("user", MATCH_EXACT, user)], strict=True))
        assert got == {(("user", user),): {"request_percentage": 50.5}}
        r = _configs(b, "--describe", "--entity-type", "users", "--entity-name", user,
                     "--entity-type", "clients", "--entity-name", client)
        assert r.stdout.strip() == (f"Quota configs for user-principal '{user}', client-id '{client}' are "
                                    "producer_byte_rate=4096.0"), r.describe()
        # removing a key that is set; then one that is not (the tool checks before it asks)
        r = _configs(b, "--alter", "--delete-config", "consumer_byte_rate",
                     "--entity-type", "clients", "--entity-name", client)
        assert r.stdout.strip() == f"Completed updating config for client {client}.", r.describe()
        r = _configs(b, "--describe", "--entity-type", "clients", "--entity-name", client)
        assert r.stdout.strip() == f"Quota configs for client-id '{client}' are producer_byte_rate=1048576.0"
        r = _configs(b, "--alter", "--delete-config", "consumer_byte_rate",
                     "--entity-type", "clients", "--entity-name", client, check=False)
        assert r.returncode == 1 and "Invalid config(s): consumer_byte_rate" in r.stdout + r.stderr, r.describe()
        # a value the broker refuses: INVALID_REQUEST with Kafka's message
        r = _configs(b, "--alter", "--add-config", "producer_byte_rate=-5",
                     "--entity-type", "clients", "--entity-name", client, check=False)
        assert r.returncode == 1, r.describe()
        assert ("org.apache.kafka.common.errors.InvalidRequestException: Quota producer_byte_rate must be "
                "greater than 0") in r.stdout + r.stderr, r.describe()
    finally:
        alter(b, [(_entity(client_id=client), {"producer_byte_rate": None, "consumer_byte_rate": None}),
                  (_entity(user=user), {"request_percentage": None}),
                  (_entity(user=user, client_id=client), {"producer_byte_rate": None})])
    r = wait_until(lambda: _configs(b, "--describe", "--entity-type", "clients", "--entity-name", client), 15,
                   what="the client's quotas gone", ok=lambda r: r.stdout.strip() == "")


def test_kafka_configs_default_entities(broker: Broker, tools: None) -> None:
    """`--entity-default` for clients and users: set, described as Kafka names them, removed."""
    b = broker.bootstrap
    huge = "1099511627776"  # 1 TiB/s: no other test of the session is slowed by it
    shown = "1.099511627776E12"  # Java's Double.toString
    try:
        r = _configs(b, "--alter", "--add-config", f"consumer_byte_rate={huge}",
                     "--entity-type", "clients", "--entity-default")
        assert r.stdout.strip() == "Completed updating default config for clients in the cluster.", r.describe()
        r = _configs(b, "--alter", "--add-config", f"producer_byte_rate={huge}",
                     "--entity-type", "users", "--entity-default")
        assert r.stdout.strip() == "Completed updating default config for users in the cluster.", r.describe()
        r = _configs(b, "--describe", "--entity-type", "clients", "--entity-default")
        assert r.stdout.strip() == f"Quota configs for the default client-id are consumer_byte_rate={shown}", \
            r.describe()
        r = _configs(b, "--describe", "--entity-type", "users", "--entity-default")
        assert r.stdout.strip() == f"Quota configs for the default user-principal are producer_byte_rate={shown}", \
            r.describe()
        got = quotas_of(describe(b, [("client-id", MATCH_DEFAULT, None)], strict=True))
        assert got == {(("client-id", None),): {"consumer_byte_rate": float(huge)}}
    finally:
        alter(b, [(_entity(client_id=None), {"consumer_byte_rate": None}),
                  (_entity(user=None), {"producer_byte_rate": None})])
    wait_until(lambda: quotas_of(describe(b, [("client-id", MATCH_DEFAULT, None)])), 15,
               what="the default quotas gone", ok=lambda q: q == {})


def test_kafka_configs_describe_user_quotas(broker: Broker, tools: None) -> None:
    """`kafka-configs --describe --entity-type users --entity-name U` also asks for the user's
    SCRAM credentials (DescribeUserScramCredentials), so it needs that API too."""
    b = broker.bootstrap
    user = _cid("bob")
    r = _configs(b, "--alter", "--add-config", "request_percentage=50.5,consumer_byte_rate=1024",
                 "--entity-type", "users", "--entity-name", user)
    assert r.stdout.strip() == f"Completed updating config for user {user}.", r.describe()
    try:
        r = _configs(b, "--describe", "--entity-type", "users", "--entity-name", user)
        assert r.stdout.strip() == (f"Quota configs for user-principal '{user}' are consumer_byte_rate=1024.0, "
                                    "request_percentage=50.5"), r.describe()
    finally:
        alter(b, [(_entity(user=user), {"request_percentage": None, "consumer_byte_rate": None})])


def test_kafka_configs_ip_quotas(broker: Broker, tools: None) -> None:
    """`--entity-type ips`: connection_creation_rate set, described, removed."""
    b = broker.bootstrap
    ip = "127.0.0.3"
    r = _configs(b, "--alter", "--add-config", "connection_creation_rate=100",
                 "--entity-type", "ips", "--entity-name", ip)
    assert r.stdout.strip() == f"Completed updating config for ip {ip}.", r.describe()
    try:
        r = _configs(b, "--describe", "--entity-type", "ips", "--entity-name", ip)
        assert r.stdout.strip() == f"Quota configs for ip '{ip}' are connection_creation_rate=100.0", r.describe()
    finally:
        r = _configs(b, "--alter", "--delete-config", "connection_creation_rate",
                     "--entity-type", "ips", "--entity-name", ip)
    assert r.stdout.strip() == f"Completed updating config for ip {ip}.", r.describe()
    wait_until(lambda: _configs(b, "--describe", "--entity-type", "ips", "--entity-name", ip), 15,
               what="the ip quota gone", ok=lambda r: r.stdout.strip() == "")


# --------------------------------------------------------------------------- raw answers


def test_alter_client_quotas_validation(broker: Broker) -> None:
    """Kafka's checks, one entity at a time: each refused entity gets INVALID_REQUEST and its
    message, the others are applied; validate_only applies nothing."""
    b = broker.bootstrap
    ok, bad = _cid("ok"), _cid("bad")
    results = alter(b, [
        (_entity(client_id=ok), {"producer_byte_rate": 1024.0, "request_percentage": 12.5}),
        (_entity(client_id=bad), {"no_such_quota": 1.0}),
        (_entity(user=bad), {"producer_byte_rate": 0.0}),
        (_entity(user=bad, client_id=bad), {"consumer_byte_rate": 10.5}),
        (_entity(ip="127.0.0.1", user=bad), {"connection_creation_rate": 10.0}),
        (_entity(ip="127.0.0.9"), {"producer_byte_rate": 10.0}),
        ([], {"producer_byte_rate": 10.0}),
        (_entity(client_id=""), {"producer_byte_rate": 10.0}),
        (_entity(client_id=ok, group="x"), {"producer_byte_rate": 10.0}),
    ])
    assert sorted(map(_norm, results)) == sorted(map(_norm, [
        ({"client-id": ok}, 0, None),
        ({"client-id": bad}, INVALID_REQUEST, "Invalid configuration key no_such_quota"),
        ({"user": bad}, INVALID_REQUEST, "Quota producer_byte_rate must be greater than 0"),
        ({"user": bad, "client-id": bad}, INVALID_REQUEST, "consumer_byte_rate cannot be a fractional value."),
        ({"ip": "127.0.0.1", "user": bad}, INVALID_REQUEST,
         "Invalid quota entity combination, IP entity shouldnot be combined with User or ClientId"),
        ({"ip": "127.0.0.9"}, INVALID_REQUEST, "Invalid configuration key producer_byte_rate"),
        ({}, INVALID_REQUEST, "Invalid empty client quota entity"),
        ({"client-id": ""}, INVALID_REQUEST, "Empty client-id not supported"),
        ({"client-id": ok, "group": "x"}, INVALID_REQUEST, "Unhandled client quota entity type: group"),
    ]))
    try:
        got = wait_until(lambda: quotas_of(describe(b, [("client-id", MATCH_EXACT, ok)])), 15,
                         ok=lambda q: q != {})
        assert got == {(("client-id", ok),): {"producer_byte_rate": 1024.0, "request_percentage": 12.5}}
        assert quotas_of(describe(b, [("client-id", MATCH_EXACT, bad)])) == {}
        assert quotas_of(describe(b, [("user", MATCH_EXACT, bad)])) == {}
        # validate_only: answered as a real change, nothing stored
        assert alter(b, [(_entity(client_id=ok), {"consumer_byte_rate": 2048.0})], validate_only=True) == [
            ({"client-id": ok}, 0, None)]
        assert alter(b, [(_entity(client_id=ok), {"consumer_byte_rate": -1.0})], validate_only=True) == [
            ({"client-id": ok}, INVALID_REQUEST, "Quota consumer_byte_rate must be greater than 0")]
        time.sleep(0.5)
        assert quotas_of(describe(b, [("client-id", MATCH_EXACT, ok)])) == got
        # the same entity twice in one request: refused (Kafka applies the first one's changes)
        again = alter(b, [(_entity(client_id=bad), {"producer_byte_rate": 10.0}),
                          (_entity(client_id=bad), {"producer_byte_rate": 20.0})])
        assert again == [({"client-id": bad}, INVALID_REQUEST,
                          f"Ignoring duplicate entity ClientQuotaEntity(entries={{client-id={bad}}})")]
        # a key twice for one entity: the entity is refused as a duplicate too
        dup = {"entity": _entity(user=bad), "ops": [
            {"key": "producer_byte_rate", "value": 1.0, "remove": False},
            {"key": "producer_byte_rate", "value": 2.0, "remove": False}]}
        with RawConn(b) as conn:
            resp = conn.request(ALTER, V, {"validate_only": False, "entries": [dup]})
        assert [(e["error_code"], e["error_message"]) for e in resp["entries"]] == [
            (INVALID_REQUEST, f"Ignoring duplicate entity ClientQuotaEntity(entries={{user={bad}}})")]
    finally:
        alter(b, [(_entity(client_id=ok), {"producer_byte_rate": None, "request_percentage": None}),
                  (_entity(client_id=bad), {"producer_byte_rate": None})])


def test_describe_client_quotas_filters(broker: Broker) -> None:
    """Exact, default and any-name components, strict or not, and the refused filters."""
    b = broker.bootstrap
    u, c = _cid("fu"), _cid("fc")
    alter(b, [(_entity(user=u), {"producer_byte_rate": 1000.0}),
              (_entity(user=u, client_id=c), {"consumer_byte_rate": 2000.0}),
              (_entity(user=u, client_id=None), {"request_percentage": 30.0}),
              (_entity(client_id=c), {"producer_byte_rate": 3000.0})])
    try:
        mine = wait_until(lambda: quotas_of(describe(b, [("user", MATCH_EXACT, u)])), 15,
                          ok=lambda q: len(q) == 3)
        assert mine == {(("user", u),): {"producer_byte_rate": 1000.0},
                        (("client-id", c), ("user", u)): {"consumer_byte_rate": 2000.0},
                        (("client-id", None), ("user", u)): {"request_percentage": 30.0}}
        assert quotas_of(describe(b, [("user", MATCH_EXACT, u)], strict=True)) == {
            (("user", u),): {"producer_byte_rate": 1000.0}}
        assert quotas_of(describe(b, [("user", MATCH_EXACT, u), ("client-id", MATCH_DEFAULT, None)])) == {
            (("client-id", None), ("user", u)): {"request_percentage": 30.0}}
        assert quotas_of(describe(b, [("user", MATCH_EXACT, u), ("client-id", MATCH_SPECIFIED, None)])) == {
            (("client-id", c), ("user", u)): {"consumer_byte_rate": 2000.0},
            (("client-id", None), ("user", u)): {"request_percentage": 30.0}}
        assert quotas_of(describe(b, [("client-id", MATCH_EXACT, c)], strict=True)) == {
            (("client-id", c),): {"producer_byte_rate": 3000.0}}
        everything = quotas_of(describe(b, []))
        assert {k: everything[k] for k in mine} == mine
    finally:
        alter(b, [(_entity(user=u), {"producer_byte_rate": None}),
                  (_entity(user=u, client_id=c), {"consumer_byte_rate": None}),
                  (_entity(user=u, client_id=None), {"request_percentage": None}),
                  (_entity(client_id=c), {"producer_byte_rate": None})])
    refusals = [
        ([("group", MATCH_EXACT, "g")], UNSUPPORTED_VERSION, "Unsupported entity type group"),
        ([("", MATCH_EXACT, "g")], INVALID_REQUEST, "Invalid empty entity type."),
        ([("user", MATCH_EXACT, None)], INVALID_REQUEST,
         "Request specified MATCH_TYPE_EXACT, but set match string to null."),
        ([("user", MATCH_DEFAULT, "x")], INVALID_REQUEST,
         "Request specified MATCH_TYPE_DEFAULT, but also specified a match string."),
        ([("user", MATCH_SPECIFIED, "x")], INVALID_REQUEST,
         "Request specified MATCH_TYPE_SPECIFIED, but also specified a match string."),
        ([("user", 7, None)], INVALID_REQUEST, "Unknown match type 7"),
        ([("user", MATCH_EXACT, "a"), ("user", MATCH_EXACT, "b")], INVALID_REQUEST,
         "Entity type user cannot appear more than once in the filter."),
        ([("ip", MATCH_SPECIFIED, None), ("user", MATCH_SPECIFIED, None)], INVALID_REQUEST,
         "Invalid entity filter component combination. IP filter component should not be used with "
         "user or clientId filter component."),
    ]
    for components, code, message in refusals:
        resp = describe(b, components)
        assert (resp["error_code"], resp["error_message"], resp["entries"]) == (code, message, None), components


def test_client_quotas_survive_restart(restartable_broker: BrokerProcess) -> None:
    b = restartable_broker
    client = _cid("keep")
    assert sorted(map(_norm, alter(b.bootstrap, [(_entity(client_id=client), {"producer_byte_rate": 65536.0}),
                                                 (_entity(user=None), {"request_percentage": 200.0})]))) == \
        sorted(map(_norm, [({"client-id": client}, 0, None), ({"user": None}, 0, None)]))
    expected = {(("client-id", client),): {"producer_byte_rate": 65536.0},
                (("user", None),): {"request_percentage": 200.0}}
    wait_until(lambda: quotas_of(describe(b.bootstrap, [])), 15, what="both quotas",
               ok=lambda q: q == expected)
    b.kill()
    b.restart()
    assert wait_until(lambda: quotas_of(describe(b.bootstrap, [])), 15, what="the quotas after a restart",
                      ok=lambda q: q == expected) == expected


# --------------------------------------------------------------------------- throttling

QUOTA = 512 * 1024  # bytes/s
RUN_S = 10.0  # Kafka measures over 10 whole windows: a run this long sees the quota itself


def _raw_produce_throttle(bootstrap: str, client: str, topic: str, size: int = 1024) -> int:
    """throttle_time_ms of one acks=1 Produce of a `size`-byte record sent as `client`."""
    with RoutedConn(bootstrap, client_id=client) as conn:  # to partition 0's leader, whose quota it is
        body = conn.request(0, 9, {"transactional_id": None, "acks": 1, "timeout_ms": 10000, "topic_data": [
            {"name": topic, "partition_data": [{"index": 0, "records": one_record_batch(b"x" * size)}]}]})
    [t] = body["responses"]
    [p] = t["partition_responses"]
    assert p["error_code"] == 0, body
    return int(body["throttle_time_ms"])


def _set_quota(bootstrap: str, client: str, key: str, value: float | None) -> None:
    assert alter(bootstrap, [(_entity(client_id=client), {key: value})]) == [({"client-id": client}, 0, None)]
    wanted = {} if value is None else {(("client-id", client),): {key: value}}
    wait_until(lambda: quotas_of(describe(bootstrap, [("client-id", MATCH_EXACT, client)])), 15,
               what=f"{key} of {client} = {value}", ok=lambda q: q == wanted)


def _create_topic(bootstrap: str, prefix: str) -> str:
    from confluent_kafka.admin import AdminClient, NewTopic

    name = unique_topic(prefix)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(30)
    wait_until(lambda: admin.list_topics(name, timeout=10).topics[name], 15, what=f"{name} in metadata",
               ok=lambda t: t.error is None and len(t.partitions) == 1)
    return name


class _Throttles:
    """The largest broker throttle librdkafka reported in its statistics (ms)."""

    def __init__(self) -> None:
        self.max = 0

    def __call__(self, stats_json: str) -> None:
        stats = json.loads(stats_json)
        for b in stats.get("brokers", {}).values():
            self.max = max(self.max, int(b.get("throttle", {}).get("max", 0)))


def test_producer_held_to_producer_byte_rate(broker: Broker) -> None:
    """A producer sending as fast as it can under producer_byte_rate = 512 KiB/s gets that
    rate (within 20%) and throttle times; a Produce of the same client id right after is
    throttled too (the quota is the client id's); removing the quota lifts it."""
    from confluent_kafka import Producer

    b = broker.bootstrap
    client = _cid("qprod")
    topic = _create_topic(b, "quota-produce")
    _set_quota(b, client, "producer_byte_rate", float(QUOTA))
    throttles = _Throttles()
    producer = Producer({"bootstrap.servers": b, "client.id": client, "linger.ms": 5, "batch.size": 16384,
                         "queue.buffering.max.kbytes": 512, "statistics.interval.ms": 500,
                         "stats_cb": throttles})
    value = b"v" * 1024
    delivered = 0
    end = 0.0

    def on_delivery(err: Any, msg: Any) -> None:
        nonlocal delivered
        if err is None and time.monotonic() <= end:
            delivered += len(msg.value())

    try:
        start = time.monotonic()
        end = start + RUN_S
        while time.monotonic() < end:
            try:
                producer.produce(topic, value, partition=0, on_delivery=on_delivery)
            except BufferError:
                producer.poll(0.01)
            producer.poll(0)
        producer.poll(0.5)  # statistics of the last interval
        rate = delivered / RUN_S
        print(f"producer: {rate / 1024:.0f} KiB/s under {QUOTA // 1024} KiB/s, max throttle {throttles.max} ms")
        assert 0.8 * QUOTA <= rate <= 1.2 * QUOTA, f"{rate / 1024:.0f} KiB/s under a quota of {QUOTA // 1024} KiB/s"
        assert throttles.max > 0, "librdkafka saw no throttle_time_ms"
        assert _raw_produce_throttle(b, client, topic) > 0
    finally:
        producer.purge()
        producer.flush(10)
    _set_quota(b, client, "producer_byte_rate", None)
    # of several brokers, the partition's leader learns of the removal a moment later (Kafka's
    # brokers from the metadata log likewise): from then on nothing is throttled
    wait_until(lambda: _raw_produce_throttle(b, client, topic), 10, 0.1, "the quota's removal at the leader",
               ok=lambda throttle: throttle == 0)
    assert [_raw_produce_throttle(b, client, topic) for _ in range(3)] == [0, 0, 0]


def test_consumer_held_to_consumer_byte_rate(broker: Broker) -> None:
    """A consumer reading as fast as it can under consumer_byte_rate = 512 KiB/s gets that
    rate (within 20%), with throttle times; the data is all there, in order."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    b = broker.bootstrap
    client = _cid("qcons")
    topic = _create_topic(b, "quota-consume")
    total = 7 * 1024  # 7 MiB of 1 KiB records, more than the 10 s the test reads
    producer = Producer({"bootstrap.servers": b, "linger.ms": 5, "batch.size": 16384})
    for i in range(total):
        producer.produce(topic, i.to_bytes(4, "big") + b"c" * 1020, partition=0)
        if i % 1000 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0
    _set_quota(b, client, "consumer_byte_rate", float(QUOTA))
    throttles = _Throttles()
    consumer = Consumer({"bootstrap.servers": b, "group.id": _cid("qgroup"), "client.id": client,
                         "enable.auto.commit": False, "max.partition.fetch.bytes": 65536,
                         "statistics.interval.ms": 500, "stats_cb": throttles})
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        received = 0
        expected_index = 0
        start = None
        while start is None or time.monotonic() < start + RUN_S:
            msg = consumer.poll(0.1)
            if msg is None:
                assert start is not None or expected_index == 0
                continue
            assert msg.error() is None, msg.error()
            start = start or time.monotonic()
            assert int.from_bytes(msg.value()[:4], "big") == expected_index
            expected_index += 1
            received += len(msg.value())
        consumer.poll(0.5)
        rate = received / RUN_S
        print(f"consumer: {rate / 1024:.0f} KiB/s under {QUOTA // 1024} KiB/s, max throttle {throttles.max} ms")
        assert 0.8 * QUOTA <= rate <= 1.2 * QUOTA, f"{rate / 1024:.0f} KiB/s under a quota of {QUOTA // 1024} KiB/s"
        assert throttles.max > 0, "librdkafka saw no throttle_time_ms"
    finally:
        consumer.close()
        _set_quota(b, client, "consumer_byte_rate", None)


def test_request_percentage_throttles_any_request(broker: Broker) -> None:
    """request_percentage: a client id allowed 0.01% of a thread is throttled after a few
    requests, for at most one quota window (1 s), on any API (here Metadata)."""
    b = broker.bootstrap
    client = _cid("qreq")
    _set_quota(b, client, "request_percentage", 0.01)
    try:
        throttles = []
        with RawConn(b, client_id=client) as conn:
            for _ in range(500):
                body = conn.request(3, 12, {"topics": [], "allow_auto_topic_creation": False,
                                            "include_topic_authorized_operations": False})
                throttles.append(body["throttle_time_ms"])
                if body["throttle_time_ms"]:
                    break
        print(f"request_percentage: throttled {throttles[-1]} ms after {len(throttles)} Metadata requests")
        assert 0 < throttles[-1] <= 1000, throttles
    finally:
        _set_quota(b, client, "request_percentage", None)


def _served_from(bootstrap: str, source: str) -> bool:
    """Whether a new connection from `source` (a loopback address) gets an ApiVersions answer;
    False when the broker closes it unserved."""
    import socket
    import struct

    host, _, port = bootstrap.rpartition(":")
    header = struct.pack(">hhih", 18, 0, 7, 5) + b"quota"
    with socket.create_connection((host, int(port)), timeout=10, source_address=(source, 0)) as s:
        s.sendall(struct.pack(">i", len(header)) + header)
        try:
            data = s.recv(10)
        except (ConnectionResetError, TimeoutError):
            return False
    return len(data) >= 10 and struct.unpack(">i", data[4:8])[0] == 7


def test_connection_creation_rate_of_an_ip(broker: Broker) -> None:
    """connection_creation_rate = 1 on 127.0.0.2: measured over 10 windows, its first 10 new
    connections are served, the 11th is closed unanswered; 127.0.0.1 is served all along;
    removing the quota serves 127.0.0.2 again."""
    b = broker.bootstrap
    ip = "127.0.0.2"
    assert alter(b, [(_entity(ip=ip), {"connection_creation_rate": 1.0})]) == [({"ip": ip}, 0, None)]
    try:
        wait_until(lambda: quotas_of(describe(b, [("ip", MATCH_EXACT, ip)])), 15, what="the ip quota",
                   ok=lambda q: q == {(("ip", ip),): {"connection_creation_rate": 1.0}})
        time.sleep(0.5)  # Kafka's broker applies the quota as it publishes the metadata image
        served = [_served_from(b, ip) for _ in range(11)]
        assert served == [True] * 10 + [False], served
        assert _served_from(b, "127.0.0.1")
    finally:
        assert alter(b, [(_entity(ip=ip), {"connection_creation_rate": None})]) == [({"ip": ip}, 0, None)]
    wait_until(lambda: quotas_of(describe(b, [("ip", MATCH_EXACT, ip)])), 15, what="no ip quota",
               ok=lambda q: q == {})
    wait_until(lambda: _served_from(b, ip), 15, what=f"{ip} served again")


def test_user_and_client_id_levels(restartable_broker: BrokerProcess) -> None:
    """Kafka's precedence on PLAINTEXT, where every client is User:ANONYMOUS (a broker of the
    test's own, as these quotas reach every client): /users/ANONYMOUS/clients/<default> comes
    before /clients/<id>, /users/ANONYMOUS/clients/<id> before both, and each client id has its
    own rate at that level; a /users/ANONYMOUS quota is one rate shared by all its client ids."""
    b = restartable_broker.bootstrap
    topic = _create_topic(b, "quota-levels")
    small = 1024.0  # 10 KiB per 10 s windows: one 6 KiB Produce passes, a second does not
    anonymous = "ANONYMOUS"
    assert len(alter(b, [(_entity(user=anonymous, client_id=None), {"producer_byte_rate": small}),
                         (_entity(client_id="lvl7"), {"producer_byte_rate": 1e12}),
                         (_entity(user=anonymous, client_id="lvl1"), {"producer_byte_rate": 1e12})])) == 3
    wait_until(lambda: quotas_of(describe(b, [])), 15, what="three quotas", ok=lambda q: len(q) == 3)
    time.sleep(0.5)  # Kafka's broker applies the quotas as it publishes the metadata image
    size = 6 * 1024
    assert _raw_produce_throttle(b, "lvl7", topic, size) == 0
    assert _raw_produce_throttle(b, "lvl7", topic, size) > 0  # <user, default client> beats <client>
    assert [_raw_produce_throttle(b, "lvl1", topic, size) for _ in range(3)] == [0, 0, 0]  # the most specific
    assert _raw_produce_throttle(b, "a", topic, size) == 0
    assert _raw_produce_throttle(b, "b", topic, size) == 0  # a rate of its own
    assert _raw_produce_throttle(b, "a", topic, size) > 0
    # a user quota: one rate for all of the user's client ids
    assert len(alter(b, [(_entity(user=anonymous, client_id=None), {"producer_byte_rate": None}),
                         (_entity(user=anonymous), {"producer_byte_rate": small})])) == 2
    wait_until(lambda: quotas_of(describe(b, [("user", MATCH_EXACT, anonymous)], strict=True)), 15,
               what="the user quota",
               ok=lambda q: q == {(("user", anonymous),): {"producer_byte_rate": small}})
    time.sleep(0.5)
    assert _raw_produce_throttle(b, "c", topic, size) == 0
    assert _raw_produce_throttle(b, "d", topic, size) > 0  # shares c's rate
    assert _raw_produce_throttle(b, "lvl1", topic, size) == 0  # <user, client> still its own


#: the API keys the cluster ACLs below deny from OTHER_HOST, and the answer
DESCRIBE_CONFIGS, ALTER_CONFIGS, CLUSTER_DENIED = 10, 11, 31


@pytest.fixture(scope="module")
def acl_bootstrap(tmp_path_factory: pytest.TempPathFactory, target: str,
                  pytestconfig: pytest.Config) -> Iterator[str]:
    """A broker of this module's own with an authorizer: everything allowed on the cluster but
    DESCRIBE_CONFIGS and ALTER_CONFIGS from OTHER_HOST (test_acls.py's names)."""
    from .test_acls import ALL, ALLOW, ANON, CLUSTER, DENY, LITERAL, OTHER_HOST, AclBroker, create_acls

    if pytestconfig.getoption("--bootstrap"):
        pytest.skip("needs a broker of its own with an authorizer")
    broker = AclBroker(target, tmp_path_factory.mktemp(f"quota-acl-{target}"))
    broker.start()
    try:
        bs = broker.bootstrap
        assert create_acls(bs, (CLUSTER, "kafka-cluster", LITERAL, ANON, "*", ALL, ALLOW),
                           (CLUSTER, "kafka-cluster", LITERAL, ANON, OTHER_HOST, DESCRIBE_CONFIGS, DENY),
                           (CLUSTER, "kafka-cluster", LITERAL, ANON, OTHER_HOST, ALTER_CONFIGS, DENY)) == [(0, "")] * 3
        yield bs
    finally:
        broker.stop()


def test_quota_apis_need_cluster_describe_and_alter_configs(acl_bootstrap: str) -> None:
    """With an authorizer: DescribeClientQuotas needs DESCRIBE_CONFIGS and AlterClientQuotas
    ALTER_CONFIGS on the cluster (CLUSTER_AUTHORIZATION_FAILED, nothing changed); the same
    principal from another host with them is served."""
    from .test_acls import OTHER_HOST, RawFrom

    bs = acl_bootstrap
    client = _cid("acl")
    with RawFrom(bs, OTHER_HOST) as c:
        d = c.request(DESCRIBE, V, {"components": [], "strict": False})
        assert (d["error_code"], d["error_message"], d["entries"]) == (CLUSTER_DENIED, None, None)
        a = c.request(ALTER, V, {"validate_only": False, "entries": [
            {"entity": _entity(client_id=client), "ops": [{"key": "producer_byte_rate", "value": 10.0,
                                                          "remove": False}]}]})
        assert [(e["error_code"], e["error_message"], e["entity"]) for e in a["entries"]] == [
            (CLUSTER_DENIED, "Cluster authorization failed.", _entity(client_id=client))]
    assert quotas_of(describe(bs, [("client-id", MATCH_EXACT, client)])) == {}
    assert alter(bs, [(_entity(client_id=client), {"producer_byte_rate": 10.0})]) == [
        ({"client-id": client}, 0, None)]


def test_refused_alter_names_each_entity_without_the_request_tags(acl_bootstrap: str) -> None:
    """A refused AlterClientQuotas (no ALTER_CONFIGS on the cluster) names each entry's entity by
    its type and name alone, as Kafka's error response builds it: tagged fields the client put in
    the request's entity (unknown to the schema) are not echoed back in the answer."""
    from .test_acls import OTHER_HOST, RawFrom

    client = _cid("tags")
    tagged = [{**e, "_unknown_tags": {90: b"\x01\x02"}} for e in _entity(client_id=client)]
    with RawFrom(acl_bootstrap, OTHER_HOST) as c:
        a = c.request(ALTER, V, {"validate_only": False, "entries": [
            {"entity": tagged, "ops": [{"key": "producer_byte_rate", "value": 10.0, "remove": False}]}]})
    assert [(e["error_code"], e["entity"]) for e in a["entries"]] == [(CLUSTER_DENIED, _entity(client_id=client))]
