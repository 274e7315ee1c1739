"""The benchmark workloads, each against a broker given by its bootstrap address.

Every workload talks to the broker only over the Kafka protocol (and tmqgate's `/rest/sql`
for the query topics), with the same clients and settings whichever broker it is:

- `producer_perf` / `consumer_perf`: Apache Kafka's own kafka-producer-perf-test and
  kafka-consumer-perf-test (4.x, from `compat_tests/bin`, full JIT);
- `e2e_latency`: a confluent-kafka producer/consumer pair at a fixed rate;
  `e2e_latency_java`: `org.apache.kafka.tools.EndToEndLatency` (one message at a time);
- `query_topics`: tmqgate only — rows written as line protocol, read back through query
  topics at 10% and 90% selectivity and a database topic;
- `rebalance`: time from a second consumer joining a group until both consume.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import statistics
import struct
import subprocess
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

from compat_tests.cli_helpers import consumer_perf_stats
from compat_tests.kafka_ref import FULL_JIT_JVM_OPTS, tool

# The perf tools run with the JIT fully on (the compat wrappers default to C1 only for a
# quick start); the same client JVM drives both brokers.
TOOL_ENV = {**os.environ, "KAFKA_JVM_PERFORMANCE_OPTS": FULL_JIT_JVM_OPTS, "KAFKA_HEAP_OPTS": "-Xmx1g"}

PRODUCER_PROPS = {"batch.size": "65536", "linger.ms": "5"}


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


class WorkloadError(RuntimeError):
    pass


def run_tool(name: str, *args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    """Run a Kafka tool; its CPU seconds (the JVM's user + system) are left in `proc.cpu_s`."""
    cmd = [str(tool(name)), *args]
    before = os.times()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=TOOL_ENV)
    except subprocess.TimeoutExpired as exc:
        raise WorkloadError(f"{name} timed out after {timeout:.0f}s") from exc
    after = os.times()
    proc.cpu_s = (after.children_user + after.children_system  # type: ignore[attr-defined]
                  - before.children_user - before.children_system)
    if proc.returncode != 0:
        raise WorkloadError(f"{name} exited {proc.returncode}: {proc.stderr[-2000:] or proc.stdout[-2000:]}")
    return proc


# --------------------------------------------------------------------------- topics

