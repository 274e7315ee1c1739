"""How long a large SQL body over HTTP holds the Kafka listener (issue 11, finding 3).

Run: ``python -m bench.sql_stall [--kib 1000] [--shape select|insert|bad]`` — starts a
`tmqgate serve`, times Kafka ApiVersions round trips on one connection back to back, first
alone and then while one POST /rest/sql of about ``--kib`` KiB runs, and prints the largest
round trip of each phase (the listener's stall) and how long the POST took.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

from compat_tests.brokers import TmqgateProcess
from compat_tests.raw import RawConn


def sql_body(shape: str, size: int) -> str:
    if shape == "select":  # a long select list: the slowest shape to parse per byte
        cols = ",".join(f"c{i}" for i in range(size // 8))
        return f"SELECT {cols} FROM d.t"
    if shape == "insert":
        rows = " ".join(f"(now+{i}a, {i})" for i in range(size // 14))
        return f"INSERT INTO d.t1 USING d.st TAGS (1) VALUES {rows}"
    return "SELECT " + "+".join(["1"] * (size // 2)) + " garbage garbage"


def ping_loop(conn: RawConn, stop: threading.Event, out: list[float]) -> None:
    while not stop.is_set():
        t0 = time.perf_counter()
        conn.api_versions()
        out.append(time.perf_counter() - t0)


def phase(conn: RawConn, action: object) -> tuple[list[float], float]:
    rtts: list[float] = []
    stop = threading.Event()
    pinger = threading.Thread(target=ping_loop, args=(conn, stop, rtts))
    pinger.start()
    time.sleep(0.3)
    t0 = time.perf_counter()
    action()  # type: ignore[operator]
    took = time.perf_counter() - t0
    time.sleep(0.3)
    stop.set()
    pinger.join()
    return rtts, took


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kib", type=int, default=1000)
    ap.add_argument("--shape", choices=("select", "insert", "bad"), default="select")
    ap.add_argument("--max-sql-length", type=int, default=None, help="broker's max_sql_length")
    args = ap.parse_args()
    config = {} if args.max_sql_length is None else {"max_sql_length": args.max_sql_length}
    with tempfile.TemporaryDirectory() as tmp:
        proc = TmqgateProcess(Path(tmp), config=config)
        proc.start()
        try:
            url = f"http://127.0.0.1:{proc.http_port}/rest/sql"

            def post(text: str) -> tuple[int, str]:
                req = urllib.request.Request(url, data=text.encode(), method="POST")
                try:
                    with urllib.request.urlopen(req, timeout=600) as resp:
                        return resp.status, resp.read().decode()
                except urllib.error.HTTPError as exc:
                    return exc.code, exc.read().decode(errors="replace")

            time.sleep(3.0)  # let start-up work (codec precompilation) finish
            post("CREATE DATABASE d VGROUPS 1")
            post("CREATE STABLE d.st (ts TIMESTAMP, v INT) TAGS (t INT)")
            body = sql_body(args.shape, args.kib * 1024)
            answer: dict[str, object] = {}

            def run() -> None:
                status, text = post(body)
                answer.update(status=status, answer=text[:160], answer_len=len(text))

            with RawConn(proc.bootstrap) as conn:
                idle, _ = phase(conn, lambda: time.sleep(1.0))
                busy, took = phase(conn, run)
            print(json.dumps({
                "shape": args.shape, "body_bytes": len(body),
                "idle_rtt_max_ms": round(max(idle) * 1000, 2),
                "idle_rtt_median_ms": round(statistics.median(idle) * 1000, 3),
                "busy_rtt_max_ms": round(max(busy) * 1000, 2),
                "busy_rtt_median_ms": round(statistics.median(busy) * 1000, 3),
                "round_trips_during_post": len(busy), "post_seconds": round(took, 3), **answer,
            }, indent=1))
        finally:
            proc.stop()


if __name__ == "__main__":
    main()
