"""Kafka ACLs (issue 12, point 4): `kafka-acls` add / list / remove, ACLs surviving a restart,
and what a denied principal gets from every data API — the same tests against the reference
broker configured the same way.

Until SASL lands every connection here is `User:ANONYMOUS` on PLAINTEXT, so both brokers run
with an authorizer and `allow.everyone.if.no.acl.found=true` (the KRaft controller and the
admin client keep working), and the tests put DENY / ALLOW ACLs for ANONYMOUS on resources of
their own: once a resource has any ACL, only its ACLs decide (StandardAuthorizer's rule)."""

from __future__ import annotations

import re
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from . import kafka_ref
from .brokers import TmqgateProcess
from .cli_helpers import require_tools, run
from .helpers import split_hostport, unique_topic, wait_until
from .raw import RawConn, one_record_batch

KAFKA_ACL_CONFIG = {
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "allow.everyone.if.no.acl.found": "true",
}
TMQGATE_ACL_CONFIG = {"authorizer": "acl", "allow_everyone_if_no_acl_found": True}

ANON = "User:ANONYMOUS"
# Kafka's wire codes (ResourceType, PatternType, AclOperation, AclPermissionType)
TOPIC, GROUP, CLUSTER = 2, 3, 4
LITERAL, PREFIXED = 3, 4
ALL, READ, WRITE, DESCRIBE = 2, 3, 4, 8
DENY, ALLOW = 2, 3

TOPIC_AUTHORIZATION_FAILED = 29
GROUP_AUTHORIZATION_FAILED = 30
INVALID_REQUEST = 42


class AclBroker:
    """A broker with an authorizer, of this module's own (restartable on the same data)."""

    def __init__(self, target: str, workdir: Path) -> None:
        self.target = target
        self.workdir = workdir
        self.tmq: TmqgateProcess | None = None
        self.ref: kafka_ref.RefKafka | None = None
        self.bootstrap = ""

    def start(self) -> None:
        if self.target == "kafka":
            self.ref = kafka_ref.start_reference_kafka(self.workdir, extra_config=KAFKA_ACL_CONFIG)
            self.bootstrap = self.ref.bootstrap
        else:
            if self.tmq is None:
                self.tmq = TmqgateProcess(self.workdir, config=TMQGATE_ACL_CONFIG)
            self.tmq.start()
            self.bootstrap = self.tmq.bootstrap

    def stop(self) -> None:
        if self.ref is not None:
            self.ref.stop()
        if self.tmq is not None:
            self.tmq.stop()

    def restart(self) -> None:
        self.stop()
        self.start()


@pytest.fixture(scope="module")
def acl_broker(pytestconfig: pytest.Config, tmp_path_factory: pytest.TempPathFactory,
               target: str) -> Iterator[AclBroker]:
    if pytestconfig.getoption("--bootstrap"):
        pytest.skip("needs a broker of its own with an authorizer")
    b = AclBroker(target, tmp_path_factory.mktemp(f"acl-{target}"))
    b.start()
    try:
        yield b
    finally:
        b.stop()


# -- raw requests ---------------------------------------------------------------------------


def create_acls(bootstrap: str, *acls: tuple[int, str, int, str, str, int, int]) -> list[tuple[int, str | None]]:
    """CreateAcls v3 of (resource type, name, pattern, principal, host, operation, permission);
    returns once the broker's authorizer has the created ones (the reference broker's learns
    them from the metadata log a moment after the controller answers: DescribeAcls shows them
    then)."""
    with RawConn(bootstrap) as c:
        body = c.request(30, 3, {"creations": [
            {"resource_type": rt, "resource_name": name, "resource_pattern_type": pt, "principal": pr,
             "host": host, "operation": op, "permission_type": perm}
            for rt, name, pt, pr, host, op, perm in acls]})
        results = [(r["error_code"], r["error_message"]) for r in body["results"]]
        for (rt, name, pt, pr, host, op, perm), (code, _) in zip(acls, results, strict=True):
            if code != 0:
                continue
            flt = {"resource_type_filter": rt, "resource_name_filter": name, "pattern_type_filter": pt,
                   "principal_filter": pr, "host_filter": host, "operation": op, "permission_type": perm}
            wait_until(lambda flt=flt: c.request(29, 3, flt)["resources"], 30, 0.05, f"ACL {flt} in effect")
    return results