def create_topic(bootstrap: str, name: str, partitions: int, timeout: float = 30.0, replication_factor: int = 1,
                 configs: dict[str, str] | None = None) -> None:
    """CreateTopics through librdkafka, then wait until every partition has a leader."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    new = NewTopic(name, partitions, replication_factor, config=configs or {})
    for fut in admin.create_topics([new], operation_timeout=timeout).values():
        fut.result(timeout)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        md = admin.list_topics(name, timeout=5).topics.get(name)
        if md is not None and md.error is None and len(md.partitions) == partitions \
                and all(p.leader >= 0 for p in md.partitions.values()):
            return
        time.sleep(0.1)
    raise WorkloadError(f"topic {name} has no leaders after {timeout}s")


# --------------------------------------------------------------------------- 1. producer

_PRODUCER_SUMMARY = re.compile(
    r"(\d+) records sent, ([\d.]+) records/sec \(([\d.]+) MB/sec\), ([\d.]+) ms avg latency, "
    r"([\d.]+) ms max latency, (\d+) ms 50th, (\d+) ms 95th, (\d+) ms 99th, (\d+) ms 99\.9th")


def parse_producer_summary(text: str) -> dict[str, float]:
    """The final line of kafka-producer-perf-test (the one with percentiles)."""
    found = _PRODUCER_SUMMARY.findall(text)
    if not found:
        raise WorkloadError(f"no summary line in kafka-producer-perf-test output:\n{text[-2000:]}")
    n, rps, mbs, avg, mx, p50, p95, p99, p999 = found[-1]
    return {"records": int(n), "records_per_s": float(rps), "mb_per_s": float(mbs),
            "avg_ms": float(avg), "max_ms": float(mx), "p50_ms": float(p50), "p95_ms": float(p95),
            "p99_ms": float(p99), "p999_ms": float(p999)}


def producer_perf(bootstrap: str, topic: str, records: int, acks: str, record_size: int = 1024,
                  timeout: float = 1800, client_config: str | None = None) -> dict[str, Any]:
    """`client_config`: a client properties file (`--command-config`), e.g. TLS or SASL."""
    props = [f"acks={acks}", *(f"{k}={v}" for k, v in PRODUCER_PROPS.items())]
    extra = ["--command-config", client_config] if client_config else []
    proc = run_tool("kafka-producer-perf-test", "--bootstrap-server", bootstrap, "--topic", topic,
                    "--num-records", str(records), "--record-size", str(record_size), *extra,
                    "--throughput", "-1", "--command-property", *props, timeout=timeout)
    result: dict[str, Any] = parse_producer_summary(proc.stdout)
    result["client_cpu_s"] = proc.cpu_s  # type: ignore[attr-defined]
    if result["records"] != records:
        raise WorkloadError(f"kafka-producer-perf-test sent {result['records']} of {records}")
    return result


# --------------------------------------------------------------------------- 2. consumer

def parse_consumer_stats(text: str) -> dict[str, str]:
    stats = consumer_perf_stats(text)
    if not stats:
        raise WorkloadError(f"no statistics in kafka-consumer-perf-test output:\n{text[-2000:]}")
    return stats


def consumer_perf(bootstrap: str, topic: str, records: int, timeout: float = 1800,
                  client_config: str | None = None) -> dict[str, Any]:
    extra = ["--command-config", client_config] if client_config else []
    proc = run_tool("kafka-consumer-perf-test", "--bootstrap-server", bootstrap, "--topic", topic,
                    "--num-records", str(records), "--timeout", "60000", "--group", unique("bench-cperf"),
                    *extra, timeout=timeout)
    stats = parse_consumer_stats(proc.stdout)
    consumed = int(stats["data.consumed.in.nMsg"])
    if consumed != records:
        raise WorkloadError(f"kafka-consumer-perf-test consumed {consumed} of {records}")
    return {"records": consumed, "mb": float(stats["data.consumed.in.MB"]),
            "mb_per_s": float(stats["MB.sec"]), "records_per_s": float(stats["nMsg.sec"]),
            "rebalance_ms": float(stats["rebalance.time.ms"]), "fetch_ms": float(stats["fetch.time.ms"]),
            "fetch_mb_per_s": float(stats["fetch.MB.sec"]),
            "fetch_records_per_s": float(stats["fetch.nMsg.sec"]),
            "client_cpu_s": proc.cpu_s}  # type: ignore[attr-defined]


# --------------------------------------------------------------------------- 3. latency

def percentile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank percentile of an ascending list."""
    if not sorted_values:
        return float("nan")
    k = max(0, min(len(sorted_values) - 1, int(round(q / 100 * len(sorted_values) + 0.5)) - 1))
    return sorted_values[k]


def e2e_latency(bootstrap: str, rate: int, seconds: float, size: int = 1024, warmup_s: float = 2.0,
                replication_factor: int = 1, configs: dict[str, str] | None = None) -> dict[str, Any]:
    """Messages produced at `rate`/s for `seconds` into a 1-partition topic and consumed as
    they arrive; latency = consumer receive time - producer send call (same clock).

    Producer: acks=all, linger.ms=0. Consumer: manual assignment at the end of the log,
    librdkafka's defaults otherwise (fetch.wait.max.ms 500: the broker answers the long
    poll as soon as data lands).  The same rate runs `warmup_s` first, unmeasured, and the
    measured phase starts once the consumer has caught up with it: a cold JIT (Kafka's
    fetch path) otherwise leaves a backlog that every later message waits behind."""
    from confluent_kafka import OFFSET_END, Consumer, Producer, TopicPartition

    topic = unique("bench-e2e")
    create_topic(bootstrap, topic, 1, replication_factor=replication_factor, configs=configs)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("bench-e2e-g"),
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, OFFSET_END)])
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
    pad = b"x" * max(0, size - 16)
    latencies: dict[int, float] = {}
    warm = threading.Event()
    done = threading.Event()
    warm_seen: set[int] = set()

    def receive() -> None:
        while not done.is_set():
            msg = consumer.poll(0.05)
            if msg is None or msg.error():
                continue
            now = time.perf_counter_ns()
            seq, sent = struct.unpack_from(">qq", msg.value())
            if seq < 0:
                warm_seen.add(seq)
                warm.set()
            else:
                latencies[seq] = (now - sent) / 1e6

    receiver = threading.Thread(target=receive, name="e2e-consumer", daemon=True)
    receiver.start()
    try:
        # warm-up: until the consumer sees a message (its fetch position is resolved)
        deadline = time.monotonic() + 30
        while not warm.is_set():
            if time.monotonic() > deadline:
                raise WorkloadError("end-to-end: the consumer saw no warm-up message in 30s")
            producer.produce(topic, struct.pack(">qq", -1, time.perf_counter_ns()) + pad, partition=0)
            producer.poll(0)
            warm.wait(0.1)
        nwarm = int(rate * warmup_s)
        start = time.perf_counter()
        for i in range(nwarm):
            delay = start + i / rate - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            producer.produce(topic, struct.pack(">qq", -2 - i, time.perf_counter_ns()) + pad, partition=0)
            producer.poll(0)
        producer.flush(30)
        deadline = time.monotonic() + 60
        while nwarm and -1 - nwarm not in warm_seen:
            if time.monotonic() > deadline:
                raise WorkloadError("end-to-end: the consumer did not catch up with the warm-up in 60s")
            time.sleep(0.01)
        n = int(rate * seconds)
        start = time.perf_counter()
        for i in range(n):
            delay = start + i / rate - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            producer.produce(topic, struct.pack(">qq", i, time.perf_counter_ns()) + pad, partition=0)
            producer.poll(0)
        sent_s = time.perf_counter() - start
        producer.flush(30)
        deadline = time.monotonic() + 15
        while len(latencies) < n and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        done.set()
        receiver.join(5)
        consumer.close()
    values = sorted(latencies.values())
    return {"messages": n, "received": len(values), "rate": rate, "achieved_rate": round(n / sent_s, 1),
            "warmup_s": warmup_s,
            "mean_ms": statistics.fmean(values) if values else float("nan"),
            "p50_ms": percentile(values, 50), "p99_ms": percentile(values, 99),
            "p999_ms": percentile(values, 99.9), "max_ms": values[-1] if values else float("nan")}


