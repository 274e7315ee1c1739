"""Shared boilerplate for the compatibility suite.

One way per client library (kafka-python, aiokafka, confluent-kafka) to create a topic,
produce, consume from the beginning with manual assignment, list offsets, list topics and
delete a topic, so the tests themselves only state what must hold.  Everything here talks
to the broker over TCP exactly as a user's program would.
"""

from __future__ import annotations

import asyncio
import importlib
import os
import random
import socket
import struct
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from types import ModuleType
from typing import Any, NoReturn, TypeVar

Headers = tuple[tuple[str, bytes | None], ...]
T = TypeVar("T")

CLIENTS = ("kafka-python", "aiokafka", "confluent")
CODECS = ("gzip", "snappy", "lz4", "zstd")
# kafka-python refuses null header values on send (TypeError); the others pass them through.
NULL_HEADER_VALUES = {"kafka-python": False, "aiokafka": True, "confluent": True}


def unique_topic(prefix: str) -> str:
    """A topic name no other test (or earlier run against the same broker) uses."""
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


#: The lowest port a test's server is given.
SERVER_PORTS_FROM = 10_000
_port_choice = random.SystemRandom()  # not `random`: a test seeding it must not make lanes pick alike


def _ephemeral_low() -> int:
    """The start of the kernel's ephemeral range (Linux's ip_local_port_range; its default)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768


def free_port(count: int = 1) -> int:
    """An unused loopback TCP port for a test's server to listen on, below the ephemeral range;
    with ``count``, a port P with P + 1 … P + count - 1 free too (`serve --workers`: one per worker).

    A port from bind(0) is an ephemeral one, and every outgoing connection of every process
    takes its local port from that range too: one could take it before the server bound it
    (CI on 9967680: a cluster node "Address already in use", with four lanes connecting
    hard). Below the range only another test's server can, and picked at random among
    ~22,000 ports, the chance that two lanes pick one in the same moment is negligible."""
    high = _ephemeral_low() - count + 1  # the last of the ports below the range too
    for _ in range(200):
        port = _port_choice.randrange(SERVER_PORTS_FROM, high) if high > SERVER_PORTS_FROM + 1000 else 0
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            port = int(s.getsockname()[1])
        if all(_bindable(port + i) for i in range(1, count)):
            return port
    raise AssertionError(f"no {count} free port(s) below the ephemeral range after 200 tries")


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def child_pids(pid: int) -> list[int]:
    """The process's children (every thread's, from /proc), sorted."""
    out: set[int] = set()
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/children") as fh:
            out.update(int(c) for c in fh.read().split())
    return sorted(out)


def split_hostport(hostport: str) -> tuple[str, int]:
    host, _, port = hostport.rpartition(":")
    return host, int(port)


def wait_until(fn: Callable[[], T], timeout: float, interval: float = 0.1,
               what: str | Callable[[], str] = "", *, ok: Callable[[T], Any] | None = None,
               show: Callable[[T], str] = repr, retry_errors: bool = False) -> T:
    """Call `fn` every `interval` seconds until its value is truthy — or, given `ok`, until
    `ok(value)` is — and return that value.  After `timeout` seconds an AssertionError naming
    `what` (a string, or a function making one at that moment) and, unless it was a plain
    False or None, the last value seen (through `show`).  `retry_errors`: an exception raised
    by `fn` (a broker between lives) is one more value seen, not the end.

    The one polling helper of the test code (tests/, compat_tests/, bench/)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            last: Any = fn()
        except Exception as exc:  # noqa: BLE001 - only with retry_errors
            if not retry_errors:
                raise
            last = exc
        else:
            if (ok(last) if ok is not None else last):
                return last  # type: ignore[no-any-return]
        if time.monotonic() > deadline:
            name = (what() if callable(what) else what) or fn
            seen = "" if last is None or last is False else f"; last seen:\n{show(last)}"
            raise AssertionError(f"timed out after {timeout}s waiting for {name}{seen}")
        time.sleep(interval)


