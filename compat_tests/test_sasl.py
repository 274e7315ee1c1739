"""SASL (issue 12, point 3): a broker with PLAINTEXT and SASL_PLAINTEXT listeners and the same
SCRAM users on both brokers (compat_tests/secure.py).

confluent-kafka, kafka-python, aiokafka and the Java client (the console tools with
--command-config) produce and consume exact records over SASL_PLAINTEXT with SCRAM-SHA-512,
SCRAM-SHA-256, PLAIN and OAUTHBEARER (unsecured tokens); a wrong password and an unknown user
each fail that client cleanly while another keeps working; the raw protocol shows the states:
nothing but ApiVersions and SaslHandshake before authentication, Kafka's failure answers, and
KIP-368 re-authentication and session expiry.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.net.sasl.scram import ScramClient

from . import cli_helpers as cli
from .certs import Certs, make_certs, tls_config
from .helpers import confluent_roundtrip, unique_topic
from .raw import RawConn
from .secure import (
    SecureBroker,
    aiokafka_conf,
    confluent_conf,
    java_client_properties,
    kafka_python_conf,
    secure_broker_fixture,
    start_secure_broker,
)

sasl_broker = secure_broker_fixture()
# KIP-368: sessions of 4 s, so re-authentication and expiry happen within a test
reauth_broker = secure_broker_fixture(reauth_ms=4000, mechanisms=("SCRAM-SHA-512", "PLAIN"))

MECHANISMS = ["SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN", "OAUTHBEARER"]
FAILED = "Authentication failed during authentication due to invalid credentials with SASL mechanism {}"
N = 10


def _topic(sb: SecureBroker, tag: str) -> str:
    topic = unique_topic(tag)
    admin = AdminClient({"bootstrap.servers": sb.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    return topic


def _expected() -> list[tuple[bytes, bytes, int]]:
    return [(f"k{i}".encode(), f"v{i}".encode(), i) for i in range(N)]


def _confluent_roundtrip(conf: dict, topic: str) -> list[tuple[bytes, bytes, int]]:
    return confluent_roundtrip(conf, topic, N)


def _kafka_python_roundtrip(conf: dict, topic: str) -> list[tuple[bytes, bytes, int]]:
    from kafka import KafkaConsumer, KafkaProducer

    producer = KafkaProducer(acks="all", **conf)
    for i in range(N):
        producer.send(topic, key=f"k{i}".encode(), value=f"v{i}".encode()).get(30)
    producer.close()
    consumer = KafkaConsumer(topic, auto_offset_reset="earliest", consumer_timeout_ms=20000, **conf)
    got = []
    for m in consumer:
        got.append((m.key, m.value, m.offset))
        if len(got) == N:
            break
    consumer.close()
    return got


def _aiokafka_roundtrip(conf: dict, topic: str) -> list[tuple[bytes, bytes, int]]:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    async def go() -> list[tuple[bytes, bytes, int]]:
        producer = AIOKafkaProducer(acks="all", **conf)
        await producer.start()
        try:
            for i in range(N):
                await producer.send_and_wait(topic, key=f"k{i}".encode(), value=f"v{i}".encode())
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(topic, auto_offset_reset="earliest", **conf)
        await consumer.start()
        got: list[tuple[bytes, bytes, int]] = []
        try:
            async with asyncio.timeout(60):
                async for m in consumer:
                    got.append((m.key, m.value, m.offset))
                    if len(got) == N:
                        break
        finally:
            await consumer.stop()
        return got

    return asyncio.run(go())


CLIENTS = {
    "confluent": (confluent_conf, _confluent_roundtrip),
    "kafka-python": (kafka_python_conf, _kafka_python_roundtrip),
    "aiokafka": (aiokafka_conf, _aiokafka_roundtrip),
}


@pytest.mark.parametrize("mechanism", MECHANISMS)
@pytest.mark.parametrize("client", list(CLIENTS))
def test_clients_produce_and_consume_over_sasl(sasl_broker: SecureBroker, client: str, mechanism: str) -> None:
    make_conf, roundtrip = CLIENTS[client]
    topic = _topic(sasl_broker, f"sasl-{client}-{mechanism.lower()}")
    conf = make_conf(sasl_broker.sasl_bootstrap, "alice", "alice-secret", mechanism)
    assert roundtrip(conf, topic) == _expected()


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", "PLAIN"])
def test_java_console_tools_over_sasl(sasl_broker: SecureBroker, mechanism: str, tmp_path: Path) -> None:
    cli.require_tools()
    topic = _topic(sasl_broker, f"sasl-java-{mechanism.lower()}")
    props = tmp_path / "client.properties"
    props.write_text(java_client_properties("alice", "alice-secret", mechanism))
    lines = [f"k{i}\tv{i}" for i in range(N)]
    cli.run("kafka-console-producer", "--bootstrap-server", sasl_broker.sasl_bootstrap, "--topic", topic,
            "--command-config", str(props), "--reader-property", "parse.key=true",
            input="\n".join(lines) + "\n")
    out = cli.run("kafka-console-consumer", "--bootstrap-server", sasl_broker.sasl_bootstrap, "--topic", topic,
                  "--command-config", str(props), "--from-beginning", "--max-messages", str(N),
                  "--formatter-property", "print.key=true", "--formatter-property", "print.offset=true",
                  "--timeout-ms", "60000")
    got = [line for line in out.stdout.splitlines() if line.startswith("Offset:")]
    assert got == [f"Offset:{i}\tk{i}\tv{i}" for i in range(N)], out.describe()


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN"])
@pytest.mark.parametrize("user,password", [("alice", "wrong-password"), ("mallory", "alice-secret")])
def test_bad_credentials_fail_that_client_only(sasl_broker: SecureBroker, mechanism: str, user: str,
                                               password: str) -> None:
    """confluent-kafka with a wrong password or an unknown user: the error callback reports the
    broker's SASL_AUTHENTICATION_FAILED message; alice's producer works before and after."""
    topic = _topic(sasl_broker, "sasl-bad")
    good = Producer({**confluent_conf(sasl_broker.sasl_bootstrap, "alice", "alice-secret", mechanism), "acks": "all"})
    delivered: list[int] = []
    good.produce(topic, value=b"before", on_delivery=lambda err, msg: delivered.append(msg.offset()))
    assert good.flush(30) == 0
    errors: list[KafkaError] = []
    bad = Producer({**confluent_conf(sasl_broker.sasl_bootstrap, user, password, mechanism),
                    "error_cb": errors.append, "message.timeout.ms": 5000})
    bad.produce(topic, value=b"never")
    deadline = time.monotonic() + 30
    while not errors and time.monotonic() < deadline:
        bad.poll(0.2)
    bad.purge()
    bad.flush(1)
    assert errors and errors[0].code() == KafkaError._AUTHENTICATION, errors
    expected = ("Authentication failed: Invalid username or password" if mechanism == "PLAIN"
                else FAILED.format(mechanism))
    assert expected in errors[0].str(), errors[0].str()
    good.produce(topic, value=b"after", on_delivery=lambda err, msg: delivered.append(msg.offset()))
    assert good.flush(30) == 0
    assert delivered == [0, 1]


_KP_BAD_LOGIN = """
import json, logging, sys
logging.basicConfig(level=logging.DEBUG, stream=sys.stdout, format="%(message)s")
from kafka import KafkaProducer
from kafka.errors import KafkaError
try:
    # it gives up on bootstrap at bootstrap_timeout_ms (default 30 s); the refusal and its
    # message come with the first attempt, so 5 s tests the same in a sixth of the time
    KafkaProducer(max_block_ms=20000, bootstrap_timeout_ms=5000, **json.loads(sys.argv[1]))
