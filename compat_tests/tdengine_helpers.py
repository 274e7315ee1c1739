"""Boilerplate for the TDengine-model tests (`test_tdengine*.py`).

Each test module runs a tmqgate of its own (the session broker does not say where its HTTP
endpoint listens), optionally with a TOML config of broker settings.  Helpers send SQL to
`POST /rest/sql`, generate the `power.meters` data of TDengine's examples deterministically
(with an independent Python model of what each topic must deliver), write it by multi-table
INSERT and by InfluxDB line protocol through a Kafka producer, and read topics back with
kafka-python and confluent-kafka by manual assignment.
"""

from __future__ import annotations

import json
import random
import struct
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .brokers import TmqgateProcess

VGROUPS = 4
LOCATIONS = ("California.SanFrancisco", "California.LosAngeles", "California.SanDiego",
             "California.SanJose", "California.PaloAlto", "California.Campbell",
             "California.MountainView", "California.Sunnyvale", "California.SantaClara",
             "California.Cupertino")
METERS_DDL = ("CREATE STABLE {db}.meters (ts TIMESTAMP, current FLOAT, voltage INT, phase FLOAT) "
              "TAGS (location VARCHAR(64), groupid INT)")
BASE_TS = 1_700_000_000_000


class SqlFailed(AssertionError):
    def __init__(self, status: int, answer: dict[str, Any], text: str) -> None:
        super().__init__(f"HTTP {status} {answer} for: {text[:300]}")
        self.status = status
        self.answer = answer


@dataclass
class TdBroker:
    """A tmqgate of the test module's own: Kafka bootstrap and HTTP address."""

    proc: TmqgateProcess

    @property
    def bootstrap(self) -> str:
        return self.proc.bootstrap

    @property
    def http(self) -> str:
        return f"127.0.0.1:{self.proc.http_port}"

    def post(self, text: str, db: str | None = None, timeout: float = 300) -> tuple[int, dict[str, Any]]:
        """POST /rest/sql[/db]: (HTTP status, JSON answer), errors included."""
        url = f"http://{self.http}/rest/sql" + (f"/{db}" if db else "")
        req = urllib.request.Request(url, data=text.encode(), method="POST")
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                return resp.status, json.load(resp)
        except urllib.error.HTTPError as exc:
            return exc.code, json.load(exc)

    def sql(self, text: str, db: str | None = None) -> dict[str, Any]:
        """Run SQL that must succeed; the JSON answer."""
        status, answer = self.post(text, db)
        if status != 200 or answer.get("code") != 0:
            raise SqlFailed(status, answer, text)
        return answer

    def sql_error(self, text: str, db: str | None = None) -> tuple[int, dict[str, Any]]:
        """Run SQL that must fail: (status, answer), checked to be a 4xx with code != 0."""
        status, answer = self.post(text, db)
        assert 400 <= status < 500, f"expected a 4xx for {text[:200]!r}, got {status} {answer}"
        assert answer.get("code") not in (0, None), answer
        assert isinstance(answer.get("desc"), str) and answer["desc"], answer
        return status, answer

    def rows(self, text: str, db: str | None = None) -> list[dict[str, Any]]:
        """A SHOW/DESCRIBE answer as dicts keyed by column name."""
        answer = self.sql(text, db)
        names = [c[0] for c in answer["column_meta"]]
        return [dict(zip(names, row, strict=True)) for row in answer["data"]]

    def affected(self, text: str, db: str | None = None) -> int:
        return int(self.sql(text, db)["data"][0][0])

    def log_history(self, db: str | None = None) -> list[dict[str, Any]]:
        url = f"http://{self.http}/log-history" + (f"?db={db}" if db else "")
        with urllib.request.urlopen(url, timeout=30) as resp:
            return json.load(resp)["vnodes"]