# --------------------------------------------------------------------------- soak sizes

#: TMQGATE_TEST_SOAK=full (scripts/soak.sh): the soaks' full cycle counts; otherwise the counts
#: sized for CI's time budget, which still cross every path of a cycle a few times.
SOAK_ENV = "TMQGATE_TEST_SOAK"


def soak_full() -> bool:
    """Running under scripts/soak.sh (the soaks at their full counts and loads)."""
    return os.environ.get(SOAK_ENV, "").strip().lower() == "full"


def soak_cycles(ci: int, full: int) -> int:
    """How many kill/restart cycles a soak runs: `ci` in the suite, `full` under scripts/soak.sh."""
    return full if soak_full() else ci


# --------------------------------------------------------------------------- dependencies


def in_ci() -> bool:
    """Running as CI: TMQGATE_CI, or the CI variable most CI services set, is 1 / true / yes."""
    return any(os.environ.get(name, "").strip().lower() in ("1", "true", "yes") for name in ("TMQGATE_CI", "CI"))


def missing_dependency(reason: str, install: str) -> NoReturn:
    """Something the test needs is not installed here (`reason`, e.g. "etcd not installed";
    `install`, the command that installs it).  Under CI (in_ci()) the test fails: a missing
    install must never pass as a skip.  Elsewhere it is skipped, with one line naming the
    command."""
    import pytest  # here: bench/ imports this module without pytest installed

    __tracebackhide__ = True  # the report names the test's line, not this one
    message = f"{reason}; run {install}"
    if in_ci():
        pytest.fail(f"{message} (under CI a missing dependency fails the test)", pytrace=False)
    pytest.skip(message)


def require(present: object, reason: str, install: str) -> None:
    """missing_dependency(reason, install) unless `present` is truthy."""
    __tracebackhide__ = True
    if not present:
        missing_dependency(reason, install)


def require_module(name: str, install: str = "pip install -e '.[test]'") -> ModuleType:
    """`import name`, or missing_dependency: pytest.importorskip that fails under CI."""
    __tracebackhide__ = True
    try:
        return importlib.import_module(name)
    except ImportError:
        pass  # reported outside the except block: no "during handling" chain in the report
    missing_dependency(f"Python module {name} not installed", install)


@contextmanager
def canned_http(status: int, body: bytes, content_type: str = "application/json") -> Iterator[int]:
    """An HTTP server on a free loopback port (yielded) that answers every POST with `status`
    and `body`: what another server (a proxy's error page, taosAdapter) says, for a client."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Canned(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server's name)
            self.rfile.read(int(self.headers["Content-Length"]))
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Canned)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def api_versions_ok(bootstrap: str, timeout: float = 1.0) -> bool:
    """True when the broker answers a hand-built ApiVersions v0 with error code 0.

    Hand-built on purpose: readiness must not depend on the codec under test.
    """
    host, port = split_hostport(bootstrap)
    client_id = b"compat-ready"
    body = struct.pack(">hhih", 18, 0, 1, len(client_id)) + client_id
    try:
        with socket.create_connection((host, port), timeout=timeout) as s:
            s.settimeout(timeout)
            s.sendall(struct.pack(">i", len(body)) + body)
            head = _recv_exact(s, 4)
            (size,) = struct.unpack(">i", head)
            frame = _recv_exact(s, size)
    except OSError:
        return False
    if len(frame) < 6:
        return False
    corr, err = struct.unpack(">ih", frame[:6])
    return corr == 1 and err == 0


def _recv_exact(s: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("connection closed")
        buf += chunk
    return bytes(buf)


# --------------------------------------------------------------------------- records


@dataclass(frozen=True)
class OutRecord:
    """A record as the test means to produce it."""

    partition: int
    key: bytes | None
    value: bytes | None
    headers: Headers
    timestamp: int


@dataclass(frozen=True)
class InRecord:
    """A record as a consumer delivered it, normalised across client libraries."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: Headers
    timestamp: int
    timestamp_type: int  # 0 CreateTime, 1 LogAppendTime


