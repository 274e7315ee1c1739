"""Wide schemas against a real `tmqgate serve` (issue 25, point 5): `python -m bench.wide_schema_bench`.

1. stall: one Produce of a line with 100,000 fields to a database topic while another
   connection sends ApiVersions every 10 ms; prints the Produce's answer and time and the
   longest ApiVersions round trip (the other clients' stall).
2. fetch: a row with N tags (N = 128, and 1,000 / 8,000 where the broker still takes them)
   written by line protocol and fetched from the database topic; prints the Fetch's time.
3. unit: the Fetch's evaluation of one row (`views._run_batch`) with N tags built directly in
   Arrow (no broker, so past the ingest limit): seconds per N show how it grows.
4. abandoned: six Fetches of wide rows whose clients close at once, then SASL PLAIN logins
   and HTTP Basic requests; prints how long each login took.

Nothing here asserts timings.
"""

from __future__ import annotations

import base64
import http.client
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path

import pyarrow as pa

from compat_tests.brokers import TmqgateProcess, _tmqgate_cmd
from compat_tests.raw import FETCH_V, RawConn
from tmqgate.protocol.messages import encode_request
from tmqgate.protocol.records import build_batch

PRECISION = [("tmq.precision", b"ms")]


def _sql(proc: TmqgateProcess, text: str, auth: dict[str, str] | None = None) -> tuple[int, bytes, float]:
    conn = http.client.HTTPConnection("127.0.0.1", proc.http_port, timeout=600)
    t0 = time.perf_counter()
    try:
        conn.request("POST", "/rest/sql", body=text.encode(), headers=auth or {})
        resp = conn.getresponse()
        return resp.status, resp.read(), time.perf_counter() - t0
    finally:
        conn.close()


def _line_batch(line: str) -> bytes:
    return build_batch([(None, line.encode(), PRECISION, int(time.time() * 1000))])


class Pinger(threading.Thread):
    """ApiVersions every 10 ms on its own connection; `worst` is the longest round trip."""

    def __init__(self, bootstrap: str) -> None:
        super().__init__(daemon=True)
        self.bootstrap, self.worst, self.stop = bootstrap, 0.0, threading.Event()

    def run(self) -> None:
        with RawConn(self.bootstrap, timeout=600) as c:
            while not self.stop.is_set():
                t0 = time.perf_counter()
                c.api_versions()
                self.worst = max(self.worst, time.perf_counter() - t0)
                time.sleep(0.01)


def stall(proc: TmqgateProcess, db: str, fields: int = 100_000) -> None:
    line = "wide " + ",".join(f"f{i}=t" for i in range(fields)) + f" {int(time.time() * 1000)}"
    pinger = Pinger(proc.bootstrap)
    pinger.start()
    time.sleep(0.5)
    with RawConn(proc.bootstrap, timeout=600) as c:
        t0 = time.perf_counter()
        p = c.produce(db, 0, _line_batch(line))
        took = time.perf_counter() - t0
    time.sleep(0.3)
    pinger.stop.set()
    pinger.join()
    print(f"stall: {fields} fields: produce {took:.2f} s, error {p['error_code']} "
          f"{(p['error_message'] or '')[:120]!r}; other client's worst ApiVersions {pinger.worst:.2f} s")


def _tag_line(stable: str, tags: int, value_len: int = 8, fields: int = 0) -> str:
    v = "x" * value_len
    more = "".join(f",g{i}={i}" for i in range(fields))
    return f"{stable}," + ",".join(f"t{i}={v}{i}" for i in range(tags)) + f" f=1i32{more} {int(time.time() * 1000)}"


def _fetch_time(proc: TmqgateProcess, db: str, offset: int) -> tuple[float, int]:
    with RawConn(proc.bootstrap, timeout=600) as c:
        t0 = time.perf_counter()
        p = c.fetch(db, 0, offset)
        return time.perf_counter() - t0, len(p["records"] or b"")


def fetch_tags(proc: TmqgateProcess, db: str, counts: tuple[int, ...]) -> None:
    for n in counts:
        with RawConn(proc.bootstrap, timeout=600) as c:
            p = c.produce(db, 0, _line_batch(_tag_line(f"tags{n}", n)))
        if p["error_code"]:
            print(f"fetch: {n} tags refused at ingest: {p['error_code']} {(p['error_message'] or '')[:100]!r}")
            continue
        took, size = _fetch_time(proc, db, p["base_offset"])
        print(f"fetch: one row with {n} tags: {took:.3f} s ({size} bytes)")


def unit(counts: tuple[int, ...]) -> None:
    from tmqgate.broker.sql import views
    from tmqgate.broker.tsdb.rows import encode_rows
    from tmqgate.broker.tsdb.types import BIGINT, TIMESTAMP, Column, StableSchema, nchar

    for n in counts:
        schema = StableSchema("s", [Column("ts", TIMESTAMP), Column("f", BIGINT)],
                              [Column(f"t{i}", nchar(16)) for i in range(n)])
        rows = pa.table({"tbname": ["c1"], "ts": pa.array([1], pa.int64()), "f": pa.array([1], pa.int64())})
        tags = pa.table({"tbname": ["c1"], **{f"t{i}": [f"value{i}"] for i in range(n)}})
        topic = views.TopicDef("t", "database", "db", None, None, "")
        run = views._Run("s", views._Compiled(topic, schema), [views._Piece(encode_rows(rows), 0, 1)], 0, 0, b"db")
        t0 = time.perf_counter()
        views._run_batch(run, tags)
        print(f"unit: _run_batch of one row with {n} tags: {time.perf_counter() - t0:.3f} s")