def start_tdbroker(workdir: Path, config: dict[str, Any] | None = None) -> TdBroker:
    proc = TmqgateProcess(workdir, config=config)
    proc.start()
    return TdBroker(proc)


def td_broker_fixture(tmp_path_factory: Any, name: str, config: dict[str, Any] | None = None) -> Iterator[TdBroker]:
    """Body of a module fixture: a tmqgate with `config`, stopped afterwards."""
    b = start_tdbroker(tmp_path_factory.mktemp(name), config)
    try:
        yield b
    finally:
        b.proc.stop()


def unique(prefix: str) -> str:
    """A SQL-safe name (letters, digits, underscore) no other test uses."""
    return f"{prefix}_{uuid.uuid4().hex[:10]}"


def f32(x: float) -> float:
    """`x` rounded to float32, as a FLOAT column stores it."""
    return struct.unpack("f", struct.pack("f", x))[0]


# --------------------------------------------------------------------------- the meters data


@dataclass(frozen=True)
class Row:
    table: str
    ts: int
    current: float
    voltage: int
    phase: float


@dataclass(frozen=True)
class Child:
    name: str
    location: str
    groupid: int


def make_children(names: Iterable[str], seed: int) -> dict[str, Child]:
    rnd = random.Random(seed)
    return {n: Child(n, rnd.choice(LOCATIONS), rnd.randint(1, 4)) for n in names}


def make_rows(tables: Sequence[str], per_table: int, seed: int, ts_base: int = BASE_TS,
              step_ms: int = 1000) -> list[Row]:
    """`per_table` rows for each table (timestamps unique within a table), in an interleaved
    order: round i writes row i of every table.  Voltage 215..235, current 5..15 (2 decimals),
    phase 0..1 (3 decimals)."""
    rnd = random.Random(seed)
    rows = []
    for i in range(per_table):
        for t in tables:
            rows.append(Row(t, ts_base + i * step_ms, round(rnd.uniform(5, 15), 2), rnd.randint(215, 235),
                            round(rnd.random(), 3)))
    return rows


def _lit(x: float) -> str:
    return repr(x)


def insert_sql(db: str, rows: Sequence[Row], children: dict[str, Child], *, using: bool = True) -> str:
    """One multi-table INSERT: consecutive rows of the same table share a VALUES list; each
    table clause creates the table (USING … TAGS) when `using`."""
    parts = ["INSERT INTO"]
    i = 0
    while i < len(rows):
        t = rows[i].table
        j = i
        vals = []
        while j < len(rows) and rows[j].table == t:
            r = rows[j]
            vals.append(f"({r.ts}, {_lit(r.current)}, {r.voltage}, {_lit(r.phase)})")
            j += 1
        c = children[t]
        clause = f"{db}.{t}"
        if using:
            clause += f" USING {db}.meters TAGS ('{c.location}', {c.groupid})"
        parts.append(clause + " VALUES " + " ".join(vals))
        i = j
    return " ".join(parts)


def insert_rows(b: TdBroker, db: str, rows: Sequence[Row], children: dict[str, Child], batch: int = 5000) -> None:
    """INSERT `rows` in statements of `batch` rows, each grouped by table (multi-table INSERT);
    the row order within each table is kept."""
    for start in range(0, len(rows), batch):
        chunk = sorted(rows[start:start + batch], key=lambda r: (r.table, r.ts))
        n = b.affected(insert_sql(db, chunk, children))
        assert n == len(chunk), (n, len(chunk))


def line(r: Row, c: Child) -> str:
    """InfluxDB line protocol for a row (ms timestamps; tags are strings in line protocol)."""
    loc = c.location.replace(" ", "\\ ").replace(",", "\\,").replace("=", "\\=")
    return (f"meters,location={loc},groupid={c.groupid} current={_lit(r.current)}f32,"
            f"voltage={r.voltage}i32,phase={_lit(r.phase)}f32 {r.ts}")


