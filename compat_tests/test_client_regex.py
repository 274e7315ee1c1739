"""Regular expressions from clients (issue 25, points 3 and 4): ListTransactions v2's
``transactional_id_pattern`` and KIP-848's ``subscribed_topic_regex`` run on a linear-time
engine (Kafka: RE2/J), and a regex subscription resolves only to the topics the member may
DESCRIBE (Kafka 4.1, KAFKA-18813) — on both brokers, configured the same: SASL (PLAIN over
SASL_PLAINTEXT) and an authorizer with ``allow.everyone.if.no.acl.found`` false, super users
``User:ANONYMOUS`` (the PLAINTEXT listener: admin work, the reference broker's own node) and admin.

A catastrophic pattern for a backtracking engine, ``(.*.*)*X`` against 24 characters without
an X, froze tmqgate's event loop for hours under Python's ``re`` (11.6 s at 15 characters,
×4 per character): every client waited. Here the pattern is answered, with fullmatch semantics,
and another connection's ApiVersions is answered too (within RawConn's timeout; the stall
figures are in the issue's closing note, not asserted). A backreference is not RE2 syntax:
INVALID_REGULAR_EXPRESSION, as Kafka answers.
"""

from __future__ import annotations

import base64
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from .group_helpers import consumer_heartbeat, create_topic, unique_name
from .helpers import wait_until
from .raw import RawConn
from .secure import SecureBroker, start_secure_broker
from .test_acls import ALLOW, DESCRIBE, GROUP, LITERAL, READ, TOPIC, create_acls
from .test_txn_coordinator import LIST_TXNS, NONE, _coordinator_ready, _init

USERS = {"admin": "admin-secret", "alice": "alice-secret", "bob": "bob-secret"}
ALICE, BOB = "User:alice", "User:bob"
CONSUMER_GROUP_DESCRIBE = 69
TOPIC_AUTHORIZATION_FAILED = 29
INVALID_REGULAR_EXPRESSION = 128
CATASTROPHIC = "(.*.*)*X"  # exponential for a backtracking engine on a text without X
SLOW_TAIL = "a" * 24


