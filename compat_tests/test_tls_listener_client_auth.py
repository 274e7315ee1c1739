"""Per-listener TLS settings (issue 12 leftover): Kafka's `listener.name.<name>.ssl.client.auth`
is tmqgate's `listener_ssl_client_auth = {NAME = ...}`, `listener.name.<name>.ssl.keystore.location`
its `listener_ssl_certfile` / `listener_ssl_keyfile`.

One broker, two SSL listeners with the same certificate: MTLS requires a client certificate,
OPEN asks for none. A client without a certificate gets a TLS alert on MTLS and is served on
OPEN; with a certificate its principal on MTLS is the certificate's (a DENY ACL for that
principal refuses it there, while on OPEN — no certificate asked, User:ANONYMOUS, a super user
— the same client is served). The reference broker runs configured the same way.
"""

from __future__ import annotations

import socket
import ssl
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from .brokers import BrokerProcess, new_broker
from .certs import CLIENT_SUBJECT, Certs, make_certs, reissue_server, tls_config
from .helpers import unique_topic
from .raw import RawConn
from .test_tls_clients import _refusal

CERT_PRINCIPAL = f"User:{CLIENT_SUBJECT}"  # Kafka's default principal of a certificate: its DN
TOPIC_AUTHORIZATION_FAILED = 29


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    certs = make_certs(tmp_path_factory.mktemp("listener-auth-certs"))
    reissue_server(certs, "CN=localhost-open,O=tmqgate-test", name="server-open")
    return certs


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory, target: str, certs: Certs,
           pytestconfig: pytest.Config) -> Iterator[BrokerProcess]:
    """PLAINTEXT, MTLS (SSL, client certificate required) and OPEN (SSL, none, with a server
    certificate of its own); the broker-wide ssl client auth is "requested", so each SSL
    listener's own setting is what decides."""
    if pytestconfig.getoption("--bootstrap"):
        pytest.skip("--bootstrap given: these tests start a broker with TLS listeners")
    config: dict[str, Any] = tls_config(target, certs, "requested")
    if target == "kafka":
        config.update({"listener.name.mtls.ssl.client.auth": "required",
                       "listener.name.open.ssl.client.auth": "none",
                       "listener.name.open.ssl.keystore.location": certs.keystore("server-open"),
                       "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                       "super.users": "User:ANONYMOUS"})
    else:
        config.update({"listener_ssl_client_auth": {"MTLS": "required", "OPEN": "none"},
                       "listener_ssl_certfile": {"OPEN": certs.cert("server-open")},
                       "listener_ssl_keyfile": {"OPEN": certs.key("server-open")},
                       "authorizer": "acl", "super_users": ["User:ANONYMOUS"]})
    proc = new_broker(target, tmp_path_factory.mktemp(f"{target}-listener-auth"), config=config,
                      extra_listeners={"MTLS": "SSL", "OPEN": "SSL"})
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()


def _metadata_error(port: int, certs: Certs, client: str | None, topic: str) -> int:
    """Metadata v12 for `topic` over TLS on `port` (with the certificate `client`): its error code."""
    ctx = ssl.create_default_context(cafile=certs.ca)
    if client:
        ctx.load_cert_chain(certs.cert(client), certs.key(client))
    conn = RawConn(f"127.0.0.1:{port}")
    conn.sock = ctx.wrap_socket(conn.sock, server_hostname="localhost")
    with conn:
        body = conn.request(3, 12, {"topics": [{"name": topic, "topic_id": bytes(16)}],
                                    "allow_auto_topic_creation": False,
                                    "include_topic_authorized_operations": False})
    [entry] = body["topics"]
    assert entry["name"] == topic
    return int(entry["error_code"])


def test_client_auth_per_listener(broker: BrokerProcess, certs: Certs) -> None:
    mtls, open_ = broker.listener_ports["MTLS"], broker.listener_ports["OPEN"]
    # No certificate: refused with an alert on MTLS, served on OPEN.
    assert "_ALERT_" in _refusal(mtls, certs, None)
    assert _refusal(open_, certs, None) == "answered"
    # A certificate: served on both.
    assert _refusal(mtls, certs, "client") == "answered"
    assert _refusal(open_, certs, "client") == "answered"

    # The principal on MTLS is the certificate's: DENY it DESCRIBE on a topic.
    topic = unique_topic("listener-auth")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})  # PLAINTEXT: User:ANONYMOUS, a super user
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    deny = AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, CERT_PRINCIPAL, "*",
                      AclOperation.ALL, AclPermissionType.DENY)
    for future in admin.create_acls([deny]).values():
        future.result(30)
    assert _metadata_error(mtls, certs, "client", topic) == TOPIC_AUTHORIZATION_FAILED
    # On OPEN the same client presents no certificate (none asked): User:ANONYMOUS, served.
    assert _metadata_error(open_, certs, "client", topic) == 0
    assert _metadata_error(open_, certs, None, topic) == 0


def _served_subject(port: int, certs: Certs) -> str:
    ctx = ssl.create_default_context(cafile=certs.ca)
    ctx.load_cert_chain(certs.cert("client"), certs.key("client"))
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw, \
            ctx.wrap_socket(raw, server_hostname="localhost") as s:
        cert = s.getpeercert()
    return dict(x[0] for x in cert["subject"])["commonName"]


def test_server_certificate_per_listener(broker: BrokerProcess, certs: Certs) -> None:
    """OPEN serves its own certificate (listener.name.open.ssl.keystore.location), MTLS the broker's."""
    assert _served_subject(broker.listener_ports["MTLS"], certs) == "localhost"
    assert _served_subject(broker.listener_ports["OPEN"], certs) == "localhost-open"