def produce_lines(bootstrap: str, db: str, rows: Sequence[Row], children: dict[str, Child],
                  lines_per_record: int = 50) -> dict[str, set[int]]:
    """Produce `rows` as line protocol to the database's topic with kafka-python (default
    murmur2 partitioner, record key = child table name, header tmq.precision=ms); each record
    holds up to `lines_per_record` lines of one table.  Returns the partitions each table's
    records went to."""
    from kafka import KafkaProducer

    by_table: dict[str, list[Row]] = {}
    for r in rows:
        by_table.setdefault(r.table, []).append(r)
    p = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5, batch_size=256 * 1024,
                      max_request_size=8 * 1024 * 1024)
    futures = []
    try:
        # Interleave tables so each batch holds several tables and vnodes.
        chunks = {t: [rs[i:i + lines_per_record] for i in range(0, len(rs), lines_per_record)]
                  for t, rs in by_table.items()}
        depth = max(len(v) for v in chunks.values())
        for k in range(depth):
            for t, cs in chunks.items():
                if k < len(cs):
                    text = "\n".join(line(r, children[t]) for r in cs[k])
                    futures.append((t, p.send(db, key=t.encode(), value=text.encode(),
                                              headers=[("tmq.precision", b"ms")])))
        p.flush(120)
        parts: dict[str, set[int]] = {}
        for t, f in futures:
            md = f.get(timeout=60)
            parts.setdefault(t, set()).add(md.partition)
        return parts
    finally:
        p.close(10)


def expected_query(rows: Iterable[Row], children: dict[str, Child]) -> dict[tuple[str, int], dict[str, Any]]:
    """The rows of `SELECT ts, current, voltage, location FROM meters WHERE voltage > 220 AND
    groupid = 2`, computed in plain Python: {(table, ts): value}."""
    out = {}
    for r in rows:
        c = children[r.table]
        if r.voltage > 220 and c.groupid == 2:
            out[(r.table, r.ts)] = {"ts": r.ts, "current": r.current, "voltage": r.voltage, "location": c.location}
    return out


# --------------------------------------------------------------------------- reading topics


@dataclass(frozen=True)
class Rec:
    partition: int
    offset: int
    key: str | None
    value: bytes | None
    timestamp: int
    headers: dict[str, bytes | None]

    def json(self) -> Any:
        return json.loads(self.value) if self.value is not None else None


def end_offsets(bootstrap: str, topic: str, partitions: int = VGROUPS) -> dict[int, int]:
    from kafka import KafkaConsumer, TopicPartition

    c = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        return {tp.partition: o for tp, o in c.end_offsets(tps).items()}
    finally:
        c.close()


def beginning_offsets(bootstrap: str, topic: str, partitions: int = VGROUPS) -> dict[int, int]:
    from kafka import KafkaConsumer, TopicPartition

    c = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        return {tp.partition: o for tp, o in c.beginning_offsets(tps).items()}
    finally:
        c.close()


def read_kafka_python(bootstrap: str, topic: str, partitions: int = VGROUPS, timeout: float = 120.0) -> list[Rec]:
    """Everything up to the end offsets, by kafka-python with manual assignment from earliest."""
    from kafka import KafkaConsumer, TopicPartition

    c = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, auto_offset_reset="earliest",
                      fetch_max_bytes=16 * 1024 * 1024, max_partition_fetch_bytes=4 * 1024 * 1024,
                      max_poll_records=20000)
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        ends = c.end_offsets(tps)
        c.assign(tps)
        c.seek_to_beginning()
        out: list[Rec] = []
        deadline = time.monotonic() + timeout
        while True:
            for tp, msgs in c.poll(timeout_ms=200).items():
                for m in msgs:
                    out.append(Rec(tp.partition, m.offset, None if m.key is None else m.key.decode(), m.value,
                                   m.timestamp, dict(m.headers)))
            if all(c.position(tp) >= ends[tp] for tp in tps):
                return out
            assert time.monotonic() < deadline, f"read {topic}: positions never reached {ends}"
    finally:
        c.close()


