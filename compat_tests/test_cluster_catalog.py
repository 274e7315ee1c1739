"""The cluster's catalog beside its topics (issue 16, step 1): topic, broker-default and group
configs, client quotas, ACLs and SCRAM users are the cluster's — changed through any broker, answered and enforced by
every broker, and a removal is removed everywhere. Both targets: three tmqgate nodes with etcd, the
reference Kafka's three brokers and KRaft controller, each with an authorizer and
`allow.everyone.if.no.acl.found` (every connection here is User:ANONYMOUS on PLAINTEXT)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from .clusters import metadata, three_brokers
from .helpers import unique_topic, wait_until
from .raw import RawConn

# kills brokers, runs a soak or starts a cluster: one such module at a time (compat_tests/serial.py)
pytestmark = pytest.mark.serial

TOPIC, BROKER, GROUP, LITERAL, DESCRIBE, DENY = 2, 4, 32, 3, 8, 2  # Kafka's wire codes
SET = 0  # IncrementalAlterConfigs' operation
SCRAM_SHA_256 = 1
TOPIC_AUTHORIZATION_FAILED = 29
RESOURCE_NOT_FOUND = 91
ANON = "User:ANONYMOUS"


def _request(bootstrap: str, api: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
    with RawConn(bootstrap) as conn:
        return conn.request(api, version, body)


def _config(bootstrap: str, rtype: int, name: str, key: str) -> str | None:
    """A config of a resource as this broker describes it (DescribeConfigs v4; None: not set)."""
    answer = _request(bootstrap, 32, 4, {"resources": [{"resource_type": rtype, "resource_name": name,
                                                         "configuration_keys": [key]}],
                                         "include_synonyms": False, "include_documentation": False})
    [result] = answer["results"]
    assert result["error_code"] == 0, result
    return next((c["value"] for c in result["configs"] if c["name"] == key), None)


def _alter_config(bootstrap: str, rtype: int, name: str, key: str, value: str) -> None:
    answer = _request(bootstrap, 44, 1, {"resources": [{"resource_type": rtype, "resource_name": name, "configs": [
        {"name": key, "config_operation": SET, "value": value}]}], "validate_only": False})
    assert [r["error_code"] for r in answer["responses"]] == [0], answer


def _quota(bootstrap: str, client: str) -> dict[str, float]:
    """The client id's quotas as this broker describes them (DescribeClientQuotas v1)."""
    answer = _request(bootstrap, 48, 1, {"strict": True, "components": [
        {"entity_type": "client-id", "match_type": 0, "match": client}]})
    assert answer["error_code"] == 0, answer
    return {v["key"]: v["value"] for e in answer["entries"] or [] for v in e["values"]}


def _topic_error(bootstrap: str, topic: str) -> int:
    [t] = metadata(bootstrap, [topic])["topics"]
    return int(t["error_code"])


def _acl(topic: str) -> dict[str, Any]:
    return {"resource_type": TOPIC, "resource_name": topic, "resource_pattern_type": LITERAL, "principal": ANON,
            "host": "*", "operation": DESCRIBE, "permission_type": DENY}


def _scram_iterations(bootstrap: str, user: str) -> list[int] | int:
    """The user's SCRAM-SHA-256 iterations as this broker describes them, or its error code."""
    [result] = _request(bootstrap, 50, 0, {"users": [{"name": user}]})["results"]
    if result["error_code"]:
        return int(result["error_code"])
    return [c["iterations"] for c in result["credential_infos"] if c["mechanism"] == SCRAM_SHA_256]


