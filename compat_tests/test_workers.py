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

from tmqgate.protocol.internal_topics import parse_offset_commit_key, partition_for

from .brokers import _tmqgate_cmd
from .clusters import metadata
from .helpers import api_versions_ok, child_pids, free_port, wait_until
from .raw import RawConn, group_commit_records

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


def _metrics(http: int, query: str = "") -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """GET /metrics: each series' value by (sample name, sorted labels)."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"http://127.0.0.1:{http}/metrics{query}", timeout=30) as resp:
        text = resp.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for f in text_string_to_metric_families(text) for s in f.samples}


def _serve(tmp_path: Path, data: Path, port: int, http: int, *flags: str) -> subprocess.Popen[bytes]:
    """`tmqgate serve` as a user runs it: no TMQGATE_WORKERS (the suite's brokers get 1); its
    output in `serve-<data dir name>.log`."""
    env = {k: v for k, v in os.environ.items() if k != "TMQGATE_WORKERS"}
    log = open(tmp_path / f"serve-{data.name}.log", "ab")  # noqa: SIM115 - handed to the child
    proc = subprocess.Popen(_tmqgate_cmd() + ["serve", *flags, "--listen", f"127.0.0.1:{port}",
                                             "--http", f"127.0.0.1:{http}", "--data-dir", str(data)],
                            stdout=log, stderr=subprocess.STDOUT, cwd=tmp_path, env={**env, "PYTHONUNBUFFERED": "1"})
    log.close()
    return proc


def _stop(proc: subprocess.Popen[bytes], tmp_path: Path) -> None:
    """SIGTERM, as an operator stops it: every worker stops cleanly (exit 0); else the serve
    logs' ends, where a slow stop writes its threads and tasks (broker/cli.py)."""
    proc.send_signal(signal.SIGTERM)
    rc = proc.wait(60)
    tails = "".join(f"\n--- {log.name}\n" + log.read_text(errors="replace")[-6000:]
                    for log in sorted(tmp_path.glob("serve-*.log")))
    assert rc == 0, f"tmqgate serve exited {rc}{tails}"


def _ready(tmp_path: Path, data: Path, count: int) -> None:
    """Until `count` "tmqgate ready" lines are in the serve log of `data`: printed once a broker
    listens and handles SIGTERM (a SIGTERM before that ends it as the default action would)."""
    log = tmp_path / f"serve-{data.name}.log"
    wait_until(lambda: log.read_text(errors="replace").count("tmqgate ready"), 60, 0.2,
               f"{count} ready line(s) in {log.name}", ok=lambda n: n >= count)


def test_one_worker_per_core_by_default_and_a_data_directory_keeps_its_shape(tmp_path: Path) -> None:
    """`tmqgate serve` with no --workers runs one worker per core on a new data directory; a
    data directory a single broker made runs one broker, and `--workers 2` on it is refused with
    the reason (exit 2) before anything listens."""
    from tmqgate.broker.workers import cores

    n = cores()
    port, http = free_port(n), free_port(n)
    proc = _serve(tmp_path, tmp_path / "new", port, http)
    try:
        _ready(tmp_path, tmp_path / "new", n)  # one per worker
        wait_until(lambda: _listed(f"127.0.0.1:{port}"), 30, 0.2, f"{n} workers listed",
                   ok=lambda listed: listed == [(1 + i, port + i) for i in range(n)])
        assert sorted(d for d in os.listdir(tmp_path / "new") if d.startswith("worker-")) == \
            [f"worker-{i}" for i in range(n)]
    finally:
        _stop(proc, tmp_path)

    single = tmp_path / "single"
    proc = _serve(tmp_path, single, port, http, "--workers", "1")
    _ready(tmp_path, single, 1)
    _stop(proc, tmp_path)
    proc = _serve(tmp_path, single, port, http)  # the default on a single broker's data: one broker
    try:
        _ready(tmp_path, single, 2)  # its own ready line after the first broker's
        assert _listed(f"127.0.0.1:{port}") == [(1, port)]
        assert not any(d.startswith("worker-") for d in os.listdir(single))
    finally:
        _stop(proc, tmp_path)
    refused = subprocess.run(_tmqgate_cmd() + ["serve", "--workers", "2", "--listen", f"127.0.0.1:{port}",
                                               "--http", f"127.0.0.1:{http}", "--data-dir", str(single)],
                             capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2
    assert f"the data directory {single} holds one broker's data; run it with --workers 1" in refused.stderr


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

        # /metrics on either front is the whole server's: each worker took 200 of the records
        messages_in = ("kafka_server_brokertopicmetrics_messagesin_total", (("topic", topic),))
        for front in (http, http + 1):
            assert _metrics(front)[messages_in] == 400
            assert _metrics(front)[("tmqgate_workers_unreached", ())] == 0
            assert _metrics(front, "?scope=worker")[messages_in] == 200

        # SQL through either worker's HTTP front: both dnodes, and a database made through one
        # is seen through the other
        db = f"wdb_{uuid.uuid4().hex[:6]}"
        assert _sql(http, f"CREATE DATABASE {db} VGROUPS 2")["code"] == 0
        for front in (http, http + 1):
            dnodes = _sql(front, "SHOW DNODES")
            assert sorted(row[1] for row in dnodes["data"]) == [f"127.0.0.1:{port}", f"127.0.0.1:{port + 1}"]
            wait_until(lambda front=front: [r[0] for r in _sql(front, "SHOW DATABASES")["data"]], 30, 0.2,
                       f"{db} seen through {front}", ok=lambda names: db in names)
        # a query topic made with an admin client on the worker that does not hold the database
        # (CreateTopics with tmq.as) is the cluster's: both workers serve it, rows and all
        assert _sql(http, f"CREATE STABLE {db}.m (ts TIMESTAMP, v INT) TAGS (g INT)")["code"] == 0
        assert _sql(http, f"INSERT INTO {db}.d1 USING {db}.m TAGS (1) VALUES (1700000000000, 5) "
                          f"{db}.d2 USING {db}.m TAGS (2) VALUES (1700000000000, 50)")["code"] == 0
        view = f"{db}_big"
        with RawConn(f"127.0.0.1:{port + 1}") as conn:  # to that worker itself, not the controller
            [made] = conn.request(19, 7, {"topics": [{
                "name": view, "num_partitions": -1, "replication_factor": -1, "assignments": [],
                "configs": [{"name": "tmq.as", "value": f"SELECT ts, v FROM {db}.m WHERE v > 10"}]}],
                "timeout_ms": 30000, "validate_only": False})["topics"]
        assert (made["error_code"], made["num_partitions"]) == (0, 2), made
        for worker_port in (port, port + 1):
            assert set(_leaders(f"127.0.0.1:{worker_port}", view)) == {0, 1}
        rows = _consume(bootstrap, view, f"g-{view}", 1)
        assert [(json.loads(v)["v"]) for _, _, v in rows] == [50]
        # a SELECT through either front runs where the database is led (sent on by the other)
        for front in (http, http + 1):
            answer = _sql(front, f"SELECT tbname, v, g FROM {db}.m ORDER BY tbname")
            assert answer["data"] == [["d1", 5, 1], ["d2", 50, 2]], (front, answer)
        # ALTER DATABASE through the other front: every worker keeps the new retention
        assert _sql(http + 1, f"ALTER DATABASE {db} WAL_RETENTION_PERIOD 7200")["code"] == 0
        for front in (http, http + 1):
            wait_until(lambda front=front: [r[3] for r in _sql(front, "SHOW DATABASES")["data"] if r[0] == db], 30,
                       0.2, f"{db}'s retention seen through {front}", ok=lambda seen: seen == [7200])

        # a group coordinated by the worker about to be killed commits 100 on each partition
        offsets_leaders = _leaders(bootstrap, "__consumer_offsets")  # it follows the coordinators
        assert len(offsets_leaders) == 6 and set(offsets_leaders.values()) == {1, 2}
        group = next(g for g in (f"g3-{topic}-{i}" for i in range(100))
                     if offsets_leaders[partition_for(g, 6)] == 2)
        assert len(_consume(bootstrap, topic, group, 400)) >= 400

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
        # and __consumer_offsets, read from whichever worker leads the group's partition now,
        # holds the group's commits
        assert wait_until(lambda: _committed_in_log(bootstrap, group, topic), 30, 0.5,
                          "the group's commits in __consumer_offsets", retry_errors=True) == {p: 100 for p in range(4)}

        _stop(proc, tmp_path)
        assert not any(api_versions_ok(f"127.0.0.1:{p}") for p in (port, port + 1))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)


def test_a_second_sigterm_while_the_workers_end_still_stops_them_cleanly(tmp_path: Path) -> None:
    """A process group's SIGTERM (systemd's, Ctrl-C's SIGINT, a test's killpg) reaches every
    worker and the supervisor, which sends its own a moment later: under load that moment may
    come after a worker's stop ended and its event loop closed. The supervisor is held here
    (SIGSTOP) while each worker is sent SIGTERM and then again every 2 ms until it is gone; the
    serve still exits 0 (CI saw 15: the loop's handlers, removed when it closed, had left the
    default action for the rest of the exit)."""
    port, http = free_port(2), free_port(2)
    data = tmp_path / "data"
    proc = _serve(tmp_path, data, port, http, "--workers", "2")
    try:
        _ready(tmp_path, data, 2)
        workers = [pid for pid in child_pids(proc.pid) if _worker_index(pid) is not None]
        assert len(workers) == 2
        os.kill(proc.pid, signal.SIGSTOP)
        sent = 0

        def ended(pid: int) -> bool:
            try:
                os.kill(pid, signal.SIGTERM)
                with open(f"/proc/{pid}/stat") as fh:
                    return fh.read().rsplit(")", 1)[1].split()[0] == "Z"  # ended, not yet reaped
            except (ProcessLookupError, FileNotFoundError):
                return True

        def all_ended() -> bool:
            nonlocal sent
            sent += 1
            return all([ended(pid) for pid in workers])

        wait_until(all_ended, 60, 0.002, "both workers ended")
        assert sent > 1  # each was sent SIGTERM again while it ended
    finally:
        os.kill(proc.pid, signal.SIGCONT)
    _stop(proc, tmp_path)


def _committed_in_log(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    """The group's committed offsets of `topic` as its partition of __consumer_offsets says
    (the newest record of each key; Fetch sent to the partition's leader)."""
    newest: dict[int, int | None] = {}
    for _, key, value in group_commit_records(bootstrap, partition_for(group, 6), group):
        _, t, p = parse_offset_commit_key(key)
        if t == topic:
            newest[p] = None if value is None else int.from_bytes(value[2:10], "big")
    return {p: o for p, o in newest.items() if o is not None}


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
