"""The vendored Apache Kafka message schemas (protocol/resources, scripts/refresh_schemas.py)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from kafka.partitioner.default import murmur2 as kafka_python_murmur2

from tmqgate.broker.apis import ApiKey
from tmqgate.protocol.partitioner import murmur2, partition_for
from tmqgate.protocol.schemas import KAFKA_VERSION, RESOURCES, SCHEMAS, load_messages

ROOT = Path(__file__).resolve().parent.parent


def test_schemas_come_from_the_reference_brokers_release():
    pom = (ROOT / "compat_tests" / "java" / "pom.xml").read_text(encoding="utf-8")
    pinned = re.search(r"<kafka\.version>([^<]+)</kafka\.version>", pom).group(1)
    assert KAFKA_VERSION == pinned, "run scripts/refresh_schemas.py after a Kafka version bump"


def test_every_api_the_broker_knows_has_its_schemas():
    missing = [k.name for k in ApiKey if k not in SCHEMAS]
    assert not missing, f"run scripts/refresh_schemas.py to vendor the schemas of {missing}"
    for name in ("RequestHeader", "ResponseHeader", "ConsumerProtocolAssignment", "ConsumerProtocolSubscription"):
        assert name in load_messages()


def test_vendored_files_are_apache_kafkas_verbatim():
    files = sorted(RESOURCES.glob("*.json"))
    assert len(files) == 2 * len(ApiKey) + 4
    for path in files:
        head = path.read_text(encoding="utf-8")[:800]
        assert "Licensed to the Apache Software Foundation (ASF)" in head, path.name
        assert "http://www.apache.org/licenses/LICENSE-2.0" in head, path.name
    provenance = (RESOURCES / "VERSION").read_text(encoding="utf-8")
    assert f"org.apache.kafka:kafka-clients:{KAFKA_VERSION}" in provenance
    assert re.search(r"sha256: [0-9a-f]{64}", provenance)


@pytest.mark.parametrize("n", range(0, 41))
def test_murmur2_is_the_java_clients(n):
    data = os.urandom(n)
    assert murmur2(data) == kafka_python_murmur2(data)


def test_murmur2_known_values():
    # org.apache.kafka.common.utils.UtilsTest.testMurmur2 (Java ints, as unsigned 32-bit)
    cases = {b"21": -973932308, b"foobar": -790332482, b"a-little-bit-long-string": -985981536,
             b"a-little-bit-longer-string": -1486304829,
             b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971, b"abc": 479470107}
    for data, java in cases.items():
        assert murmur2(data) == java & 0xFFFFFFFF
    assert partition_for(b"foobar", 4) == (-790332482 & 0x7FFFFFFF) % 4
