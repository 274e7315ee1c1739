"""Fuzzing the wire: valid and mutated requests of every advertised API and version, sent to a
real `tmqgate serve` over TCP.

For each input the broker must answer (a frame carrying the input's correlation id) or close
the connection; an input left unanswered must not stop the broker from serving a fresh
connection (Produce with acks=0 owes no answer, a mutated Fetch may long-poll); the broker must
not die; a real client (confluent-kafka producer + consumer) round-trips records every
CHECK_EVERY inputs and at the end; the broker's RSS stays within idle + RSS_BUDGET.

Requests are built from the protocol schemas (valid values, names of a real topic and group
sprinkled in, waits capped), encoded by our codec, then mutated: bit flips, truncation,
extreme lengths and counts (int32 0x7fffffff / -2, int16 0x7fff, varint 2^32-1) at random
offsets of the body. TMQGATE_FUZZ_INPUTS sets the number of inputs (default 2000),
TMQGATE_FUZZ_SEED the seed. The figures are printed (run with -s to see them).
"""

from __future__ import annotations

import os
import random
import struct
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from .brokers import TmqgateProcess
from .helpers import ConfluentDriver, OutRecord, unique_topic
from .raw import Closed, RawConn

pytestmark = pytest.mark.tmqgate_only

INPUTS = int(os.environ.get("TMQGATE_FUZZ_INPUTS", "2000"))
SEED = int(os.environ.get("TMQGATE_FUZZ_SEED", "11"))
CHECK_EVERY = 500
ANSWER_WITHIN = 3.0  # seconds an input is given before the broker is probed on a fresh connection
PROBE_WITHIN = 10.0  # a fresh ApiVersions must be answered within this, or the broker hangs
RSS_BUDGET = 300 << 20
# CreateTopics and CreatePartitions are mutated like every API: before the partition limits
# (max_partitions_per_request and friends), a mutated count such as 0x00ffffff made that many
# vnodes and the broker stopped serving for minutes — found by this test with seeds 5 and 99.

INT_RANGES = {"int8": (-(2**7), 2**7 - 1), "int16": (-(2**15), 2**15 - 1), "uint16": (0, 2**16 - 1),
              "int32": (-(2**31), 2**31 - 1), "uint32": (0, 2**32 - 1), "int64": (-(2**63), 2**63 - 1)}
EXTREMES = [struct.pack(">i", 0x7FFFFFFF), struct.pack(">i", -2), struct.pack(">h", 0x7FFF),
            b"\xff\xff\xff\xff\x0f", b"\x80\x80\x80\x80\x80\x80"]


class Gen:
    """Valid request bodies from the schemas, with the test's topic and group in them."""

    def __init__(self, rng: random.Random, topic: str, group: str, topic_id: bytes) -> None:
        self.rng, self.topic, self.group, self.topic_id = rng, topic, group, topic_id

    def body(self, api_key: int, v: int) -> dict[str, Any]:
        from tmqgate.protocol.schemas import SCHEMAS

        return self._struct(SCHEMAS[api_key].request.fields, v)

    def _struct(self, fields: Any, v: int) -> dict[str, Any]:
        return {f.key: self._field(f, v) for f in fields if f.present(v)}

    def _field(self, f: Any, v: int) -> Any:
        rng = self.rng
        if f.nullable(v) and rng.random() < 0.1:
            return None
        if f.is_array:
            return [self._one(f, v) for _ in range(rng.choice((0, 1, 1, 2, 3)))]
        return self._one(f, v)

    def _one(self, f: Any, v: int) -> Any:
        rng, key, t = self.rng, f.key, f.type
        if f.is_struct:
            return self._struct(f.fields, v)
        if key.endswith(("_ms", "timeout")) and t in INT_RANGES:
            return rng.choice((0, 10, 100))  # no request waits long unless a mutation says so
        if key in ("count", "num_partitions"):
            # Small counts, and counts the partition limits must refuse (4e8 once stalled it).
            return rng.choice((-1, 0, 1, 3, 5, 10_001, 0x00FFFFFF, 400_000_000, 2**31 - 1))
        if key == "acks":
            return rng.choice((-1, 1))  # acks=0 owes no answer: mutations may still get there
        if t in INT_RANGES:
            lo, hi = INT_RANGES[t]
            return rng.choice((0, 1, 2, -1, lo, hi, rng.randint(lo, hi)))
        if t == "bool":
            return rng.random() < 0.5
        if t == "float64":
            return rng.random()
        if t == "string":
            pool = [self.topic, self.group, "", "fuzz", "x" * rng.randint(0, 300)]
            if "group" in key or "member" in key:
                pool = [self.group, self.group, "", "m-1"]
            return rng.choice(pool)
        if t == "uuid":
            return rng.choice((self.topic_id, bytes(16), uuid.uuid4().bytes))
        if t == "records":
            from tmqgate.protocol.records import build_batch

            return build_batch([(None, b"fuzz", [], int(time.time() * 1000))])
        if t == "bytes":
            return rng.randbytes(rng.randint(0, 40))
        raise AssertionError(t)


