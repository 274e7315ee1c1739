"""Bounded resources (issue 11, findings 3 and 4): one request, one connection or many of them
cannot make the broker allocate without limit, and the broker keeps serving afterwards.

What Kafka 4.x does, found by running the unmarked tests against the reference broker:
- CreateTopics whose topics add up to more than 10,000 partitions -> POLICY_VIOLATION (44)
  "Excessively large number of partitions per request." for every topic; nothing is created.
  (One topic of exactly 10,000 is refused too, as "Unable to perform excessively large batch
  operation.": with its topic record it is 10,001 controller records; tmqgate accepts it.)
- CreatePartitions adding 10,001 partitions: a minute later UNKNOWN_SERVER_ERROR (-1), no
  message, and the partitions created all the same — nothing to mirror; tmqgate refuses it
  as CreateTopics (POLICY_VIOLATION), so that test is tmqgate_only.
The tmqgate_only tests use settings Kafka has under the same name but whose test values need
a broker of their own (connections.max.idle.ms, max.connections.per.ip,
queued.max.request.bytes), or settings Kafka does not have (max_partitions, max_databases,
request_read_timeout_ms, the SQL front's max_sql_length).
"""

from __future__ import annotations

import json
import select
import socket
import struct
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from .brokers import TmqgateProcess
from .conftest import Broker
from .helpers import unique_topic, wait_until
from .raw import Closed, RawConn, RoutedConn, one_record_batch

POLICY_VIOLATION = 44
INVALID_PARTITIONS = 37
UNKNOWN_TOPIC_OR_PARTITION = 3
NOT_LEADER_OR_FOLLOWER = 6
TOO_LARGE = "Excessively large number of partitions per request."
CLOSE_WAIT = 10.0  # seconds we give the broker to hang up
CREATE_TOPICS, CREATE_TOPICS_V = 19, 7
CREATE_PARTITIONS, CREATE_PARTITIONS_V = 37, 3
METADATA, METADATA_V = 3, 12


def create_topics(c: RawConn | RoutedConn, *topics: tuple[str, int]) -> list[dict]:
    body = c.request(CREATE_TOPICS, CREATE_TOPICS_V, {
        "topics": [{"name": name, "num_partitions": n, "replication_factor": 1, "assignments": [],
                    "configs": []} for name, n in topics],
        "timeout_ms": 30000, "validate_only": False}, timeout=60)
    return sorted(body["topics"], key=lambda t: t["name"])


def create_partitions(c: RawConn | RoutedConn, name: str, count: int) -> dict:
    body = c.request(CREATE_PARTITIONS, CREATE_PARTITIONS_V, {
        "topics": [{"name": name, "count": count, "assignments": None}],
        "timeout_ms": 30000, "validate_only": False}, timeout=60)
    [result] = body["results"]
    return result


def partitions_of(c: RawConn | RoutedConn, name: str) -> int | None:
    """The topic's partition count in Metadata, None if the broker does not know it."""
    body = c.request(METADATA, METADATA_V, {"topics": [{"name": name, "topic_id": bytes(16)}],
                                            "allow_auto_topic_creation": False,
                                            "include_topic_authorized_operations": False})
    [t] = body["topics"]
    if t["error_code"] == UNKNOWN_TOPIC_OR_PARTITION:
        return None
    assert t["error_code"] == 0, t
    return len(t["partitions"])


def wait_partitions(c: RawConn | RoutedConn, name: str, expected: int) -> None:
    """Metadata shows `expected` partitions (Kafka's metadata follows its controller shortly)."""
    wait_until(lambda: partitions_of(c, name), 10, 0.1, f"{name} with {expected} partitions",
               ok=lambda got: got == expected)


def assert_served(c: RawConn | RoutedConn, topic: str, partition: int = 0) -> None:
    """Produce a unique value and fetch it back at the offset Produce returned (Kafka takes a
    moment to elect the leader of a new partition: NOT_LEADER_OR_FOLLOWER until then)."""
    value = uuid.uuid4().bytes
    p = wait_until(lambda: c.produce(topic, partition, one_record_batch(value)), 10, 0.1, f"{topic}[{partition}] led",
                   ok=lambda p: p["error_code"] not in (NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION))
    assert p["error_code"] == 0, p
    fetched = c.fetch(topic, partition, p["base_offset"])
    assert fetched["error_code"] == 0, fetched
    assert value in fetched["records"]