def deny(bootstrap: str, rt: int, name: str, op: int, pattern: int = LITERAL) -> None:
    assert create_acls(bootstrap, (rt, name, pattern, ANON, "*", op, DENY)) == [(0, "")]


def allow(bootstrap: str, rt: int, name: str, op: int, pattern: int = LITERAL) -> None:
    assert create_acls(bootstrap, (rt, name, pattern, ANON, "*", op, ALLOW)) == [(0, "")]


def make_topic(bootstrap: str, name: str) -> None:
    with RawConn(bootstrap) as c:
        body = c.request(19, 7, {"topics": [{"name": name, "num_partitions": 1, "replication_factor": 1,
                                             "assignments": [], "configs": []}],
                                 "timeout_ms": 30000, "validate_only": False})
    assert body["topics"][0]["error_code"] == 0, body


def produce_code(bootstrap: str, topic: str) -> int:
    def code() -> int:
        with RawConn(bootstrap) as c:
            return int(c.produce(topic, 0, one_record_batch(b"v"))["error_code"])

    # the reference broker's new topic may need a moment to get a leader
    return wait_until(code, 30, 0.2, f"{topic}[0] led",
                      ok=lambda got: got not in (3, 5, 6))  # UNKNOWN_TOPIC, LEADER_NOT_AVAILABLE


def fetch_code(bootstrap: str, topic: str) -> tuple[int, bytes]:
    with RawConn(bootstrap) as c:
        p = c.fetch(topic, 0, 0)
    return p["error_code"], p["records"] or b""


def list_offsets_code(bootstrap: str, topic: str) -> int:
    with RawConn(bootstrap) as c:
        return int(c.list_offsets(topic, 0, -1)["error_code"])


def metadata(bootstrap: str, topics: list[str] | None) -> dict[str, int]:
    with RawConn(bootstrap) as c:
        body = c.request(3, 12, {"topics": None if topics is None else [{"name": t, "topic_id": bytes(16)}
                                                                        for t in topics],
                                 "allow_auto_topic_creation": False,
                                 "include_topic_authorized_operations": False})
    return {t["name"]: t["error_code"] for t in body["topics"]}


# -- kafka-acls -----------------------------------------------------------------------------


def _acl_blocks(text: str) -> set[str]:
    """kafka-acls' output as its per-resource blocks (the order of resources is a hash map's)."""
    return {b.strip() for b in re.split(r"\n\s*\n", text) if b.strip()}


def test_kafka_acls_add_list_remove(acl_broker: AclBroker) -> None:
    require_tools()
    bs = acl_broker.bootstrap
    t = unique_topic("acl-cli")
    added = run("kafka-acls", "--bootstrap-server", bs, "--add", "--allow-principal", "User:alice",
                "--operation", "Read", "--topic", t)
    assert added.stdout == (
        f"Adding ACLs for resource `ResourcePattern(resourceType=TOPIC, name={t}, patternType=LITERAL)`: \n"
        " \t(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)\n\n")
    run("kafka-acls", "--bootstrap-server", bs, "--add", "--deny-principal", "User:bob", "--operation", "All",
        "--topic", f"{t}-", "--resource-pattern-type", "prefixed", "--group", f"{t}-g")
    listed = run("kafka-acls", "--bootstrap-server", bs, "--list", "--topic", t)
    assert listed.stdout == (
        f"Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name={t}, patternType=LITERAL)`:\n"
        "\t(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)\n\n")
    everything = _acl_blocks(run("kafka-acls", "--bootstrap-server", bs, "--list").stdout)
    assert {
        f"Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name={t}, patternType=LITERAL)`:\n"
        "\t(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)",
        f"Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name={t}-, patternType=PREFIXED)`:\n"
        "\t(principal=User:bob, host=*, operation=ALL, permissionType=DENY)",
        f"Current ACLs for resource `ResourcePattern(resourceType=GROUP, name={t}-g, patternType=PREFIXED)`:\n"
        "\t(principal=User:bob, host=*, operation=ALL, permissionType=DENY)",
    } <= everything
    removed = run("kafka-acls", "--bootstrap-server", bs, "--remove", "--force", "--allow-principal", "User:alice",
                  "--operation", "Read", "--topic", t)
    assert removed.stdout == ""
    assert run("kafka-acls", "--bootstrap-server", bs, "--list", "--topic", t).stdout == ""
    # --remove of a whole resource pattern (any principal, any operation)
    run("kafka-acls", "--bootstrap-server", bs, "--remove", "--force", "--topic", f"{t}-",
        "--resource-pattern-type", "prefixed", "--group", f"{t}-g")
    rest = _acl_blocks(run("kafka-acls", "--bootstrap-server", bs, "--list").stdout)
    assert not any(t in block for block in rest), rest