_E2E_AVG = re.compile(r"Avg latency: ([\d.]+) ms")
_E2E_PCT = re.compile(r"Percentiles: 50th = ([\d.]+), 99th = ([\d.]+), 99\.9th = ([\d.]+)")


def e2e_latency_java(bootstrap: str, records: int, size: int = 1024, timeout: float = 600) -> dict[str, Any]:
    """`EndToEndLatency`: send one message (acks=all), wait until the consumer has it, repeat."""
    topic = unique("bench-e2ej")
    create_topic(bootstrap, topic, 1)
    proc = run_tool("kafka-run-class", "org.apache.kafka.tools.EndToEndLatency", "--bootstrap-server",
                    bootstrap, "--topic", topic, "--num-records", str(records), "--producer-acks", "all",
                    "--record-size", str(size), timeout=timeout)
    avg, pct = _E2E_AVG.search(proc.stdout), _E2E_PCT.search(proc.stdout)
    if not avg or not pct:
        raise WorkloadError(f"no latency summary from EndToEndLatency:\n{proc.stdout[-2000:]}")
    return {"messages": records, "mean_ms": float(avg.group(1)), "p50_ms": float(pct.group(1)),
            "p99_ms": float(pct.group(2)), "p999_ms": float(pct.group(3))}


# --------------------------------------------------------------------------- 4. query topics

def sql(http: str, statement: str) -> dict[str, Any]:
    req = urllib.request.Request(f"http://{http}/rest/sql", data=statement.encode(), method="POST")
    try:
        with urllib.request.urlopen(req, timeout=120) as resp:
            body = json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        body = json.loads(exc.read() or b"{}")
    if body.get("code") != 0:
        raise WorkloadError(f"{statement[:80]}: {body}")
    return body