# -- partitions per request: Kafka's own behaviour, checked against both brokers ------------

def test_create_topics_over_partitions_per_request_is_a_policy_violation(broker: Broker) -> None:
    big, small = unique_topic("limits-big"), unique_topic("limits-small")
    with RoutedConn(broker.bootstrap) as c:
        # One topic of over 10,000 partitions, and a request whose topics add up to over 10,000:
        # both refused whole, nothing created, before anything is allocated.
        for count in (10_001, 10_000_000, 2**31 - 1):
            [r] = create_topics(c, (big, count))
            assert (r["error_code"], r["error_message"]) == (POLICY_VIOLATION, TOO_LARGE), count
        results = create_topics(c, (big, 6000), (small, 6000))
        assert [(r["name"], r["error_code"], r["error_message"]) for r in results] == \
            sorted([(big, POLICY_VIOLATION, TOO_LARGE), (small, POLICY_VIOLATION, TOO_LARGE)])
        assert partitions_of(c, big) is None and partitions_of(c, small) is None
        # ... and the broker keeps serving: a normal topic is created and written
        [r] = create_topics(c, (small, 2))
        assert r["error_code"] == 0, r
        wait_partitions(c, small, 2)
        assert_served(c, small, 1)


@pytest.mark.tmqgate_only
def test_create_partitions_over_partitions_per_request_is_refused(broker: Broker) -> None:
    name = unique_topic("limits-grow")
    with RoutedConn(broker.bootstrap) as c:
        [r] = create_topics(c, (name, 1))
        assert r["error_code"] == 0, r
        r = create_partitions(c, name, 10_002)  # 10,001 new ones
        assert (r["error_code"], r["error_message"]) == (POLICY_VIOLATION, TOO_LARGE)
        wait_partitions(c, name, 1)
        r = create_partitions(c, name, 3)
        assert r["error_code"] == 0, r
        wait_partitions(c, name, 3)
        assert_served(c, name, 2)


# -- a broker of the test's own, with small limits -----------------------------------------

SMALL_LIMITS = {
    "max_partitions": 40,
    "max_databases": 4,
    "connections_max_idle_ms": 1000,
    "request_read_timeout_ms": 1500,
    "max_connections_per_ip": 6,
    # frames up to 8 MiB; the pool holds two of them and 4 MiB more
    "socket_request_max_bytes": 8 << 20,
    "queued_max_request_bytes": 20 << 20,
    "max_sql_length": 64 << 10,
}


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TmqgateProcess]:
    proc = TmqgateProcess(tmp_path_factory.mktemp("limits"), config=SMALL_LIMITS)
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()


