"""ACLs with two authenticated principals (issue 12, point 4): mutual TLS gives each client
its certificate's principal, so a super user (admin) and alice, who may only READ one topic
in one group, use stock clients (confluent-kafka) against both brokers configured the same:
an authorizer, `allow.everyone.if.no.acl.found` false (Kafka's default), super users
`User:ANONYMOUS` (the reference broker's own node speaks PLAINTEXT) and the admin."""

from __future__ import annotations

import socket
import ssl
import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from .brokers import BrokerProcess, new_broker
from .certs import CLIENT_SUBJECT, Certs, issue_client, make_certs, tls_config
from .helpers import unique_topic, wait_until
from .raw import RawConn

ADMIN_SUBJECT = "CN=admin,O=tmqgate-test"
ADMIN = f"User:{ADMIN_SUBJECT}"
ALICE = f"User:{CLIENT_SUBJECT}"  # Kafka's default principal of a certificate: its whole DN


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    certs = make_certs(tmp_path_factory.mktemp("acl-certs"))
    issue_client(certs, "admin", ADMIN_SUBJECT)
    return certs


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory, target: str, certs: Certs,
           pytestconfig: pytest.Config) -> Iterator[BrokerProcess]:
    if pytestconfig.getoption("--bootstrap"):
        pytest.skip("--bootstrap given: these tests start a broker with an authorizer and TLS")
    config: dict[str, Any] = tls_config(target, certs, "required")
    if target == "kafka":
        config.update({"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                       "super.users": f"User:ANONYMOUS;{ADMIN}"})
    else:
        config.update({"authorizer": "acl", "super_users": ["User:ANONYMOUS", ADMIN]})
    proc = new_broker(target, tmp_path_factory.mktemp(f"{target}-acl-tls"), config=config,
                      extra_listeners={"SSL": "SSL"})
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()


class RawTls(RawConn):
    """A raw connection over mutual TLS with client certificate `who`."""

    def __init__(self, port: int, certs: Certs, who: str) -> None:
        ctx = ssl.create_default_context(cafile=certs.ca)
        ctx.load_cert_chain(certs.cert(who), certs.key(who))
        self.sock = ctx.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=15.0),
                                    server_hostname="127.0.0.1")
        self.timeout = 15.0
        self.client_id = "compat-raw"


def _conf(broker: BrokerProcess, certs: Certs, who: str) -> dict[str, Any]:
    return {"bootstrap.servers": f"127.0.0.1:{broker.listener_ports['SSL']}", "security.protocol": "SSL",
            "ssl.ca.location": certs.ca, "ssl.certificate.location": certs.cert(who),
            "ssl.key.location": certs.key(who)}


def _acl(rt: ResourceType, name: str, op: AclOperation) -> AclBinding:
    return AclBinding(rt, name, ResourcePatternType.LITERAL, ALICE, "*", op, AclPermissionType.ALLOW)


