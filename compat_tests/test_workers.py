"""`tmqgate serve --workers 2` (issue 28, broker/workers.py): one command and one data
directory run two brokers of a cluster on this machine (no etcd), each advertised as a broker
of its own on the configured port + its index. A topic's partitions are spread over both; a
producer and a consumer group see one Kafka cluster and get exactly what was acknowledged; SQL
sees both dnodes; a worker killed with -9 is started again by the supervisor with nothing
acknowledged lost; SIGTERM stops them all.

tmqgate only: the reference Kafka has no such mode.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest

from .brokers import _tmqgate_cmd
from .clusters import metadata
from .helpers import api_versions_ok, child_pids, free_port, wait_until

pytestmark = [pytest.mark.serial, pytest.mark.tmqgate_only]


def _listed(bootstrap: str) -> list[tuple[int, int]]:
    return sorted((b["node_id"], b["port"]) for b in metadata(bootstrap, [], timeout=5)["brokers"])


def _leaders(bootstrap: str, topic: str) -> dict[int, int]:
    [t] = metadata(bootstrap, [topic], timeout=5)["topics"]
    return {p["partition_index"]: p["leader_id"] for p in t["partitions"]}


def _consume(bootstrap: str, topic: str, group: str, count: int) -> list[tuple[int, int, bytes]]:
    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    consumer.subscribe([topic])
    got: list[tuple[int, int, bytes]] = []
    try:
        wait_until(lambda: got.extend((m.partition(), m.offset(), m.value()) for m in consumer.consume(500, 0.5)
                                      if m.error() is None) or len(got), 60, 0.1, f"{count} records consumed",
                   ok=lambda n: n >= count)
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    return got


def _sql(http: int, text: str) -> dict[str, Any]:
    req = urllib.request.Request(f"http://127.0.0.1:{http}/rest/sql", data=text.encode(), method="POST")
    with urllib.request.urlopen(req, timeout=60) as resp:
        return json.load(resp)  # type: ignore[no-any-return]


def _produce(bootstrap: str, topic: str, values: list[tuple[int, bytes]]) -> list[tuple[int, int]]:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                         "enable.idempotence": True})
    acked: list[tuple[int, int]] = []
    for part, value in values:
        producer.produce(topic, value, partition=part,
                         on_delivery=lambda err, msg: acked.append((-1, -1) if err else (msg.partition(),
                                                                                       msg.offset())))
        producer.poll(0)
    assert producer.flush(60) == 0
    return sorted(acked)


def test_two_workers_serve_as_one_cluster(tmp_path: Path) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    port, http = free_port(2), free_port(2)
    bootstrap = f"127.0.0.1:{port}"
    log = open(tmp_path / "serve.log", "ab")  # noqa: SIM115 - handed to the child
    proc = subprocess.Popen(_tmqgate_cmd() + ["serve", "--workers", "2", "--listen", bootstrap,
                                             "--http", f"127.0.0.1:{http}", "--data-dir", str(tmp_path / "data")],
                            stdout=log, stderr=subprocess.STDOUT, cwd=tmp_path,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    log.close()
    try:
        workers = [(1, port), (2, port + 1)]  # node ids node_id + i, ports + i
        for p in (port, port + 1):
            wait_until(lambda p=p: api_versions_ok(f"127.0.0.1:{p}"), 60, 0.2, f"worker on {p} ready")
            wait_until(lambda p=p: _listed(f"127.0.0.1:{p}"), 30, 0.2, "both workers listed",
                       ok=lambda listed: listed == workers)
        assert sorted(os.listdir(tmp_path / "data")) == ["cluster.db", "cluster.db-shm", "cluster.db-wal",
                                                         "worker-0", "worker-1"]

        topic = f"w-{uuid.uuid4().hex[:8]}"
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic(topic, num_partitions=4, replication_factor=1)])[topic].result(30)
        leaders = wait_until(lambda: _leaders(bootstrap, topic), 30, 0.2, "every partition led",
                             ok=lambda ls: len(ls) == 4 and -1 not in ls.values())
        assert sorted(leaders.values()) == [1, 1, 2, 2]  # two partitions on each worker

        sent = [(i % 4, f"v{i}".encode()) for i in range(400)]
        assert _produce(bootstrap, topic, sent) == sorted((p, o) for p in range(4) for o in range(100))
        expected = sorted((p, i // 4, v) for i, (p, v) in enumerate(sent))
        assert sorted(_consume(bootstrap, topic, f"g-{topic}", 400)) == expected

        # SQL through either worker's HTTP front: both dnodes, and a database made through one
        # is seen through the other
        db = f"wdb_{uuid.uuid4().hex[:6]}"
        assert _sql(http, f"CREATE DATABASE {db} VGROUPS 2")["code"] == 0
        for front in (http, http + 1):
            dnodes = _sql(front, "SHOW DNODES")
            assert sorted(row[1] for row in dnodes["data"]) == [f"127.0.0.1:{port}", f"127.0.0.1:{port + 1}"]
            wait_until(lambda front=front: [r[0] for r in _sql(front, "SHOW DATABASES")["data"]], 30, 0.2,
                       f"{db} seen through {front}", ok=lambda names: db in names)

        # kill -9 the worker leading partitions 1 and 3's node: the supervisor starts it again
        [worker1] = [pid for pid in child_pids(proc.pid) if _worker_index(pid) == 1]
        os.kill(worker1, signal.SIGKILL)
        wait_until(lambda: api_versions_ok(f"127.0.0.1:{port + 1}") and worker1 not in child_pids(proc.pid), 60, 0.2,
                   "the killed worker started again")
        wait_until(lambda: _listed(bootstrap), 30, 0.2, "both listed again", ok=lambda listed: listed == workers)
        wait_until(lambda: _leaders(bootstrap, topic), 30, 0.2, "its partitions led again",
                   ok=lambda ls: sorted(ls.values()) == [1, 1, 2, 2])
        # nothing acknowledged lost: a new group reads all 400 again
        assert sorted(_consume(bootstrap, topic, f"g2-{topic}", 400)) == expected

        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
        assert not any(api_versions_ok(f"127.0.0.1:{p}") for p in (port, port + 1))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)


def _worker_index(pid: int) -> int | None:
    """The index of a worker process, from the data directory it holds open (LevelDB's LOCK)."""
    try:
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            target = os.readlink(fd)
            for i in (0, 1):
                if f"/worker-{i}/" in target:
                    return i
    except OSError:
        return None
    return None
