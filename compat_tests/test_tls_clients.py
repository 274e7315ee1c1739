"""The rest of the client matrix over secured listeners (issue 12): aiokafka, the Java
client 4.x, the command-line tools with `--command-config` and Spark's Kafka source and sink,
each over SSL presenting a client certificate to a broker that requires one
(`ssl_client_auth = "required"` / `ssl.client.auth=required`), and over SASL_SSL with
SCRAM-SHA-512 (the broker's certificate checked, the user's password) once SASL is in the tree
(compat_tests/secure.py). confluent-kafka and kafka-python over SSL are in test_tls.py.

Every client is configured from one `ClientSecurity` (compat_tests/client_security.py), and
the same tests run against the reference broker configured the same way (`--target kafka`).
Each checks what a user would: the records and offsets read back, the group's committed
offsets, the listener Metadata names; and a tool without its credential fails.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from . import secure
from .brokers import BrokerProcess, new_broker
from .certs import Certs, make_certs, tls_config
from .cli_helpers import client_errors, parse_table, require_tools, run
from .client_security import ClientSecurity
from .helpers import unique_topic
from .java_client import java_roundtrip


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory, target: str, certs: Certs,
            pytestconfig: pytest.Config) -> Iterator[BrokerProcess]:
    """A broker with PLAINTEXT and SSL listeners; the SSL one requires a client certificate."""
    if pytestconfig.getoption("--bootstrap"):
        pytest.skip("--bootstrap given: these tests start a broker with secured listeners")
    proc = new_broker(target, tmp_path_factory.mktemp(f"{target}-tls-clients"),
                      config=tls_config(target, certs, "required"), extra_listeners={"SSL": "SSL"})
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()


SASL_USER, SASL_PASSWORD = "alice", "alice-secret"


@pytest.fixture(scope="module")
def sasl_ssl_broker(tmp_path_factory: pytest.TempPathFactory, target: str, certs: Certs,
                    pytestconfig: pytest.Config) -> Iterator[Any]:
    """A broker with a SASL_SSL listener (SCRAM users admin and alice), the same certificate."""
    if pytestconfig.getoption("--bootstrap"):
        pytest.skip("--bootstrap given: these tests start a broker with secured listeners")
    sb = secure.start_secure_broker(target, tmp_path_factory.mktemp(f"{target}-sasl-ssl-clients"),
                                    users={"admin": "admin-secret", SASL_USER: SASL_PASSWORD},
                                    mechanisms=("SCRAM-SHA-512", "SCRAM-SHA-256"),
                                    extra_config=tls_config(target, certs, "none"), sasl_ssl=True)
    try:
        yield sb
    finally:
        sb.proc.stop()


@dataclass(frozen=True)
class Channel:
    """A secured listener and how a client connects to it."""

    port: int
    security: ClientSecurity
    refused: ClientSecurity  # the same without its credential (no certificate / a wrong password)
    refusal: str  # the Java client's exception then

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"


@pytest.fixture(scope="module", params=["SSL", "SASL_SSL"])
def channel(request: pytest.FixtureRequest, certs: Certs) -> Channel:
    if request.param == "SSL":
        proc = request.getfixturevalue("secured")
        return Channel(proc.listener_ports["SSL"], ClientSecurity("SSL", certs, client_cert="client"),
                       ClientSecurity("SSL", certs), "SslAuthenticationException")
    sb = request.getfixturevalue("sasl_ssl_broker")
    return Channel(sb.listener_ports["SASL_SSL"],
                   ClientSecurity("SASL_SSL", certs, mechanism="SCRAM-SHA-512", username=SASL_USER,
                                  password=SASL_PASSWORD),
                   ClientSecurity("SASL_SSL", certs, mechanism="SCRAM-SHA-512", username=SASL_USER,
                                  password="wrong"), "SaslAuthenticationException")


# --------------------------------------------------------------------------- aiokafka


def test_aiokafka(channel: Channel) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    bootstrap = channel.bootstrap
    sec = channel.security.aiokafka()
    topic = unique_topic("aio-sec")
    group = unique_topic("aio-sec-g")

    async def go() -> tuple[list[int], list[tuple[int, bytes, bytes]], int, list[tuple[str, int]]]:
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, **sec)
        await admin.start()
        try:
            await admin.create_topics([NewTopic(topic, 1, 1)], timeout_ms=30000)
        finally:
            await admin.close()
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", **sec)
        await producer.start()
        try:
            sent = [(await producer.send_and_wait(topic, f"v{i}".encode(), key=f"k{i}".encode())).offset
                    for i in range(10)]
            brokers = [(b.host, b.port) for b in producer.client.cluster.brokers()]
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group,
                                    auto_offset_reset="earliest", enable_auto_commit=False, **sec)
        await consumer.start()
        got: list[tuple[int, bytes, bytes]] = []
        try:
            deadline = time.monotonic() + 60
            while len(got) < 10 and time.monotonic() < deadline:
                for batch in (await consumer.getmany(timeout_ms=500)).values():
                    got += [(m.offset, m.key, m.value) for m in batch]
            await consumer.commit()
            from aiokafka import TopicPartition

            committed = await consumer.committed(TopicPartition(topic, 0))
        finally:
            await consumer.stop()
        return sent, got, committed, brokers

    sent, got, committed, brokers = asyncio.run(go())
    assert sent == list(range(10))
    assert got == [(i, f"k{i}".encode(), f"v{i}".encode()) for i in range(10)]
    assert committed == 10
    assert brokers == [("127.0.0.1", channel.port)]  # Metadata names the listener it came in on


# --------------------------------------------------------------------------- the Java client


def test_java_client(channel: Channel, tmp_path: Path) -> None:
    """kafka-clients 4.x: Admin, producer (acks=all, idempotent by default) and a consumer
    group, trust and key stores as PEM files."""
    require_tools()
    config = channel.security.write_properties(tmp_path / "client.properties",
                                               {"bootstrap.servers": channel.bootstrap})
    topic = unique_topic("java-sec")
    result = java_roundtrip(config, topic, 12, unique_topic("java-sec-g"))
    assert result.returncode == 0, f"{result.stdout}\n{result.stderr[-3000:]}"
    assert result.nodes == [channel.bootstrap]
    assert result.sent == [(0, i) for i in range(12)]
    assert result.got == [(i, f"k{i}", f"v{i}") for i in range(12)]
    assert result.committed == 12


# --------------------------------------------------------------------------- command-line tools


def test_cli_tools_with_command_config(channel: Channel, tmp_path: Path) -> None:
    """kafka-topics, kafka-console-producer/-consumer and kafka-consumer-groups with
    `--command-config` (PEM trust store, and the key store or the SASL user); without the key
    store (SSL) or with a wrong password (SASL_SSL) the tool fails with the authentication
    error at once."""
    require_tools()
    b = channel.bootstrap
    config = str(channel.security.write_properties(tmp_path / "client.properties"))
    topic = unique_topic("cli-sec")
    group = unique_topic("cli-sec-g")

    run("kafka-topics", "--bootstrap-server", b, "--command-config", config, "--create", "--topic", topic,
        "--partitions", "2", "--replication-factor", "1")
    listed = run("kafka-topics", "--bootstrap-server", b, "--command-config", config, "--list")
    assert topic in listed.lines, listed.describe()

    lines = [f"k{i}:v{i}" for i in range(6)]
    prod = run("kafka-console-producer", "--bootstrap-server", b, "--command-config", config, "--topic", topic,
               "--reader-property", "parse.key=true", "--reader-property", "key.separator=:",
               "--command-property", "acks=all", "--command-property", "partitioner.class="
               "org.apache.kafka.clients.producer.RoundRobinPartitioner",
               input="".join(f"{ln}\n" for ln in lines))
    assert not client_errors(prod.stderr), prod.describe()

    cons = run("kafka-console-consumer", "--bootstrap-server", b, "--command-config", config, "--topic", topic,
               "--group", group, "--from-beginning", "--max-messages", "6", "--timeout-ms", "30000",
               "--formatter-property", "print.key=true", "--formatter-property", "key.separator=:")
    assert sorted(cons.lines) == sorted(lines), cons.describe()
    assert "Processed a total of 6 messages" in cons.stderr, cons.describe()

    desc = run("kafka-consumer-groups", "--bootstrap-server", b, "--command-config", config,
               "--describe", "--group", group)
    rows = {r["PARTITION"]: r for r in parse_table(desc.stdout) if r["TOPIC"] == topic}
    assert sorted(rows) == ["0", "1"], desc.describe()
    assert sum(int(r["CURRENT-OFFSET"]) for r in rows.values()) == 6, desc.describe()
    assert all(r["CURRENT-OFFSET"] == r["LOG-END-OFFSET"] and r["LAG"] == "0" for r in rows.values()), \
        desc.describe()

    without = channel.refused.write_properties(tmp_path / "refused.properties")
    refused = run("kafka-topics", "--bootstrap-server", b, "--command-config", str(without), "--list",
                  check=False)
    assert refused.returncode != 0, refused.describe()
    assert channel.refusal in refused.stderr + refused.stdout, refused.describe()


def _refusal(port: int, certs: Certs, client: str | None) -> str:
    """What a TLS 1.3 client sees when the broker refuses its certificate (or its lack of
    one): the handshake completes on the client's side, and its first read gets the alert."""
    ctx = ssl.create_default_context(cafile=certs.ca)
    if client:
        ctx.load_cert_chain(certs.cert(client), certs.key(client))
    with socket.create_connection(("127.0.0.1", port), timeout=15) as raw, \
            ctx.wrap_socket(raw, server_hostname="localhost") as s:
        try:
            s.sendall(b"\x00\x00\x00\x0c\x00\x12\x00\x00\x00\x00\x00\x07\x00\x02ab")
            return "answered" if s.recv(8) else "closed without an alert"
        except ssl.SSLError as exc:
            return exc.reason or str(exc)
        except OSError as exc:
            return f"{type(exc).__name__} without an alert"


