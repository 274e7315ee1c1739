"""TLS listeners (issue 12, points 1 and 2): a broker with a PLAINTEXT and an SSL listener,
the same certificates on both brokers (compat_tests/certs.py, made at test time).

Each client connects to the listener it is configured for and is told that listener's
address in Metadata; a client certificate is asked for (`requested`) and checked against
the CA; a plaintext client on the TLS port, an untrusted or expired certificate, a client
that does not trust the server and an old TLS version each fail for that client alone.
"""

from __future__ import annotations

import os
import signal
import socket
import ssl
import struct
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from .brokers import BrokerProcess, new_broker
from .certs import Certs, make_certs, reissue_server, tls_config
from .helpers import confluent_roundtrip, unique_topic, wait_until


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


def _start(target: str, workdir: Path, certs: Certs, client_auth: str) -> BrokerProcess:
    proc = new_broker(target, workdir, config=tls_config(target, certs, client_auth),
                      extra_listeners={"SSL": "SSL"})
    proc.start()
    return proc


@pytest.fixture(scope="module")
def tls_broker(tmp_path_factory: pytest.TempPathFactory, target: str, certs: Certs,
               pytestconfig: pytest.Config) -> Iterator[BrokerProcess]:
    if pytestconfig.getoption("--bootstrap"):
        pytest.skip("--bootstrap given: these tests start a broker with TLS listeners")
    proc = _start(target, tmp_path_factory.mktemp(f"{target}-tls"), certs, "requested")
    try:
        yield proc
    finally:
        proc.stop()


def _ssl_conf(certs: Certs, port: int, client: str | None = None) -> dict[str, object]:
    conf: dict[str, object] = {"bootstrap.servers": f"127.0.0.1:{port}", "security.protocol": "SSL",
                               "ssl.ca.location": certs.ca}
    if client:
        conf.update({"ssl.certificate.location": certs.cert(client), "ssl.key.location": certs.key(client)})
    return conf


def _roundtrip(conf: dict[str, object], topic: str, n: int = 20) -> list[tuple[bytes, bytes, int]]:
    """Create `topic`, produce n keyed records and read them back over `conf`'s listener."""
    admin = AdminClient(conf)
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    return confluent_roundtrip(conf, topic, n)


def test_ssl_listener_roundtrip_and_metadata_names_it(tls_broker: BrokerProcess, certs: Certs) -> None:
    ssl_port = tls_broker.listener_ports["SSL"]
    plain_port = tls_broker.listener_ports["PLAINTEXT"]
    topic = unique_topic("tls")
    got = _roundtrip(_ssl_conf(certs, ssl_port), topic)
    assert got == [(f"k{i}".encode(), f"v{i}".encode(), i) for i in range(20)]
    # Metadata advertises the listener the request came in on.
    over_ssl = AdminClient(_ssl_conf(certs, ssl_port)).list_topics(timeout=20)
    assert [(b.host, b.port) for b in over_ssl.brokers.values()] == [("127.0.0.1", ssl_port)]
    over_plain = AdminClient({"bootstrap.servers": f"127.0.0.1:{plain_port}"}).list_topics(timeout=20)
    assert [(b.host, b.port) for b in over_plain.brokers.values()] == [("127.0.0.1", plain_port)]
    assert topic in over_plain.topics


def test_client_certificate_over_ssl(tls_broker: BrokerProcess, certs: Certs) -> None:
    """Mutual TLS with kafka-python (Python's ssl): the client presents a CA-signed certificate."""
    from kafka import KafkaConsumer, KafkaProducer
    from kafka.admin import KafkaAdminClient
    from kafka.admin import NewTopic as KpTopic

    port = tls_broker.listener_ports["SSL"]
    common = {"bootstrap_servers": f"127.0.0.1:{port}", "security_protocol": "SSL",
              "ssl_cafile": certs.ca, "ssl_certfile": certs.cert("client"), "ssl_keyfile": certs.key("client")}
    topic = unique_topic("mtls")
    admin = KafkaAdminClient(**common)
    admin.create_topics([KpTopic(topic, 1, 1)])
    admin.close()
    producer = KafkaProducer(acks="all", **common)
    for i in range(5):
        producer.send(topic, key=b"k", value=f"m{i}".encode()).get(30)
    producer.close()
    consumer = KafkaConsumer(topic, auto_offset_reset="earliest", consumer_timeout_ms=15000, **common)
    values = [m.value for m in consumer][:5]
    consumer.close()
    assert values == [f"m{i}".encode() for i in range(5)]


