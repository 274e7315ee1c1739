"""What SASL costs (issue 12, point 3).

Run: ``python -m bench.sasl_bench [--target tmqgate|kafka] [--n 200]`` — starts a broker with
PLAINTEXT and SASL_PLAINTEXT listeners (compat_tests/secure.py) and prints:

- the median and p95 time to open a connection and be served (connect + ApiVersions +
  Metadata) over PLAINTEXT, and over SASL_PLAINTEXT with SCRAM-SHA-512, SCRAM-SHA-256 and PLAIN
  (connect + ApiVersions + SaslHandshake + SaslAuthenticate(s) + Metadata);
- on tmqgate, the Kafka listener's stall while a storm of PLAIN logins with wrong passwords
  runs on other connections: the largest ApiVersions round trip on an authenticated connection
  (PBKDF2 runs in a worker thread, so it should stay near the idle figure);
- the key derivation's CPU per check (what PLAIN and HTTP Basic pay once per password).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
from pathlib import Path

from kafka.net.sasl.scram import ScramClient

from compat_tests.raw import RawConn
from compat_tests.secure import start_secure_broker

META = {"topics": None, "allow_auto_topic_creation": False, "include_topic_authorized_operations": False}


def _login(bootstrap: str, mechanism: str | None, password: str = "alice-secret") -> RawConn:
    c = RawConn(bootstrap)
    c.api_versions()
    if mechanism is not None:
        assert c.request(17, 1, {"mechanism": mechanism})["error_code"] == 0
        if mechanism == "PLAIN":
            body = c.request(36, 2, {"auth_bytes": f"\0alice\0{password}".encode()})
        else:
            client = ScramClient("alice", password, mechanism)
            first = c.request(36, 2, {"auth_bytes": client.first_message()})
            client.process_server_first_message(first["auth_bytes"])
            body = c.request(36, 2, {"auth_bytes": client.final_message()})
        if body["error_code"]:
            c.close()
            raise PermissionError(body["error_message"])
    return c


def connection_times(bootstrap: str, mechanism: str | None, n: int) -> list[float]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        c = _login(bootstrap, mechanism)
        c.request(3, 12, META)
        out.append(time.perf_counter() - t0)
        c.close()
    return out


def stall_under_bad_logins(sasl: str, seconds: float = 5.0, threads: int = 4) -> tuple[float, float, int]:
    """(largest ApiVersions round trip idle, same during the storm, failed logins made)."""
    conn = _login(sasl, "SCRAM-SHA-512")

    def pings(duration: float) -> list[float]:
        out = []
        end = time.monotonic() + duration
        while time.monotonic() < end:
            t0 = time.perf_counter()
            conn.api_versions()
            out.append(time.perf_counter() - t0)
        return out

    idle = pings(2.0)
    stop = threading.Event()
    made = [0]

    def storm() -> None:
        i = 0
        while not stop.is_set():
            i += 1
            try:
                _login(sasl, "PLAIN", password=f"wrong-{threading.get_ident()}-{i}").close()
            except (PermissionError, OSError):
                made[0] += 1

    workers = [threading.Thread(target=storm, daemon=True) for _ in range(threads)]
    for w in workers:
        w.start()
    busy = pings(seconds)
    stop.set()
    for w in workers:
        w.join(10)
    conn.close()
    return max(idle), max(busy), made[0]


def derivation_costs() -> dict[str, float]:
    from tmqgate.broker.auth import scram

    out = {}
    for mechanism, iterations in (("SCRAM-SHA-256", 4096), ("SCRAM-SHA-512", 4096), ("SCRAM-SHA-512", 8192),
                                  ("SCRAM-SHA-512", 16384)):
        credential = scram.make_credential(mechanism, "pw", iterations)
        t0 = time.perf_counter()
        for _ in range(20):
            scram.password_matches(mechanism, credential, "not-it")
        out[f"{mechanism} i={iterations}"] = (time.perf_counter() - t0) / 20 * 1000
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--target", default="tmqgate", choices=["tmqgate", "kafka"])
    parser.add_argument("--n", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        sb = start_secure_broker(args.target, Path(tmp) / "b", users={"alice": "alice-secret"})
        try:
            for label, bootstrap, mechanism in (("PLAINTEXT", sb.bootstrap, None),
                                                ("SASL SCRAM-SHA-512", sb.sasl_bootstrap, "SCRAM-SHA-512"),
                                                ("SASL SCRAM-SHA-256", sb.sasl_bootstrap, "SCRAM-SHA-256"),
                                                ("SASL PLAIN", sb.sasl_bootstrap, "PLAIN")):
                connection_times(bootstrap, mechanism, 20)  # warm up
                times = sorted(connection_times(bootstrap, mechanism, args.n))
                print(f"{args.target} {label:20s} connect+auth+Metadata median {statistics.median(times) * 1000:.2f} ms"
                      f"  p95 {times[int(len(times) * 0.95)] * 1000:.2f} ms  (n={args.n})")
            if args.target == "tmqgate":
                idle, busy, made = stall_under_bad_logins(sb.sasl_bootstrap)
                print(f"tmqgate ApiVersions max round trip: idle {idle * 1000:.1f} ms, during {made} failed PLAIN "
                      f"logins in 5 s {busy * 1000:.1f} ms")
        finally:
            sb.proc.stop()
    for name, ms in derivation_costs().items():
        print(f"PBKDF2 check {name}: {ms:.2f} ms")


if __name__ == "__main__":
    main()
