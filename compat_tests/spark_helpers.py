"""Boilerplate for the Spark tests (`test_spark*.py`).

One SparkSession per test module (local[2], small heap, no UI, 2 shuffle partitions) that
loads Spark's Kafka connector from `compat_tests/java/spark-lib/` (installed by
`scripts/install_java.sh`; never `spark.jars.packages`), test events for the windowed
pipeline with their independently computed window results, and a confluent-kafka reader
that drains a topic up to its end offsets, gaps and all.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .helpers import Headers, InRecord, _norm_headers, wait_until

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:  # `pipelines` lives at the repository root
    sys.path.insert(0, str(REPO_ROOT))

WINDOW_MS = 10_000
WATERMARK_MS = 5_000


def spark_session(app_name: str) -> Any:
    """The module's SparkSession (the JVM is shared by every session of this process)."""
    from tmqgate.pipelines.session import build_session

    return build_session(app_name, "local[2]", {
        # Spark caches Kafka producers per configuration, in the JVM, beyond session.stop();
        # close idle ones soon so none outlives the broker or proxy it was writing to.
        "spark.kafka.producer.cache.timeout": "3s",
        "spark.kafka.producer.cache.evictorThreadRunInterval": "1s",
    })


# --------------------------------------------------------------------------- reading topics back


def _consumer(bootstrap: str) -> Any:
    from confluent_kafka import Consumer

    return Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": "spark-compat-unused-" + uuid.uuid4().hex[:8],  # assign() only, never joins
        "enable.auto.commit": False,
        "fetch.wait.max.ms": 100,
        "enable.partition.eof": False,
        "isolation.level": "read_uncommitted",
    })


def end_offsets(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    from confluent_kafka import TopicPartition

    c = _consumer(bootstrap)
    try:
        return {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=30, cached=False)[1]
                for p in range(partitions)}
    finally:
        c.close()


def read_topic(bootstrap: str, topic: str, partitions: int, timeout: float = 60.0) -> list[InRecord]:
    """Every record of the topic from the log start up to the end offsets seen at call time.

    Done when each partition's position reached its end offset (positions move past gaps,
    e.g. transaction markers, as well as records).
    """
    from confluent_kafka import OFFSET_BEGINNING, TopicPartition

    ends = end_offsets(bootstrap, topic, partitions)
    c = _consumer(bootstrap)
    try:
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        got: list[InRecord] = []
        deadline = time.monotonic() + timeout
        while True:
            for m in c.consume(num_messages=1000, timeout=0.2):
                if m.error() is not None:
                    raise AssertionError(f"consume error: {m.error()}")
                ts_type, ts = m.timestamp()
                got.append(InRecord(m.partition(), m.offset(), m.key(), m.value(),
                                    _norm_headers(m.headers()), ts, ts_type - 1))
            pos = {tp.partition: tp.offset for tp in c.position([TopicPartition(topic, p) for p in range(partitions)])}
            have = {}
            for r in got:
                have[r.partition] = max(have.get(r.partition, -1), r.offset + 1)
            if all(max(pos.get(p, -1), have.get(p, -1)) >= ends[p] or ends[p] == 0 for p in range(partitions)):
                return got
            if time.monotonic() > deadline:
                raise AssertionError(f"read {topic}: positions {pos} never reached end offsets {ends}")
    finally:
        c.close()


# --------------------------------------------------------------------------- pipeline test data


@dataclass(frozen=True)
class Event:
    key: str
    value: float
    ts: int
    partition: int

    def json(self) -> bytes:
        return json.dumps({"key": self.key, "value": self.value, "ts": self.ts}).encode()


BASE_TS = 1_700_000_000_000  # a multiple of the window: events start at a window boundary


def make_events(n: int, *, partitions: int = 2, keys: int = 6, step_ms: int = 200, jitter_ms: int = 500,
                seed: int = 11) -> list[Event]:
    """`n` events in event-time order, `step_ms` apart with at most `jitter_ms` disorder (far less
    than the 5 s watermark, so none is late however a micro-batch cuts the stream), partition
    i % partitions so every partition moves through event time at the same pace.  Values are
    multiples of 0.25 so sums are exact in floating point whatever the order of addition."""
    rnd = random.Random(seed)
    out = []
    for i in range(n):
        ts = BASE_TS + i * step_ms + rnd.randint(-jitter_ms, jitter_ms)
        out.append(Event(f"sensor-{rnd.randrange(keys)}", rnd.randrange(0, 400) * 0.25, max(BASE_TS, ts),
                         i % partitions))
    return out


