"""The HTTP front's connection limits (issue 25, point 6), over TCP to a real `tmqgate serve`:
a connection over `http_max_connections` is closed at once while those open keep working; a
slow-loris connection (a header byte at a time) is closed by `http_header_timeout_ms` and
the log says why; an idle kept-alive connection is closed after `http_idle_timeout_ms`;
wrong HTTP Basic credentials are answered after `connection_failed_authentication_delay_ms`
(as SASL's failures); with a low descriptor limit, idle connects to the HTTP port do not lock
Kafka clients out, and accept() failing for want of descriptors is logged a bounded number
of times, then the broker serves again. Small limits configured for the test.

Kafka has no HTTP front: tmqgate only."""

from __future__ import annotations

import base64
import os
import resource
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from .brokers import TmqgateProcess, add_user_offline
from .helpers import api_versions_ok, wait_until

pytestmark = pytest.mark.tmqgate_only

CAP = 5


@pytest.fixture(scope="module")
def front(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TmqgateProcess]:
    proc = TmqgateProcess(tmp_path_factory.mktemp("http-limits"),
                          config={"http_max_connections": CAP, "http_header_timeout_ms": 1500,
                                  "http_idle_timeout_ms": 3000})
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()


def _connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=10)


def _health(s: socket.socket) -> bytes:
    return f"GET /health HTTP/1.1\r\nHost: 127.0.0.1:{s.getpeername()[1]}\r\n\r\n".encode()


def _get_health(s: socket.socket) -> bytes:
    """One keep-alive GET /health on `s`: the answer's status line."""
    s.sendall(_health(s))
    data = b""
    while b"\r\n\r\n" not in data or not data.rstrip().endswith(b"}"):
        chunk = s.recv(65536)
        if not chunk:
            raise ConnectionError(f"closed after {data!r}")
        data += chunk
    return data.split(b"\r\n", 1)[0]


def _closed_within(s: socket.socket, seconds: float) -> float | None:
    """Seconds until the server closes `s` (EOF or reset), None if still open after `seconds`."""
    t0 = time.monotonic()
    s.settimeout(seconds)
    try:
        while True:
            if not s.recv(65536):
                return time.monotonic() - t0
    except (ConnectionResetError, BrokenPipeError):
        return time.monotonic() - t0
    except TimeoutError:
        return None


def _log_since(proc: TmqgateProcess, offset: int) -> str:
    with open(proc.log_path, "rb") as fh:
        fh.seek(offset)
        return fh.read().decode(errors="replace")


def _hold(port: int, n: int) -> list[socket.socket] | None:
    """`n` open connections, each answered a GET /health; None if one was closed instead."""
    socks: list[socket.socket] = []
    try:
        for _ in range(n):
            socks.append(_connect(port))
            assert _get_health(socks[-1]) == b"HTTP/1.1 200 OK"
    except ConnectionError:
        for s in socks:
            s.close()
        return None
    return socks


def test_connection_over_the_cap_is_closed_and_open_ones_keep_working(front: TmqgateProcess) -> None:
    start = front.log_path.stat().st_size
    # CAP connections, each served (the front may still count a connection the readiness
    # probe or a test before closed until it reads that close: then try again)
    held = wait_until(lambda: _hold(front.http_port, CAP), 10, 0.2, f"{CAP} connections served")
    try:
        extra = _connect(front.http_port)  # the kernel completes the handshake; the front closes it
        try:
            extra.sendall(_health(extra))
        except OSError:
            pass
        assert _closed_within(extra, 5) is not None
        extra.close()
        assert _get_health(held[0]) == b"HTTP/1.1 200 OK"  # an open one is still served
    finally:
        for s in held:
            s.close()
    assert "http_max_connections (5) reached" in _log_since(front, start)
    # once they are closed, new connections are served again
    fresh = wait_until(lambda: _connect(front.http_port), 10, 0.2, "a new connection",
                       ok=lambda s: _get_health(s) == b"HTTP/1.1 200 OK")
    fresh.close()


def test_slow_loris_is_closed_by_the_header_timeout(front: TmqgateProcess) -> None:
    start = front.log_path.stat().st_size
    s = _connect(front.http_port)
    s.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n")
    t0 = time.monotonic()
    closed = False
    while time.monotonic() - t0 < 15:  # one header byte every 0.3 s: never a whole request
        try:
            s.sendall(b"X")
        except OSError:
            closed = True
            break
        if _closed_within(s, 0.3) is not None:
            closed = True
            break
    s.close()
    assert closed, "the slow-loris connection was still open after 15 s (http_header_timeout_ms 1500)"
    assert "within http_header_timeout_ms (1500 ms)" in _log_since(front, start)


