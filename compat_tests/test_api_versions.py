"""What the broker advertises in ApiVersions, where clients make decisions from it."""

from __future__ import annotations

from .conftest import Broker
from .raw import RawConn


def _versions(broker: Broker) -> dict[int, tuple[int, int]]:
    with RawConn(broker.bootstrap) as c:
        return c.api_versions()


def test_find_coordinator_advertised_from_v0(broker: Broker) -> None:
    """librdkafka (confluent-kafka 2.16) derives its LZ4 feature from FindCoordinator v0
    being advertised (a broker >= 0.8.2 marker); without it, compression.type=lz4 is silently
    sent uncompressed.  Verified by hiding api key 10 from Kafka's answer in a proxy."""
    versions = _versions(broker)
    assert 10 in versions, "FindCoordinator not advertised"
    assert versions[10][0] == 0, f"FindCoordinator advertised as {versions[10]}"


def test_produce_advertised_from_v0(broker: Broker) -> None:
    """Kafka 4.x advertises Produce from v0 although it closes the connection on v0-v2
    (see test_bad_input): older clients' feature detection looks for v0."""
    versions = _versions(broker)
    assert versions[0][0] == 0, f"Produce advertised as {versions[0]}"
    assert versions[0][1] >= 9