def test_create_acls_validation(acl_broker: AclBroker) -> None:
    bs = acl_broker.bootstrap
    results = [*create_acls(bs, (CLUSTER, "other", LITERAL, ANON, "*", DESCRIBE, ALLOW)),
               *create_acls(bs, (TOPIC, "", LITERAL, ANON, "*", READ, ALLOW)),
               *create_acls(bs, (TOPIC, "t", LITERAL, ANON, "*", 1, ALLOW))]  # operation ANY
    assert results == [
        (INVALID_REQUEST, "The only valid name for the CLUSTER resource is kafka-cluster"),
        (INVALID_REQUEST, "Invalid empty resource name"),
        (-1, None),  # ANY in a creation fails the whole request: UNKNOWN_SERVER_ERROR
    ]


def test_acls_survive_a_restart(acl_broker: AclBroker) -> None:
    require_tools()
    t = unique_topic("acl-restart")
    deny(acl_broker.bootstrap, TOPIC, t, READ)
    acl_broker.restart()
    listed = run("kafka-acls", "--bootstrap-server", acl_broker.bootstrap, "--list", "--topic", t)
    assert listed.stdout == (
        f"Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name={t}, patternType=LITERAL)`:\n"
        f"\t(principal={ANON}, host=*, operation=READ, permissionType=DENY)\n\n")
    assert fetch_code(acl_broker.bootstrap, t)[0] == TOPIC_AUTHORIZATION_FAILED


# -- enforcement ----------------------------------------------------------------------------


def test_denied_read_on_a_topic(acl_broker: AclBroker) -> None:
    bs = acl_broker.bootstrap
    t = unique_topic("acl-deny")
    make_topic(bs, t)
    assert produce_code(bs, t) == 0
    code, records = fetch_code(bs, t)
    assert code == 0 and records
    deny(bs, TOPIC, t, READ)
    # READ denied: no data. The topic has ACLs now and none allows anything, so WRITE and
    # DESCRIBE (ListOffsets, Metadata) are refused too (a DENY of READ does not deny DESCRIBE:
    # the missing ALLOW does).
    assert fetch_code(bs, t) == (TOPIC_AUTHORIZATION_FAILED, b"")
    assert produce_code(bs, t) == TOPIC_AUTHORIZATION_FAILED
    assert list_offsets_code(bs, t) == TOPIC_AUTHORIZATION_FAILED
    assert metadata(bs, [t]) == {t: TOPIC_AUTHORIZATION_FAILED}
    assert t not in metadata(bs, None)
    with RawConn(bs) as c:  # DescribeTopicPartitions (kafka-topics --describe) alike
        named = c.request(75, 0, {"topics": [{"name": t}], "response_partition_limit": 2000, "cursor": None})
        assert [(x["name"], x["error_code"]) for x in named["topics"]] == [(t, TOPIC_AUTHORIZATION_FAILED)]
        listed = c.request(75, 0, {"topics": [], "response_partition_limit": 2000, "cursor": None})
        assert t not in {x["name"] for x in listed["topics"]}
    # ALLOW DESCRIBE and WRITE: Metadata, ListOffsets and Produce come back; READ stays denied.
    allow(bs, TOPIC, t, DESCRIBE)
    allow(bs, TOPIC, t, WRITE)
    assert metadata(bs, [t]) == {t: 0}
    assert t in metadata(bs, None)
    assert list_offsets_code(bs, t) == 0
    assert produce_code(bs, t) == 0
    assert fetch_code(bs, t)[0] == TOPIC_AUTHORIZATION_FAILED


def test_prefixed_allow_and_deny_over_allow(acl_broker: AclBroker) -> None:
    bs = acl_broker.bootstrap
    prefix = unique_topic("acl-pre") + "-"
    open_topic, secret = prefix + "open", prefix + "secret"
    allow(bs, TOPIC, prefix, ALL, PREFIXED)
    deny(bs, TOPIC, secret, READ)
    for t in (open_topic, secret):
        make_topic(bs, t)
        assert produce_code(bs, t) == 0  # ALL on the prefix allows WRITE; the DENY is of READ only
    assert fetch_code(bs, open_topic)[0] == 0
    assert fetch_code(bs, secret) == (TOPIC_AUTHORIZATION_FAILED, b"")  # DENY wins over the ALLOW
    assert metadata(bs, [secret]) == {secret: 0}  # DESCRIBE: only ALLOW ALL applies