def mutate(rng: random.Random, frame: bytes) -> tuple[str, bytes]:
    """A mutation of a whole frame (size prefix, header of 8 bytes kept, body changed)."""
    head, body = frame[:12], bytearray(frame[12:])
    kind = rng.choice(("valid", "valid", "flip", "truncate", "extreme", "extreme"))
    if kind == "flip" and body:
        for _ in range(rng.randint(1, 8)):
            i = rng.randrange(len(body))
            body[i] ^= 1 << rng.randrange(8)
    elif kind == "truncate" and body:
        del body[rng.randrange(len(body)):]
    elif kind == "extreme" and body:
        e = rng.choice(EXTREMES)
        i = rng.randrange(len(body))
        body[i:i + len(e)] = e
    elif kind != "valid":
        kind = "valid"
    out = head[4:] + bytes(body)
    return kind, struct.pack(">i", len(out)) + out


def rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def round_trip(bootstrap: str, topic: str) -> None:
    """A real client: produce 3 records with confluent-kafka, read them back."""
    driver = ConfluentDriver(bootstrap)
    values = [uuid.uuid4().bytes for _ in range(3)]
    now = int(time.time() * 1000)
    placed = driver.produce(topic, [OutRecord(0, None, v, (), now) for v in values], idempotent=False)
    first = min(off for _, off in placed)
    got = driver.consume(topic, {0: first + 3}, timeout=60)
    assert [r.value for r in got if r.offset >= first] == values


def probe(bootstrap: str) -> bool:
    try:
        with RawConn(bootstrap, timeout=PROBE_WITHIN) as c:
            return bool(c.api_versions())
    except (OSError, Closed, TimeoutError):
        return False


def test_fuzz(tmp_path: Path, target: str) -> None:
    if target != "tmqgate":
        pytest.skip("tmqgate-only")
    from tmqgate.protocol.messages import encode_request

    proc = TmqgateProcess(tmp_path / "fuzz")
    proc.start()
    try:
        assert proc.proc is not None
        pid = proc.proc.pid
        topic, group = unique_topic("fuzz"), f"fuzz-group-{uuid.uuid4().hex[:6]}"
        ConfluentDriver(proc.bootstrap).create_topic(topic, 3)
        round_trip(proc.bootstrap, topic)
        idle = rss(pid)
        with RawConn(proc.bootstrap) as c:
            ranges = c.api_versions()
            from tmqgate.protocol.schemas import SCHEMAS

            [t] = c.request(3, 12, {"topics": [{"name": topic, "topic_id": bytes(16)}]})["topics"]
            topic_id = bytes(t["topic_id"])
        combos = [(k, v) for k, (lo, hi) in sorted(ranges.items()) if k in SCHEMAS
                  for v in range(max(lo, SCHEMAS[k].min_version), min(hi, SCHEMAS[k].max_version) + 1)]
        rng = random.Random(SEED)
        gen = Gen(rng, topic, group, topic_id)
        stats: Counter[str] = Counter()
        kinds: Counter[str] = Counter()
        peak = idle
        valid_failures: list[str] = []
        conn: RawConn | None = None
        for i in range(INPUTS):
            api_key, v = rng.choice(combos)
            corr = i + 1000
            frame = encode_request(api_key, v, corr, "fuzz", gen.body(api_key, v))
            kind, frame = mutate(rng, frame)
            kinds[kind] += 1
            if conn is None:
                conn = RawConn(proc.bootstrap, timeout=ANSWER_WITHIN)
            outcome = _send(conn, frame, corr)
            stats[outcome] += 1
            if kind == "valid" and outcome != "answered":
                stats[f"valid-{outcome}"] += 1
                valid_failures.append(f"{api_key} v{v} {outcome}: {frame.hex()[:200]}")
            if outcome != "answered":
                conn.close()
                conn = None
            if outcome == "silent" and not probe(proc.bootstrap):
                stats["hang"] += 1
                raise AssertionError(f"broker stopped serving after input {i} ({api_key} v{v} {kind}): "
                                     f"{frame.hex()}\n{proc.log_tail()}")
            if proc.proc.poll() is not None:
                stats["crash"] += 1
                raise AssertionError(f"broker died after input {i}:\n{proc.log_tail()}")
            if (i + 1) % 50 == 0:
                peak = max(peak, rss(pid))
            if (i + 1) % CHECK_EVERY == 0:
                round_trip(proc.bootstrap, topic)
        if conn is not None:
            conn.close()
        round_trip(proc.bootstrap, topic)
        peak = max(peak, rss(pid))
        print(f"\nfuzz: seed {SEED}, {INPUTS} inputs ({dict(kinds)}), outcomes {dict(stats)}, "
              f"crashes 0, hangs 0, RSS idle {idle >> 20} MB, peak {peak >> 20} MB")
        assert stats["wrong-correlation"] == 0
        assert not valid_failures, valid_failures[:10]  # a valid request is answered
        assert peak <= idle + RSS_BUDGET, (idle, peak)
        log = proc.log_path.read_text()
        failures = [line for line in log.splitlines() if "error handling" in line or "suppressed" in line]
        print("handler failures answered (first lines):", *failures[:20], sep="\n  ")
        assert "Traceback" not in log, log[-5000:]
    finally:
        proc.stop()


def _send(conn: RawConn, frame: bytes, corr: int) -> str:
    """answered / closed / silent (nothing within ANSWER_WITHIN) / wrong-correlation."""
    try:
        conn.send_bytes(frame)
        got = conn.recv_frame(timeout=ANSWER_WITHIN)
    except TimeoutError:
        return "silent"
    except (Closed, OSError):
        return "closed"
    (got_corr,) = struct.unpack_from(">i", got)
    return "answered" if got_corr == corr else "wrong-correlation"