def ingest_line_protocol(bootstrap: str, db: str, rows: int, tables: int = 64, per_record: int = 100,
                         seed: int = 1) -> dict[str, Any]:
    """`rows` rows of `st,g=gT v=<float>,k=<int>i <ts>` (k uniform 0..99), `per_record` lines
    per Kafka record keyed by child table (murmur2, so a table stays in one vnode), produced
    to the database's topic with acks=all.  Returns counts of k < 10 and k < 90."""
    from confluent_kafka import Producer

    rnd = random.Random(seed)
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 20,
                         "batch.size": 1_000_000, "partitioner": "murmur2_random"})
    errors: list[str] = []

    def report(err: Any, _msg: Any) -> None:
        if err is not None:
            errors.append(str(err))

    ts0 = 1_700_000_000_000
    below10 = below90 = 0
    start = time.perf_counter()
    i = 0
    while i < rows:
        t = (i // per_record) % tables
        m = min(per_record, rows - i)
        lines = []
        for j in range(m):
            k = rnd.randrange(100)
            below10 += k < 10
            below90 += k < 90
            lines.append(f"st,g=g{t} v={rnd.random():.6f},k={k}i {ts0 + i + j}")
        while True:
            try:
                producer.produce(db, "\n".join(lines).encode(), key=f"c{t}".encode(),
                                 headers=[("tmq.precision", b"ms")], on_delivery=report)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
        i += m
    remaining = producer.flush(300)
    seconds = time.perf_counter() - start
    if errors or remaining:
        raise WorkloadError(f"line-protocol ingest: {len(errors)} failed, {remaining} undelivered: {errors[:3]}")
    return {"rows": rows, "seconds": seconds, "rows_per_s": rows / seconds, "below10": below10,
            "below90": below90}


def consume_to_end(bootstrap: str, topic: str, timeout: float = 1800) -> dict[str, Any]:
    """Read every partition of `topic` from the beginning to its end (partition EOF) with one
    confluent-kafka consumer (manual assignment); timed from assign() to the last EOF."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("bench-q"),
                         "enable.auto.commit": False, "enable.partition.eof": True})
    try:
        parts = sorted(consumer.list_topics(topic, timeout=10).topics[topic].partitions)
        start = time.perf_counter()
        cpu0 = time.process_time()  # this process: the consumer (librdkafka's threads and this loop)
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in parts])
        eof: set[int] = set()
        n = nbytes = 0
        first = last = 0.0
        deadline = time.monotonic() + timeout
        while len(eof) < len(parts):
            if time.monotonic() > deadline:
                raise WorkloadError(f"{topic}: not at the end after {timeout}s ({n} records)")
            # a short timeout: consume() waits the whole timeout for a partial batch, which
            # would add up to that much to the last record's time
            msgs = consumer.consume(10_000, 0.01)
            got = 0
            for msg in msgs:
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        eof.add(msg.partition())
                        continue
                    raise WorkloadError(f"{topic}: {err}")
                got += 1
                nbytes += len(msg.value() or b"")
            if got:
                last = time.perf_counter()
                first = first or last
                n += got
        seconds = time.perf_counter() - start
        client_cpu = time.process_time() - cpu0
    finally:
        consumer.close()
    # "streaming": from the first delivered record to the last, without the consumer's start-up
    # and the final empty long-poll that reports the end of each partition
    streaming = last - first if n > 1 and last > first else seconds
    return {"records": n, "seconds": seconds, "records_per_s": n / seconds, "mb_per_s": nbytes / seconds / 1e6,
            "value_bytes": nbytes, "first_record_s": first - start if n else None,
            "streaming_s": streaming, "streaming_records_per_s": n / streaming, "client_cpu_s": client_cpu}


def query_topics(bootstrap: str, http: str, rows: int,
                 around: Callable[[str], AbstractContextManager[Any]] | None = None) -> dict[str, Any]:
    """tmqgate only: database `b` (VGROUPS 4), supertable `st`, `rows` rows; topics at 10%
    and 90% selectivity and over the whole database, each read to the end. `around(label)`:
    a context manager around the ingest ("ingest") and each topic's read (its label), such as
    the broker's resource sampler or a profiler."""
    span = around or (lambda _label: contextlib.nullcontext())
    db = unique("b").replace("-", "_")
    sql(http, f"CREATE DATABASE {db} VGROUPS 4")
    sql(http, f"CREATE STABLE {db}.st (ts TIMESTAMP, v DOUBLE, k BIGINT) TAGS (g NCHAR(16))")
    with span("ingest"):
        ingest = ingest_line_protocol(bootstrap, db, rows)
    topics = {"select_k_lt_10": (f"{db}_q10", f"AS SELECT ts, v FROM {db}.st WHERE k < 10", ingest["below10"]),
              "select_k_lt_90": (f"{db}_q90", f"AS SELECT ts, v FROM {db}.st WHERE k < 90", ingest["below90"]),
              "database": (f"{db}_all", f"AS DATABASE {db}", rows)}
    out: dict[str, Any] = {"rows": rows, "ingest": ingest, "topics": {}}
    for label, (name, definition, expected) in topics.items():
        sql(http, f"CREATE TOPIC {name} {definition}")
        with span(label):
            got = consume_to_end(bootstrap, name)
        got["expected"] = expected
        got["definition"] = f"CREATE TOPIC {name} {definition}"
        got["rows_scanned_per_s"] = rows / got["streaming_s"]
        out["topics"][label] = got
    return out


# --------------------------------------------------------------------------- 5. rebalance

class _Member:
    """A group member polled by the trial loop; remembers when it last received a message."""

    def __init__(self, bootstrap: str, group: str, topic: str, protocol: str) -> None:
        from confluent_kafka import Consumer

        conf: dict[str, Any] = {"bootstrap.servers": bootstrap, "group.id": group,
                                "auto.offset.reset": "latest", "enable.auto.commit": False}
        if protocol == "consumer":
            conf["group.protocol"] = "consumer"
        self.consumer = Consumer(conf)
        self.last_msg = 0.0
        self.consumer.subscribe([topic])

    def poll(self, timeout: float) -> None:
        msg = self.consumer.poll(timeout)
        if msg is not None and not msg.error():
            self.last_msg = time.perf_counter()

    def assigned(self) -> set[int]:
        return {tp.partition for tp in self.consumer.assignment()}

    def close(self) -> None:
        try:
            self.consumer.close()
        except Exception:  # noqa: BLE001 - best effort at the end of a trial
            pass


def _feeder(bootstrap: str, topic: str, partitions: int, rate: int, stop: threading.Event) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 1, "acks": "1"})
    i = 0
    start = time.perf_counter()
    while not stop.is_set():
        delay = start + i / rate - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        producer.produce(topic, b"r" * 100, partition=i % partitions)
        producer.poll(0)
        i += 1
    producer.flush(5)