def test_denied_group(acl_broker: AclBroker) -> None:
    bs = acl_broker.bootstrap
    t = unique_topic("acl-grp-topic")
    group = unique_topic("acl-grp")
    make_topic(bs, t)
    assert produce_code(bs, t) == 0
    deny(bs, GROUP, group, READ)
    with RawConn(bs) as c:
        found = c.request(10, 4, {"key_type": 0, "coordinator_keys": [group]})
        # FindCoordinator needs DESCRIBE on the group: the group has ACLs, none allows it.
        assert found["coordinators"][0]["error_code"] == GROUP_AUTHORIZATION_FAILED
        joined = c.request(11, 5, {"group_id": group, "session_timeout_ms": 10000, "rebalance_timeout_ms": 10000,
                                   "member_id": "", "group_instance_id": None, "protocol_type": "consumer",
                                   "protocols": [{"name": "range", "metadata": b""}]})
        assert joined["error_code"] == GROUP_AUTHORIZATION_FAILED
        committed = c.request(8, 8, {"group_id": group, "generation_id_or_member_epoch": -1, "member_id": "",
                                     "group_instance_id": None, "topics": [
                                         {"name": t, "partitions": [{"partition_index": 0, "committed_offset": 1,
                                                                     "committed_leader_epoch": -1,
                                                                     "committed_metadata": None}]}]})
        assert committed["topics"][0]["partitions"][0]["error_code"] == GROUP_AUTHORIZATION_FAILED
        fetched = c.request(9, 8, {"groups": [{"group_id": group, "topics": None}], "require_stable": False})
        assert fetched["groups"][0]["error_code"] == GROUP_AUTHORIZATION_FAILED
        described = c.request(15, 5, {"groups": [group], "include_authorized_operations": False})
        assert described["groups"][0]["error_code"] == GROUP_AUTHORIZATION_FAILED
        deleted = c.request(42, 2, {"groups_names": [group]})
        assert deleted["results"][0]["error_code"] == GROUP_AUTHORIZATION_FAILED
        # KIP-848's APIs alike
        beat = c.request(68, 0, {"group_id": group, "member_id": "", "member_epoch": 0, "instance_id": None,
                                 "rack_id": None, "rebalance_timeout_ms": 30000, "subscribed_topic_names": [t],
                                 "server_assignor": None, "topic_partitions": []})
        assert beat["error_code"] == GROUP_AUTHORIZATION_FAILED
        cdesc = c.request(69, 0, {"group_ids": [group], "include_authorized_operations": False})
        assert cdesc["groups"][0]["error_code"] == GROUP_AUTHORIZATION_FAILED


class RawFrom(RawConn):
    """A raw connection from another loopback address (host-specific ACLs)."""

    def __init__(self, bootstrap: str, source: str) -> None:
        host, port = split_hostport(bootstrap)
        self.sock = socket.create_connection((host, port), timeout=15.0, source_address=(source, 0))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.timeout = 15.0
        self.client_id = "compat-raw"


OTHER_HOST = "127.0.0.2"
CREATE, DELETE, ALTER, DESCRIBE_CONFIGS, ALTER_CONFIGS = 5, 6, 7, 10, 11
CLUSTER_AUTHORIZATION_FAILED = 31
ELECTION_NOT_NEEDED = 84


def _elect_partition_0(topic: str) -> dict:
    """An ElectLeaders v2 body: a preferred election of the topic's partition 0."""
    return {"election_type": 0, "topic_partitions": [{"topic": topic, "partitions": [0]}], "timeout_ms": 30000}