def sql(proc: TmqgateProcess, text: str | bytes) -> tuple[int, dict | str]:
    data = text if isinstance(text, bytes) else text.encode()
    req = urllib.request.Request(f"http://127.0.0.1:{proc.http_port}/rest/sql", data=data, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            return resp.status, json.load(resp)
    except urllib.error.HTTPError as exc:
        raw = exc.read().decode(errors="replace")
        try:
            return exc.code, json.loads(raw)
        except ValueError:
            return exc.code, raw


@pytest.mark.tmqgate_only
def test_long_sql_is_parsed_off_the_loop_and_runs(small: TmqgateProcess) -> None:
    """A statement over 16 KiB is parsed in the parsing process (bench/listener_stall.py
    measures the listener meanwhile) and then runs as any other: every row is inserted."""
    assert sql(small, "CREATE DATABASE IF NOT EXISTS longsql VGROUPS 1")[0] == 200
    assert sql(small, "CREATE STABLE longsql.st (ts TIMESTAMP, v INT) TAGS (t INT)")[0] == 200
    rows = " ".join(f"({1_700_000_000_000 + i}, {i})" for i in range(2500))
    text = f"INSERT INTO longsql.t1 USING longsql.st TAGS (1) VALUES {rows}"
    assert 16 << 10 < len(text) < 64 << 10
    status, answer = sql(small, text)
    assert (status, answer["data"]) == (200, [[2500]]), answer  # type: ignore[index]
    # a parse error found in the parsing process comes back as any syntax error, and short
    status, answer = sql(small, text + " garbage")
    assert (status, answer["code"]) == (400, 0x2600), answer  # type: ignore[index]
    assert len(answer["desc"]) < 300  # type: ignore[index]
    assert sql(small, "DROP DATABASE longsql")[0] == 200  # the caps test counts databases

@pytest.mark.tmqgate_only
def test_broker_wide_partition_and_database_caps(small: TmqgateProcess) -> None:
    """max_partitions (40) and max_databases (4) hold for CreateTopics, CreatePartitions and
    CREATE DATABASE alike; what is refused is not created, and the broker keeps serving."""
    a, b = unique_topic("cap-a"), unique_topic("cap-b")
    with RawConn(small.bootstrap) as c:
        [r] = create_topics(c, (a, 30))
        assert r["error_code"] == 0, r
        [r] = create_topics(c, (b, 11))  # 30 + 11 > 40
        assert r["error_code"] == POLICY_VIOLATION, r
        assert "max_partitions (40)" in r["error_message"]
        assert partitions_of(c, b) is None
        r = create_partitions(c, a, 41)
        assert r["error_code"] == POLICY_VIOLATION, r
        assert partitions_of(c, a) == 30
        status, answer = sql(small, "CREATE DATABASE capdb VGROUPS 11")
        assert status == 400 and "max_partitions (40)" in answer["desc"], answer
        r = create_partitions(c, a, 40)  # exactly at the cap
        assert r["error_code"] == 0, r
        assert_served(c, a, 39)
        # make room in partitions (delete `a`), then count databases alone: four fit
        body = c.request(20, 6, {"topics": [{"name": a, "topic_id": bytes(16)}], "timeout_ms": 30000})
        assert body["responses"][0]["error_code"] == 0, body
        for i in range(4):
            status, answer = sql(small, f"CREATE DATABASE capdb{i} VGROUPS 1")
            assert (status, answer.get("code")) == (200, 0), answer  # type: ignore[union-attr]
        status, answer = sql(small, "CREATE DATABASE capdb4 VGROUPS 1")
        assert status == 400 and "max_databases (4)" in answer["desc"], answer
        [r] = create_topics(c, (b, 1))
        assert r["error_code"] == POLICY_VIOLATION and "max_databases (4)" in r["error_message"], r
        c.api_versions()


@pytest.mark.tmqgate_only
def test_idle_connection_is_closed(small: TmqgateProcess) -> None:
    """connections_max_idle_ms (1 s here): a connection that sends nothing more is closed."""
    with RawConn(small.bootstrap) as c:
        c.api_versions()
        assert c.closed_within(CLOSE_WAIT)
    with RawConn(small.bootstrap) as c:  # silent from the start
        assert c.closed_within(CLOSE_WAIT)
    with RawConn(small.bootstrap) as c:
        c.api_versions()


@pytest.mark.tmqgate_only
def test_partial_frame_is_closed_after_read_timeout(small: TmqgateProcess) -> None:
    """request_read_timeout_ms (1.5 s): a frame announced but never completed closes its
    connection, even while the client keeps trickling bytes (which resets no idle timer)."""
    with RawConn(small.bootstrap) as c:
        c.send_bytes(struct.pack(">i", 1000) + b"\x00" * 10)
        closed = False
        for _ in range(40):  # a byte every 0.25 s: never idle for 1 s, never done
            try:
                c.send_bytes(b"\x00")
            except (BrokenPipeError, ConnectionResetError):
                closed = True
                break
            if c.closed_within(0.25):
                closed = True
                break
        assert closed
    with RawConn(small.bootstrap) as c:
        c.api_versions()


@pytest.mark.tmqgate_only
def test_connections_over_max_connections_per_ip_are_closed(small: TmqgateProcess) -> None:
    """max_connections_per_ip (6): the 7th connection from 127.0.0.1 is closed at once; once
    one closes, a new one is served."""
    conns = [RawConn(small.bootstrap) for _ in range(6)]
    try:
        for c in conns:
            c.api_versions()
        extra = RawConn(small.bootstrap)
        try:
            assert extra.closed_within(CLOSE_WAIT)
        finally:
            extra.close()
        conns.pop().close()
        for c in conns:
            c.api_versions()
        again = None
        for _ in range(50):  # the broker counts the closed one down when it sees the EOF
            again = RawConn(small.bootstrap)
            try:
                again.api_versions()
                break
            except Closed:
                again.close()
                again = None
                select.select([], [], [], 0.1)
        assert again is not None
        again.close()
    finally:
        for c in conns:
            c.close()


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def _broker_pid(proc: TmqgateProcess) -> int:
    assert proc.proc is not None
    return proc.proc.pid


@pytest.mark.tmqgate_only
def test_many_huge_frames_hold_no_more_than_the_pool(tmp_path: Path) -> None:
    """32 connections each announce an 8 MiB frame and send 7 MiB of it (224 MiB in all):
    the broker reads only what queued_max_request_bytes (20 MiB) holds, the rest waits in
    the kernel's socket buffers; its RSS stays under idle + pool + slack; a normal client is
    served meanwhile; when the senders go, everything is given back."""
    # a broker of its own (the per-IP cap of the module broker would refuse 32 connections)
    config = {**SMALL_LIMITS, "max_connections_per_ip": 1000, "connections_max_idle_ms": 600_000,
              "request_read_timeout_ms": 600_000}
    proc = TmqgateProcess(tmp_path / "pool", config=config)
    proc.start()
    try:
        name = unique_topic("pool")
        with RawConn(proc.bootstrap) as good:
            [r] = create_topics(good, (name, 1))
            assert r["error_code"] == 0, r
            assert_served(good, name)
            idle = _rss_kib(_broker_pid(proc))
            frame, sent_each = 8 << 20, 7 << 20
            senders = []
            for _ in range(32):
                s = socket.create_connection(("127.0.0.1", proc.port))
                s.setblocking(False)
                s.send(struct.pack(">i", frame))
                senders.append([s, 0])
            chunk = b"\x00" * (256 << 10)
            while True:  # push until every socket is full or done
                pending = [e for e in senders if e[1] < sent_each]
                if not pending:
                    break
                _, writable, _ = select.select([], [e[0] for e in pending], [], 2.0)
                if not writable:
                    break  # no socket took a byte for 2 s: the broker reads nothing more
                for e in pending:
                    if e[0] in writable:
                        try:
                            e[1] += e[0].send(chunk[:sent_each - e[1]])
                        except BlockingIOError:
                            pass
            total_sent = sum(e[1] for e in senders)
            rss = _rss_kib(_broker_pid(proc))
            pool_kib = config["queued_max_request_bytes"] >> 10
            slack_kib = 48 << 10
            assert total_sent > 3 * (pool_kib << 10)  # the clients did push far more than the pool
            assert rss - idle < pool_kib + slack_kib, (idle, rss, total_sent)
            # a normal client is served while the pool is held
            assert_served(good, name)
            for e in senders:
                e[0].close()
            assert_served(good, name)
        with RawConn(proc.bootstrap) as c:
            assert_served(c, name)
    finally:
        proc.stop()


@pytest.mark.tmqgate_only
def test_sql_body_over_max_sql_length_is_refused_unread(small: TmqgateProcess) -> None:
    """max_sql_length (64 KiB here, TDengine's 1 MiB by default): a larger /rest/sql body is
    answered 413 without being parsed or echoed, and an error never quotes more than ~300
    characters of a statement; the front keeps serving."""
    body = b"SELECT '" + b"x" * (64 << 10) + b"'"
    status, answer = sql(small, body)
    assert status == 413
    assert len(str(answer)) < 1000
    status, answer = sql(small, "SHOW DATABASES")
    assert status == 200, answer
    # under the limit, a statement whose error quotes a 60 KB literal quotes only its ends
    status, answer = sql(small, "DROP DATABASE '" + "y" * 60_000 + "'")
    assert (status, answer["code"]) == (400, 0x2600), answer  # type: ignore[index]
    desc = answer["desc"]  # type: ignore[index]
    assert len(desc) <= 320 and desc.startswith("syntax error near 'yyy") and "at position 14" in desc, desc
    with RawConn(small.bootstrap) as c:
        c.api_versions()


