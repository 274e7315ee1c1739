"""Transactional offsets on the wire (KIP-98 TxnOffsetCommit, KIP-447 OffsetFetch require_stable),
raw protocol, the same on tmqgate and the reference Kafka broker.

A TxnOffsetCommit belongs to a transaction: it needs InitProducerId with the transactional
id and AddOffsetsToTxn (API 25) first, and the offsets become the group's committed offsets
only when EndTxn (API 26) commits. Both brokers serve the two; they are encoded by hand here.
"""

from __future__ import annotations

import struct
from typing import Any

import pytest

from .conftest import Broker
from .group_helpers import create_topic
from .helpers import unique_topic, wait_until
from .raw import RoutedConn
from .test_acls import acl_broker  # noqa: F401  (the module's own broker with an authorizer)

TXN_OFFSET_COMMIT, ADD_OFFSETS_TO_TXN, END_TXN = 28, 25, 26
NONE, UNKNOWN_TOPIC_OR_PARTITION, ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID = 0, 3, 22, 25
INVALID_GROUP_ID, UNSTABLE_OFFSET_COMMIT = 24, 88
TOPIC_AUTHORIZATION_FAILED, GROUP_AUTHORIZATION_FAILED, TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 29, 30, 53
#: Answers to retry while a fresh broker loads its coordinators.
RETRIABLE = {14, 15, 16, 51}  # LOAD_IN_PROGRESS, NOT_AVAILABLE, NOT_COORDINATOR, CONCURRENT_TRANSACTIONS


# ---- the hand-encoded transaction APIs (flexible v3 of both) ---------------------------------


def _cstr(s: str) -> bytes:
    b = s.encode()
    return bytes([len(b) + 1]) + b  # uvarint: every id here is shorter than 127 bytes


def _call(routed: RoutedConn, txn: str, api_key: int, body: bytes) -> int:
    """Send a v3 request of AddOffsetsToTxn / EndTxn to the transaction coordinator of `txn`;
    the response's error code."""
    conn = routed.conn(routed.coordinator(txn, 1))
    corr = 7000 + api_key
    header = struct.pack(">hhi", api_key, 3, corr) + struct.pack(">h", 3) + b"raw" + b"\x00"
    frame = header + body + b"\x00"
    conn.send_bytes(struct.pack(">i", len(frame)) + frame)
    data = conn.recv_frame()
    got, tags = struct.unpack_from(">ib", data, 0)
    assert got == corr and tags == 0, data.hex()
    _throttle, code = struct.unpack_from(">ih", data, 5)
    return int(code)


def add_offsets_to_txn(conn: RoutedConn, txn: str, pid: int, epoch: int, group: str) -> int:
    return _call(conn, txn, ADD_OFFSETS_TO_TXN, _cstr(txn) + struct.pack(">qh", pid, epoch) + _cstr(group))


def end_txn(conn: RoutedConn, txn: str, pid: int, epoch: int, commit: bool) -> int:
    return _call(conn, txn, END_TXN, _cstr(txn) + struct.pack(">qh?", pid, epoch, commit))


# ---- requests ------------------------------------------------------------------------------


def retried(call: Any, what: str) -> Any:
    """``call()`` until its error code is not a coordinator-loading one (a fresh Kafka creates
    __consumer_offsets and __transaction_state on first use)."""
    out: list[Any] = []

    def done() -> bool:
        out[:] = [call()]
        code = out[0] if isinstance(out[0], int) else out[0]["error_code"]
        return code not in RETRIABLE

    wait_until(done, 60, 0.3, what=what)
    return out[0]


def find_coordinator(conn: RoutedConn, key: str, key_type: int) -> None:
    def call() -> dict[str, Any]:
        r = conn.request(10, 4, {"key_type": key_type, "coordinator_keys": [key]})
        return dict(r["coordinators"][0])

    assert retried(call, f"coordinator of {key}")["error_code"] == NONE


