"""Brokers of a secured cluster authenticate to each other (issue 16): every listener takes
SASL (PLAIN and SCRAM-SHA-256), the authorizer refuses what no ACL allows
(`allow.everyone.if.no.acl.found` false) and the brokers' own user is a super user — so
followers' fetches (CLUSTER_ACTION) and the rest of the inter-broker traffic pass only as that
user, authenticated with SCRAM-SHA-256 (the password never on the wire; PLAIN between brokers is
the same client, compat_tests/test_sasl.py). A client user with ACLs on its topic
and group writes acks=all to a topic replicated three times, its followers in sync, reads back
every record, and goes on through the kill of a partition's leader. Both targets, configured
alike: three tmqgate nodes with etcd (`inter_broker_sasl_mechanism`, `inter_broker_username` /
`inter_broker_password`), the reference Kafka's three brokers and KRaft controller
(`sasl.mechanism.inter.broker.protocol`, the brokers' SCRAM user added when the metadata is
formatted, JAAS users for PLAIN; the controller's own listener stays PLAINTEXT, its ANONYMOUS brokers super users
there, as in Kafka's docs)."""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicCollection, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
)
from confluent_kafka.admin import ResourceType as RT

from .brokers import TmqgateProcess, _tmqgate_cmd
from .clusters import Nodes, tmqgate_cluster
from .etcd import require_etcd
from .helpers import unique_topic, wait_until
from .raw import RawConn

# kills brokers, runs a soak or starts a cluster: one such module at a time (compat_tests/serial.py)
pytestmark = pytest.mark.serial

ADMIN, ADMIN_PASSWORD = "admin", "admin-secret"
ALICE, ALICE_PASSWORD = "alice", "alice-secret"
INTER_BROKER = "SCRAM-SHA-256"  # the brokers' mechanism among themselves; clients here use PLAIN


def _client(bootstrap: str, user: str, password: str, **extra: Any) -> dict[str, Any]:
    return {"bootstrap.servers": bootstrap, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
            "sasl.username": user, "sasl.password": password, **extra}


def _provision(proc: TmqgateProcess) -> None:
    """The users every node holds alike before the cluster forms (tmqgate user add, in the data
    directory made for it)."""
    proc.data_dir.mkdir(parents=True, exist_ok=True)
    for user, password in ((ADMIN, ADMIN_PASSWORD), (ALICE, ALICE_PASSWORD)):
        added = subprocess.run([*_tmqgate_cmd(), "user", "add", user, "--mechanism", "SCRAM-SHA-256",
                                "--data-dir", str(proc.data_dir)], input=password + "\n",
                               capture_output=True, text=True, timeout=60)
        assert added.returncode == 0, added.stderr


def _tmqgate(workdir: Path) -> contextlib.AbstractContextManager[Nodes]:
    require_etcd()
    return tmqgate_cluster(workdir, {
        "sasl_enabled_mechanisms": ["PLAIN", "SCRAM-SHA-256"], "authorizer": "acl",
        "allow_everyone_if_no_acl_found": False, "super_users": [f"User:{ADMIN}"],
        "inter_broker_sasl_mechanism": INTER_BROKER, "inter_broker_username": ADMIN,
        "inter_broker_password": ADMIN_PASSWORD, "replica_lag_time_max_ms": 3000},
        listener="SASL_PLAINTEXT", prepare=_provision)


@contextlib.contextmanager
def _kafka(pytestconfig: pytest.Config, workdir: Path) -> Iterator[Nodes]:
    from .kafka_cluster import start_reference_kafka_cluster
    from .kafka_ref import require_jars

    require_jars()
    plain = (f'org.apache.kafka.common.security.plain.PlainLoginModule required '
             f'user_{ADMIN}="{ADMIN_PASSWORD}" user_{ALICE}="{ALICE_PASSWORD}";')
    scram = (f'org.apache.kafka.common.security.scram.ScramLoginModule required username="{ADMIN}" '
             f'password="{ADMIN_PASSWORD}";')
    cluster = start_reference_kafka_cluster(workdir / "kafka", scram=[
        f"SCRAM-SHA-256=[name={ADMIN},password={ADMIN_PASSWORD}]"], broker_config={
        "listener.security.protocol.map": "PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256", "sasl.mechanism.inter.broker.protocol": INTER_BROKER,
        "listener.name.plaintext.plain.sasl.jaas.config": plain,
        "listener.name.plaintext.scram-sha-256.sasl.jaas.config": scram,
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "allow.everyone.if.no.acl.found": "false", "super.users": f"User:{ADMIN};User:ANONYMOUS",
        "replica.lag.time.max.ms": "3000"})
    nodes = Nodes(cluster.brokers)
    nodes.coordination = cluster.controller
    try:
        yield nodes
    finally:
        cluster.stop()


def _isr(admin: AdminClient, topic: str) -> list[tuple[int, int, list[int]]]:
    described = admin.describe_topics(TopicCollection([topic]))[topic].result(30)
    return sorted((p.id, p.leader.id if p.leader else -1, sorted(r.id for r in p.isr)) for p in described.partitions)