def test_configs_acls_and_users_are_the_clusters(pytestconfig: pytest.Config, target: str, tmp_path: Path) -> None:
    settings = {"authorizer": "acl", "allow_everyone_if_no_acl_found": True}
    with three_brokers(pytestconfig, target, tmp_path, settings=settings) as nodes:
        b = {n: nodes[n].bootstrap for n in (0, 1, 2)}
        topic = unique_topic("catalog")
        admin = AdminClient({"bootstrap.servers": b[0]})
        admin.create_topics([NewTopic(topic, 3, 3)])[topic].result(60)
        for n in b:
            wait_until(lambda n=n: _topic_error(b[n], topic), 30, 0.2, f"{topic} on broker {n}",
                       ok=lambda e: e == 0)

        # configs altered through one broker — a topic's, the brokers' cluster default, a group's —
        # and a client quota: every broker describes them
        _alter_config(b[1], TOPIC, topic, "retention.ms", "123456")
        _alter_config(b[2], BROKER, "", "log.retention.ms", "7200000")
        group = unique_topic("group")
        _alter_config(b[0], GROUP, group, "consumer.session.timeout.ms", "50000")
        client = unique_topic("client")
        answer = _request(b[1], 49, 1, {"validate_only": False, "entries": [{
            "entity": [{"entity_type": "client-id", "entity_name": client}],
            "ops": [{"key": "producer_byte_rate", "value": 1048576.0, "remove": False}]}]})
        assert [e["error_code"] for e in answer["entries"]] == [0], answer
        for n in b:
            wait_until(lambda n=n: _config(b[n], TOPIC, topic, "retention.ms"), 30, 0.2,
                       f"retention.ms on broker {n}", ok=lambda v: v == "123456")
            wait_until(lambda n=n: _config(b[n], BROKER, "", "log.retention.ms"), 30, 0.2,
                       f"the brokers' default log.retention.ms on broker {n}",
                       ok=lambda v: v == "7200000")
            wait_until(lambda n=n: _config(b[n], GROUP, group, "consumer.session.timeout.ms"), 30, 0.2,
                       f"the group's session timeout on broker {n}", ok=lambda v: v == "50000")
            wait_until(lambda n=n: _quota(b[n], client), 30, 0.2, f"the client's quota on broker {n}",
                       ok=lambda q: q == {"producer_byte_rate": 1048576.0})
        # removed through another broker: gone from every broker
        answer = _request(b[0], 49, 1, {"validate_only": False, "entries": [{
            "entity": [{"entity_type": "client-id", "entity_name": client}],
            "ops": [{"key": "producer_byte_rate", "value": 0.0, "remove": True}]}]})
        assert [e["error_code"] for e in answer["entries"]] == [0], answer
        for n in b:
            wait_until(lambda n=n: _quota(b[n], client), 30, 0.2, f"the client's quota gone from broker {n}",
                       ok=lambda q: q == {})

        # an ACL made through broker 2 is enforced by every broker; removed through broker 0, by none
        answer = _request(b[2], 30, 3, {"creations": [_acl(topic)]})
        assert [r["error_code"] for r in answer["results"]] == [0], answer
        for n in b:
            wait_until(lambda n=n: _topic_error(b[n], topic), 30, 0.2, f"DESCRIBE denied by broker {n}",
                       ok=lambda e: e == TOPIC_AUTHORIZATION_FAILED)
        described = _request(b[1], 29, 3, {"resource_type_filter": TOPIC, "resource_name_filter": topic,
                                           "pattern_type_filter": LITERAL, "principal_filter": None,
                                           "host_filter": None, "operation": 1, "permission_type": 1})
        assert [(r["resource_name"], [(a["principal"], a["operation"], a["permission_type"]) for a in r["acls"]])
                for r in described["resources"]] == [(topic, [(ANON, DESCRIBE, DENY)])], described
        acl = _acl(topic)
        answer = _request(b[0], 31, 3, {"filters": [{
            "resource_type_filter": TOPIC, "resource_name_filter": topic, "pattern_type_filter": LITERAL,
            "principal_filter": ANON, "host_filter": "*", "operation": acl["operation"],
            "permission_type": acl["permission_type"]}]})
        assert [len(r["matching_acls"]) for r in answer["filter_results"]] == [1], answer
        for n in b:
            wait_until(lambda n=n: _topic_error(b[n], topic), 30, 0.2, f"DESCRIBE allowed again by broker {n}",
                       ok=lambda e: e == 0)

        # a SCRAM user made through broker 0: every broker describes it; deleted through broker 2: none
        user = unique_topic("user").replace("-", "_")
        answer = _request(b[0], 51, 0, {"deletions": [], "upsertions": [{
            "name": user, "mechanism": SCRAM_SHA_256, "iterations": 8192, "salt": os.urandom(16),
            "salted_password": os.urandom(32)}]})
        assert [r["error_code"] for r in answer["results"]] == [0], answer
        for n in b:
            wait_until(lambda n=n: _scram_iterations(b[n], user), 30, 0.2, f"{user} on broker {n}",
                       ok=lambda v: v == [8192])
        answer = _request(b[2], 51, 0, {"upsertions": [], "deletions": [{"name": user, "mechanism": SCRAM_SHA_256}]})
        assert [r["error_code"] for r in answer["results"]] == [0], answer
        for n in b:
            wait_until(lambda n=n: _scram_iterations(b[n], user), 30, 0.2, f"{user} gone from broker {n}",
                       ok=lambda v: v == RESOURCE_NOT_FOUND)