except KafkaError as exc:
    print("REFUSED", type(exc).__name__)
else:
    print("CONNECTED")
"""


def _kafka_python_bad_login(conf: dict) -> str:
    """kafka-python's attempt, in a process of its own (its network layer keeps state per
    process, which earlier tests in a long pytest run share); its DEBUG log."""
    out = subprocess.run([sys.executable, "-c", _KP_BAD_LOGIN, json.dumps(conf)], capture_output=True,
                         text=True, timeout=120)
    assert "REFUSED" in out.stdout, out.stdout[-2000:] + out.stderr[-2000:]
    return out.stdout + out.stderr


def _aiokafka_bad_login(conf: dict) -> None:
    from aiokafka import AIOKafkaProducer
    from aiokafka.errors import KafkaError as AioError

    async def go() -> None:
        producer = AIOKafkaProducer(request_timeout_ms=8000, **conf)
        try:
            with pytest.raises(AioError):
                await producer.start()
        finally:
            await producer.stop()

    asyncio.run(go())


@pytest.mark.parametrize("client", ["kafka-python", "aiokafka"])
@pytest.mark.parametrize("user,password", [("alice", "wrong-password"), ("mallory", "alice-secret")])
def test_python_clients_bad_credentials(sasl_broker: SecureBroker, client: str, user: str, password: str,
                                        caplog: pytest.LogCaptureFixture) -> None:
    """kafka-python and aiokafka with a wrong password or an unknown user: no bootstrap, and the
    client logs the broker's SASL_AUTHENTICATION_FAILED (58) with Kafka's message; a confluent
    producer authenticated as alice works meanwhile."""
    topic = _topic(sasl_broker, "sasl-bad-py")
    good = Producer({**confluent_conf(sasl_broker.sasl_bootstrap, "alice", "alice-secret", "SCRAM-SHA-512"),
                     "acks": "all"})
    good.produce(topic, value=b"before")
    assert good.flush(30) == 0
    make_conf = kafka_python_conf if client == "kafka-python" else aiokafka_conf
    conf = make_conf(sasl_broker.sasl_bootstrap, user, password, "SCRAM-SHA-512")
    if client == "kafka-python":
        logged = _kafka_python_bad_login(conf)
    else:
        with caplog.at_level("DEBUG"):
            _aiokafka_bad_login(conf)
        logged = "\n".join(r.getMessage() for r in caplog.records)
    # kafka-python 3.x drops an answer that arrives with the connection's EOF: Kafka answers
    # and closes at once, so under load that client may never show the message there;
    # tmqgate waits for the refused client to close first, so it always does.
    if client == "aiokafka" or sasl_broker.target == "tmqgate":
        assert FAILED.format("SCRAM-SHA-512") in logged, (logged[-2000:], sasl_broker.proc.log_tail(40))
    good.produce(topic, value=b"after")
    assert good.flush(30) == 0
    assert _confluent_values(sasl_broker, topic) == [b"before", b"after"]


def _confluent_values(sb: SecureBroker, topic: str) -> list[bytes]:
    consumer = Consumer({**confluent_conf(sb.sasl_bootstrap, "alice", "alice-secret", "SCRAM-SHA-512"),
                         "group.id": f"g-{topic}", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + 60
    while len(got) < 2 and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            got.append(msg.value())
    consumer.close()
    return got


def test_java_client_wrong_password(sasl_broker: SecureBroker, tmp_path: Path) -> None:
    cli.require_tools()
    topic = _topic(sasl_broker, "sasl-java-bad")
    props = tmp_path / "bad.properties"
    props.write_text(java_client_properties("alice", "nope", "SCRAM-SHA-512"))
    out = cli.run("kafka-topics", "--bootstrap-server", sasl_broker.sasl_bootstrap, "--command-config", str(props),
                  "--describe", "--topic", topic, check=False)
    assert out.returncode == 1
    assert "SaslAuthenticationException: " + FAILED.format("SCRAM-SHA-512") in out.stderr, out.describe()


# the raw protocol -------------------------------------------------------------------------


def _handshake(c: RawConn, mechanism: str) -> dict:
    return c.request(17, 1, {"mechanism": mechanism})


def _scram_auth(c: RawConn, user: str, password: str, mechanism: str = "SCRAM-SHA-512",
                version: int = 2) -> dict:
    """Handshake and the two SaslAuthenticate rounds; the last answer (or the failed one)."""
    assert _handshake(c, mechanism)["error_code"] == 0
    client = ScramClient(user, password, mechanism)
    first = c.request(36, version, {"auth_bytes": client.first_message()})
    if first["error_code"]:
        return first
    client.process_server_first_message(first["auth_bytes"])
    final = c.request(36, version, {"auth_bytes": client.final_message()})
    if final["error_code"] == 0:
        client.process_server_final_message(final["auth_bytes"])  # checks the server's signature
    return final


def test_only_versions_and_handshake_before_authentication(sasl_broker: SecureBroker) -> None:
    with RawConn(sasl_broker.sasl_bootstrap) as c:
        assert 36 in c.api_versions()
        c.send_request(3, 12, {"topics": None, "allow_auto_topic_creation": False,
                               "include_topic_authorized_operations": False})
        assert c.closed_within(10)


def test_large_frame_before_authentication_closes(sasl_broker: SecureBroker) -> None:
    """sasl.server.max.receive.size (512 KiB): a bigger frame before authentication closes the
    connection without waiting for its body."""
    import struct

    with RawConn(sasl_broker.sasl_bootstrap) as c:
        c.send_bytes(struct.pack(">i", 600_000) + b"\0" * 1024)
        assert c.closed_within(10)


def test_unsupported_mechanism(sasl_broker: SecureBroker) -> None:
    with RawConn(sasl_broker.sasl_bootstrap) as c:
        body = _handshake(c, "GSSAPI")
        assert body["error_code"] == 33
        assert sorted(body["mechanisms"]) == sorted(MECHANISMS)
        assert c.closed_within(10)


def test_raw_scram_success_then_requests_served(sasl_broker: SecureBroker) -> None:
    with RawConn(sasl_broker.sasl_bootstrap) as c:
        body = _scram_auth(c, "alice", "alice-secret")
        assert body["error_code"] == 0 and body["error_message"] == ""  # as Kafka: empty, not null
        assert body["session_lifetime_ms"] == 0  # connections.max.reauth.ms = 0: no expiry
        meta = c.request(3, 12, {"topics": None, "allow_auto_topic_creation": False,
                                 "include_topic_authorized_operations": False})
        assert [b["port"] for b in meta["brokers"]] == [sasl_broker.listener_ports["SASL_PLAINTEXT"]]


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_the_client_brokers_dial_each_other_with_authenticates(sasl_broker: SecureBroker, mechanism: str) -> None:
    """The client a tmqgate broker dials the others of its cluster with (inter_broker_sasl_mechanism,
    broker/cluster/peer.py), here against the one broker: authenticated with each mechanism, its
    requests are answered; a wrong password is refused before any request is."""
    from tmqgate.broker.cluster.peer import PeerConnection, PeerError, PeerSecurity

    port = sasl_broker.listener_ports["SASL_PLAINTEXT"]
    metadata = {"topics": None, "allow_auto_topic_creation": False, "include_topic_authorized_operations": False}

    async def run() -> None:
        conn = PeerConnection("127.0.0.1", port, "peer", PeerSecurity(sasl=(mechanism, "alice", "alice-secret")))
        try:
            for _ in range(2):  # the connection stays authenticated
                meta = await conn.request(3, 12, metadata, 30)
                assert [b["port"] for b in meta["brokers"]] == [port]
        finally:
            conn.close()
        bad = PeerConnection("127.0.0.1", port, "peer", PeerSecurity(sasl=(mechanism, "alice", "wrong")))
        with pytest.raises(PeerError, match="refused this broker's credentials"):
            await bad.request(3, 12, metadata, 30)

    asyncio.run(run())


@pytest.mark.parametrize("user,password", [("alice", "wrong"), ("mallory", "x")])
def test_raw_scram_failure_answer_and_close(sasl_broker: SecureBroker, user: str, password: str) -> None:
    with RawConn(sasl_broker.sasl_bootstrap) as c:
        body = _scram_auth(c, user, password)
        assert body["error_code"] == 58
        assert body["error_message"] == FAILED.format("SCRAM-SHA-512")
        assert c.closed_within(10)


@pytest.mark.tmqgate_only  # Kafka closes right after the answer
def test_refused_client_closes_first(sasl_broker: SecureBroker) -> None:
    """After a failed authentication the broker waits (up to 1 s) for the client to close, so
    the answer never arrives together with the FIN: kafka-python 3.x drops bytes read in the
    same call as an EOF, and showed "socket disconnected" instead of the broker's message."""
    with RawConn(sasl_broker.sasl_bootstrap) as c:
        assert _scram_auth(c, "alice", "wrong")["error_code"] == 58
        assert not c.closed_within(0.4)  # still open: nothing more arrives, no EOF yet
        assert c.closed_within(5)  # and closed by the broker once the wait is over