def test_cluster_and_admin_apis_per_host(acl_broker: AclBroker) -> None:
    """DENY ACLs of one client host: the same principal is refused from 127.0.0.2 what it may do
    from 127.0.0.1 — the ACL APIs (CLUSTER_AUTHORIZATION_FAILED), CreateTopics without CREATE
    and DeleteTopics without DELETE (on the cluster or the topic, either does), configs without
    DESCRIBE_CONFIGS / ALTER_CONFIGS."""
    bs = acl_broker.bootstrap
    t = unique_topic("acl-adm")
    make_topic(bs, t)
    # The cluster gets ACLs: everything for ANONYMOUS from anywhere (the reference broker's own
    # node connects as ANONYMOUS too), minus these from 127.0.0.2.
    assert create_acls(bs, (CLUSTER, "kafka-cluster", LITERAL, ANON, "*", ALL, ALLOW),
                       *((CLUSTER, "kafka-cluster", LITERAL, ANON, OTHER_HOST, op, DENY)
                         for op in (ALTER, DESCRIBE, CREATE, DELETE, ALTER_CONFIGS)),
                       (TOPIC, t, LITERAL, ANON, OTHER_HOST, DELETE, DENY),
                       (TOPIC, t, LITERAL, ANON, OTHER_HOST, DESCRIBE_CONFIGS, DENY),
                       (TOPIC, t, LITERAL, ANON, "*", READ, ALLOW),
                       (TOPIC, t + "-new", PREFIXED, ANON, OTHER_HOST, CREATE, DENY)) == [(0, "")] * 10
    acl = {"resource_type": TOPIC, "resource_name": t, "resource_pattern_type": LITERAL, "principal": ANON,
           "host": "*", "operation": WRITE, "permission_type": ALLOW}
    flt = {"resource_type_filter": TOPIC, "resource_name_filter": t, "pattern_type_filter": LITERAL,
           "principal_filter": None, "host_filter": None, "operation": 1, "permission_type": 1}
    with RawFrom(bs, OTHER_HOST) as c:
        assert c.request(30, 3, {"creations": [acl]})["results"][0]["error_code"] == CLUSTER_AUTHORIZATION_FAILED
        assert c.request(29, 3, flt)["error_code"] == CLUSTER_AUTHORIZATION_FAILED
        deleted = c.request(31, 3, {"filters": [flt]})
        assert deleted["filter_results"][0]["error_code"] == CLUSTER_AUTHORIZATION_FAILED
        created = c.request(19, 7, {"topics": [{"name": t + "-new1", "num_partitions": 1, "replication_factor": 1,
                                                "assignments": [], "configs": []}],
                                    "timeout_ms": 30000, "validate_only": False})
        assert [(x["error_code"], x["error_message"]) for x in created["topics"]] == \
            [(TOPIC_AUTHORIZATION_FAILED, "Authorization failed.")]
        dropped = c.request(20, 6, {"topics": [{"name": t, "topic_id": bytes(16)}], "timeout_ms": 30000})
        assert dropped["responses"][0]["error_code"] == TOPIC_AUTHORIZATION_FAILED
        described = c.request(32, 4, {"resources": [{"resource_type": TOPIC, "resource_name": t,
                                                     "configuration_keys": None}],
                                      "include_synonyms": False, "include_documentation": False})
        assert described["results"][0]["error_code"] == TOPIC_AUTHORIZATION_FAILED
        altered = c.request(44, 1, {"resources": [{"resource_type": 4, "resource_name": "", "configs": [
            {"name": "log.cleaner.threads", "config_operation": 0, "value": "2"}]}], "validate_only": True})
        assert altered["responses"][0]["error_code"] == CLUSTER_AUTHORIZATION_FAILED
        elected = c.request(43, 2, _elect_partition_0(t))  # ElectLeaders: ALTER on the cluster
        assert elected["error_code"] == CLUSTER_AUTHORIZATION_FAILED
        assert [(r["topic"], [(p["partition_id"], p["error_code"]) for p in r["partition_result"]])
                for r in elected["replica_election_results"]] == [(t, [(0, CLUSTER_AUTHORIZATION_FAILED)])]
    with RawConn(bs) as c:  # from 127.0.0.1 the same requests pass the authorizer
        elected = c.request(43, 2, _elect_partition_0(t))  # one broker: its only replica leads already
        assert elected["error_code"] == 0
        assert [(p["partition_id"], p["error_code"]) for r in elected["replica_election_results"]
                for p in r["partition_result"]] == [(0, ELECTION_NOT_NEEDED)]
        listed = c.request(29, 3, flt)
        assert listed["error_code"] == 0
        assert sorted((a["host"], a["operation"], a["permission_type"]) for r in listed["resources"]
                      for a in r["acls"]) == [("*", READ, ALLOW), (OTHER_HOST, DELETE, DENY),
                                              (OTHER_HOST, DESCRIBE_CONFIGS, DENY)]
        described = c.request(32, 4, {"resources": [{"resource_type": TOPIC, "resource_name": t,
                                                     "configuration_keys": ["cleanup.policy"]}],
                                      "include_synonyms": False, "include_documentation": False})
        assert described["results"][0]["error_code"] == TOPIC_AUTHORIZATION_FAILED  # no ALLOW of it anywhere
        meta = c.request(3, 12, {"topics": [{"name": t, "topic_id": bytes(16)}], "allow_auto_topic_creation": False,
                                 "include_topic_authorized_operations": True})
        [entry] = meta["topics"]
        assert entry["error_code"] == 0
        assert entry["topic_authorized_operations"] == (1 << READ) | (1 << DESCRIBE)