def _handshake(port: int, ctx: ssl.SSLContext) -> str | None:
    """A TLS handshake with `ctx`; None if it succeeds and the connection then answers
    ApiVersions, else the error."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        try:
            with ctx.wrap_socket(raw, server_hostname="localhost") as s:
                request = struct.pack(">hhi", 18, 0, 7) + struct.pack(">h", 1) + b"x"
                s.sendall(struct.pack(">i", len(request)) + request)
                head = s.recv(8)
                if len(head) < 8:  # TLS 1.3 reports a refused client certificate on the first read
                    return "closed"
                return None
        except (ssl.SSLError, OSError) as exc:
            return repr(exc)


def _client_ctx(certs: Certs, client: str | None = None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=certs.ca)
    if client:
        ctx.load_cert_chain(certs.cert(client), certs.key(client))
    return ctx


def test_bad_certificates_fail_alone(tmp_path: Path, target: str, certs: Certs,
                                     pytestconfig: pytest.Config) -> None:
    """ssl_client_auth = required: an untrusted, an expired and a missing client certificate
    fail the handshake; a good one passes; the broker serves a PLAINTEXT client throughout."""
    if pytestconfig.getoption("--bootstrap"):
        pytest.skip("--bootstrap given")
    proc = _start(target, tmp_path / "required", certs, "required")
    try:
        port = proc.listener_ports["SSL"]
        assert _handshake(port, _client_ctx(certs, "client")) is None
        for bad in ("untrusted", "expired", None):
            assert _handshake(port, _client_ctx(certs, bad)) is not None, bad
        # A client that does not trust the broker's CA refuses it.
        stranger = ssl.create_default_context(cafile=certs.cert("other-ca"))
        stranger.load_cert_chain(certs.cert("client"), certs.key("client"))
        assert "CERTIFICATE_VERIFY_FAILED" in str(_handshake(port, stranger))
        # TLS 1.1 is not offered.
        old = _client_ctx(certs, "client")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # the point: an old version
            old.minimum_version = ssl.TLSVersion.TLSv1
            old.maximum_version = ssl.TLSVersion.TLSv1_1
        assert _handshake(port, old) is not None
        plain = AdminClient({"bootstrap.servers": f"127.0.0.1:{proc.listener_ports['PLAINTEXT']}"})
        assert plain.list_topics(timeout=20).brokers
    finally:
        proc.stop()


def test_plaintext_client_on_tls_port_fails_cleanly(tls_broker: BrokerProcess, certs: Certs) -> None:
    """A Kafka request in the clear on the TLS port gets no Kafka answer; the connection ends
    and the broker keeps serving TLS clients."""
    port = tls_broker.listener_ports["SSL"]
    with socket.create_connection(("127.0.0.1", port), timeout=15) as s:
        request = struct.pack(">hhi", 18, 0, 1) + struct.pack(">h", 1) + b"x"
        s.sendall(struct.pack(">i", len(request)) + request)
        data = b""
        try:
            while chunk := s.recv(4096):
                data += chunk
        except (ConnectionResetError, TimeoutError):
            pass
    assert data[4:8] != struct.pack(">i", 1)  # no Kafka answer to correlation id 1
    producer = Producer(_ssl_conf(certs, port))
    with pytest.raises(KafkaException):  # a client configured for plaintext cannot talk to it either
        AdminClient({"bootstrap.servers": f"127.0.0.1:{port}", "socket.timeout.ms": 3000}).list_topics(timeout=5)
    assert producer.list_topics(timeout=20).brokers  # TLS clients still served


@pytest.mark.tmqgate_only
def test_sighup_reloads_certificates(tls_broker: BrokerProcess, certs: Certs) -> None:
    """New handshakes get the certificate written before SIGHUP; the broker keeps running."""
    port = tls_broker.listener_ports["SSL"]

    def served_subject() -> str:
        ctx = _client_ctx(certs)
        with socket.create_connection(("127.0.0.1", port), timeout=10) as raw, \
                ctx.wrap_socket(raw, server_hostname="localhost") as s:
            cert = s.getpeercert()
            return dict(x[0] for x in cert["subject"])["commonName"]

    assert served_subject() == "localhost"
    reissue_server(certs, "CN=localhost-renewed,O=tmqgate-test")
    proc = tls_broker.proc  # type: ignore[attr-defined]
    os.kill(proc.pid, signal.SIGHUP)
    wait_until(lambda: served_subject() == "localhost-renewed", 10, 0.1, "the renewed certificate served")
    assert proc.poll() is None


@pytest.mark.tmqgate_only
def test_http_sql_front_over_https(tmp_path: Path, certs: Certs) -> None:
    """http_tls: the SQL front answers over HTTPS with the listeners' certificate; `tmqgate sql`
    checks it against --cafile; plain HTTP gets no answer."""
    import subprocess
    import sys
    import urllib.error
    import urllib.request

    config = {**tls_config("tmqgate", certs), "http_tls": True}
    proc = new_broker("tmqgate", tmp_path / "https", config=config)
    proc.start()
    try:
        base = f"127.0.0.1:{proc.http_port}"  # type: ignore[attr-defined]
        run = [sys.executable, "-m", "tmqgate.broker.cli", "sql", "--http", f"https://{base}", "--json"]
        out = subprocess.run([*run, "--cafile", certs.ca, "CREATE DATABASE tlsdb"],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        out = subprocess.run([*run, "--cafile", certs.ca, "SHOW DATABASES"], capture_output=True, text=True,
                             timeout=60)
        assert "tlsdb" in out.stdout
        refused = subprocess.run([*run, "SHOW DATABASES"], capture_output=True, text=True, timeout=60)
        assert refused.returncode == 2 and "CERTIFICATE_VERIFY_FAILED" in refused.stderr
        with pytest.raises((urllib.error.URLError, ConnectionError)):
            urllib.request.urlopen(f"http://{base}/rest/sql", data=b"SHOW DATABASES", timeout=10)
    finally:
        proc.stop()


@pytest.mark.tmqgate_only
def test_sigterm_does_not_wait_on_a_silent_tls_client(tmp_path: Path, certs: Certs) -> None:
    """SIGTERM with a TLS client connected that never answers the broker's close_notify: the
    broker exits at once, as Kafka does, instead of waiting out asyncio's 30 s TLS shutdown
    per connection (the test fixtures' stop timed out and killed it)."""
    proc = _start("tmqgate", tmp_path, certs, "requested")
    try:
        port = proc.listener_ports["SSL"]  # type: ignore[attr-defined]
        raw = socket.create_connection(("127.0.0.1", port), timeout=10)
        s = _client_ctx(certs).wrap_socket(raw, server_hostname="localhost")
        request = struct.pack(">hhi", 18, 0, 7) + struct.pack(">h", 1) + b"x"
        s.sendall(struct.pack(">i", len(request)) + request)
        assert len(s.recv(8)) == 8  # served; now silent, the socket left open
        broker = proc.proc  # type: ignore[attr-defined]
        broker.send_signal(signal.SIGTERM)
        assert broker.wait(15) == 0, proc.log_tail()
        s.close()
    finally:
        proc.stop()
