"""Spark's Kafka source on a cluster (issue 16's fault list): a streaming query with the
default failOnDataLoss=true reads a replicated topic while an idempotent acks=all producer
writes to it and a partition leader is killed -9 and restarted, then the broker Metadata names
as the controller (tmqgate's controller; Kafka names some broker, its KRaft quorum runs apart):
the query never fails, and it reads every acknowledged record exactly once, in order.

On both targets (compat_tests/clusters.py), Spark's kafka-clients 3.9 as the client.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .clusters import metadata, three_brokers
from .helpers import wait_until
from .spark_helpers import spark_session
from .test_cluster_replication import LAG_MS, PARTITIONS, _kill_and_restart_leader, _Load, _replicated_topic
from .test_spark_kafka import _stream_topic

# kills brokers, runs a soak or starts a cluster: one such module at a time (compat_tests/serial.py)
pytestmark = pytest.mark.serial


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    session = spark_session("compat-cluster-spark")
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture
def cluster(pytestconfig: pytest.Config, target: str, tmp_path: Path) -> Iterator[dict[int, Any]]:
    with three_brokers(pytestconfig, target, tmp_path, lag_ms=LAG_MS) as nodes:
        wait_until(lambda: [len(metadata(p.bootstrap, [], timeout=5)["brokers"]) for p in nodes.values()], 40,
                   0.2, "every broker sees the other two", ok=lambda seen: seen == [3, 3, 3],
                   retry_errors=True)
        yield nodes


def test_a_stream_with_fail_on_data_loss_reads_every_record_through_broker_kills(
        cluster: dict[int, Any], target: str, spark: Any) -> None:
    topic = _replicated_topic(cluster)
    boot = ",".join(p.bootstrap for p in cluster.values())
    load = _Load(boot, topic)
    load.thread.start()

    def faults() -> None:
        wait_until(load.count, 40, 0.2, "the producer under way", ok=lambda c: c >= 300)
        _kill_and_restart_leader(cluster, topic, load, 0)
        controller = int(metadata(cluster[0].bootstrap, [])["controller_id"])
        _kill_and_restart_node(controller if controller in cluster else 0)
        load.stopped.set()
        load.thread.join(150)

    def _kill_and_restart_node(node: int) -> None:
        before = load.count()
        cluster[node].kill()
        wait_until(load.count, 60, 0.2, f"writes going on without broker {node}",
                   ok=lambda c: c >= before + 300)
        cluster[node].start()

    rows = _stream_topic(spark, boot, topic, faults, **{"kafka.metadata.max.age.ms": "1000"})
    assert not load.failed, load.failed[:5]
    got: dict[int, list[int]] = {p: [] for p in range(PARTITIONS)}
    positions = [(r["partition"], r["offset"]) for r in rows]
    assert len(positions) == len(set(positions)), "a record was delivered twice"
    for r in sorted(rows, key=lambda r: (r["partition"], r["offset"])):
        got[r["partition"]].append(int(r["value"]))
    for p in range(PARTITIONS):
        assert got[p] == load.acked[p], (p, len(got[p]), len(load.acked[p]))