def test_raw_plain_failure_message(sasl_broker: SecureBroker) -> None:
    with RawConn(sasl_broker.sasl_bootstrap) as c:
        assert _handshake(c, "PLAIN")["error_code"] == 0
        body = c.request(36, 2, {"auth_bytes": b"\0alice\0wrong"})
        assert (body["error_code"], body["error_message"]) == \
            (58, "Authentication failed: Invalid username or password")
        assert c.closed_within(10)


def _raw_token(c: RawConn, token: bytes) -> bytes:
    """SaslHandshake v0's framing: a size-prefixed SASL token each way."""
    import struct

    c.send_bytes(struct.pack(">i", len(token)) + token)
    return c.recv_frame()


def test_handshake_v0_raw_tokens(sasl_broker: SecureBroker) -> None:
    """A SaslHandshake v0 client (before KIP-152) sends raw SCRAM tokens, not SaslAuthenticate;
    then it is served; a wrong password closes the connection unanswered."""
    meta = {"topics": None, "allow_auto_topic_creation": False, "include_topic_authorized_operations": False}
    with RawConn(sasl_broker.sasl_bootstrap) as c:
        assert c.request(17, 0, {"mechanism": "SCRAM-SHA-512"})["error_code"] == 0
        client = ScramClient("alice", "alice-secret", "SCRAM-SHA-512")
        client.process_server_first_message(_raw_token(c, client.first_message()))
        client.process_server_final_message(_raw_token(c, client.final_message()))  # checks v=
        assert c.request(3, 12, meta)["brokers"]
    with RawConn(sasl_broker.sasl_bootstrap) as c:
        assert c.request(17, 0, {"mechanism": "PLAIN"})["error_code"] == 0
        c.send_bytes(len(b"\0alice\0wrong").to_bytes(4, "big") + b"\0alice\0wrong")
        assert c.closed_within(10)


