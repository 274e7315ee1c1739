"""User quotas for SASL principals: a quota on user `alice` throttles alice's producer (whatever
its client id) and not bob's, on brokers with a SASL_PLAINTEXT listener configured the same
way (compat_tests/secure.py)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from . import secure
from .helpers import wait_until
from .test_client_quotas import MATCH_EXACT, _create_topic, _entity, alter, describe, quotas_of


@pytest.fixture(scope="module")
def sasl_broker(tmp_path_factory: pytest.TempPathFactory, target: str,
                pytestconfig: pytest.Config) -> Iterator[Any]:
    if pytestconfig.getoption("--bootstrap"):
        pytest.skip("--bootstrap given: these tests start a broker with SASL listeners")
    sb = secure.start_secure_broker(target, tmp_path_factory.mktemp(f"{target}-quota-sasl"),
                                    users={"alice": "alice-secret", "bob": "bob-secret"},
                                    mechanisms=("SCRAM-SHA-512",))
    try:
        yield sb
    finally:
        sb.proc.stop()


def _max_throttle(sb: Any, user: str, client_id: str, topic: str, records: int) -> int:
    """Produce `records` 1 KiB records as `user` over SASL_PLAINTEXT (acks=all, all delivered);
    the largest throttle_time_ms librdkafka saw."""
    from confluent_kafka import Producer

    seen = [0]

    def stats(text: str) -> None:
        for b in json.loads(text).get("brokers", {}).values():
            seen[0] = max(seen[0], int(b.get("throttle", {}).get("max", 0)))

    conf = secure.confluent_conf(sb.sasl_bootstrap, user, sb.users[user], "SCRAM-SHA-512")
    conf.update({"client.id": client_id, "linger.ms": 5, "batch.size": 4096, "statistics.interval.ms": 100,
                 "stats_cb": stats})
    producer = Producer(conf)
    errors: list[Any] = []
    for _ in range(records):
        producer.produce(topic, b"q" * 1024, partition=0,
                         on_delivery=lambda err, _msg: errors.append(err) if err else None)
    assert producer.flush(60) == 0 and errors == []
    deadline = time.monotonic() + 1.0  # a few statistics intervals after the last answer
    while time.monotonic() < deadline:
        producer.poll(0.1)
    return seen[0]


def test_user_quota_throttles_that_principal_only(sasl_broker: Any) -> None:
    sb = sasl_broker
    topic = _create_topic(sb.bootstrap, "quota-sasl")
    assert alter(sb.bootstrap, [(_entity(user="alice"), {"producer_byte_rate": 1024.0})]) == [
        ({"user": "alice"}, 0, None)]
    wait_until(lambda: quotas_of(describe(sb.bootstrap, [("user", MATCH_EXACT, "alice")])), 15,
               what="alice's quota",
               ok=lambda q: q == {(("user", "alice"),): {"producer_byte_rate": 1024.0}})
    time.sleep(0.5)  # Kafka's broker applies the quota as it publishes the metadata image
    assert _max_throttle(sb, "bob", "same-app", topic, 30) == 0
    assert _max_throttle(sb, "alice", "same-app", topic, 30) > 0  # 30 KiB over 10 KiB per 10 windows