_WORDS = (b"alpha", b"bravo", b"charlie", b"delta", b"echo", b"foxtrot", b"\x00\x01", b"\xff")


def make_records(n: int, partitions: int, *, seed: int = 7, base_ts: int | None = None,
                 value_size: int = 100, null_header_values: bool = True) -> list[OutRecord]:
    """Deterministic, varied records: null/empty keys, 0-3 headers (a repeated name, some
    null-valued if the client allows it), strictly increasing timestamps 3 ms apart (so
    "between two records" timestamps exist)."""
    rnd = random.Random(seed)
    if base_ts is None:
        base_ts = int(time.time() * 1000) - 3_600_000 // 2  # half an hour ago: well inside retention
    out = []
    for i in range(n):
        p = rnd.randrange(partitions)
        key: bytes | None = f"key-{i:06d}".encode()
        if i % 101 == 0:
            key = None
        elif i % 103 == 0:
            key = b""
        # compressible by every codec (librdkafka sends a batch uncompressed when the codec
        # would not shrink it, which would defeat the per-codec check), still varied
        pad = b" ".join(rnd.choice(_WORDS) for _ in range(value_size // 4))
        value = f"v{i:06d}|".encode() + pad[: max(0, value_size - 8)]
        nh = i % 4
        headers: list[tuple[str, bytes | None]] = []
        if nh >= 1:
            headers.append(("idx", str(i).encode()))
        if nh >= 2:
            headers.append(("h\u00e9", b"\x00\xff" * (i % 5)))
        if nh >= 3:
            headers.append(("idx", None if null_header_values and i % 8 == 3 else b"dup-name"))
        out.append(OutRecord(p, key, value, tuple(headers), base_ts + 3 * i))
    return out


def expected_offsets(records: Sequence[OutRecord]) -> list[int]:
    """Kafka assigns offsets 0..n-1 per partition in produce order."""
    nxt: dict[int, int] = {}
    res = []
    for r in records:
        o = nxt.get(r.partition, 0)
        res.append(o)
        nxt[r.partition] = o + 1
    return res


def per_partition_counts(records: Sequence[OutRecord], partitions: int) -> dict[int, int]:
    counts = dict.fromkeys(range(partitions), 0)
    for r in records:
        counts[r.partition] += 1
    return counts


class _Reading:
    """A read of known partitions from the beginning, as every client's `consume` does it: the
    records so far, and whether to poll again — until `counts` records per partition arrived
    and half a second more passed (to catch extra ones), or `timeout`."""

    def __init__(self, counts: dict[int, int], timeout: float) -> None:
        self.counts = counts
        self.got: list[InRecord] = []
        self.have = dict.fromkeys(counts, 0)
        self.deadline = time.monotonic() + timeout
        self.extra_until: float | None = None

    def add(self, record: InRecord) -> None:
        self.got.append(record)
        self.have[record.partition] = self.have.get(record.partition, 0) + 1

    def going(self) -> bool:
        now = time.monotonic()
        if self.extra_until is None and all(self.have[p] >= c for p, c in self.counts.items()):
            self.extra_until = now + 0.5
        return now < self.deadline and (self.extra_until is None or now <= self.extra_until)


def _norm_headers(h: Any) -> Headers:
    if not h:
        return ()
    return tuple((k if isinstance(k, str) else k.decode(), v) for k, v in h)


# --------------------------------------------------------------------------- client drivers


def _spec_kind(specs: dict[int, str | int]) -> str:
    kinds = {v if isinstance(v, str) else "timestamp" for v in specs.values()}
    assert len(kinds) == 1 and kinds <= {"earliest", "latest", "timestamp"}, specs
    return kinds.pop()


class ClientDriver:
    """One library's way to do each step. All methods are synchronous."""

    name = ""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap

    def create_topic(self, topic: str, partitions: int, configs: dict[str, str] | None = None) -> None:
        raise NotImplementedError

    def delete_topic(self, topic: str) -> None:
        raise NotImplementedError

    def list_topics(self) -> set[str]:
        raise NotImplementedError

    def produce(self, topic: str, records: Sequence[OutRecord], compression: str | None = None,
                idempotent: bool = True) -> list[tuple[int, int]]:
        """Produce with acks=all; returns the (partition, offset) each delivery report gave."""
        raise NotImplementedError

    def consume(self, topic: str, counts: dict[int, int], timeout: float = 60.0) -> list[InRecord]:
        """Assign all partitions in `counts`, seek to the beginning, read until each partition
        delivered its count (and a little beyond, to catch extras)."""
        raise NotImplementedError

    def list_offsets(self, topic: str, specs: dict[int, str | int]) -> dict[int, int | None]:
        """ListOffsets for partition -> spec; the specs are all "earliest", all "latest", or
        all timestamps in ms.  None = no such offset (nothing at or after the timestamp)."""
        raise NotImplementedError

    def wait_topic_gone(self, topic: str, timeout: float = 20.0) -> None:
        wait_until(lambda: topic not in self.list_topics(), timeout, 0.3, f"{topic} to disappear")

    def wait_topic_ready(self, topic: str, timeout: float = 20.0) -> None:
        wait_until(lambda: topic in self.list_topics(), timeout, 0.2, f"{topic} to appear")


class KafkaPythonDriver(ClientDriver):
    name = "kafka-python"

    def _admin(self) -> Any:
        from kafka import KafkaAdminClient

        return KafkaAdminClient(bootstrap_servers=self.bootstrap, client_id="compat-kp-admin")

    def create_topic(self, topic: str, partitions: int, configs: dict[str, str] | None = None) -> None:
        admin = self._admin()
        try:
            admin.create_topics(
                {topic: {"num_partitions": partitions, "replication_factor": 1, "configs": configs or {}}},
                timeout_ms=30000,
            )
        finally:
            admin.close()
        self.wait_topic_ready(topic)

    def delete_topic(self, topic: str) -> None:
        admin = self._admin()
        try:
            admin.delete_topics([topic], timeout_ms=30000)
        finally:
            admin.close()

    def list_topics(self) -> set[str]:
        admin = self._admin()
        try:
            return set(admin.list_topics())
        finally:
            admin.close()

    def produce(self, topic: str, records: Sequence[OutRecord], compression: str | None = None,
                idempotent: bool = True) -> list[tuple[int, int]]:
        from kafka import KafkaProducer

        producer = KafkaProducer(
            bootstrap_servers=self.bootstrap,
            client_id="compat-kp-producer",
            acks="all",
            enable_idempotence=idempotent,
            compression_type=compression,
            linger_ms=20,
            batch_size=256 * 1024,
            max_request_size=4 * 1024 * 1024,
            request_timeout_ms=30000,
        )
        try:
            futures = [
                producer.send(topic, key=r.key, value=r.value, partition=r.partition,
                              timestamp_ms=r.timestamp, headers=list(r.headers))
                for r in records
            ]
            producer.flush(timeout=120)
            out = []
            for f in futures:
                md = f.get(timeout=60)
                out.append((md.partition, md.offset))
            return out
        finally:
            producer.close(timeout=10)

    def consume(self, topic: str, counts: dict[int, int], timeout: float = 60.0) -> list[InRecord]:
        from kafka import KafkaConsumer, TopicPartition

        consumer = KafkaConsumer(
            bootstrap_servers=self.bootstrap,
            client_id="compat-kp-consumer",
            group_id=None,
            enable_auto_commit=False,
            fetch_max_wait_ms=200,
            max_partition_fetch_bytes=1024 * 1024,
        )
        try:
            tps = [TopicPartition(topic, p) for p in counts]
            consumer.assign(tps)
            consumer.seek_to_beginning(*tps)
            reading = _Reading(counts, timeout)
            while reading.going():
                batch = consumer.poll(timeout_ms=300)
                for tp, msgs in batch.items():
                    for m in msgs:
                        reading.add(InRecord(tp.partition, m.offset, m.key, m.value,
                                             _norm_headers(m.headers), m.timestamp, m.timestamp_type))
            return reading.got
        finally:
            consumer.close()

    def list_offsets(self, topic: str, specs: dict[int, str | int]) -> dict[int, int | None]:
        from kafka import KafkaConsumer, TopicPartition

        consumer = KafkaConsumer(bootstrap_servers=self.bootstrap, group_id=None,
                                 client_id="compat-kp-offsets", enable_auto_commit=False)
        try:
            tps = [TopicPartition(topic, p) for p in specs]
            kind = _spec_kind(specs)
            if kind == "earliest":
                res = consumer.beginning_offsets(tps, timeout_ms=30000)
                return {tp.partition: o for tp, o in res.items()}
            if kind == "latest":
                res = consumer.end_offsets(tps, timeout_ms=30000)
                return {tp.partition: o for tp, o in res.items()}
            res2 = consumer.offsets_for_times({tp: specs[tp.partition] for tp in tps}, timeout_ms=30000)
            return {tp.partition: (None if v is None else v.offset) for tp, v in res2.items()}
        finally:
            consumer.close()


class AioKafkaDriver(ClientDriver):
    name = "aiokafka"

    def _run(self, coro: Any) -> Any:
        return asyncio.run(coro)

    async def _with_admin(self, fn: Callable[[Any], Any]) -> Any:
        from aiokafka.admin import AIOKafkaAdminClient

        admin = AIOKafkaAdminClient(bootstrap_servers=self.bootstrap, client_id="compat-aio-admin")
        await admin.start()
        try:
            return await fn(admin)
        finally:
            await admin.close()

    def create_topic(self, topic: str, partitions: int, configs: dict[str, str] | None = None) -> None:
        from aiokafka.admin import NewTopic

        nt = NewTopic(topic, num_partitions=partitions, replication_factor=1, topic_configs=configs or {})

        async def go(admin: Any) -> None:
            resp = await admin.create_topics([nt], timeout_ms=30000)
            for t in getattr(resp, "topics", []) or []:
                code = t[1] if isinstance(t, tuple) else getattr(t, "error_code", 0)
                assert code == 0, f"create_topics: {resp}"

        self._run(self._with_admin(go))
        self.wait_topic_ready(topic)

    def delete_topic(self, topic: str) -> None:
        async def go(admin: Any) -> None:
            await admin.delete_topics([topic], timeout_ms=30000)

        self._run(self._with_admin(go))

    def list_topics(self) -> set[str]:
        async def go(admin: Any) -> set[str]:
            return set(await admin.list_topics())

        return self._run(self._with_admin(go))

    def produce(self, topic: str, records: Sequence[OutRecord], compression: str | None = None,
                idempotent: bool = True) -> list[tuple[int, int]]:
        from aiokafka import AIOKafkaProducer

        async def go() -> list[tuple[int, int]]:
            producer = AIOKafkaProducer(
                bootstrap_servers=self.bootstrap,
                client_id="compat-aio-producer",
                acks="all",
                enable_idempotence=idempotent,
                compression_type=compression,
                linger_ms=20,
                max_batch_size=256 * 1024,
                max_request_size=4 * 1024 * 1024,
                request_timeout_ms=30000,
            )
            await producer.start()
            try:
                futs = []
                for r in records:
                    futs.append(await producer.send(topic, value=r.value, key=r.key, partition=r.partition,
                                                    timestamp_ms=r.timestamp, headers=list(r.headers)))
                mds = await asyncio.gather(*futs)
                return [(md.partition, md.offset) for md in mds]
            finally:
                await producer.stop()

        return self._run(go())

    def consume(self, topic: str, counts: dict[int, int], timeout: float = 60.0) -> list[InRecord]:
        from aiokafka import AIOKafkaConsumer, TopicPartition

        async def go() -> list[InRecord]:
            consumer = AIOKafkaConsumer(
                bootstrap_servers=self.bootstrap,
                client_id="compat-aio-consumer",
                group_id=None,
                enable_auto_commit=False,
                fetch_max_wait_ms=200,
            )
            await consumer.start()
            try:
                tps = [TopicPartition(topic, p) for p in counts]
                consumer.assign(tps)
                await consumer.seek_to_beginning(*tps)
                reading = _Reading(counts, timeout)
                while reading.going():
                    batch = await consumer.getmany(timeout_ms=300)
                    for tp, msgs in batch.items():
                        for m in msgs:
                            reading.add(InRecord(tp.partition, m.offset, m.key, m.value,
                                                 _norm_headers(m.headers), m.timestamp, m.timestamp_type))
                return reading.got
            finally:
                await consumer.stop()

        return self._run(go())

    def list_offsets(self, topic: str, specs: dict[int, str | int]) -> dict[int, int | None]:
        from aiokafka import AIOKafkaConsumer, TopicPartition

        async def go() -> dict[int, int | None]:
            consumer = AIOKafkaConsumer(bootstrap_servers=self.bootstrap, group_id=None,
                                        client_id="compat-aio-offsets", enable_auto_commit=False)
            await consumer.start()
            try:
                tps = [TopicPartition(topic, p) for p in specs]
                kind = _spec_kind(specs)
                if kind == "earliest":
                    res = await consumer.beginning_offsets(tps)
                    return {tp.partition: o for tp, o in res.items()}
                if kind == "latest":
                    res = await consumer.end_offsets(tps)
                    return {tp.partition: o for tp, o in res.items()}
                res2 = await consumer.offsets_for_times({tp: specs[tp.partition] for tp in tps})
                return {tp.partition: (None if v is None else v.offset) for tp, v in res2.items()}
            finally:
                await consumer.stop()

        return self._run(go())


class ConfluentDriver(ClientDriver):
    name = "confluent"

    def _admin(self) -> Any:
        from confluent_kafka.admin import AdminClient

        return AdminClient({"bootstrap.servers": self.bootstrap, "client.id": "compat-ck-admin"})

    def create_topic(self, topic: str, partitions: int, configs: dict[str, str] | None = None) -> None:
        from confluent_kafka.admin import NewTopic

        admin = self._admin()  # must outlive the futures: a destroyed handle fails them
        fs = admin.create_topics(
            [NewTopic(topic, num_partitions=partitions, replication_factor=1, config=configs or {})],
            operation_timeout=30, request_timeout=30)
        fs[topic].result(timeout=60)
        self.wait_topic_ready(topic)

    def delete_topic(self, topic: str) -> None:
        admin = self._admin()
        fs = admin.delete_topics([topic], operation_timeout=30, request_timeout=30)
        fs[topic].result(timeout=60)

    def list_topics(self) -> set[str]:
        md = self._admin().list_topics(timeout=30)
        return set(md.topics)

    def producer_config(self, compression: str | None, idempotent: bool) -> dict[str, Any]:
        return {
            "bootstrap.servers": self.bootstrap,
            "client.id": "compat-ck-producer",
            "acks": "all",
            "enable.idempotence": idempotent,
            "compression.type": compression or "none",
            "linger.ms": 20,
            "batch.size": 256 * 1024,
            "message.max.bytes": 4 * 1024 * 1024,
        }

    def produce(self, topic: str, records: Sequence[OutRecord], compression: str | None = None,
                idempotent: bool = True) -> list[tuple[int, int]]:
        from confluent_kafka import Producer

        producer = Producer(self.producer_config(compression, idempotent))
        results: list[tuple[int, int] | None] = [None] * len(records)
        errors: list[str] = []

        def report(i: int) -> Callable[[Any, Any], None]:
            def cb(err: Any, msg: Any) -> None:
                if err is not None:
                    errors.append(f"record {i}: {err}")
                else:
                    results[i] = (msg.partition(), msg.offset())
            return cb

        for i, r in enumerate(records):
            while True:
                try:
                    producer.produce(topic, value=r.value, key=r.key, partition=r.partition,
                                     timestamp=r.timestamp, headers=list(r.headers), on_delivery=report(i))
                    break
                except BufferError:
                    producer.poll(0.05)
            if i % 1000 == 0:
                producer.poll(0)
        left = producer.flush(120)
        assert left == 0, f"{left} records still undelivered"
        assert not errors, errors[:5]
        assert all(x is not None for x in results)
        return [x for x in results if x is not None]

    def consume(self, topic: str, counts: dict[int, int], timeout: float = 60.0) -> list[InRecord]:
        from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

        consumer = Consumer({
            "bootstrap.servers": self.bootstrap,
            "client.id": "compat-ck-consumer",
            "group.id": "compat-unused-" + uuid.uuid4().hex[:8],  # required by the Consumer ctor
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 200,
            "enable.partition.eof": False,
        })
        try:
            consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in counts])
            reading = _Reading(counts, timeout)
            while reading.going():
                for m in consumer.consume(num_messages=2000, timeout=0.3):
                    if m.error() is not None:
                        raise AssertionError(f"consume error: {m.error()}")
                    ts_type, ts = m.timestamp()
                    reading.add(InRecord(m.partition(), m.offset(), m.key(), m.value(),
                                         _norm_headers(m.headers()), ts, ts_type - 1))
            return reading.got
        finally:
            consumer.close()

    def list_offsets(self, topic: str, specs: dict[int, str | int]) -> dict[int, int | None]:
        from confluent_kafka import TopicPartition
        from confluent_kafka.admin import OffsetSpec

        def to_spec(v: str | int) -> Any:
            if v == "earliest":
                return OffsetSpec.earliest()
            if v == "latest":
                return OffsetSpec.latest()
            assert isinstance(v, int)
            return OffsetSpec.for_timestamp(v)

        _spec_kind(specs)
        admin = self._admin()
        fs = admin.list_offsets({TopicPartition(topic, p): to_spec(v) for p, v in specs.items()},
                                request_timeout=30)
        out: dict[int, int | None] = {}
        for tp, f in fs.items():
            off = f.result(timeout=60).offset
            out[tp.partition] = None if off < 0 else off
        return out


DRIVERS: dict[str, type[ClientDriver]] = {
    "kafka-python": KafkaPythonDriver,
    "aiokafka": AioKafkaDriver,
    "confluent": ConfluentDriver,
}


def driver(name: str, bootstrap: str) -> ClientDriver:
    return DRIVERS[name](bootstrap)


def confluent_roundtrip(conf: dict[str, Any], topic: str, n: int) -> list[tuple[bytes, bytes, int]]:
    """With confluent-kafka over `conf`: produce n keyed records k{i}/v{i} to
    `topic` (acks=all), then read them back from the start: [(key, value, offset)]."""
    from confluent_kafka import Consumer, Producer

    producer = Producer({**conf, "acks": "all"})
    for i in range(n):
        producer.produce(topic, key=f"k{i}".encode(), value=f"v{i}".encode())
    assert producer.flush(30) == 0
    consumer = Consumer({**conf, "group.id": f"g-{topic}", "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    consumer.subscribe([topic])
    got: list[tuple[bytes, bytes, int]] = []
    deadline = time.monotonic() + 60
    while len(got) < n and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            got.append((msg.key(), msg.value(), msg.offset()))
    consumer.close()
    return got