def test_other_request_during_authentication(sasl_broker: SecureBroker) -> None:
    with RawConn(sasl_broker.sasl_bootstrap) as c:
        assert _handshake(c, "SCRAM-SHA-512")["error_code"] == 0
        body = c.request(10, 4, {"key_type": 0, "coordinator_keys": ["g"]})
        assert [k["error_code"] for k in body["coordinators"]] == [34]
        assert c.closed_within(10)


def test_reauthentication_renews_the_session(reauth_broker: SecureBroker) -> None:
    """KIP-368 on one connection: authenticate (lifetime 4000 ms), re-authenticate before it
    ends, and requests go on being served past the first session's end."""
    meta = {"topics": None, "allow_auto_topic_creation": False, "include_topic_authorized_operations": False}
    with RawConn(reauth_broker.sasl_bootstrap) as c:
        body = _scram_auth(c, "alice", "alice-secret")
        assert (body["error_code"], body["session_lifetime_ms"]) == (0, 4000)
        started = time.monotonic()
        time.sleep(2.5)
        body = _scram_auth(c, "alice", "alice-secret")
        assert (body["error_code"], body["session_lifetime_ms"]) == (0, 4000)
        time.sleep(max(0.0, 4.5 - (time.monotonic() - started)))  # the first session is over
        assert c.request(3, 12, meta)["brokers"]


