"""Kafka Connect (Apache Kafka 4.3.1's distributed worker, unchanged) against the broker.

The worker keeps its connector configs, source offsets and statuses in three topics it
creates itself, compacted (cleanup.policy=compact, replication factor 1), and runs its
workers as a group of the "connect" protocol.  FileStreamSource reads a file into a topic,
one record per line; FileStreamSink writes a topic's records into a file, one per line.
Run with `--target kafka` to check the same against the reference broker.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .conftest import Broker
from .connect_helpers import ConnectWorker, connect_jars_installed
from .helpers import require, unique_topic, wait_until

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def _connect_jars() -> None:
    require(connect_jars_installed(), "Kafka Connect jars not installed", "scripts/install_java.sh")

SOURCE = "org.apache.kafka.connect.file.FileStreamSourceConnector"
SINK = "org.apache.kafka.connect.file.FileStreamSinkConnector"


def topic_values(bootstrap: str, topic: str) -> list[tuple[int, str]]:
    """(offset, value) of every record of partition 0 of `topic`, read from the start to
    the end offset as a plain consumer sees them."""
    from kafka import KafkaConsumer, TopicPartition

    tp = TopicPartition(topic, 0)
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None,
                             consumer_timeout_ms=10000)
    try:
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        end = consumer.end_offsets([tp])[tp]
        out: list[tuple[int, str]] = []
        while consumer.position(tp) < end:
            for records in consumer.poll(timeout_ms=1000).values():
                out.extend((r.offset, r.value.decode()) for r in records)
        return out
    finally:
        consumer.close()


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def write_lines(path: Path, items: list[str]) -> None:
    with path.open("a") as f:
        f.write("".join(f"{x}\n" for x in items))


def source_config(file: Path, topic: str) -> dict[str, str]:
    return {"connector.class": SOURCE, "file": str(file), "topic": topic, "tasks.max": "1"}


def sink_config(file: Path, topic: str) -> dict[str, str]:
    return {"connector.class": SINK, "file": str(file), "topics": topic, "tasks.max": "1"}


@pytest.fixture
def workers(tmp_path: Path) -> Iterator[list[ConnectWorker]]:
    """Workers a test starts; all stopped (and their log tails shown on failure) at the end."""
    started: list[ConnectWorker] = []
    yield started
    for w in started:
        w.stop()


def new_worker(workers: list[ConnectWorker], tmp_path: Path, broker: Broker, group: str,
               name: str = "worker") -> ConnectWorker:
    w = ConnectWorker(tmp_path / "connect", broker.bootstrap, group, name=name)
    workers.append(w)
    w.start()
    return w


def test_file_source_to_sink_copies_a_file_exactly(broker: Broker, tmp_path: Path,
                                                    workers: list[ConnectWorker]) -> None:
    group = unique_topic("connect-copy")
    topic = unique_topic("connect-lines")
    w = new_worker(workers, tmp_path, broker, group)
    src, dst = tmp_path / "in.txt", tmp_path / "out.txt"
    sent = [f"line {i} {'x' * (i % 37)}" for i in range(500)]
    write_lines(src, sent)
    w.put_connector("copy-source", source_config(src, topic))
    w.put_connector("copy-sink", sink_config(dst, topic))
    wait_until(lambda: len(lines(dst)) >= len(sent), 120, 0.5,
               f"the sink file to hold {len(sent)} lines\n{w.log_tail()}")
    assert lines(dst) == sent
    # the topic holds the lines once each, in order, at offsets 0..N-1
    assert topic_values(broker.bootstrap, topic) == list(enumerate(sent))
    assert w.running("copy-source") and w.running("copy-sink")
    # the worker created its internal topics compacted, one partition for configs
    from confluent_kafka import TopicCollection
    from confluent_kafka.admin import AdminClient, ConfigResource

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    names = [f"{group}-configs", f"{group}-offsets", f"{group}-status"]
    resources = [ConfigResource(ConfigResource.Type.TOPIC, n) for n in names]
    described = admin.describe_configs(resources)
    assert {r.name: described[r].result(30)["cleanup.policy"].value for r in resources} == \
        dict.fromkeys(names, "compact")
    topics = admin.describe_topics(TopicCollection(names))
    assert {n: len(topics[n].result(30).partitions) for n in names} == {names[0]: 1, names[1]: 5, names[2]: 3}


def committed_position(w: ConnectWorker, connector: str) -> int | None:
    """The source offset (a byte position in the file) the worker has committed for
    `connector` (GET /connectors/<name>/offsets, KIP-875)."""
    status, body = w.rest("GET", f"/connectors/{connector}/offsets")
    if status != 200 or not body or not body.get("offsets"):
        return None
    return int(body["offsets"][0]["offset"]["position"])


def test_killed_worker_resumes_from_committed_source_offsets(broker: Broker, tmp_path: Path,
                                                             workers: list[ConnectWorker]) -> None:
    group = unique_topic("connect-kill")
    topic = unique_topic("connect-kill-lines")
    w = new_worker(workers, tmp_path, broker, group)
    src = tmp_path / "in.txt"
    before = [f"before {i}" for i in range(200)]
    write_lines(src, before)
    w.put_connector("kill-source", source_config(src, topic))
    size = src.stat().st_size
    wait_until(lambda: committed_position(w, "kill-source") == size, 120, 0.5,
               f"source offset {size} committed\n{w.log_tail()}")
    w.kill()  # SIGKILL: no shutdown, no last offset flush
    after = [f"after {i}" for i in range(100)]
    write_lines(src, after)
    w.start()
    wait_until(lambda: len(topic_values(broker.bootstrap, topic)) >= len(before) + len(after), 180, 1.0,
               f"{len(before) + len(after)} records in {topic}\n{w.log_tail()}")
    wait_until(lambda: committed_position(w, "kill-source") == src.stat().st_size, 60, 0.5,
               "the restarted worker's source offset at the end of the file")
    # committed before the kill: nothing re-read; appended after: each line once, in order
    assert [v for _, v in topic_values(broker.bootstrap, topic)] == before + after
    assert w.running("kill-source")


def placement(w: ConnectWorker, connectors: list[str]) -> dict[str, str]:
    """connector or task id -> worker_id (host:port) of the RUNNING ones, as the REST
    status shows them."""
    out: dict[str, str] = {}
    for name in connectors:
        s: Any = w.status(name)
        if not s:
            continue
        if s["connector"]["state"] == "RUNNING":
            out[name] = s["connector"]["worker_id"]
        for t in s.get("tasks", []):
            if t["state"] == "RUNNING":
                out[f"{name}-{t['id']}"] = t["worker_id"]
    return out


def test_two_workers_share_connectors_and_take_over_when_one_leaves(broker: Broker, tmp_path: Path,
                                                                    workers: list[ConnectWorker]) -> None:
    group = unique_topic("connect-two")
    w1 = new_worker(workers, tmp_path, broker, group, "worker1")
    w2 = new_worker(workers, tmp_path, broker, group, "worker2")
    ids = {f"127.0.0.1:{w1.rest_port}", f"127.0.0.1:{w2.rest_port}"}
    pipes = []
    for p in ("a", "b"):
        topic = unique_topic(f"connect-two-{p}")
        src, dst = tmp_path / f"in-{p}.txt", tmp_path / f"out-{p}.txt"
        write_lines(src, [f"{p} first {i}" for i in range(100)])
        w1.put_connector(f"src-{p}", source_config(src, topic))
        w1.put_connector(f"sink-{p}", sink_config(dst, topic))
        pipes.append((p, src, dst))
    names = [f"{kind}-{p}" for p, _, _ in pipes for kind in ("src", "sink")]
    units = len(names) * 2  # each connector and its one task

    def spread() -> bool:
        where = placement(w1, names)
        return len(where) == units and set(where.values()) == ids

    wait_until(spread, 120, 0.5, f"{units} connectors and tasks RUNNING on both workers\n{w1.log_tail()}")
    where = placement(w1, names)
    per_worker = {i: sum(1 for v in where.values() if v == i) for i in ids}
    assert sorted(per_worker.values()) == [units // 2, units // 2]  # the leader balances them evenly
    for p, _, dst in pipes:
        wait_until(lambda dst=dst: len(lines(dst)) >= 100, 120, 0.5, f"{dst} copied")
        assert lines(dst) == [f"{p} first {i}" for i in range(100)]

    w2.stop()  # leaves the group: its connectors and tasks move to worker1
    only = {f"127.0.0.1:{w1.rest_port}"}
    wait_until(lambda: len(placement(w1, names)) == units and set(placement(w1, names).values()) == only,
               120, 0.5, f"all connectors and tasks RUNNING on worker1 alone\n{w1.log_tail()}")
    for p, src, _ in pipes:
        write_lines(src, [f"{p} second {i}" for i in range(50)])
    for p, _, dst in pipes:
        wait_until(lambda dst=dst: len(lines(dst)) >= 150, 120, 0.5, f"{dst} copied after the move")
        assert lines(dst) == [f"{p} first {i}" for i in range(100)] + [f"{p} second {i}" for i in range(50)]