def test_refused_client_certificate_gets_a_tls_alert(secured: BrokerProcess, certs: Certs) -> None:
    """The broker says why it refuses: a missing, untrusted or expired certificate gets a TLS
    alert, so clients stop at once with an authentication error instead of retrying a dropped
    connection (before: tmqgate closed the socket without sending the alert)."""
    port = secured.listener_ports["SSL"]
    # tmqgate (OpenSSL): CERTIFICATE_REQUIRED, UNKNOWN_CA, CERTIFICATE_EXPIRED; Kafka (JSSE)
    # answers BAD_CERTIFICATE for a missing one: the alert's kind is each TLS stack's own.
    for bad in (None, "untrusted", "expired"):
        reason = _refusal(port, certs, bad)
        assert "_ALERT_" in reason, (bad, reason)
    assert _refusal(port, certs, "client") == "answered"


# --------------------------------------------------------------------------- Spark


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    from .spark_helpers import spark_session

    session = spark_session("compat-tls-spark")
    try:
        yield session
    finally:
        session.stop()


def test_spark_sink_and_source(channel: Channel, spark: Any) -> None:
    """One short job each way: df.write.format("kafka") and spark.read.format("kafka") with
    kafka.security.protocol and the kafka.ssl.* / kafka.sasl.* options."""
    from confluent_kafka.admin import AdminClient, NewTopic

    sec = channel.security
    b = channel.bootstrap
    topic = unique_topic("spark-sec")
    admin = AdminClient({"bootstrap.servers": b, **sec.confluent()})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    rows = [(f"k{i}", f"v{i}") for i in range(8)]
    (spark.createDataFrame(rows, "key string, value string").coalesce(1).write.format("kafka")
     .option("kafka.bootstrap.servers", b).options(**sec.spark())
     .option("kafka.client.id", "spark-sec-" + uuid.uuid4().hex[:6]).option("topic", topic).save())
    df = (spark.read.format("kafka").option("kafka.bootstrap.servers", b).options(**sec.spark())
          .option("subscribe", topic).option("startingOffsets", "earliest").option("endingOffsets", "latest")
          .load())
    got = sorted((r["partition"], r["offset"], bytes(r["key"]).decode(), bytes(r["value"]).decode())
                 for r in df.select("partition", "offset", "key", "value").collect())
    assert [(p, o) for p, o, _, _ in got] == [(0, i) for i in range(8)]
    assert sorted((k, v) for _, _, k, v in got) == sorted(rows)