def begin(conn: RoutedConn, txn: str, group: str) -> tuple[int, int]:
    """A transaction that may commit offsets for ``group``: (producer id, epoch)."""
    find_coordinator(conn, txn, 1)
    find_coordinator(conn, group, 0)
    r = retried(lambda: conn.request(22, 4, {"transactional_id": txn, "transaction_timeout_ms": 60_000,
                                             "producer_id": -1, "producer_epoch": -1}), "InitProducerId")
    assert r["error_code"] == NONE, r
    pid, epoch = r["producer_id"], r["producer_epoch"]
    assert retried(lambda: add_offsets_to_txn(conn, txn, pid, epoch, group), "AddOffsetsToTxn") == NONE
    return pid, epoch


def finish(conn: RoutedConn, txn: str, pid: int, epoch: int, commit: bool) -> None:
    assert retried(lambda: end_txn(conn, txn, pid, epoch, commit), "EndTxn") == NONE


def txn_commit(conn: RoutedConn, txn: str, pid: int, epoch: int, group: str, offsets: dict[tuple[str, int], int],
               member: str = "", generation: int = -1, version: int = 3) -> dict[tuple[str, int], int]:
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for (topic, partition), offset in offsets.items():
        by_topic.setdefault(topic, []).append({"partition_index": partition, "committed_offset": offset,
                                               "committed_leader_epoch": -1, "committed_metadata": "m"})
    body = conn.request(TXN_OFFSET_COMMIT, version, {
        "transactional_id": txn, "group_id": group, "producer_id": pid, "producer_epoch": epoch,
        "generation_id": generation, "member_id": member, "group_instance_id": None,
        "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]})
    return {(t["name"], p["partition_index"]): p["error_code"] for t in body["topics"] for p in t["partitions"]}


def fetch(conn: RoutedConn, group: str, topic: str, partitions: list[int], stable: bool,
          version: int = 8) -> dict[int, tuple[int, int]]:
    """OffsetFetch: partition -> (committed offset, error code)."""
    if version < 8:
        body = conn.request(9, version, {"group_id": group, "require_stable": stable,
                                         "topics": [{"name": topic, "partition_indexes": partitions}]})
        assert body["error_code"] == NONE, body
        topics = body["topics"]
    else:
        body = conn.request(9, version, {"require_stable": stable, "groups": [
            {"group_id": group, "topics": [{"name": topic, "partition_indexes": partitions}]}]})
        assert body["groups"][0]["error_code"] == NONE, body
        topics = body["groups"][0]["topics"]
    return {p["partition_index"]: (p["committed_offset"], p["error_code"]) for t in topics for p in t["partitions"]}


def plain_commit(conn: RoutedConn, group: str, topic: str, partition: int, offset: int) -> None:
    def call() -> int:
        body = conn.request(8, 8, {"group_id": group, "generation_id_or_member_epoch": -1, "member_id": "",
                                   "group_instance_id": None, "topics": [{"name": topic, "partitions": [
                                       {"partition_index": partition, "committed_offset": offset,
                                        "committed_leader_epoch": -1, "committed_metadata": ""}]}]})
        return int(body["topics"][0]["partitions"][0]["error_code"])

    assert retried(call, "OffsetCommit") == NONE


@pytest.fixture
def topic(broker: Broker) -> str:
    name = unique_topic("txnoff")
    create_topic(broker.bootstrap, name, 2)
    return name


# ---- validation that needs no transaction ------------------------------------------------------


def test_txn_offset_commit_unknown_topic_or_partition(broker: Broker, topic: str) -> None:
    """Kafka checks the metadata before the group and the transaction: an unknown topic or a
    partition beyond the topic's answers UNKNOWN_TOPIC_OR_PARTITION, whatever else is wrong."""
    with RoutedConn(broker.bootstrap) as c:
        find_coordinator(c, "g-unknown-topic", 0)
        codes = txn_commit(c, "no-such-txn", 123456, 0, "g-unknown-topic",
                           {(unique_topic("nope"), 0): 5, (topic, 7): 5}, member="ghost", generation=9)
    assert sorted(codes.values()) == [UNKNOWN_TOPIC_OR_PARTITION, UNKNOWN_TOPIC_OR_PARTITION]


def test_txn_offset_commit_empty_group_id(broker: Broker, topic: str) -> None:
    """An empty group id is refused before the transaction is looked at (INVALID_GROUP_ID)."""
    with RoutedConn(broker.bootstrap) as c:
        find_coordinator(c, "g-any", 0)
        assert txn_commit(c, "no-such-txn", 123456, 0, "", {(topic, 0): 5}) == {(topic, 0): INVALID_GROUP_ID}


@pytest.mark.parametrize("version", [7, 8])
def test_offset_fetch_require_stable_is_per_partition(broker: Broker, topic: str, version: int) -> None:
    """require_stable answers UNSTABLE_OFFSET_COMMIT only for the partitions with a pending
    transactional offset: -1 for an unknown group, the committed offset of a partition without
    one (OffsetFetch v7 and the v8 groups form)."""
    group, txn = unique_topic(f"g-stable-{version}"), unique_topic("txn-stable")
    with RoutedConn(broker.bootstrap) as c:
        find_coordinator(c, group, 0)
        assert fetch(c, unique_topic("g-never"), topic, [0, 1], True, version) == {0: (-1, NONE), 1: (-1, NONE)}
        plain_commit(c, group, topic, 0, 17)
        assert fetch(c, group, topic, [0, 1], True, version) == {0: (17, NONE), 1: (-1, NONE)}
        pid, epoch = begin(c, txn, group)
        assert txn_commit(c, txn, pid, epoch, group, {(topic, 1): 4}) == {(topic, 1): NONE}
        assert fetch(c, group, topic, [0, 1], True, version) == {0: (17, NONE), 1: (-1, UNSTABLE_OFFSET_COMMIT)}
        assert fetch(c, group, topic, [0, 1], False, version) == {0: (17, NONE), 1: (-1, NONE)}


# ---- inside a transaction ----------------------------------------------------------------------


def test_pending_offsets_are_unstable_and_invisible(broker: Broker, topic: str) -> None:
    group, txn = unique_topic("g-pending"), unique_topic("txn-pending")
    with RoutedConn(broker.bootstrap) as c:
        pid, epoch = begin(c, txn, group)
        plain_commit(c, group, topic, 0, 5)
        assert txn_commit(c, txn, pid, epoch, group, {(topic, 0): 42, (topic, 1): 9}) == {
            (topic, 0): NONE, (topic, 1): NONE}
        # A consumer asking for stable offsets is told to retry, per partition...
        assert fetch(c, group, topic, [0, 1], True) == {0: (-1, UNSTABLE_OFFSET_COMMIT),
                                                        1: (-1, UNSTABLE_OFFSET_COMMIT)}
        assert fetch(c, group, topic, [0, 1], True, version=7) == {0: (-1, UNSTABLE_OFFSET_COMMIT),
                                                                   1: (-1, UNSTABLE_OFFSET_COMMIT)}
        # ... one that does not sees the last committed offsets, not the transaction's.
        assert fetch(c, group, topic, [0, 1], False) == {0: (5, NONE), 1: (-1, NONE)}


def test_txn_offset_commit_makes_an_unknown_group(broker: Broker, topic: str) -> None:
    """A group that does not exist is made by the commit, as an empty "simple" group (Kafka's
    getOrMaybeCreateClassicGroup): listed and described as Empty with no protocol type."""
    group, txn = unique_topic("g-made"), unique_topic("txn-made")
    with RoutedConn(broker.bootstrap) as c:
        def describe() -> dict[str, Any]:
            return dict(c.request(15, 5, {"groups": [group], "include_authorized_operations": False})["groups"][0])

        pid, epoch = begin(c, txn, group)
        described = retried(describe, "DescribeGroups")
        assert (described["error_code"], described["group_state"]) == (NONE, "Dead")
        assert txn_commit(c, txn, pid, epoch, group, {(topic, 0): 3}) == {(topic, 0): NONE}
        described = describe()
        assert (described["error_code"], described["group_state"], described["protocol_type"],
                described["members"]) == (NONE, "Empty", "", [])
        # ListGroups lists what the broker asked coordinates (admin clients ask every broker)
        listed = c.conn(c.coordinator(group, 0)).request(16, 4, {"states_filter": []})["groups"]
        assert [(g["group_state"], g["protocol_type"]) for g in listed if g["group_id"] == group] == [("Empty", "")]


@pytest.mark.parametrize("commit", [True, False], ids=["commit", "abort"])
def test_end_of_transaction_commits_or_drops_offsets(broker: Broker, topic: str, commit: bool) -> None:
    group, txn = unique_topic("g-end"), unique_topic("txn-end")
    with RoutedConn(broker.bootstrap) as c:
        pid, epoch = begin(c, txn, group)
        plain_commit(c, group, topic, 0, 5)
        assert set(txn_commit(c, txn, pid, epoch, group, {(topic, 0): 42, (topic, 1): 9}).values()) == {NONE}
        finish(c, txn, pid, epoch, commit)
        # EndTxn answers once the outcome is decided; the markers follow (Kafka writes them
        # after), so a consumer retries UNSTABLE_OFFSET_COMMIT until they are written.
        answers: list[dict[int, tuple[int, int]]] = []

        def settled() -> bool:
            answers[:] = [fetch(c, group, topic, [0, 1], True)]
            return all(code != UNSTABLE_OFFSET_COMMIT for _, code in answers[0].values())

        wait_until(settled, 30, 0.1, what="the transaction's markers")
        expected = {0: (42, NONE), 1: (9, NONE)} if commit else {0: (5, NONE), 1: (-1, NONE)}
        assert answers[0] == expected
        assert fetch(c, group, topic, [0, 1], False) == expected


def test_zombie_generation_and_unknown_member(broker: Broker, topic: str) -> None:
    """KIP-447: the consumer's generation fences a zombie producer's offsets."""
    group, txn = unique_topic("g-zombie"), unique_topic("txn-zombie")
    meta = struct.pack(">hi", 0, 1) + struct.pack(">h", len(topic)) + topic.encode() + struct.pack(">i", -1)
    with RoutedConn(broker.bootstrap) as c:
        pid, epoch = begin(c, txn, group)
        join = {"group_id": group, "session_timeout_ms": 30_000, "rebalance_timeout_ms": 30_000, "member_id": "",
                "group_instance_id": None, "protocol_type": "consumer",
                "protocols": [{"name": "range", "metadata": meta}]}
        first = c.request(11, 5, join)
        assert first["error_code"] == 79, first  # MEMBER_ID_REQUIRED
        joined = c.request(11, 5, {**join, "member_id": first["member_id"]})
        assert joined["error_code"] == NONE, joined
        member, gen = joined["member_id"], joined["generation_id"]
        synced = c.request(14, 5, {"group_id": group, "generation_id": gen, "member_id": member,
                                   "group_instance_id": None, "protocol_type": "consumer", "protocol_name": "range",
                                   "assignments": [{"member_id": member, "assignment": b""}]})
        assert synced["error_code"] == NONE, synced
        tp = (topic, 0)
        assert txn_commit(c, txn, pid, epoch, group, {tp: 3}, member, gen - 1) == {tp: ILLEGAL_GENERATION}
        assert txn_commit(c, txn, pid, epoch, group, {tp: 3}, "ghost", gen) == {tp: UNKNOWN_MEMBER_ID}
        assert txn_commit(c, txn, pid, epoch, group, {tp: 3}, member, gen) == {tp: NONE}
        # A group that does not exist has no generation to claim.
        other = unique_topic("g-nogroup")
        find_coordinator(c, other, 0)
        assert retried(lambda: add_offsets_to_txn(c, txn, pid, epoch, other), "AddOffsetsToTxn") == NONE
        assert txn_commit(c, txn, pid, epoch, other, {tp: 3}, "m", 4) == {tp: ILLEGAL_GENERATION}
        assert fetch(c, group, topic, [0], True) == {0: (-1, UNSTABLE_OFFSET_COMMIT)}


# ---- ACLs (both brokers with an authorizer, as compat_tests/test_acls.py runs them) ------------


def test_txn_offset_commit_acls(acl_broker: Any) -> None:  # noqa: F811 (the imported fixture)
    """Kafka's order: WRITE on the transactional id, then READ on the group (each refusal
    answers every partition), then READ on each topic (that topic's partitions), then unknown
    topics — all before the transaction or the group is looked at."""
    from .test_acls import GROUP, READ, TOPIC, TRANSACTIONAL_ID, WRITE, deny, make_topic

    bs = acl_broker.bootstrap
    hidden, txn, group = unique_topic("acl-txnoff"), unique_topic("acl-txnoff-id"), unique_topic("acl-txnoff-g")
    make_topic(bs, hidden)
    missing = unique_topic("acl-txnoff-missing")
    offsets = {(hidden, 0): 5, (missing, 0): 5}
    with RoutedConn(bs) as c:
        find_coordinator(c, group, 0)
        deny(bs, TOPIC, hidden, READ)
        assert txn_commit(c, txn, 123456, 0, group, offsets) == {
            (hidden, 0): TOPIC_AUTHORIZATION_FAILED, (missing, 0): UNKNOWN_TOPIC_OR_PARTITION}
        deny(bs, GROUP, group, READ)
        assert txn_commit(c, txn, 123456, 0, group, offsets) == {
            (hidden, 0): GROUP_AUTHORIZATION_FAILED, (missing, 0): GROUP_AUTHORIZATION_FAILED}
        deny(bs, TRANSACTIONAL_ID, txn, WRITE)
        assert txn_commit(c, txn, 123456, 0, group, offsets) == {
            (hidden, 0): TRANSACTIONAL_ID_AUTHORIZATION_FAILED, (missing, 0): TRANSACTIONAL_ID_AUTHORIZATION_FAILED}


# ---- kill -9 -------------------------------------------------------------------------------------


def test_pending_offsets_survive_kill_9(restartable_broker: Any) -> None:
    """A transaction's offsets outlive a crash of the broker: after kill -9 and a restart they
    are still pending (UNSTABLE_OFFSET_COMMIT), the last committed offsets still answered."""
    bs = restartable_broker.bootstrap
    topic, group, txn = unique_topic("txnoff-kill"), unique_topic("g-kill"), unique_topic("txn-kill")
    create_topic(bs, topic, 2)
    with RoutedConn(bs) as c:
        pid, epoch = begin(c, txn, group)
        plain_commit(c, group, topic, 0, 5)
        assert set(txn_commit(c, txn, pid, epoch, group, {(topic, 0): 42, (topic, 1): 9}).values()) == {NONE}
    restartable_broker.kill()
    restartable_broker.start()
    with RoutedConn(restartable_broker.bootstrap) as c:
        find_coordinator(c, group, 0)
        answers: list[dict[int, tuple[int, int]]] = []

        def loaded() -> bool:  # Kafka answers COORDINATOR_LOAD_IN_PROGRESS while it replays its log
            body = c.request(9, 8, {"require_stable": True, "groups": [
                {"group_id": group, "topics": [{"name": topic, "partition_indexes": [0, 1]}]}]})
            if body["groups"][0]["error_code"] in RETRIABLE:
                return False
            answers[:] = [fetch(c, group, topic, [0, 1], True)]
            return True

        wait_until(loaded, 60, 0.3, what="the group coordinator after the restart")
        assert answers[0] == {0: (-1, UNSTABLE_OFFSET_COMMIT), 1: (-1, UNSTABLE_OFFSET_COMMIT)}
        assert fetch(c, group, topic, [0, 1], False) == {0: (5, NONE), 1: (-1, NONE)}
