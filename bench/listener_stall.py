"""How long CPU-heavy work holds the Kafka listener (issue 11: "CPU-heavy work never blocks
the Kafka listener for more than a few ms: measured").

Run: ``python -m bench.listener_stall SCENARIO [options]`` — starts a `tmqgate serve`, then
times Kafka ApiVersions round trips back to back on one connection from a separate process
(so the load generator's own GIL does not delay the measurement), first alone (idle) and then
while the scenario's work runs (busy), and prints max / p99 / median of each phase.

Scenarios:
- ``sql-select``: one POST /rest/sql of a ~``--kib`` KiB SELECT with a long select list
  (the slowest shape to parse per byte);
- ``sql-insert``: one ~``--kib`` KiB INSERT (``--kib 700`` is ~1 MB, ~70k rows, just under
  max_sql_length), parsed and then executed (checked, encoded, appended);
- ``sql-bad``: one ~``--kib`` KiB text that parses for seconds and then fails;
- ``query-topic``: ``--rows`` rows written as line protocol (bench/workloads.py's query-topic
  workload) into a 4-vnode database, then a topic ``AS SELECT ts, v FROM st WHERE k < 90``
  read from the beginning to the end by one consumer (the view is evaluated in Fetch);
- ``database-topic``: the same rows read through a topic ``AS DATABASE``.

Figures are wall-clock round trips on a shared 2-core machine: read them as orders of
magnitude (idle is the floor, busy - idle is the stall).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import statistics
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from compat_tests.brokers import TmqgateProcess
from compat_tests.raw import RawConn

SCENARIOS = ("sql-select", "sql-insert", "sql-bad", "query-topic", "database-topic")


def sql_body(shape: str, size: int) -> str:
    if shape == "select":  # a long select list: the slowest shape to parse per byte
        cols = ",".join(f"c{i}" for i in range(size // 8))
        return f"SELECT {cols} FROM d.t"
    if shape == "insert":
        rows = " ".join(f"(now+{i}a, {i})" for i in range(size // 14))
        return f"INSERT INTO d.t1 USING d.st TAGS (1) VALUES {rows}"
    return "SELECT " + "+".join(["1"] * (size // 2)) + " garbage garbage"


def _pinger(bootstrap: str, ready: Any, stop: Any, out: Any) -> None:
    """In its own process: ApiVersions back to back until `stop`; the round trips to `out`."""
    rtts: list[float] = []
    with RawConn(bootstrap, timeout=600) as conn:
        conn.api_versions()
        ready.set()
        while not stop.is_set():
            t0 = time.perf_counter()
            conn.api_versions()
            rtts.append(time.perf_counter() - t0)
    out.send(rtts)


def phase(bootstrap: str, action: Callable[[], Any]) -> tuple[list[float], float, Any]:
    """Round trips measured while `action` runs (with 0.3 s before and after it)."""
    ctx = mp.get_context("spawn")
    ready, stop = ctx.Event(), ctx.Event()
    receive, send = ctx.Pipe(duplex=False)
    pinger = ctx.Process(target=_pinger, args=(bootstrap, ready, stop, send))
    pinger.start()
    ready.wait(60)
    time.sleep(0.3)
    t0 = time.perf_counter()
    result = action()
    took = time.perf_counter() - t0
    time.sleep(0.3)
    stop.set()
    rtts = receive.recv()
    pinger.join()
    return rtts, took, result


def figures(rtts: list[float]) -> dict[str, float]:
    ms = sorted(r * 1000 for r in rtts)
    return {"max_ms": round(ms[-1], 2), "p99_ms": round(ms[min(len(ms) - 1, int(len(ms) * 0.99))], 2),
            "median_ms": round(statistics.median(ms), 3), "round_trips": len(ms)}


def post(http_port: int, text: str) -> tuple[int, str]:
    req = urllib.request.Request(f"http://127.0.0.1:{http_port}/rest/sql", data=text.encode(), method="POST")
    try:
        with urllib.request.urlopen(req, timeout=600) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")


def sql_scenario(proc: TmqgateProcess, shape: str, kib: int) -> Callable[[], dict[str, Any]]:
    post(proc.http_port, "CREATE DATABASE d VGROUPS 1")
    post(proc.http_port, "CREATE STABLE d.st (ts TIMESTAMP, v INT) TAGS (t INT)")
    body = sql_body(shape, kib * 1024)

    def run() -> dict[str, Any]:
        status, text = post(proc.http_port, body)
        return {"body_bytes": len(body), "status": status, "answer": text[:160]}

    return run


def topic_scenario(proc: TmqgateProcess, kind: str, rows: int) -> Callable[[], dict[str, Any]]:
    from bench.workloads import consume_to_end, ingest_line_protocol, sql

    http = f"127.0.0.1:{proc.http_port}"
    sql(http, "CREATE DATABASE b VGROUPS 4")
    sql(http, "CREATE STABLE b.st (ts TIMESTAMP, v DOUBLE, k BIGINT) TAGS (g NCHAR(16))")
    ingest = ingest_line_protocol(proc.bootstrap, "b", rows)
    definition = "AS DATABASE b" if kind == "database-topic" else "AS SELECT ts, v FROM b.st WHERE k < 90"
    sql(http, f"CREATE TOPIC q {definition}")
    expected = rows if kind == "database-topic" else ingest["below90"]

    def run() -> dict[str, Any]:
        got = consume_to_end(proc.bootstrap, "q")
        return {"definition": definition, "rows": rows, "records": got["records"], "expected": expected,
                "read_seconds": round(got["seconds"], 2)}

    return run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("scenario", choices=SCENARIOS)
    ap.add_argument("--kib", type=int, default=900, help="SQL body size (sql-* scenarios)")
    ap.add_argument("--rows", type=int, default=1_000_000, help="rows in the WAL (topic scenarios)")
    ap.add_argument("--config", default="{}", help="broker settings as JSON, e.g. '{\"max_sql_length\": 2000000}'")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        proc = TmqgateProcess(Path(tmp), config=json.loads(args.config))
        proc.start()
        try:
            time.sleep(3.0)  # let start-up work (codec precompilation) finish
            if args.scenario.startswith("sql-"):
                action = sql_scenario(proc, args.scenario[4:], args.kib)
            else:
                action = topic_scenario(proc, args.scenario, args.rows)
            idle, _, _ = phase(proc.bootstrap, lambda: time.sleep(1.0))
            busy, took, result = phase(proc.bootstrap, action)
            print(json.dumps({"scenario": args.scenario, "idle": figures(idle), "busy": figures(busy),
                              "busy_seconds": round(took, 3), **result}, indent=1))
        finally:
            proc.stop()


if __name__ == "__main__":
    main()
