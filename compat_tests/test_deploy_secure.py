"""The SASL_SSL + ACL deployment example (deploy/secure/) works as its README says.

Its certificates are made with deploy/secure/make-certs.sh (openssl), the first admin with
`tmqgate user add admin --mechanism SCRAM-SHA-512 --data-dir ...`, and `tmqgate serve` runs
deploy/secure/tmqgate.toml with only what a test must change: free ports on loopback (and the
advertised addresses with them), the certificate paths, the data directory. Then a client
connects over each listener: over the loopback PLAINTEXT listener as User:ANONYMOUS, which
the ACLs give nothing; over SASL_SSL as the admin (a super user); the SQL front over HTTPS
asks for HTTP Basic credentials. Every setting of the example must be one the broker knows.
"""

from __future__ import annotations

import base64
import json
import socket
import ssl
import subprocess
import time
import tomllib
import urllib.error
import urllib.request
from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tmqgate.broker.configs.config import BrokerConfig

from .brokers import TmqgateProcess, _tmqgate_cmd
from .helpers import free_port, unique_topic

pytestmark = pytest.mark.tmqgate_only

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "deploy" / "secure" / "tmqgate.toml"
MAKE_CERTS = ROOT / "deploy" / "secure" / "make-certs.sh"
ADMIN_PASSWORD = "admin-secret-Xy7"


def _example_config(tls_dir: Path, ports: dict[str, int]) -> dict[str, Any]:
    """The example with test ports and paths."""
    config = tomllib.loads(EXAMPLE.read_text())
    assert {name.partition("://")[0] for name in config["listeners"]} == {"PLAINTEXT", "SASL_SSL"}
    config["listeners"] = [f"{name}://127.0.0.1:{port}" for name, port in ports.items()]
    config["advertised_listeners"] = [f"{name}://127.0.0.1:{port}" for name, port in ports.items()]
    for key in ("ssl_certfile", "ssl_keyfile", "ssl_cafile"):
        config[key] = str(tls_dir / Path(config[key]).name)
    unknown = sorted(set(config) - {f.name for f in fields(BrokerConfig)})
    assert not unknown, f"the example has settings the broker does not know: {unknown}"
    return config


@pytest.fixture(scope="module")
def deployed(tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config) -> Any:
    if pytestconfig.getoption("--bootstrap"):
        pytest.skip("--bootstrap given: this test starts its own broker")
    work = tmp_path_factory.mktemp("deploy-secure")
    tls_dir = work / "tls"
    made = subprocess.run([str(MAKE_CERTS), str(tls_dir), "localhost", "127.0.0.1"], capture_output=True,
                          text=True, timeout=60)
    assert made.returncode == 0, made.stderr
    ports = {"PLAINTEXT": free_port(), "SASL_SSL": free_port()}
    proc = TmqgateProcess(work, port=ports["PLAINTEXT"], config=_example_config(tls_dir, ports))
    # the first admin, offline, exactly as deploy/secure/README.md says (the directory first)
    proc.data_dir.mkdir(parents=True)
    added = subprocess.run([*_tmqgate_cmd(), "user", "add", "admin", "--mechanism", "SCRAM-SHA-512",
                            "--data-dir", str(proc.data_dir)], input=ADMIN_PASSWORD + "\n",
                           capture_output=True, text=True, timeout=60)
    assert added.returncode == 0, added.stderr
    proc.start()
    try:
        yield proc, tls_dir, ports
    finally:
        proc.stop()


def test_plaintext_on_loopback_serves_anonymous(deployed: Any) -> None:
    proc, _tls, ports = deployed
    md = AdminClient({"bootstrap.servers": f"127.0.0.1:{ports['PLAINTEXT']}"}).list_topics(timeout=20)
    assert [(b.host, b.port) for b in md.brokers.values()] == [("127.0.0.1", ports["PLAINTEXT"])]