def rebalance_trial(bootstrap: str, topic: str, partitions: int, protocol: str,
                    timeout: float = 90) -> float:
    """Seconds from the second member's subscribe() until the two members own disjoint halves
    of the partitions and each has received a message since then."""
    group = unique(f"bench-rb-{protocol}")
    all_parts = set(range(partitions))
    a = _Member(bootstrap, group, topic, protocol)
    b: _Member | None = None
    try:
        deadline = time.monotonic() + timeout
        while not (a.assigned() == all_parts and a.last_msg):
            if time.monotonic() > deadline:
                raise WorkloadError(f"{protocol}: first member not consuming after {timeout}s")
            a.poll(0.01)
        time.sleep(0.5)
        a.poll(0.01)
        joined = time.perf_counter()
        b = _Member(bootstrap, group, topic, protocol)
        deadline = time.monotonic() + timeout
        settled = 0.0
        while True:
            if time.monotonic() > deadline:
                raise WorkloadError(f"{protocol}: the two members not both consuming after {timeout}s "
                                    f"(A {sorted(a.assigned())}, B {sorted(b.assigned())})")
            a.poll(0.005)
            b.poll(0.005)
            pa, pb = a.assigned(), b.assigned()
            if pa and pb and not (pa & pb) and (pa | pb) == all_parts:
                settled = settled or time.perf_counter()
                if a.last_msg > settled and b.last_msg > settled:
                    return max(a.last_msg, b.last_msg) - joined
            else:
                settled = 0.0
    finally:
        a.close()
        if b is not None:
            b.close()


def rebalance(bootstrap: str, protocol: str, trials: int, partitions: int = 4,
              rate: int = 1000) -> dict[str, Any]:
    """`trials` fresh groups on one topic fed at `rate` msg/s: median/min/max seconds."""
    topic = unique(f"bench-rb-{protocol}")
    create_topic(bootstrap, topic, partitions)
    stop = threading.Event()
    feeder = threading.Thread(target=_feeder, args=(bootstrap, topic, partitions, rate, stop), daemon=True)
    feeder.start()
    times: list[float] = []
    errors: list[str] = []
    try:
        for _ in range(trials):
            try:
                times.append(rebalance_trial(bootstrap, topic, partitions, protocol))
            except WorkloadError as exc:
                errors.append(str(exc))
    finally:
        stop.set()
        feeder.join(10)
    out: dict[str, Any] = {"protocol": protocol, "trials": trials, "times_s": [round(t, 3) for t in times],
                           "errors": errors}
    if times:
        out.update(median_s=statistics.median(times), min_s=min(times), max_s=max(times))
    return out


def raw_request_round(bootstrap: str, topic: str, requests: int) -> tuple[float, float]:
    """(Produce µs per request, Fetch µs per request) on one raw connection: single-record
    batches of 100 bytes (acks=1) to partition 0, then as many Fetches of the last record —
    the per-request cost a broker feature (ACLs, metrics) adds shows here undiluted."""
    from compat_tests.raw import RawConn, one_record_batch

    batch = one_record_batch(b"x" * 100)
    with RawConn(bootstrap) as c:
        t0 = time.perf_counter()
        for _ in range(requests):
            assert c.produce(topic, 0, batch, acks=1)["error_code"] == 0
        produce = (time.perf_counter() - t0) / requests * 1e6
        last = c.list_offsets(topic, 0, -1)["offset"] - 1
        t0 = time.perf_counter()
        for _ in range(requests):  # the last record: one small batch per answer
            assert c.fetch(topic, 0, last)["error_code"] == 0
        fetch = (time.perf_counter() - t0) / requests * 1e6
    return produce, fetch