def _ck_rec(m: Any) -> Rec:
    if m.error() is not None:
        raise AssertionError(f"consume error: {m.error()}")
    return Rec(m.partition(), m.offset(), None if m.key() is None else m.key().decode(), m.value(),
               m.timestamp()[1], dict(m.headers() or []))


class CkConsumer:
    """A confluent-kafka consumer that knows its fetch positions.

    A view's last versions may deliver no record (filtered rows, meta entries), so the
    application position (last record + 1) need not reach the end offset; librdkafka's fetch
    position (`next_offset` in its statistics) does, and says when a partition is read."""

    def __init__(self, bootstrap: str, topic: str, **config: Any) -> None:
        from confluent_kafka import Consumer

        self.topic = topic
        self.fetched: dict[int, int] = {}
        conf = {"bootstrap.servers": bootstrap, "group.id": "td-unused-" + uuid.uuid4().hex[:8],
                "enable.auto.commit": False, "fetch.wait.max.ms": 100, "enable.partition.eof": False,
                "statistics.interval.ms": 100, "stats_cb": self._stats}
        conf.update(config)
        self.c = Consumer(conf)

    def _stats(self, text: str) -> None:
        for p, d in json.loads(text).get("topics", {}).get(self.topic, {}).get("partitions", {}).items():
            if p != "-1" and int(d["next_offset"]) >= 0:
                self.fetched[int(p)] = int(d["next_offset"])

    def end_offsets(self, partitions: int = VGROUPS) -> dict[int, int]:
        from confluent_kafka import TopicPartition

        return {p: self.c.get_watermark_offsets(TopicPartition(self.topic, p), timeout=30, cached=False)[1]
                for p in range(partitions)}

    def drain(self, ends: dict[int, int], timeout: float = 120.0) -> list[Rec]:
        """Consume until every partition's position reached `ends` (partitions with end 0
        or not in `ends` need nothing)."""
        out: list[Rec] = []
        last: dict[int, int] = {}
        deadline = time.monotonic() + timeout
        while True:
            for m in self.c.consume(num_messages=10000, timeout=0.1):
                r = _ck_rec(m)
                out.append(r)
                last[r.partition] = r.offset + 1
            if all(e == 0 or max(self.fetched.get(p, -1), last.get(p, -1)) >= e for p, e in ends.items()):
                # the statistics may run ahead of the records handed out: drain what is queued
                while more := self.c.consume(num_messages=10000, timeout=0.3):
                    out.extend(_ck_rec(m) for m in more)
                return out
            assert time.monotonic() < deadline, \
                f"read {self.topic}: fetch positions {self.fetched}, records up to {last}, never reached {ends}"

    def close(self) -> None:
        self.c.close()


def read_confluent(bootstrap: str, topic: str, partitions: int = VGROUPS, timeout: float = 120.0) -> list[Rec]:
    """Everything up to the end offsets, by confluent-kafka with manual assignment from earliest."""
    from confluent_kafka import OFFSET_BEGINNING, TopicPartition

    c = CkConsumer(bootstrap, topic)
    try:
        ends = c.end_offsets(partitions)
        c.c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        return c.drain(ends, timeout)
    finally:
        c.close()


def by_partition(recs: Iterable[Rec]) -> dict[int, list[Rec]]:
    out: dict[int, list[Rec]] = {}
    for r in recs:
        out.setdefault(r.partition, []).append(r)
    return out


def assert_strictly_increasing(recs: Iterable[Rec]) -> None:
    for p, rs in by_partition(recs).items():
        offs = [r.offset for r in rs]
        bad = [(a, b) for a, b in zip(offs, offs[1:], strict=False) if b <= a]
        assert not bad, f"partition {p}: offsets not strictly increasing at {bad[:5]}"