def _plain_login(bootstrap: str, user: str, password: str) -> float:
    """SaslHandshake v1 + SaslAuthenticate PLAIN on a new connection: seconds until answered."""
    host, port = bootstrap.split(":")
    t0 = time.perf_counter()
    with RawConn(bootstrap, timeout=600) as c:
        hs = c.request(17, 1, {"mechanism": "PLAIN"})
        assert hs["error_code"] == 0, hs
        ans = c.request(36, 2, {"auth_bytes": f"\0{user}\0{password}".encode()})
        assert ans["error_code"] == 0, ans
    return time.perf_counter() - t0


def _abandon_fetch(bootstrap: str, topic: str, offset: int, max_bytes: int = 64 << 20) -> None:
    """Send a Fetch and close the socket without reading the answer."""
    host, port = bootstrap.split(":")
    s = socket.create_connection((host, int(port)))
    body = {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": max_bytes, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1,
            "topics": [{"topic": topic, "partitions": [{"partition": 0, "current_leader_epoch": -1,
                                                        "fetch_offset": offset, "last_fetched_epoch": -1,
                                                        "log_start_offset": -1, "partition_max_bytes": max_bytes}]}],
            "forgotten_topics_data": [], "rack_id": ""}
    frame = encode_request(1, FETCH_V, 1, "abandoner", body)
    s.sendall(frame)
    time.sleep(0.05)
    s.close()


def abandoned(workdir: Path, tags: int, rows: int, fields: int = 0, fetches: int = 6) -> None:
    proc = TmqgateProcess(workdir, config={"http_auth": "basic", "sasl_enabled_mechanisms": ["PLAIN"],
                                           "max_decompressed_batch_bytes": 256 << 20},
                          extra_listeners={"SASL_PLAINTEXT": "SASL_PLAINTEXT"})
    proc.data_dir.mkdir(parents=True)
    import subprocess
    subprocess.run([*_tmqgate_cmd(), "user", "add", "alice", "--mechanism", "SCRAM-SHA-512", "--iterations",
                    "4096", "--data-dir", str(proc.data_dir)], input="alice-secret\n", text=True, check=True)
    proc.start()
    try:
        auth = {"Authorization": "Basic " + base64.b64encode(b"alice:alice-secret").decode()}
        print(_sql(proc, "CREATE DATABASE ab VGROUPS 1", auth)[:2])
        lines = "\n".join(_tag_line("wide", tags, 8, fields).replace(" f=1i32", f" f={i}i32") for i in range(rows))
        # the rows in many small batches (one child table each)
        with RawConn(proc.bootstrap, timeout=600) as c:
            first = None
            per = max(1, 600_000 // len(lines.split("\n")[0]))
            for chunk in range(0, rows, per):
                part = "\n".join(lines.split("\n")[chunk:chunk + per])
                p = c.produce("ab", 0, _line_batch(part))
                if p["error_code"]:
                    print("abandoned: ingest refused", p["error_message"][:200])
                    return
                first = p["base_offset"] if first is None else first
        one = _fetch_time(proc, "ab", 0)
        print(f"abandoned: one Fetch from offset 0 of {rows} rows x {tags} tags, {fields + 1} fields: "
              f"{one[0]:.2f} s ({one[1]} bytes)")
        for _ in range(fetches):
            _abandon_fetch(proc.bootstrap, "ab", 0)
        time.sleep(0.5)
        sasl = proc.listener_ports["SASL_PLAINTEXT"]
        for i in range(3):
            took = _plain_login(f"127.0.0.1:{sasl}", "alice", "alice-secret")
            status, _, basic = _sql(proc, "SHOW DATABASES", auth)
            print(f"abandoned: login {i}: SASL PLAIN {took:.2f} s, HTTP Basic {basic:.2f} s (status {status})")
    finally:
        proc.stop()


def main() -> None:
    what = sys.argv[1:] or ["stall", "fetch", "unit", "abandoned"]
    if "unit" in what:
        unit((128, 1000, 2000, 4000, 8000))
    with tempfile.TemporaryDirectory() as tmp:
        if "stall" in what or "fetch" in what:
            proc = TmqgateProcess(Path(tmp) / "b1", config={"max_decompressed_batch_bytes": 256 << 20})
            proc.start()
            try:
                print(_sql(proc, "CREATE DATABASE wide VGROUPS 1")[:2])
                if "stall" in what:
                    stall(proc, "wide")
                if "fetch" in what:
                    fetch_tags(proc, "wide", (128, 1000, 8000))
            finally:
                proc.stop()
        if "abandoned" in what:
            tags = int(next((a.split("=")[1] for a in what if a.startswith("tags=")), "2000"))
            rows = int(next((a.split("=")[1] for a in what if a.startswith("rows=")), "200"))
            fields = int(next((a.split("=")[1] for a in what if a.startswith("fields=")), "0"))
            abandoned(Path(tmp) / "b2", tags, rows, fields)


if __name__ == "__main__":
    main()