def test_reauthentication_cannot_change_principal(reauth_broker: SecureBroker) -> None:
    with RawConn(reauth_broker.sasl_bootstrap) as c:
        assert _scram_auth(c, "alice", "alice-secret")["error_code"] == 0
        body = _scram_auth(c, "bob", "bob-secret")
        assert body["error_code"] == 58
        assert body["error_message"] == "Cannot change principals during re-authentication from User.alice: User.bob"
        assert c.closed_within(10)


def test_expired_session_is_closed_at_next_request(reauth_broker: SecureBroker) -> None:
    meta = {"topics": None, "allow_auto_topic_creation": False, "include_topic_authorized_operations": False}
    with RawConn(reauth_broker.sasl_bootstrap) as c:
        assert _scram_auth(c, "alice", "alice-secret")["session_lifetime_ms"] == 4000
        assert c.request(3, 12, meta)["brokers"]
        time.sleep(4.5)
        c.send_request(3, 12, meta)
        assert c.closed_within(10)


def test_java_client_reauthenticates_transparently(reauth_broker: SecureBroker, tmp_path: Path) -> None:
    """The Java consumer re-authenticates on its connections as their 4 s sessions end: it reads
    records produced over 10 s, across two session lifetimes, without a failure."""
    cli.require_tools()
    topic = _topic(reauth_broker, "sasl-reauth")
    props = tmp_path / "client.properties"
    props.write_text(java_client_properties("alice", "alice-secret", "SCRAM-SHA-512"))
    consumer = cli.Background("kafka-console-consumer", "--bootstrap-server", reauth_broker.sasl_bootstrap,
                              "--topic", topic, "--command-config", str(props), "--from-beginning",
                              "--max-messages", "5", "--timeout-ms", "60000",
                              workdir=tmp_path, tag="reauth")
    try:
        producer = Producer({**confluent_conf(reauth_broker.sasl_bootstrap, "alice", "alice-secret",
                                              "SCRAM-SHA-512"), "acks": "all"})
        for i in range(5):
            producer.produce(topic, value=f"r{i}".encode())
            assert producer.flush(30) == 0
            time.sleep(2.5)
        consumer.proc.wait(60)  # it exits by itself after --max-messages
    finally:
        rc = consumer.stop()
    got = [line for line in consumer.lines() if line.startswith("r")]
    assert got == [f"r{i}" for i in range(5)], consumer.describe()
    assert "AuthenticationException" not in consumer.stderr(), consumer.describe()
    assert rc == 0, consumer.describe()


