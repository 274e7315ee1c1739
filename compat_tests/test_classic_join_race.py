"""The classic join race with group.initial.rebalance.delay.ms = 0, in raw JoinGroup/SyncGroup.

Both session brokers run with the initial delay at 0 (brokers.py / kafka_ref.py). Kafka starts
a new (Empty) group's first rebalance on a timer of that delay and completes the join when it
fires with the members that are in — a member that only got its id (MEMBER_ID_REQUIRED, a
"pending" member) is not waited for (GroupMetadataManager.prepareRebalance /
tryCompleteInitialRebalanceElseSchedule; only later rebalances wait for pending members,
ClassicGroup.hasAllMembersJoined). So when two consumers start together:

1. A and B each send JoinGroup without a member id and get MEMBER_ID_REQUIRED;
2. A rejoins with its id: the lone member's join completes at once (generation 1, A leader);
3. B rejoins with its id: the group goes back to PreparingRebalance, B's JoinGroup is parked;
4. A's SyncGroup for generation 1 answers REBALANCE_IN_PROGRESS; A rejoins, and both get
   generation 2 (A still leader) and their assignments from A's SyncGroup.

Before the fix tmqgate held A's JoinGroup in step 2 until B's pending id came back (or its
session timeout passed), so both joined generation 1 and A's SyncGroup succeeded.
"""

from __future__ import annotations

from typing import Any

from .group_helpers import unique_name
from .helpers import wait_until
from .raw import RawConn, coordinator_address

JOIN, SYNC, HEARTBEAT, FIND_COORDINATOR, DESCRIBE_GROUPS = 11, 14, 12, 10, 15
JOIN_V, SYNC_V, HEARTBEAT_V = 7, 5, 4
NONE, MEMBER_ID_REQUIRED, REBALANCE_IN_PROGRESS = 0, 79, 27
COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR = 14, 15, 16


def _subscription(topic: str) -> bytes:
    """ConsumerProtocolSubscription v0 naming one topic."""
    return ((0).to_bytes(2, "big") + (1).to_bytes(4, "big") + len(topic).to_bytes(2, "big") + topic.encode()
            + (-1).to_bytes(4, "big", signed=True))


def _find_coordinator(conn: RawConn, group: str) -> None:
    """FindCoordinator until it answers (Kafka creates __consumer_offsets on the first one)."""
    wait_until(lambda: conn.request(FIND_COORDINATOR, 4, {"key_type": 0, "coordinator_keys": [group]}),
               60, 0.2, f"the coordinator of {group}", ok=lambda body: body["coordinators"][0]["error_code"] == NONE)


def _wait_state(conn: RawConn, group: str, state: str) -> list[str]:
    """DescribeGroups until the group is in `state` (orders B's JoinGroup before A's SyncGroup);
    returns the member ids then."""
    g = wait_until(lambda: conn.request(DESCRIBE_GROUPS, 5, {"groups": [group],
                                                             "include_authorized_operations": False})["groups"][0],
                   30, 0.05, f"{group} {state}", ok=lambda g: g["group_state"] == state)
    return sorted(m["member_id"] for m in g["members"])


def _first_join(conn: RawConn, group: str) -> dict[str, Any]:
    """The first JoinGroup, retried while the coordinator is still loading (Kafka, fresh start)."""
    return wait_until(lambda: conn.request(JOIN, JOIN_V, _join_body(group, "")), 60, 0.2, f"{group}'s coordinator",
                      ok=lambda body: body["error_code"] not in (COORDINATOR_LOAD_IN_PROGRESS,
                                                                 COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR))


def _join_body(group: str, member_id: str) -> dict[str, Any]:
    return {"group_id": group, "session_timeout_ms": 30_000, "rebalance_timeout_ms": 30_000,
            "member_id": member_id, "group_instance_id": None, "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": _subscription("race-topic")}], "reason": None}


def _sync_body(group: str, member_id: str, generation: int, assignments: list[dict[str, Any]]) -> dict[str, Any]:
    return {"group_id": group, "generation_id": generation, "member_id": member_id, "group_instance_id": None,
            "protocol_type": "consumer", "protocol_name": "range", "assignments": assignments}


def test_first_sync_sees_rebalance_when_second_member_joins(broker: Any) -> None:
    group = unique_name("join-race")
    coordinator = coordinator_address(broker.bootstrap, group)  # both members talk to it, as clients do
    with RawConn(coordinator, timeout=60) as a, RawConn(coordinator, timeout=60) as b:
        _find_coordinator(a, group)

        first_a = _first_join(a, group)
        first_b = b.request(JOIN, JOIN_V, _join_body(group, ""))
        assert first_a["error_code"] == MEMBER_ID_REQUIRED and first_b["error_code"] == MEMBER_ID_REQUIRED
        id_a, id_b = first_a["member_id"], first_b["member_id"]

        # The lone member's join completes at once: B's pending id is not waited for.
        joined_a = a.request(JOIN, JOIN_V, _join_body(group, id_a), timeout=20)  # < B's 30 s session
        assert (joined_a["error_code"], joined_a["generation_id"], joined_a["leader"]) == (NONE, 1, id_a)
        assert [m["member_id"] for m in joined_a["members"]] == [id_a]

        # B's JoinGroup moves the group back to PreparingRebalance (and is parked).
        corr_b = b.send_request(JOIN, JOIN_V, _join_body(group, id_b))
        members = _wait_state(a, group, "PreparingRebalance")
        assert members == sorted([id_a, id_b])

        stale = a.request(SYNC, SYNC_V, _sync_body(group, id_a, 1, [{"member_id": id_a, "assignment": b""}]))
        assert stale["error_code"] == REBALANCE_IN_PROGRESS
        beat = a.request(HEARTBEAT, HEARTBEAT_V, {"group_id": group, "generation_id": 1, "member_id": id_a,
                                                  "group_instance_id": None})
        assert beat["error_code"] == REBALANCE_IN_PROGRESS

        # A rejoins: both get generation 2, A (the old leader, first to rejoin) leads.
        rejoined_a = a.request(JOIN, JOIN_V, _join_body(group, id_a))
        joined_b = b.recv_response(JOIN, JOIN_V, corr_b)
        assert (rejoined_a["error_code"], rejoined_a["generation_id"], rejoined_a["leader"]) == (NONE, 2, id_a)
        assert (joined_b["error_code"], joined_b["generation_id"], joined_b["leader"]) == (NONE, 2, id_a)
        assert sorted(m["member_id"] for m in rejoined_a["members"]) == sorted([id_a, id_b])
        assert joined_b["members"] == []

        # B's SyncGroup waits for the leader's; the leader's brings both assignments.
        corr_sync_b = b.send_request(SYNC, SYNC_V, _sync_body(group, id_b, 2, []))
        synced_a = a.request(SYNC, SYNC_V, _sync_body(group, id_a, 2, [
            {"member_id": id_a, "assignment": b"for-a"}, {"member_id": id_b, "assignment": b"for-b"}]))
        synced_b = b.recv_response(SYNC, SYNC_V, corr_sync_b)
        assert (synced_a["error_code"], bytes(synced_a["assignment"])) == (NONE, b"for-a")
        assert (synced_b["error_code"], bytes(synced_b["assignment"])) == (NONE, b"for-b")
