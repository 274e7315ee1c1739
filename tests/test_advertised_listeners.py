"""The addresses clients are told (Metadata) follow where the broker listens unless set, and a
set one that cannot reach this broker is warned about at start (issue 24, point 3).

`tmqgate serve --config deploy/tmqgate.toml --listen 127.0.0.1:PORT` told clients localhost:9092
(the shipped file's advertised_listener) and they hung; now the shipped configs advertise the
bound address, a host without a port means the bound port, and the broker logs a WARNING for an
advertised host that does not resolve to this machine or a port the listener is not bound to.
Each test starts a real `tmqgate serve` and asks Metadata over a socket."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from compat_tests.helpers import free_port
from compat_tests.raw import RawConn

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"


@contextmanager
def _serve(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> Iterator[tuple[str, Path]]:
    """`tmqgate serve` with `args` (data in tmp_path, the SQL front on a free loopback port);
    yields its ready line and the file its stderr (the log) goes to."""
    err = tmp_path / "stderr.log"
    clean = {k: v for k, v in os.environ.items() if not k.startswith("TMQGATE_")}
    clean["TMQGATE_WORKERS"] = "1"  # one broker: what it tells clients is the subject here
    with err.open("w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "tmqgate.broker.cli", "serve", "--data-dir",
                                 str(tmp_path / "data"), "--http", "127.0.0.1:0", *args],
                                stdout=subprocess.PIPE, stderr=log, text=True, cwd=tmp_path,
                                env={**clean, **(env or {})})
    try:
        assert proc.stdout is not None
        ready = proc.stdout.readline().strip()
        assert ready.startswith("tmqgate ready"), (ready, err.read_text())
        yield ready, err
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)


def _told(bootstrap: str) -> list[tuple[str, int]]:
    """The brokers Metadata names, as (host, port)."""
    with RawConn(bootstrap) as conn:
        brokers = conn.request(3, 12, {"topics": [], "allow_auto_topic_creation": False})["brokers"]
    return [(b["host"], b["port"]) for b in brokers]


def _warnings(log: Path) -> list[str]:
    return [line.split(" tmqgate.listeners: ", 1)[1] for line in log.read_text().splitlines()
            if " WARNING tmqgate.listeners: " in line]


def _resolved(host: str) -> str:
    return ", ".join(dict.fromkeys(str(i[4][0]) for i in socket.getaddrinfo(host, 9092, type=socket.SOCK_STREAM)))


def test_shipped_config_with_another_listen_port_advertises_the_bound_address(tmp_path: Path) -> None:
    """The issue's case: deploy/tmqgate.toml with --listen 127.0.0.1:PORT tells clients that
    address (it told localhost:9092, where nothing listened), and nothing is warned."""
    port = free_port()
    with _serve(tmp_path, "--config", str(DEPLOY / "tmqgate.toml"), "--listen", f"127.0.0.1:{port}") as (ready, log):
        assert ready.startswith(f"tmqgate ready: kafka PLAINTEXT://127.0.0.1:{port}, http 127.0.0.1:")
        assert _told(f"127.0.0.1:{port}") == [("127.0.0.1", port)]
    assert _warnings(log) == []


def test_a_host_without_a_port_is_told_with_the_bound_port(tmp_path: Path) -> None:
    """advertised_listener = "localhost" (as the container image sets it): the bound port."""
    config = tmp_path / "broker.toml"
    config.write_text('advertised_listener = "localhost"\n')
    port = free_port()
    with _serve(tmp_path, "--config", str(config), "--listen", f"127.0.0.1:{port}") as (_, log):
        assert _told(f"127.0.0.1:{port}") == [("localhost", port)]
    assert _warnings(log) == []


def test_an_advertised_port_the_listener_is_not_bound_to_is_warned(tmp_path: Path) -> None:
    """The old shipped setting, advertised_listener = "localhost:9092", with --listen elsewhere:
    this machine's address, but a port the listener is not bound to."""
    config = tmp_path / "broker.toml"
    config.write_text('advertised_listener = "localhost:9092"\n')
    port = free_port()
    with _serve(tmp_path, "--config", str(config), "--listen", f"127.0.0.1:{port}") as (_, log):
        assert _told(f"127.0.0.1:{port}") == [("localhost", 9092)]  # told as set: a port forward may lead there
    assert _warnings(log) == [
        f"listener PLAINTEXT: the advertised address localhost:9092 resolves to {_resolved('localhost')} (this "
        f"machine), where the listener is not bound (it listens on 127.0.0.1:{port}): clients told it connect "
        f"elsewhere, unless a port forward leads there; set advertised_listener to localhost:{port}, or leave it "
        "unset to advertise the bound address"]


def test_secure_config_advertising_a_host_elsewhere_is_warned(tmp_path: Path) -> None:
    """deploy/secure/tmqgate.toml (its listeners on free loopback ports, test certificates) told
    to advertise broker.example.com for SASL_SSL, as it shipped: the name does not resolve to
    this machine, so clients told it would not reach this broker; the PLAINTEXT listener is
    told as bound."""
    from compat_tests.certs import make_certs

    certs = make_certs(tmp_path / "tls")
    plain, sasl = free_port(), free_port()
    env = {"TMQGATE_LISTENERS": f'["PLAINTEXT://127.0.0.1:{plain}", "SASL_SSL://127.0.0.1:{sasl}"]',
           "TMQGATE_ADVERTISED_LISTENERS": '["SASL_SSL://broker.example.com"]',
           "TMQGATE_SSL_CERTFILE": certs.cert("server"), "TMQGATE_SSL_KEYFILE": certs.key("server"),
           "TMQGATE_SSL_CAFILE": certs.cert("ca")}
    try:
        socket.getaddrinfo("broker.example.com", sasl, type=socket.SOCK_STREAM)
        raise AssertionError("broker.example.com resolves on this machine: the test needs a name that does not")
    except socket.gaierror as exc:
        reason = exc.strerror
    with _serve(tmp_path, "--config", str(DEPLOY / "secure" / "tmqgate.toml"), env=env) as (ready, log):
        assert re.match(rf"tmqgate ready: kafka PLAINTEXT://127\.0\.0\.1:{plain}, SASL_SSL://broker\.example\.com:"
                        rf"{sasl}, http 127\.0\.0\.1:\d+$", ready), ready
        assert _told(f"127.0.0.1:{plain}") == [("127.0.0.1", plain)]
    assert _warnings(log) == [
        f"listener SASL_SSL: the advertised address broker.example.com:{sasl} does not resolve ({reason}): clients "
        "told it cannot connect; set advertised_listeners to a name or address of this machine that the clients "
        "resolve"]