# SASL_SSL: the production setting -------------------------------------------------------------


@pytest.fixture(scope="module")
def sasl_ssl_broker(tmp_path_factory: pytest.TempPathFactory, target: str,
                    pytestconfig: pytest.Config) -> Iterator[tuple[SecureBroker, Certs]]:
    if pytestconfig.getoption("--bootstrap"):
        pytest.skip("--bootstrap given: these tests start a broker with SASL listeners")
    certs = make_certs(tmp_path_factory.mktemp("sasl-certs"))
    sb = start_secure_broker(target, tmp_path_factory.mktemp(f"{target}-sasl-ssl"), sasl_ssl=True,
                             extra_config=tls_config(target, certs, "none"))
    try:
        yield sb, certs
    finally:
        sb.proc.stop()


@pytest.mark.parametrize("client,mechanism", [("confluent", "SCRAM-SHA-512"), ("kafka-python", "PLAIN"),
                                              ("aiokafka", "SCRAM-SHA-256")])
def test_clients_over_sasl_ssl(sasl_ssl_broker: tuple[SecureBroker, Certs], client: str, mechanism: str) -> None:
    sb, certs = sasl_ssl_broker
    make_conf, roundtrip = CLIENTS[client]
    topic = _topic(sb, f"sasl-ssl-{client}")
    conf = make_conf(sb.sasl_ssl_bootstrap, "alice", "alice-secret", mechanism, protocol="SASL_SSL")
    if client == "confluent":
        conf["ssl.ca.location"] = certs.ca
    elif client == "kafka-python":
        conf["ssl_cafile"] = certs.ca
    else:
        import ssl

        conf["ssl_context"] = ssl.create_default_context(cafile=certs.ca)
    assert roundtrip(conf, topic) == _expected()


def test_java_tools_over_sasl_ssl(sasl_ssl_broker: tuple[SecureBroker, Certs], tmp_path: Path) -> None:
    cli.require_tools()
    sb, certs = sasl_ssl_broker
    topic = _topic(sb, "sasl-ssl-java")
    props = tmp_path / "client.properties"
    props.write_text(java_client_properties("alice", "alice-secret", "SCRAM-SHA-512", protocol="SASL_SSL",
                                            extra={"ssl.truststore.type": "PEM",
                                                   "ssl.truststore.location": certs.ca}))
    cli.run("kafka-console-producer", "--bootstrap-server", sb.sasl_ssl_bootstrap, "--topic", topic,
            "--command-config", str(props), input="".join(f"v{i}\n" for i in range(N)))
    out = cli.run("kafka-console-consumer", "--bootstrap-server", sb.sasl_ssl_bootstrap, "--topic", topic,
                  "--command-config", str(props), "--from-beginning", "--max-messages", str(N),
                  "--timeout-ms", "60000")
    assert [ln for ln in out.stdout.splitlines() if ln.startswith("v")] == [f"v{i}" for i in range(N)], out.describe()
    bad = tmp_path / "bad.properties"
    bad.write_text(java_client_properties("alice", "nope", "SCRAM-SHA-512", protocol="SASL_SSL",
                                          extra={"ssl.truststore.type": "PEM", "ssl.truststore.location": certs.ca}))
    out = cli.run("kafka-topics", "--bootstrap-server", sb.sasl_ssl_bootstrap, "--command-config", str(bad),
                  "--list", check=False)
    assert out.returncode == 1
    assert "SaslAuthenticationException: " + FAILED.format("SCRAM-SHA-512") in out.stderr, out.describe()


# -- before authentication: frames outside the request pool, and a deadline (issue 25, point 2) --

POOL_BYTES = 4 << 20  # the broker-wide request pool of this module's small broker
AUTH_TIMEOUT_MS = 3000  # tmqgate's sasl_authentication_timeout_ms there