def test_sasl_ssl_listener_presents_the_scripts_certificate(deployed: Any) -> None:
    """The certificate make-certs.sh wrote, trusted through its CA, for the name and the IP."""
    _proc, tls_dir, ports = deployed
    ctx = ssl.create_default_context(cafile=str(tls_dir / "ca.pem"))
    for name in ("localhost", "127.0.0.1"):
        with socket.create_connection(("127.0.0.1", ports["SASL_SSL"]), timeout=10) as raw, \
                ctx.wrap_socket(raw, server_hostname=name) as s:
            subject = dict(x[0] for x in s.getpeercert()["subject"])
            assert subject == {"organizationName": "tmqgate", "commonName": "localhost"}
            assert s.version() in ("TLSv1.2", "TLSv1.3")


def _sasl_ssl_conf(tls_dir: Path, port: int, password: str = ADMIN_PASSWORD) -> dict[str, Any]:
    return {"bootstrap.servers": f"127.0.0.1:{port}", "security.protocol": "SASL_SSL",
            "ssl.ca.location": str(tls_dir / "ca.pem"), "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": "admin", "sasl.password": password}


def test_admin_over_sasl_ssl_and_anonymous_denied(deployed: Any) -> None:
    """The super user does everything over SASL_SSL; User:ANONYMOUS on the loopback listener
    does not see the topic and may not write to it (TOPIC_AUTHORIZATION_FAILED); a wrong
    password fails that client alone."""
    _proc, tls_dir, ports = deployed
    conf = _sasl_ssl_conf(tls_dir, ports["SASL_SSL"])
    topic = unique_topic("deploy")
    admin = AdminClient(conf)
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    producer = Producer({**conf, "acks": "all"})
    for i in range(5):
        producer.produce(topic, key=b"k", value=f"v{i}".encode())
    assert producer.flush(30) == 0
    consumer = Consumer({**conf, "group.id": unique_topic("deploy-g"), "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    got: list[tuple[int, bytes]] = []
    deadline = time.monotonic() + 60
    while len(got) < 5 and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            got.append((msg.offset(), msg.value()))
    consumer.close()
    assert got == [(i, f"v{i}".encode()) for i in range(5)]

    plain = {"bootstrap.servers": f"127.0.0.1:{ports['PLAINTEXT']}"}
    assert topic not in AdminClient(plain).list_topics(timeout=20).topics
    errors: list[KafkaError] = []
    anonymous = Producer({**plain, "acks": "all", "message.timeout.ms": 10000, "allow.auto.create.topics": False})
    anonymous.produce(topic, value=b"x", on_delivery=lambda err, _msg: errors.append(err))
    anonymous.flush(20)
    assert [e.code() for e in errors] == [KafkaError.TOPIC_AUTHORIZATION_FAILED]

    with pytest.raises(KafkaException) as wrong:
        AdminClient(_sasl_ssl_conf(tls_dir, ports["SASL_SSL"], "wrong")).list_topics(timeout=15)
    assert wrong.value.args[0].code() in (KafkaError._AUTHENTICATION, KafkaError._TRANSPORT)


def test_sql_front_over_https_asks_for_credentials(deployed: Any) -> None:
    proc, tls_dir, _ports = deployed
    ctx = ssl.create_default_context(cafile=str(tls_dir / "ca.pem"))
    base = f"https://127.0.0.1:{proc.http_port}"
    with urllib.request.urlopen(f"{base}/health", context=ctx, timeout=10) as r:
        assert r.status == 200

    def sql(auth: str | None) -> tuple[int, dict[str, Any]]:
        req = urllib.request.Request(f"{base}/rest/sql", data=b"SHOW DATABASES", method="POST")
        if auth is not None:
            req.add_header("Authorization", "Basic " + base64.b64encode(auth.encode()).decode())
        try:
            with urllib.request.urlopen(req, context=ctx, timeout=20) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read())

    assert sql(None)[0] == 401
    assert sql("admin:wrong")[0] == 401
    status, body = sql(f"admin:{ADMIN_PASSWORD}")
    assert (status, body["code"]) == (200, 0), body


def test_the_example_refuses_an_open_sql_front() -> None:
    """What the example protects against: the SQL front on every interface with no
    authentication does not start (unless allow_insecure_http = true)."""
    with pytest.raises(ValueError, match="no authentication"):
        BrokerConfig(http="0.0.0.0:6041").check()
    BrokerConfig(http="0.0.0.0:6041", http_auth="basic").check()  # the example's choice
    BrokerConfig(http="0.0.0.0:6041", allow_insecure_http=True).check()  # said out loud