def _consume(conf: dict[str, Any], group: str, topic: str, n: int, timeout: float = 60) -> tuple[list[bytes], Any]:
    """Subscribe in `group` and poll until n records or an error: (values, first error code)."""
    consumer = Consumer({**conf, "group.id": group, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    consumer.subscribe([topic])
    values: list[bytes] = []
    error = None
    deadline = time.monotonic() + timeout
    try:
        while len(values) < n and error is None and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error() is not None:
                error = msg.error().code()
            else:
                values.append(msg.value())
        if values and error is None:
            consumer.commit(asynchronous=False)
    except KafkaException as exc:
        error = exc.args[0].code()
    finally:
        consumer.close()
    return values, error


def test_super_user_and_a_reader(broker: BrokerProcess, certs: Certs) -> None:
    admin_conf, alice_conf = _conf(broker, certs, "admin"), _conf(broker, certs, "client")
    readable, hidden = unique_topic("acl-r"), unique_topic("acl-h")
    group, other_group = unique_topic("acl-g"), unique_topic("acl-og")
    admin = AdminClient(admin_conf)
    for f in admin.create_topics([NewTopic(readable, 1, 1), NewTopic(hidden, 1, 1)]).values():
        f.result(30)
    producer = Producer({**admin_conf, "acks": "all"})
    for t in (readable, hidden):
        for i in range(5):
            producer.produce(t, value=f"{t}-{i}".encode())
    assert producer.flush(30) == 0
    acls = [_acl(ResourceType.TOPIC, readable, AclOperation.READ), _acl(ResourceType.GROUP, group, AclOperation.READ)]
    for f in admin.create_acls(acls).values():
        f.result(30)
    flt = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, ALICE, None, AclOperation.ANY,
                           AclPermissionType.ANY)
    wait_until(lambda: len(admin.describe_acls(flt).result(30)) >= 2, 30, 0.1,  # in effect on the reference broker
               "alice's two ACLs described")

    # alice reads the topic in her group, and commits
    values, error = _consume(alice_conf, group, readable, 5)
    assert error is None and values == [f"{readable}-{i}".encode() for i in range(5)]
    # ...sees only that topic (DESCRIBE is implied by READ)
    visible = set(AdminClient(alice_conf).list_topics(timeout=20).topics)
    assert readable in visible and hidden not in visible
    # ...may not write it
    results: list[Any] = []
    alice_producer = Producer({**alice_conf, "acks": "all", "message.timeout.ms": 20000})
    alice_producer.produce(readable, value=b"no", on_delivery=lambda err, _msg: results.append(err))
    alice_producer.flush(30)
    assert [e.code() for e in results] == [KafkaError.TOPIC_AUTHORIZATION_FAILED]
    # ...nor read another topic (librdkafka's assign() stays silent on it: asked raw), nor use
    # another group
    with RawTls(broker.listener_ports["SSL"], certs, "client") as c:
        p = c.fetch(hidden, 0, 0)
        assert (p["error_code"], p["records"] or b"") == (KafkaError.TOPIC_AUTHORIZATION_FAILED, b"")
        assert c.fetch(readable, 0, 0)["error_code"] == 0
    assert _consume(alice_conf, other_group, readable, 5, timeout=30) == ([], KafkaError.GROUP_AUTHORIZATION_FAILED)
    # ...nor list or change ACLs (no DESCRIBE / ALTER on the cluster)
    with RawTls(broker.listener_ports["SSL"], certs, "client") as c:
        body = c.request(29, 3, {"resource_type_filter": 1, "resource_name_filter": None, "pattern_type_filter": 1,
                                 "principal_filter": None, "host_filter": None, "operation": 1,
                                 "permission_type": 1})
        assert (body["error_code"], body["resources"]) == (KafkaError.CLUSTER_AUTHORIZATION_FAILED, [])
        created = c.request(30, 3, {"creations": [
            {"resource_type": 2, "resource_name": hidden, "resource_pattern_type": 3, "principal": ALICE,
             "host": "*", "operation": 3, "permission_type": 3}]})
        assert created["results"][0]["error_code"] == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    # OffsetFetch shows alice only the committed offsets of topics she may describe
    def commit(c: RawConn, topic: str) -> int:
        body = c.request(8, 8, {"group_id": group, "generation_id_or_member_epoch": -1, "member_id": "",
                                "group_instance_id": None, "topics": [{"name": topic, "partitions": [
                                    {"partition_index": 0, "committed_offset": 3, "committed_leader_epoch": -1,
                                     "committed_metadata": None}]}]})
        return int(body["topics"][0]["partitions"][0]["error_code"])

    with RawTls(broker.listener_ports["SSL"], certs, "admin") as c:
        assert commit(c, hidden) == 0
    with RawTls(broker.listener_ports["SSL"], certs, "client") as c:
        assert commit(c, hidden) == KafkaError.TOPIC_AUTHORIZATION_FAILED  # READ on the topic too
        everything = c.request(9, 8, {"groups": [{"group_id": group, "topics": None}], "require_stable": False})
        assert [t["name"] for t in everything["groups"][0]["topics"]] == [readable]
        named = c.request(9, 8, {"groups": [{"group_id": group, "topics": [
            {"name": hidden, "partition_indexes": [0]}]}], "require_stable": False})
        [topic] = named["groups"][0]["topics"]
        assert [(p["partition_index"], p["committed_offset"], p["error_code"]) for p in topic["partitions"]] == \
            [(0, -1, KafkaError.TOPIC_AUTHORIZATION_FAILED)]
    # the super user reads everything, whatever the ACLs
    values, error = _consume(admin_conf, other_group, hidden, 5)
    assert error is None and len(values) == 5
    # ListGroups: without DESCRIBE on the cluster, alice sees only the groups she may describe
    with RawTls(broker.listener_ports["SSL"], certs, "client") as c:
        mine = {g["group_id"] for g in c.request(16, 5, {"states_filter": [], "types_filter": []})["groups"]}
    with RawTls(broker.listener_ports["SSL"], certs, "admin") as c:
        every = {g["group_id"] for g in c.request(16, 5, {"states_filter": [], "types_filter": []})["groups"]}
    assert {group, other_group} <= every
    assert group in mine and other_group not in mine