def _scram_upsert(name: str, iterations: int, password: bytes) -> dict:
    """An AlterUserScramCredentials v0 upsertion of a SCRAM-SHA-512 credential."""
    import hashlib

    salt = b"attacker-salt-16"
    return {"name": name, "mechanism": 2, "iterations": iterations, "salt": salt,
            "salted_password": hashlib.pbkdf2_hmac("sha512", password, salt, iterations)}


def test_scram_credential_apis_need_the_cluster(acl_broker: AclBroker) -> None:
    """KIP-554: AlterUserScramCredentials needs ALTER on the cluster, DescribeUserScramCredentials
    DESCRIBE on it (issue 25: any client could replace the super user's credential, then log in
    as it). A refused request changes nothing; every user named gets the refusal."""
    bs = acl_broker.bootstrap
    victim = unique_topic("scram-victim")
    assert create_acls(bs, (CLUSTER, "kafka-cluster", LITERAL, ANON, "*", ALL, ALLOW),
                       *((CLUSTER, "kafka-cluster", LITERAL, ANON, OTHER_HOST, op, DENY)
                         for op in (ALTER, DESCRIBE))) == [(0, "")] * 3
    with RawConn(bs) as c:  # from 127.0.0.1 the owner sets the credential
        made = c.request(51, 0, {"deletions": [], "upsertions": [_scram_upsert(victim, 8192, b"owner")]})
        assert [(r["user"], r["error_code"]) for r in made["results"]] == [(victim, 0)]
    with RawFrom(bs, OTHER_HOST) as c:
        upserted = c.request(51, 0, {"deletions": [], "upsertions": [_scram_upsert(victim, 4096, b"attacker")]})
        # Kafka's message names the request (its controller's toString of it): its end is what is kept
        assert [(r["user"], r["error_code"], r["error_message"].endswith(" needs ALTER permission."))
                for r in upserted["results"]] == [(victim, CLUSTER_AUTHORIZATION_FAILED, True)]
        deleted = c.request(51, 0, {"deletions": [{"name": victim, "mechanism": 2}], "upsertions": []})
        assert [(r["user"], r["error_code"], r["error_message"].endswith(" needs ALTER permission."))
                for r in deleted["results"]] == [(victim, CLUSTER_AUTHORIZATION_FAILED, True)]
        described = c.request(50, 0, {"users": [{"name": victim}]})
        # Kafka's error answer has a result per user asked for, its name left empty
        assert (described["error_code"], described["error_message"]) == (CLUSTER_AUTHORIZATION_FAILED, None)
        assert [(r["user"], r["error_code"], r["credential_infos"]) for r in described["results"]] == \
            [("", CLUSTER_AUTHORIZATION_FAILED, [])]
    with RawConn(bs) as c:  # the owner's credential is as it was
        described = c.request(50, 0, {"users": [{"name": victim}]})
        assert described["error_code"] == 0
        assert [(r["user"], r["error_code"], [(i["mechanism"], i["iterations"]) for i in r["credential_infos"]])
                for r in described["results"]] == [(victim, 0, [(2, 8192)])]


TRANSACTIONAL_ID, TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 5, 53


def test_denied_transactional_id(acl_broker: AclBroker) -> None:
    """InitProducerId and transactional Produce need WRITE on the transactional id."""
    from tmqgate.protocol.records import build_batch

    bs = acl_broker.bootstrap
    t = unique_topic("acl-txn")
    txn = unique_topic("acl-txn-id")
    make_topic(bs, t)
    deny(bs, TRANSACTIONAL_ID, txn, WRITE)
    with RawConn(bs) as c:
        init = c.request(22, 5, {"transactional_id": txn, "transaction_timeout_ms": 60000,
                                 "producer_id": -1, "producer_epoch": -1})
        assert (init["error_code"], init["producer_id"]) == (TRANSACTIONAL_ID_AUTHORIZATION_FAILED, -1)
        batch = build_batch([(None, b"v", [], int(time.time() * 1000))], producer_id=1000, producer_epoch=0,
                            base_sequence=0, is_transactional=True)
        body = c.request(0, 9, {"transactional_id": txn, "acks": -1, "timeout_ms": 10000, "topic_data": [
            {"name": t, "partition_data": [{"index": 0, "records": batch}]}]})
        assert body["responses"][0]["partition_responses"][0]["error_code"] == TRANSACTIONAL_ID_AUTHORIZATION_FAILED


