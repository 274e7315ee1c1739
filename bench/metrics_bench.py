"""What the metrics cost (issue 13, Metrics): the hot paths count per request and per
partition (pre-bound label children), never per record.

1. In process: the calls a Produce request makes (`request` + `produced`) and a Fetch makes
   (`request` + `fetched`), ns per call pair.
2. End to end: one raw connection sending small Produce (acks=1) and Fetch requests, one at a
   time, to a `tmqgate serve` of the code before the metrics (`--before`: a folder holding
   `tmqgate/<pkg>` links to that code, as the worktree shims) and of this code; interleaved
   rounds, medians (µs per request).
3. A scrape: `GET /metrics` of this code's broker with `--groups` groups each committed on
   every partition of a 10-partition topic (the lag series are computed at scrape time).

    PYTHONPATH=<shim> python -m bench.metrics_bench --before /tmp/metrics_before/shim \
        [--requests 3000] [--rounds 3] [--groups 100]
"""

from __future__ import annotations

import argparse
import http.client
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.workloads import raw_request_round  # noqa: E402
from compat_tests.brokers import TmqgateProcess  # noqa: E402
from compat_tests.raw import RawConn  # noqa: E402


def _start(proc: TmqgateProcess, pythonpath: str) -> None:
    saved = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = pythonpath
    try:
        proc.start()
    finally:
        if saved is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = saved


def _create(proc: TmqgateProcess, name: str, partitions: int) -> None:
    with RawConn(proc.bootstrap) as c:
        body = c.request(19, 7, {"topics": [{"name": name, "num_partitions": partitions, "replication_factor": 1,
                                             "assignments": [], "configs": []}],
                                 "timeout_ms": 30000, "validate_only": False})
        assert body["topics"][0]["error_code"] == 0, body


def _scrape_ms(proc: TmqgateProcess, groups: int) -> tuple[float, int]:
    _create(proc, "bench-lag", 10)
    with RawConn(proc.bootstrap) as c:
        for g in range(groups):
            body = c.request(8, 8, {"group_id": f"bench-g{g}", "generation_id_or_member_epoch": -1,
                                    "member_id": "", "group_instance_id": None, "retention_time_ms": -1,
                                    "topics": [{"name": "bench-lag", "partitions": [
                                        {"partition_index": p, "committed_offset": 0, "committed_leader_epoch": -1,
                                         "committed_metadata": ""} for p in range(10)]}]})
            assert body["topics"][0]["partitions"][0]["error_code"] == 0, body
    times = []
    size = 0
    for _ in range(5):
        conn = http.client.HTTPConnection("127.0.0.1", proc.http_port, timeout=60)
        t0 = time.perf_counter()
        conn.request("GET", "/metrics")
        resp = conn.getresponse()
        text = resp.read()
        times.append((time.perf_counter() - t0) * 1000)
        conn.close()
        assert resp.status == 200
        size = len(text)
    return statistics.median(times), size


def in_process(n: int = 200_000) -> tuple[float, float]:
    from tmqgate.broker.ops.metrics import Metrics

    m = Metrics()
    t0 = time.perf_counter()
    for _ in range(n):
        m.request(0, 9, 1.0)
        m.produced("bench-t", 100, 1)
    produce = (time.perf_counter() - t0) / n * 1e9
    t0 = time.perf_counter()
    for _ in range(n):
        m.request(1, 12, 1.0)
        m.fetched("bench-t", 100)
    return produce, (time.perf_counter() - t0) / n * 1e9


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--before", required=True, help="a shim folder of the code before the metrics")
    ap.add_argument("--requests", type=int, default=3000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--groups", type=int, default=100)
    args = ap.parse_args()
    produce_ns, fetch_ns = in_process()
    print(f"in process: Produce's metrics {produce_ns:,.0f} ns/request, Fetch's {fetch_ns:,.0f} ns/request")
    base = Path(tempfile.mkdtemp(prefix="metrics-bench-"))
    procs = {"before": (TmqgateProcess(base / "before"), args.before),
             "after": (TmqgateProcess(base / "after"), os.environ.get("PYTHONPATH", ""))}
    results: dict[str, list[tuple[float, float]]] = {k: [] for k in procs}
    try:
        for proc, path in procs.values():
            _start(proc, path)
            _create(proc, "bench-t", 1)
            raw_request_round(proc.bootstrap, "bench-t", 200)  # warm-up
        for _ in range(args.rounds):
            for name, (proc, _) in procs.items():
                results[name].append(raw_request_round(proc.bootstrap, "bench-t", args.requests))
        scrape_ms, size = _scrape_ms(procs["after"][0], args.groups)
    finally:
        for proc, _ in procs.values():
            proc.stop()
    for name, rounds in results.items():
        print(f"{name:<6}: Produce {statistics.median(p for p, _ in rounds):,.0f} µs/request, "
              f"Fetch {statistics.median(f for _, f in rounds):,.0f} µs/request "
              f"(median of {args.rounds} rounds of {args.requests})")
    print(f"GET /metrics with {args.groups} groups x 10 partitions committed: {scrape_ms:.1f} ms "
          f"(median of 5), {size:,} bytes")


if __name__ == "__main__":
    main()