def test_brokers_authenticate_to_each_other_under_strict_acls(pytestconfig: pytest.Config, target: str,
                                                              tmp_path: Path) -> None:
    if pytestconfig.getoption("--bootstrap"):
        pytest.skip("--bootstrap given: this test starts its own brokers")
    start = _kafka(pytestconfig, tmp_path) if target == "kafka" else _tmqgate(tmp_path)
    with start as nodes:
        bootstrap = ",".join(nodes[n].bootstrap for n in (0, 1, 2))
        admin = AdminClient(_client(bootstrap, ADMIN, ADMIN_PASSWORD))
        topic, group = unique_topic("secured"), unique_topic("secured-group")
        wait_until(lambda: len(admin.list_topics(timeout=10).brokers), 30, 0.2, "three brokers",
                   ok=lambda n: n == 3)
        admin.create_topics([NewTopic(topic, 2, 3)])[topic].result(60)
        acls = [AclBinding(RT.TOPIC, topic, ResourcePatternType.LITERAL, f"User:{ALICE}", "*", op,
                           AclPermissionType.ALLOW) for op in (AclOperation.WRITE, AclOperation.READ,
                                                               AclOperation.DESCRIBE)]
        acls.append(AclBinding(RT.GROUP, group, ResourcePatternType.LITERAL, f"User:{ALICE}", "*", AclOperation.READ,
                               AclPermissionType.ALLOW))
        for future in admin.create_acls(acls).values():
            future.result(30)

        # every replica in sync: the followers' fetches pass the leaders' authorizers as the brokers' user
        wait_until(lambda: _isr(admin, topic), 60, 0.2, "three in-sync replicas of each partition",
                   ok=lambda parts: all(isr == [0, 1, 2] for _, _, isr in parts))
        acked: list[bytes] = []
        refused: list[Any] = []

        def delivered(err: Any, msg: Any) -> None:
            (refused if err is not None else acked).append(err or msg.value())

        def send(values: list[bytes]) -> None:
            producer = producers[0]
            for v in values:
                producer.produce(topic, v, on_delivery=delivered)
            assert producer.flush(60) == 0, refused

        # alice's ACLs reach every broker (a probe of each partition until acknowledged, by a
        # producer of its own: a refusal must not touch the idempotent one), then two rounds of
        # records, the leader of partition 0 killed between them
        def probe() -> list[Any]:
            prober = Producer(_client(bootstrap, ALICE, ALICE_PASSWORD, acks="all", **{"enable.idempotence": False}))
            results: list[Any] = []
            for p in (0, 1):
                prober.produce(topic, b"probe", partition=p, on_delivery=lambda err, msg: results.append(err or msg))
            prober.flush(30)
            acked.extend(m.value() for m in results if hasattr(m, "value"))
            return results

        wait_until(probe, 30, 0.2, "alice may write",
                   ok=lambda got: len(got) == 2 and all(hasattr(m, "value") for m in got),
                   retry_errors=True)
        # The idempotent producer's InitProducerId goes to any broker, not only the partitions'
        # leaders the probe reached: each must have her ACLs (a broker that has not yet answers
        # CLUSTER_AUTHORIZATION_FAILED, fatal to the producer)
        for n in (0, 1, 2):
            wait_until(lambda b=nodes[n].bootstrap: _init_producer_id_as(b, ALICE, ALICE_PASSWORD), 30, 0.2,
                       f"broker {n} to let alice initialise an idempotent producer", ok=lambda code: code == 0)
        # idempotent: its InitProducerId needs her WRITE, now everywhere
        producers = [Producer(_client(bootstrap, ALICE, ALICE_PASSWORD, acks="all", **{"enable.idempotence": True}))]
        first = [f"a{i}".encode() for i in range(200)]
        send(first)
        [(_, leader, _), *_] = _isr(admin, topic)
        nodes[leader].kill()  # the new leader was in sync as the brokers' user: nothing acknowledged is lost
        second = [f"b{i}".encode() for i in range(200)]
        send(second)
        assert sorted(v for v in acked if v != b"probe") == sorted(first + second)

        consumer = Consumer(_client(bootstrap, ALICE, ALICE_PASSWORD, **{"group.id": group,
                                                                         "enable.auto.commit": False}))
        try:
            # from the beginning, no committed offset asked (the group's coordinator needs three
            # live brokers to make its internal topic, and one was killed)
            consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in (0, 1)])
            read: list[bytes] = []
            wait_until(lambda: _poll_into(consumer, read), 90, 0.2, "every record read",
                       ok=lambda n: n >= len(acked))
            assert sorted(read) == sorted(acked)
        finally:
            consumer.close()


def _init_producer_id_as(bootstrap: str, user: str, password: str) -> int:
    """InitProducerId (no transactional id: an idempotent producer's) from this one broker, as
    ``user`` authenticated with SASL PLAIN; its error code."""
    with RawConn(bootstrap) as c:
        assert c.request(17, 1, {"mechanism": "PLAIN"})["error_code"] == 0
        auth = c.request(36, 2, {"auth_bytes": f"\0{user}\0{password}".encode()})
        assert auth["error_code"] == 0, auth
        answer = c.request(22, 4, {"transactional_id": None, "transaction_timeout_ms": -1,
                                   "producer_id": -1, "producer_epoch": -1})
        return int(answer["error_code"])


def _poll_into(consumer: Consumer, read: list[bytes]) -> int:
    read.extend(m.value() for m in consumer.consume(1000, 0.5) if m.error() is None)
    return len(read)