def test_transaction_apis_acls(acl_broker: AclBroker) -> None:
    """The transaction APIs check what KafkaApis checks: WRITE on the transactional id
    (AddPartitionsToTxn, AddOffsetsToTxn, EndTxn), WRITE on each topic added (one refused topic
    fails the request: the others are not attempted), READ on the group (AddOffsetsToTxn),
    DESCRIBE on the id (DescribeTransactions; ListTransactions leaves the others out) and on the
    topics DescribeTransactions shows."""
    from .test_txn_coordinator import (
        OPERATION_NOT_ATTEMPTED,
        _add,
        _coordinator_ready,
        _describe,
        _end,
        _init,
    )

    bs = acl_broker.bootstrap
    denied, hidden, shown = (unique_topic(p) for p in ("acl-txw", "acl-txd", "acl-txo"))
    for t in (denied, hidden, shown):
        make_topic(bs, t)
    deny(bs, TOPIC, denied, WRITE)
    allow(bs, TOPIC, hidden, WRITE)
    deny(bs, TOPIC, hidden, DESCRIBE)
    tid, secret, blocked = (unique_topic(p) for p in ("acl-tid", "acl-tid-secret", "acl-tid-blocked"))
    group = unique_topic("acl-txg")
    deny(bs, GROUP, group, READ)
    allow(bs, TRANSACTIONAL_ID, secret, WRITE)  # which implies DESCRIBE, but the DENY wins
    deny(bs, TRANSACTIONAL_ID, secret, DESCRIBE)
    deny(bs, TRANSACTIONAL_ID, blocked, WRITE)
    with RawConn(bs) as c:
        _coordinator_ready(c, tid)
        init = _init(c, tid)
        pid, epoch = init["producer_id"], init["producer_epoch"]
        assert init["error_code"] == 0, init
        assert produce_code(bs, shown) == 0  # the topics have leaders (the reference broker's take a moment)
        assert _add(c, tid, pid, epoch, {denied: [0], shown: [0]}) == {
            (denied, 0): TOPIC_AUTHORIZATION_FAILED, (shown, 0): OPERATION_NOT_ATTEMPTED}
        assert _add(c, tid, pid, epoch, {hidden: [0], shown: [0]}) == {(hidden, 0): 0, (shown, 0): 0}
        offsets = c.request(25, 3, {"transactional_id": tid, "producer_id": pid, "producer_epoch": epoch,
                                    "group_id": group})
        assert offsets["error_code"] == GROUP_AUTHORIZATION_FAILED
        described = _describe(c, tid)
        assert described["transaction_state"] == "Ongoing"
        assert [t["topic"] for t in described["topics"]] == [shown]  # no DESCRIBE on `hidden`

        assert _init(c, secret)["error_code"] == 0  # WRITE is allowed, DESCRIBE is not
        assert _describe(c, secret)["error_code"] == TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        listed = {s["transactional_id"] for s in c.request(66, 1, {
            "state_filters": [], "producer_id_filters": [], "duration_filter": -1})["transaction_states"]}
        assert tid in listed and secret not in listed

        assert _init(c, blocked)["error_code"] == TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        assert _add(c, blocked, pid, epoch, {shown: [0]}) == {(shown, 0): TRANSACTIONAL_ID_AUTHORIZATION_FAILED}
        assert _end(c, blocked, pid, epoch, commit=True) == TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        assert _end(c, tid, pid, epoch, commit=False) == 0