@pytest.fixture(scope="module")
def small_pool_broker(tmp_path_factory: pytest.TempPathFactory, target: str,
                      pytestconfig: pytest.Config) -> Iterator[SecureBroker]:
    """A SASL broker whose request pool (queued.max.request.bytes) holds 4 MiB, frames of 1 MiB."""
    if pytestconfig.getoption("--bootstrap"):
        pytest.skip("--bootstrap given: these tests start a broker with SASL listeners")
    extra: dict[str, object] = ({"queued.max.request.bytes": str(POOL_BYTES),
                                 "socket.request.max.bytes": str(1 << 20)} if target == "kafka" else
                                {"queued_max_request_bytes": POOL_BYTES, "socket_request_max_bytes": 1 << 20,
                                 "sasl_authentication_timeout_ms": AUTH_TIMEOUT_MS})
    sb = start_secure_broker(target, tmp_path_factory.mktemp(f"{target}-sasl-pool"),
                             mechanisms=("SCRAM-SHA-512",), extra_config=extra)
    try:
        yield sb
    finally:
        sb.proc.stop()


def _half_frames(address: str, count: int) -> list:
    """`count` sockets that each announce a 512 KiB frame (sasl.server.max.receive.size, the
    largest allowed before authentication) and send 4 bytes of it."""
    import socket
    import struct

    from .helpers import split_hostport

    host, port = split_hostport(address)
    out = []
    for _ in range(count):
        s = socket.create_connection((host, port))
        s.sendall(struct.pack(">i", 512 << 10) + b"\x00\x12\x00\x03")
        out.append(s)
    return out


def test_unauthenticated_frames_do_not_hold_the_request_pool(small_pool_broker: SecureBroker) -> None:
    """24 unauthenticated sockets announce 12 MiB of frames, three times the 4 MiB pool, and
    never send them: Kafka reads frames before authentication outside its memory pool, so an
    authenticated client's Metadata, a new client's ApiVersions and a SCRAM login are answered
    meanwhile (issue 25: the pool was theirs, and everyone else waited as long as they held on)."""
    sb = small_pool_broker
    holders = _half_frames(sb.sasl_bootstrap, 24)
    try:
        with RawConn(sb.sasl_bootstrap) as newcomer:
            assert 36 in newcomer.api_versions()
            assert _scram_auth(newcomer, "alice", "alice-secret")["error_code"] == 0
            meta = newcomer.request(3, 12, {"topics": None, "allow_auto_topic_creation": False,
                                            "include_topic_authorized_operations": False})
            assert [b["port"] for b in meta["brokers"]] != []
        with RawConn(sb.bootstrap) as plain:
            meta = plain.request(3, 12, {"topics": None, "allow_auto_topic_creation": False,
                                         "include_topic_authorized_operations": False})
            assert meta["brokers"] != []
    finally:
        for s in holders:
            s.close()


@pytest.mark.tmqgate_only
def test_connections_not_authenticated_in_time_are_closed(small_pool_broker: SecureBroker) -> None:
    """sasl_authentication_timeout_ms (3 s here): a connection silent from the start, one that
    stopped after its SaslHandshake and one trickling a frame are closed (issue 25: they stayed
    until connections_max_idle_ms, 600 s); an authenticated one lives on past the deadline."""
    sb = small_pool_broker
    with RawConn(sb.sasl_bootstrap) as silent, RawConn(sb.sasl_bootstrap) as half, \
            RawConn(sb.sasl_bootstrap) as trickle, RawConn(sb.sasl_bootstrap) as done:
        assert _handshake(half, "SCRAM-SHA-512")["error_code"] == 0
        assert _scram_auth(done, "bob", "bob-secret")["error_code"] == 0
        trickle.send_bytes(b"\x00\x00\x01\x00")  # a 256-byte frame, a byte at a time
        started = time.monotonic()
        closed = False
        while not closed and time.monotonic() - started < AUTH_TIMEOUT_MS / 1000 + 30:
            try:
                trickle.send_bytes(b"\x00")
            except (BrokenPipeError, ConnectionResetError):
                closed = True
            closed = closed or trickle.closed_within(0.5)
        assert closed, "the trickling connection is still open"
        assert silent.closed_within(30)
        assert half.closed_within(30)
        meta = done.request(3, 12, {"topics": None, "allow_auto_topic_creation": False,
                                    "include_topic_authorized_operations": False})
        assert meta["brokers"] != []