def test_idle_keep_alive_is_closed(front: TmqgateProcess) -> None:
    s = _connect(front.http_port)
    try:
        assert _get_health(s) == b"HTTP/1.1 200 OK"
        assert _closed_within(s, 15) is not None, "idle kept-alive connection still open after 15 s"
    finally:
        s.close()


@pytest.fixture(scope="module")
def basic(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TmqgateProcess]:
    proc = TmqgateProcess(tmp_path_factory.mktemp("http-basic-delay"), config={"http_auth": "basic"})
    add_user_offline(proc, "alice", "alice-secret")
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()


def test_wrong_basic_credentials_take_the_failure_delay(basic: TmqgateProcess) -> None:
    """10 wrong guesses on one connection take at least 10 x 100 ms (a lower bound only)."""
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", basic.http_port, timeout=30)
    wrong = {"Authorization": "Basic " + base64.b64encode(b"alice:guess").decode()}
    try:
        t0 = time.monotonic()
        for _ in range(10):
            conn.request("POST", "/rest/sql", body=b"SHOW DATABASES", headers=wrong)
            resp = conn.getresponse()
            resp.read()
            assert resp.status == 401
        took = time.monotonic() - t0
        right = {"Authorization": "Basic " + base64.b64encode(b"alice:alice-secret").decode()}
        conn.request("POST", "/rest/sql", body=b"SHOW DATABASES", headers=right)
        assert conn.getresponse().status == 200
    finally:
        conn.close()
    assert took >= 10 * 0.1, f"10 wrong guesses answered in {took:.3f} s"


def _limit_descriptors(proc: TmqgateProcess, headroom: int) -> None:
    """The running broker's RLIMIT_NOFILE lowered to what it has open plus `headroom`."""
    assert proc.proc is not None
    pid = proc.proc.pid
    limit = len(os.listdir(f"/proc/{pid}/fd")) + headroom
    resource.prlimit(pid, resource.RLIMIT_NOFILE, (limit, limit))


def _flood(port: int, n: int) -> list[socket.socket]:
    """Up to `n` idle connections to `port` (as many as the kernel takes within 2 s each)."""
    socks = []
    for _ in range(n):
        s = socket.socket()
        s.settimeout(2)
        try:
            s.connect(("127.0.0.1", port))
        except OSError:
            s.close()
            break
        socks.append(s)
    return socks


@pytest.fixture
def tight(tmp_path: Path) -> Iterator[TmqgateProcess]:
    proc = TmqgateProcess(tmp_path, config={"http_max_connections": 20, "log_rate_limit_messages": 3})
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()


def test_idle_http_connects_do_not_lock_kafka_clients_out(tight: TmqgateProcess) -> None:
    """Descriptors: 400 idle connects to the HTTP port against a broker allowed ~200 more
    descriptors. The front holds at most http_max_connections (20) of them: a new Kafka client
    is still served (before: the front took every descriptor and Kafka's accept failed)."""
    _limit_descriptors(tight, 200)
    socks = _flood(tight.http_port, 400)
    try:
        time.sleep(1.5)  # asyncio retries a refused accept after 1 s
        assert wait_until(lambda: api_versions_ok(tight.bootstrap, timeout=2.0), 8, 0.2,
                          "a Kafka client served while the HTTP port is flooded")
    finally:
        for s in socks:
            s.close()


def test_out_of_descriptors_is_logged_a_bounded_number_of_times(tight: TmqgateProcess) -> None:
    """Kafka connections past the descriptor limit: accept() fails with EMFILE again and again
    (Python 3.11 reports each try); the log has at most log_rate_limit_messages (3) such lines
    and no traceback, and once the connections close the broker serves again."""
    start = tight.log_path.stat().st_size
    _limit_descriptors(tight, 40)
    socks = _flood(tight.port, 150)
    try:
        time.sleep(3)
        text = _log_since(tight, start)
    finally:
        for s in socks:
            s.close()
    assert "Too many open files" in text, text[-2000:]
    assert "Traceback" not in text, text[-3000:]
    assert text.count("Too many open files") <= 3, text[-3000:]
    assert wait_until(lambda: api_versions_ok(tight.bootstrap, timeout=2.0), 10, 0.2, "served after the flood")