@pytest.fixture(scope="module")
def sb(tmp_path_factory: pytest.TempPathFactory, target: str, pytestconfig: pytest.Config) -> Iterator[SecureBroker]:
    if pytestconfig.getoption("--bootstrap"):
        pytest.skip("--bootstrap given: these tests start a broker with SASL and an authorizer")
    if target == "kafka":
        config: dict[str, Any] = {"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                                  "super.users": "User:ANONYMOUS;User:admin"}
    else:
        config = {"authorizer": "acl", "super_users": ["User:ANONYMOUS", "User:admin"]}
    b = start_secure_broker(target, tmp_path_factory.mktemp(f"{target}-regex"), users=USERS,
                            mechanisms=("PLAIN", "SCRAM-SHA-512"), extra_config=config)
    try:
        yield b
    finally:
        b.proc.stop()


def _login(sb: SecureBroker, user: str) -> RawConn:
    """A raw connection on the SASL_PLAINTEXT listener, authenticated as `user` with PLAIN."""
    c = RawConn(sb.sasl_bootstrap)
    try:
        assert c.request(17, 1, {"mechanism": "PLAIN"})["error_code"] == 0
        body = c.request(36, 2, {"auth_bytes": f"\0{user}\0{USERS[user]}".encode()})
        assert body["error_code"] == 0, body
    except BaseException:
        c.close()
        raise
    return c


def _list(c: RawConn, pattern: str) -> dict[str, Any]:
    return c.request(LIST_TXNS, 2, {"state_filters": [], "producer_id_filters": [], "duration_filter": -1,
                                    "transactional_id_pattern": pattern})


def _member_id() -> str:
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def _assigned(beat: dict[str, Any], names: dict[bytes, str]) -> set[str]:
    return {names[bytes(tp["topic_id"])] for tp in (beat["assignment"] or {}).get("topic_partitions") or []}


def _topic_ids(c: RawConn, topics: list[str]) -> dict[bytes, str]:
    meta = c.request(3, 12, {"topics": [{"name": t, "topic_id": bytes(16)} for t in topics],
                             "allow_auto_topic_creation": False, "include_topic_authorized_operations": False})
    return {bytes(t["topic_id"]): t["name"] for t in meta["topics"]}


def _group_coordinator_ready(sb: SecureBroker, group: str) -> None:
    """FindCoordinator for the group as the super user (the reference broker makes
    __consumer_offsets on the first one; until then a heartbeat answers NOT_COORDINATOR)."""
    with RawConn(sb.bootstrap) as c:
        wait_until(lambda: c.request(10, 4, {"key_type": 0, "coordinator_keys": [group]}), 60, 0.2,
                   f"the coordinator of {group}", ok=lambda b: b["coordinators"][0]["error_code"] == 0)


def _join_until_assigned(sb: SecureBroker, c: RawConn, group: str, regex: str, names: dict[bytes, str],
                         timeout: float = 60.0) -> tuple[str, int, set[str]]:
    """Join with `regex` and heartbeat until an assignment names a topic: (member, epoch, topics)."""
    _group_coordinator_ready(sb, group)
    beat = consumer_heartbeat(c, {"group_id": group, "member_id": _member_id(), "member_epoch": 0,
                          "rebalance_timeout_ms": 30_000, "subscribed_topic_names": [],
                          "subscribed_topic_regex": regex, "topic_partitions": []})
    assert beat["error_code"] == 0, beat
    member, epoch = beat["member_id"], beat["member_epoch"]
    deadline = time.monotonic() + timeout
    while not _assigned(beat, names):
        assert time.monotonic() < deadline, beat
        time.sleep(0.2)
        beat = consumer_heartbeat(c, {"group_id": group, "member_id": member, "member_epoch": epoch,
                                      "topic_partitions": []})
        assert beat["error_code"] == 0, beat
        epoch = beat["member_epoch"]
    return member, epoch, _assigned(beat, names)


def test_catastrophic_transactional_id_pattern_is_answered(sb: SecureBroker) -> None:
    prefix = unique_name("rxtid") + "-"
    slow, hit, inner = prefix + SLOW_TAIL, prefix + SLOW_TAIL + "X", prefix + "X" + SLOW_TAIL
    with RawConn(sb.bootstrap) as c, RawConn(sb.bootstrap) as other:
        _coordinator_ready(c, slow)
        for tid in (slow, hit, inner):
            assert _init(c, tid)["error_code"] == NONE
        corr = c.send_request(LIST_TXNS, 2, {"state_filters": [], "producer_id_filters": [], "duration_filter": -1,
                                             "transactional_id_pattern": prefix + CATASTROPHIC})
        assert other.api_versions()  # another client is served meanwhile
        body = c.recv_response(LIST_TXNS, 2, corr)
        assert body["error_code"] == NONE, body
        # fullmatch: the id ending in X only (not the one with an X inside)
        assert [s["transactional_id"] for s in body["transaction_states"]] == [hit]


def test_backreference_and_lookahead_patterns_are_invalid(sb: SecureBroker) -> None:
    tid = unique_name("rxtid-bad")
    with RawConn(sb.bootstrap) as c:
        _coordinator_ready(c, tid)
        assert _init(c, tid)["error_code"] == NONE
        for pattern in (r"(rxtid)\1.*", "(?=rxtid).*"):
            body = _list(c, pattern)
            assert (body["error_code"], body["transaction_states"]) == (INVALID_REGULAR_EXPRESSION, []), body
        group = unique_name("rx-bad-group")
        _group_coordinator_ready(sb, group)
        for regex in (r"(rx)\1.*", "(?!rx).*"):
            beat = consumer_heartbeat(c, {"group_id": group, "member_id": _member_id(), "member_epoch": 0,
                                  "rebalance_timeout_ms": 30_000, "subscribed_topic_names": [],
                                  "subscribed_topic_regex": regex, "topic_partitions": []})
            assert beat["error_code"] == INVALID_REGULAR_EXPRESSION, beat


def test_catastrophic_subscribed_topic_regex_is_resolved(sb: SecureBroker) -> None:
    base = unique_name("rxc").replace("-", "_")
    slow, hit = base + SLOW_TAIL, base + SLOW_TAIL + "X"
    for topic in (slow, hit):
        create_topic(sb.bootstrap, topic, 1)
    with RawConn(sb.bootstrap) as c, RawConn(sb.bootstrap) as other:
        names = _topic_ids(c, [slow, hit])
        member, epoch, assigned = _join_until_assigned(sb, c, unique_name("rxc-group"), base + CATASTROPHIC, names)
        assert other.api_versions()
        assert assigned == {hit}


def test_regex_resolves_to_topics_the_member_may_describe(sb: SecureBroker) -> None:
    """alice may READ (so DESCRIBE) topic a and not b; her regex matches both: she is assigned
    a only, and ConsumerGroupDescribe shows a only — to her and to the super user; bob, who
    may describe the group but neither topic, gets TOPIC_AUTHORIZATION_FAILED for it."""
    base = unique_name("rxacl")
    a, b = f"{base}-a", f"{base}-b"
    group = unique_name("rxacl-group")
    for topic in (a, b):
        create_topic(sb.bootstrap, topic, 2)
    assert create_acls(sb.bootstrap, (TOPIC, a, LITERAL, ALICE, "*", READ, ALLOW),
                       (GROUP, group, LITERAL, ALICE, "*", READ, ALLOW),
                       (GROUP, group, LITERAL, BOB, "*", DESCRIBE, ALLOW)) == [(0, "")] * 3
    with RawConn(sb.bootstrap) as admin:
        names = _topic_ids(admin, [a, b])
    with _login(sb, "alice") as alice, _login(sb, "bob") as bob:
        member, epoch, assigned = _join_until_assigned(sb, alice, group, f"{base}-.*", names)
        assert assigned == {a}
        # a few more heartbeats: the assignment stays a (b never comes)
        for _ in range(5):
            beat = consumer_heartbeat(alice, {"group_id": group, "member_id": member, "member_epoch": epoch,
                                      "topic_partitions": [{"topic_id": tid, "partitions": [0, 1]}
                                                           for tid, n in names.items() if n == a]})
            assert beat["error_code"] == 0, beat
            epoch = beat["member_epoch"]
            assert _assigned(beat, names) <= {a}, beat
            time.sleep(0.2)
        for who in (alice, None):
            if who is None:
                with RawConn(sb.bootstrap) as su:
                    described = su.request(CONSUMER_GROUP_DESCRIBE, 1, {"group_ids": [group],
                                                                        "include_authorized_operations": False})
            else:
                described = who.request(CONSUMER_GROUP_DESCRIBE, 1, {"group_ids": [group],
                                                                     "include_authorized_operations": False})
            [g] = described["groups"]
            assert g["error_code"] == 0, g
            [m] = g["members"]
            assert m["subscribed_topic_regex"] == f"{base}-.*"
            for kind in ("assignment", "target_assignment"):
                assert [tp["topic_name"] for tp in m[kind]["topic_partitions"]] == [a], m
        refused = bob.request(CONSUMER_GROUP_DESCRIBE, 1,
                              {"group_ids": [group], "include_authorized_operations": False})
        [g] = refused["groups"]
        assert (g["error_code"], g["members"]) == (TOPIC_AUTHORIZATION_FAILED, []), g
        consumer_heartbeat(alice, {"group_id": group, "member_id": member, "member_epoch": -1})