def test_created_topic_configs_need_describe_configs(acl_broker: AclBroker) -> None:
    """CreateTopics makes a topic whose configs the client may not see: created (error 0), but
    no configs, partitions or replication factor, and topic_config_error_code 29."""
    bs = acl_broker.bootstrap
    prefix = unique_topic("acl-dc") + "-"
    deny(bs, TOPIC, prefix, DESCRIBE_CONFIGS, PREFIXED)
    with RawConn(bs) as c:
        body = c.request(19, 7, {"topics": [{"name": prefix + "x", "num_partitions": 2, "replication_factor": 1,
                                             "assignments": [], "configs": []}],
                                 "timeout_ms": 30000, "validate_only": False})
    [r] = body["topics"]
    assert (r["error_code"], r["topic_config_error_code"], r["num_partitions"], r["replication_factor"],
            r["configs"]) == (0, TOPIC_AUTHORIZATION_FAILED, -1, -1, [])
    assert r["topic_id"] != bytes(16)


def test_describe_producers_needs_read_on_the_topic(acl_broker: AclBroker) -> None:
    """DescribeProducers (what `kafka-transactions describe-producers` sends) answers a topic
    the client may not READ with TOPIC_AUTHORIZATION_FAILED for its partitions."""
    bs = acl_broker.bootstrap
    t = unique_topic("acl-producers")
    make_topic(bs, t)
    deny(bs, TOPIC, t, READ)
    with RawConn(bs) as c:
        body = c.request(61, 0, {"topics": [{"name": t, "partition_indexes": [0]}]})
    [p] = body["topics"][0]["partitions"]
    assert (p["error_code"], p["active_producers"]) == (TOPIC_AUTHORIZATION_FAILED, [])


def _topic_id(bootstrap: str, topic: str) -> bytes:
    with RawConn(bootstrap) as c:
        md = c.request(3, 12, {"topics": [{"name": topic, "topic_id": b"\0" * 16}],
                               "allow_auto_topic_creation": False, "include_topic_authorized_operations": False})
    return md["topics"][0]["topic_id"]


def _share_fetch(c: RawConn, group: str, topic_id: bytes) -> dict:  # type: ignore[type-arg]
    return c.request(78, 1, {"group_id": group, "member_id": "acl-member-1", "share_session_epoch": 0,
                             "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20, "max_records": 10,
                             "batch_size": 10, "topics": [{"topic_id": topic_id, "partitions": [
                                 {"partition_index": 0, "acknowledgement_batches": []}]}],
                             "forgotten_topics_data": []})


def test_share_group_apis_need_the_group_and_the_topic(acl_broker: AclBroker) -> None:
    """Share groups (KIP-932): READ on the group for ShareGroupHeartbeat, ShareFetch and
    ShareAcknowledge (the whole request refused), DESCRIBE for ShareGroupDescribe; DESCRIBE on
    a subscribed topic, READ on a fetched one (its partitions refused)."""
    bs = acl_broker.bootstrap
    t, open_topic = unique_topic("acl-share-topic"), unique_topic("acl-share-open")
    group, open_group = unique_topic("acl-share"), unique_topic("acl-share-ok")
    make_topic(bs, t)
    make_topic(bs, open_topic)
    tid = _topic_id(bs, t)
    deny(bs, GROUP, group, READ)
    deny(bs, TOPIC, t, ALL)
    with RawConn(bs) as c:
        beat = c.request(76, 1, {"group_id": group, "member_id": "acl-member-1", "member_epoch": 0,
                                 "rack_id": None, "subscribed_topic_names": [open_topic]})
        assert beat["error_code"] == GROUP_AUTHORIZATION_FAILED
        assert _share_fetch(c, group, tid)["error_code"] == GROUP_AUTHORIZATION_FAILED
        acked = c.request(79, 1, {"group_id": group, "member_id": "acl-member-1", "share_session_epoch": 1,
                                  "topics": []})
        assert acked["error_code"] == GROUP_AUTHORIZATION_FAILED
        described = c.request(77, 1, {"group_ids": [group], "include_authorized_operations": False})
        assert described["groups"][0]["error_code"] == GROUP_AUTHORIZATION_FAILED
        # a group it may use, a topic it may not
        beat = c.request(76, 1, {"group_id": open_group, "member_id": "acl-member-1", "member_epoch": 0,
                                 "rack_id": None, "subscribed_topic_names": [t]})
        assert beat["error_code"] == TOPIC_AUTHORIZATION_FAILED
        fetched = _share_fetch(c, open_group, tid)
        assert fetched["error_code"] == 0, fetched
        [part] = [p for r in fetched["responses"] for p in r["partitions"]]
        assert (part["partition_index"], part["error_code"]) == (0, TOPIC_AUTHORIZATION_FAILED)
