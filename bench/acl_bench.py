"""What the ACL authorizer costs (issue 12, point 4).

1. The decision in process: `Authorizer.allowed` of one topic for one principal, from its
   cache (the hot path: a decision changes only with an ACL change) and computed afresh
   (cache cleared each time), over ACL sets of 10 and 10,000 bindings (literal, prefixed and
   wildcard mixed, most on other topics).
2. End to end: one raw connection sending small Produce and Fetch requests, one at a time,
   to `tmqgate serve` with `authorizer = "none"` and with `authorizer = "acl"` (1,000 ACLs,
   the client allowed by a PREFIXED ALLOW on the topic); interleaved rounds, medians.

    PYTHONPATH=... python -m bench.acl_bench [--requests 3000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.workloads import raw_request_round  # noqa: E402
from compat_tests.brokers import TmqgateProcess  # noqa: E402
from compat_tests.raw import RawConn  # noqa: E402
from tmqgate.broker.acl.authorizer import Authorizer  # noqa: E402
from tmqgate.broker.acl.model import AclBinding, Operation, PatternType, Permission, ResourceType  # noqa: E402
from tmqgate.broker.identity.client import ClientInfo, current_client  # noqa: E402
from tmqgate.storage import Store  # noqa: E402

T = ResourceType.TOPIC


def _acls(n: int) -> list[AclBinding]:
    out = [AclBinding(T, "bench-", PatternType.PREFIXED, "User:alice", "*", Operation.ALL, Permission.ALLOW)]
    for i in range(n - 1):
        kind = i % 3
        name = f"other-{i}" + ("-" if kind == 1 else "")
        pattern = PatternType.PREFIXED if kind == 1 else PatternType.LITERAL
        out.append(AclBinding(T, name, pattern, f"User:u{i % 50}", "*", Operation.READ,
                              Permission.DENY if kind == 2 else Permission.ALLOW))
    return out


def decision(n_acls: int, calls: int = 200_000) -> tuple[float, float]:
    """(ns per cached decision, ns per uncached decision)."""
    with tempfile.TemporaryDirectory() as d, Store(Path(d) / "data") as store:
        auth = Authorizer(store)
        auth.create(_acls(n_acls))
        current_client.set(ClientInfo("10.0.0.1", 1, principal="User:alice"))
        names = ("bench-t",)
        auth.allowed(Operation.WRITE, T, names)
        t0 = time.perf_counter_ns()
        for _ in range(calls):
            auth.allowed(Operation.WRITE, T, names)
        cached = (time.perf_counter_ns() - t0) / calls
        n = calls // 10
        t0 = time.perf_counter_ns()
        for _ in range(n):
            auth._cache.clear()
            auth.allowed(Operation.WRITE, T, names)
        fresh = (time.perf_counter_ns() - t0) / n
        return cached, fresh


def end_to_end(requests: int, rounds: int) -> dict[str, tuple[float, float]]:
    base = Path(tempfile.mkdtemp(prefix="acl-bench-"))
    procs = {
        "none": TmqgateProcess(base / "none"),
        "acl": TmqgateProcess(base / "acl", config={"authorizer": "acl", "allow_everyone_if_no_acl_found": True}),
    }
    results: dict[str, list[tuple[float, float]]] = {k: [] for k in procs}
    try:
        for name, proc in procs.items():
            proc.start()
            with RawConn(proc.bootstrap) as c:
                if name == "acl":  # 1,000 ACLs, ANONYMOUS allowed by a PREFIXED ALL on bench-
                    acls = [a._replace(principal="User:ANONYMOUS") if a.resource_name == "bench-" else a
                            for a in _acls(1000)]
                    body = c.request(30, 3, {"creations": [
                        {"resource_type": a.resource_type, "resource_name": a.resource_name,
                         "resource_pattern_type": a.pattern_type, "principal": a.principal, "host": a.host,
                         "operation": a.operation, "permission_type": a.permission} for a in acls]})
                    # (the cluster has no ACL: allow_everyone_if_no_acl_found lets ANONYMOUS add them)
                    if body["results"][0]["error_code"] != 0:
                        raise SystemExit(f"CreateAcls refused: {body['results'][0]}")
                c.request(19, 7, {"topics": [{"name": "bench-t", "num_partitions": 1, "replication_factor": 1,
                                              "assignments": [], "configs": []}],
                                  "timeout_ms": 30000, "validate_only": False})
            raw_request_round(proc.bootstrap, "bench-t", 200)  # warm-up
        for _ in range(rounds):
            for name, proc in procs.items():
                results[name].append(raw_request_round(proc.bootstrap, "bench-t", requests))
    finally:
        for proc in procs.values():
            proc.stop()
    return {k: (statistics.median(p for p, _ in v), statistics.median(f for _, f in v)) for k, v in results.items()}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=3000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    for n in (10, 10_000):
        cached, fresh = decision(n)
        print(f"decision, {n:>6} ACLs: cached {cached:,.0f} ns, uncached {fresh:,.0f} ns")
    e2e = end_to_end(args.requests, args.rounds)
    for name, (produce, fetch) in e2e.items():
        print(f"authorizer={name:<4}: Produce {produce:,.0f} µs/request, Fetch {fetch:,.0f} µs/request "
              f"(median of {args.rounds} rounds of {args.requests})")


if __name__ == "__main__":
    main()