def flush_event(events: Sequence[Event], partition: int) -> Event:
    """An event a minute after the last one: it moves the watermark past every window of
    `events` (so append mode emits them all) while its own window stays open."""
    return Event("flush", 0.0, max(e.ts for e in events) + 60_000, partition)


def expected_windows(events: Sequence[Event]) -> dict[tuple[str, int], dict[str, Any]]:
    """The pipeline's results computed in plain Python: {(key, window_start): result}."""
    acc: dict[tuple[str, int], list[float]] = {}
    for e in events:
        start = e.ts - e.ts % WINDOW_MS
        acc.setdefault((e.key, start), []).append(e.value)
    return {(k, s): {"key": k, "window_start": s, "window_end": s + WINDOW_MS, "sum": sum(vs), "count": len(vs)}
            for (k, s), vs in acc.items()}


def produce_events(bootstrap: str, topic: str, events: Sequence[Event], chunk: int = 0) -> list[tuple[int, int]]:
    """Produce with confluent-kafka (acks=all, record timestamp = event time), flushing every
    `chunk` events so a live stream sees them arrive in event-time order."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 5})
    reports: list[tuple[int, int]] = []
    errors: list[str] = []

    def cb(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(str(err))
        else:
            reports.append((msg.partition(), msg.offset()))

    for i, e in enumerate(events):
        p.produce(topic, key=e.key.encode(), value=e.json(), partition=e.partition, timestamp=e.ts, on_delivery=cb)
        if chunk and (i + 1) % chunk == 0:
            assert p.flush(30) == 0
    assert p.flush(60) == 0
    assert not errors, errors[:5]
    return reports


def output_results(bootstrap: str, topic: str, partitions: int) -> tuple[list[dict[str, Any]], dict]:
    """(every result record's JSON, deduped by (key, window_start)) of an output topic."""
    from tmqgate.pipelines.windowed import dedupe_results

    values = [json.loads(r.value or b"null") for r in read_topic(bootstrap, topic, partitions)]
    return values, dedupe_results(values)


# --------------------------------------------------------------------------- the pipeline as a process


class PipelineProcess:
    """`python -m pipelines.windowed ...` in a process group of its own (Python driver + its JVM),
    so a SIGKILL takes down both at once, as a crash of the machine running it would."""

    def __init__(self, args: Sequence[str], log_path: Path) -> None:
        self.log_path = log_path
        self.batches: list[int] = []
        self._lines: list[str] = []
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
        self._log = open(log_path, "ab")  # noqa: SIM115 - closed in wait()/kill()
        self.proc = subprocess.Popen([sys.executable, "-m", "tmqgate.pipelines.windowed", *args], cwd=str(REPO_ROOT),
                                     env=env, stdout=subprocess.PIPE, stderr=self._log, start_new_session=True)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            line = raw.decode(errors="replace").rstrip()
            self._lines.append(line)
            self._log.write(f"[stdout {time.strftime('%H:%M:%S')}] {line}\n".encode())
            self._log.flush()
            if line.startswith("batch "):
                self.batches.append(int(line.split()[1]))

    def wait_batches(self, n: int, timeout: float) -> None:
        """Until the job reported micro-batch `n - 1` as done (batches 0..n-1 committed)."""
        def done() -> bool:
            if self.proc.poll() is not None:
                raise AssertionError(f"pipeline exited with {self.proc.returncode}:\n{self.log_tail()}")
            return bool(self.batches) and max(self.batches) >= n - 1
        wait_until(done, timeout, 0.1, f"pipeline to finish {n} micro-batches")

    def kill(self) -> None:
        """SIGKILL the whole process group (the driver and the JVM it started)."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(30)
        self._reader.join(10)
        self._log.close()

    def log_tail(self, n: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""


def rows_as_records(rows: Sequence[Any]) -> list[tuple[int, int, bytes | None, bytes | None, int, int, Headers]]:
    """Spark Kafka source rows (partition, offset, key, value, ts_ms, timestampType, headers) as
    comparable tuples."""
    out = []
    for r in rows:
        headers: Headers = tuple((h["key"], None if h["value"] is None else bytes(h["value"]))
                                 for h in (r["headers"] or []))
        out.append((r["partition"], r["offset"], None if r["key"] is None else bytes(r["key"]),
                    None if r["value"] is None else bytes(r["value"]), r["ts_ms"], r["timestampType"], headers))
    return out


def iter_chunks(seq: Sequence[Any], n: int) -> Iterator[Sequence[Any]]:
    for i in range(0, len(seq), n):
        yield seq[i:i + n]
