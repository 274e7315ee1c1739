"""KIP-848 consumer groups and the sticky even-split assignor, on a fake clock."""

from __future__ import annotations

from typing import Any

import pytest

from tests.test_coordinator import Topics
from tmqgate.coordinator.assignor import assign
from tmqgate.coordinator.coordinator import GroupCoordinator
from tmqgate.protocol.errors import ErrorCode
from tmqgate.storage import Store

E = ErrorCode


# ---- the assignor ------------------------------------------------------------------------


def split(members: list[str], current: dict[str, set[tuple[str, int]]] | None = None,
          partitions: dict[str, int] | None = None, subs: dict[str, list[str]] | None = None,
          ) -> dict[str, list[int]]:
    parts = partitions or {"t": 4}
    result = assign(members, subs or {m: list(parts) for m in members}, parts, current)
    return {m: sorted(p for _, p in tps) for m, tps in result.items()}


def as_tps(d: dict[str, list[int]], topic: str = "t") -> dict[str, set[tuple[str, int]]]:
    return {m: {(topic, p) for p in ps} for m, ps in d.items()}


def test_tdengine_even_split_as_members_arrive() -> None:
    """4 vnodes: 1 consumer takes 4; 2 take 2+2; 3 take 2+1+1; 5 take 1+1+1+1 and one idles."""
    one = split(["c1"])
    assert one == {"c1": [0, 1, 2, 3]}
    two = split(["c1", "c2"], as_tps(one))
    assert two == {"c1": [0, 1], "c2": [2, 3]}
    three = split(["c1", "c2", "c3"], as_tps(two))
    assert three == {"c1": [0], "c2": [2, 3], "c3": [1]}
    four = split(["c1", "c2", "c3", "c4"], as_tps(three))
    assert four == {"c1": [0], "c2": [2], "c3": [1], "c4": [3]}
    five = split(["c1", "c2", "c3", "c4", "c5"], as_tps(four))
    assert five == {"c1": [0], "c2": [2], "c3": [1], "c4": [3], "c5": []}


def test_fresh_splits() -> None:
    assert split(["a", "b"]) == {"a": [0, 2], "b": [1, 3]}
    assert sorted(map(len, split(["a", "b", "c"]).values())) == [1, 1, 2]
    assert sorted(map(len, split(["a", "b", "c", "d", "e"]).values())) == [0, 1, 1, 1, 1]


def test_sticky_when_a_member_leaves() -> None:
    before = {"c1": [0], "c2": [2, 3], "c3": [1]}
    after = split(["c1", "c3"], as_tps({"c1": [0], "c3": [1]}))
    assert after["c1"][0] == 0 and after["c3"][0] == 1  # survivors keep what they had
    assert sorted(after["c1"] + after["c3"]) == [0, 1, 2, 3] and len(after["c1"]) == len(after["c3"]) == 2
    idle_takes_over = split(["c1", "c2", "c3", "c4", "c5"],
                            as_tps({"c1": [0], "c2": [2], "c3": [1], "c4": [], "c5": []}))
    assert idle_takes_over == {"c1": [0], "c2": [2], "c3": [1], "c4": [3], "c5": []}
    assert before  # documents the starting point


def test_split_runs_over_all_subscribed_topics() -> None:
    result = assign(["a", "b", "c"], {m: ["t", "u"] for m in "abc"}, {"t": 4, "u": 2})
    assert sorted(len(v) for v in result.values()) == [2, 2, 2]
    assert set().union(*result.values()) == {("t", p) for p in range(4)} | {("u", p) for p in range(2)}


def test_heterogeneous_subscriptions() -> None:
    result = assign(["a", "b"], {"a": ["t"], "b": ["t", "u"]}, {"t": 4, "u": 4})
    assert all(tp[0] == "t" for tp in result["a"])
    assert len(result["a"]) == 4 and len(result["b"]) == 4
    assert result["b"] == {("u", p) for p in range(4)}


def test_missing_topic_and_stale_current_are_ignored() -> None:
    result = assign(["a"], {"a": ["t", "gone"]}, {"t": 2}, {"a": {("t", 5), ("gone", 0), ("t", 1)}})
    assert result == {"a": {("t", 0), ("t", 1)}}


# ---- the heartbeat state machine ---------------------------------------------------------


def make(tmp_path: Any, store: Store | None = None, **topics: int) -> GroupCoordinator:
    counter = iter(range(1, 1_000_000))
    return GroupCoordinator(store or Store(str(tmp_path / "data")), Topics(**(topics or {"t": 4})), now_ms=0,
                            new_consumer_id=lambda: f"m{next(counter)}")


TID = Topics.tid


def hb(c: GroupCoordinator, now: int, member_id: str = "", epoch: int = 0, topics: list[str] | None = None,
       owned: dict[str, list[int]] | None = None, instance: str | None = None, regex: str | None = None,
       group: str = "g", rebalance_timeout: int = 60_000, assignor: str | None = None) -> dict[str, Any]:
    body = {"group_id": group, "member_id": member_id, "member_epoch": epoch, "instance_id": instance,
            "rebalance_timeout_ms": rebalance_timeout if epoch == 0 else -1,
            "subscribed_topic_names":
                topics if topics is not None else (["t"] if epoch == 0 and regex is None else None),
            "subscribed_topic_regex": regex, "server_assignor": assignor,
            "topic_partitions": None if owned is None else [{"topic_id": TID(t), "partitions": ps}
                                                           for t, ps in owned.items()]}
    if epoch == 0 and owned is None:
        body["topic_partitions"] = []
    return c.consumer_heartbeat(now, body, "client", "10.0.0.2")


def parts(resp: dict[str, Any], topic: str = "t") -> list[int] | None:
    if resp["assignment"] is None:
        return None
    return sorted(p for tp in resp["assignment"]["topic_partitions"] if tp["topic_id"] == TID(topic)
                  for p in tp["partitions"])


def test_first_member_gets_everything_on_its_joining_heartbeat(tmp_path: Any) -> None:
    c = make(tmp_path)
    r = hb(c, 0)
    assert r["error_code"] == 0 and r["member_id"] == "m1" and r["member_epoch"] == 1
    assert r["heartbeat_interval_ms"] == 1000
    assert parts(r) == [0, 1, 2, 3]
    again = hb(c, 3000, "m1", 1, owned={"t": [0, 1, 2, 3]})
    assert again["assignment"] is None and again["member_epoch"] == 1
    assert c.admin.consumer_describe(["g"])[0]["group_state"] == "Stable"


def test_second_member_waits_for_revocation(tmp_path: Any) -> None:
    c = make(tmp_path)
    hb(c, 0)
    r2 = hb(c, 100)
    # Target computed at once (c2 → 2,3), but c1 still owns them: c2 advances with nothing yet.
    assert r2["member_id"] == "m2" and r2["member_epoch"] == 2 and parts(r2) == []
    assert r2["heartbeat_interval_ms"] == 200  # polls fast while waiting for a release
    d = c.admin.consumer_describe(["g"])[0]
    assert d["group_state"] == "Reconciling" and d["group_epoch"] == 2 and d["assignment_epoch"] == 2
    targets = {m["member_id"]: m["target_assignment"]["topic_partitions"][0]["partitions"] for m in d["members"]}
    assert targets == {"m1": [0, 1], "m2": [2, 3]}
    r1 = hb(c, 3000, "m1", 1, owned={"t": [0, 1, 2, 3]})
    assert r1["member_epoch"] == 1 and parts(r1) == [0, 1]  # revoke 2,3 first, epoch unchanged
    still = hb(c, 3100, "m2", 2)
    assert still["assignment"] is None or parts(still) == []
    r1 = hb(c, 3200, "m1", 1, owned={"t": [0, 1, 2, 3]})  # not yet revoked
    assert r1["member_epoch"] == 1
    r1 = hb(c, 3300, "m1", 1, owned={"t": [0, 1]})  # revoked: now on epoch 2
    assert r1["member_epoch"] == 2
    r2 = hb(c, 3400, "m2", 2)
    assert parts(r2) == [2, 3] and r2["member_epoch"] == 2
    hb(c, 3500, "m2", 2, owned={"t": [2, 3]})
    assert c.admin.consumer_describe(["g"])[0]["group_state"] == "Stable"


def test_three_and_five_members(tmp_path: Any) -> None:
    c = make(tmp_path)
    owned: dict[str, list[int]] = {}
    epochs: dict[str, int] = {}

    def settle(now: int) -> int:
        for _ in range(4):
            for mid in list(epochs):
                r = hb(c, now, mid, epochs[mid], owned={"t": owned.get(mid, [])})
                epochs[mid] = r["member_epoch"]
                if r["assignment"] is not None:
                    owned[mid] = parts(r) or []
                now += 10
        return now

    now = 0
    for _ in range(5):
        r = hb(c, now)
        epochs[r["member_id"]] = r["member_epoch"]
        owned[r["member_id"]] = parts(r) or []
        now = settle(now + 10)
        if len(epochs) == 3:
            assert owned == {"m1": [0], "m2": [2, 3], "m3": [1]}
    assert owned == {"m1": [0], "m2": [2], "m3": [1], "m4": [3], "m5": []}
    assert c.admin.consumer_describe(["g"])[0]["group_state"] == "Stable"


def test_fenced_and_unknown(tmp_path: Any) -> None:
    c = make(tmp_path)
    hb(c, 0)
    assert hb(c, 10, "m1", 7)["error_code"] == E.FENCED_MEMBER_EPOCH
    assert hb(c, 10, "ghost", 1)["error_code"] == E.UNKNOWN_MEMBER_ID
    assert hb(c, 10, "m1", 1, group="nogroup")["error_code"] == E.UNKNOWN_MEMBER_ID
    no_subscription = {"group_id": "h", "member_id": "", "member_epoch": 0, "topic_partitions": []}
    assert c.consumer_heartbeat(10, no_subscription, "c", "h")["error_code"] == E.INVALID_REQUEST
    assert hb(c, 10, regex="(")["error_code"] == E.INVALID_REGULAR_EXPRESSION
    assert hb(c, 10, assignor="fancy")["error_code"] == E.UNSUPPORTED_ASSIGNOR
    assert hb(c, 10, group="")["error_code"] == E.INVALID_REQUEST


def test_lost_response_previous_epoch_accepted(tmp_path: Any) -> None:
    c = make(tmp_path)
    hb(c, 0)
    hb(c, 10)  # m2 joins: epoch 2
    hb(c, 20, "m1", 1, owned={"t": [0, 1, 2, 3]})
    r = hb(c, 30, "m1", 1, owned={"t": [0, 1]})
    assert r["member_epoch"] == 2
    # The response carrying epoch 2 was lost: m1 retries with epoch 1 and a subset of its partitions.
    assert hb(c, 40, "m1", 1, owned={"t": [0, 1]})["error_code"] == 0
    assert hb(c, 50, "m1", 0 + 1, owned={"t": [0, 1, 2]})["error_code"] == E.FENCED_MEMBER_EPOCH


def test_session_timeout_removes_member(tmp_path: Any) -> None:
    c = make(tmp_path)
    hb(c, 0)
    hb(c, 10)
    for t in range(3000, 12_010, 3000):
        r = hb(c, t, "m1", 1, owned={"t": [0, 1]})
    assert r["member_epoch"] == 2
    c.tick(12_009)
    assert "m2" in c.groups["g"].members
    c.tick(12_010)  # m2 silent for 12 s (TDengine's session timeout)
    assert list(c.groups["g"].members) == ["m1"]
    r = hb(c, 12_100, "m1", 2, owned={"t": [0, 1]})
    assert r["member_epoch"] == 3 and parts(r) == [0, 1, 2, 3]
    assert hb(c, 12_200, "m2", 2)["error_code"] == E.UNKNOWN_MEMBER_ID


def test_member_that_does_not_revoke_in_time_is_removed(tmp_path: Any) -> None:
    c = make(tmp_path)
    hb(c, 0, rebalance_timeout=5000)
    hb(c, 10)
    hb(c, 20, "m1", 1, owned={"t": [0, 1, 2, 3]})  # told to revoke 2,3 by 5020
    for t in range(1000, 5020, 1000):
        hb(c, t, "m2", 2)
        hb(c, t, "m1", 1, owned={"t": [0, 1, 2, 3]})
    c.tick(5019)
    assert "m1" in c.groups["g"].members
    c.tick(5020)
    assert list(c.groups["g"].members) == ["m2"]
    r = hb(c, 5100, "m2", 2)
    assert parts(r) == [0, 1, 2, 3] and r["member_epoch"] == 3


def test_leave_and_static_membership(tmp_path: Any) -> None:
    c = make(tmp_path)
    r1 = hb(c, 0, instance="i1")
    r2 = hb(c, 10, instance="i2")
    hb(c, 20, "m1", 1, owned={"t": [0, 1, 2, 3]})
    hb(c, 30, "m1", 1, owned={"t": [0, 1]})
    hb(c, 40, "m2", 2)
    assert r1["member_id"] == "m1" and r2["member_id"] == "m2"
    # A second process with instance id i2 while m2 is alive.
    assert hb(c, 50, instance="i2")["error_code"] == E.UNRELEASED_INSTANCE_ID
    # m2 leaves temporarily (-2): keeps its partitions, no new epoch.
    left = hb(c, 60, "m2", -2, instance="i2")
    assert left["member_epoch"] == -2
    assert c.groups["g"].group_epoch == 2
    back = hb(c, 70, instance="i2")
    assert back["error_code"] == 0 and back["member_id"] == "m4" and back["member_epoch"] == 2
    assert parts(back) == [2, 3]
    assert c.groups["g"].group_epoch == 2  # no rebalance
    # Dynamic leave: -1 gives the partitions back and bumps the epoch.
    bye = hb(c, 80, "m1", -1, instance="i1")
    assert bye["member_epoch"] == -1
    r = hb(c, 90, "m4", 2, instance="i2", owned={"t": [2, 3]})
    assert r["member_epoch"] == 3 and parts(r) == [0, 1, 2, 3]
    assert hb(c, 100, "ghost", -1)["error_code"] == E.UNKNOWN_MEMBER_ID


def test_static_member_left_temporarily_expires(tmp_path: Any) -> None:
    c = make(tmp_path)
    hb(c, 0, instance="i1")
    hb(c, 10, "m1", -2, instance="i1")
    c.tick(10 + 12_000)
    assert c.groups["g"].members == {}
    assert c.admin.consumer_describe(["g"])[0]["group_state"] == "Empty"


def test_regex_subscription_and_topic_changes(tmp_path: Any) -> None:
    c = make(tmp_path, **{"logs.a": 2, "metrics": 1})
    # The heartbeat that brings a new regex gets nothing from it: the regex is resolved at the
    # next tick (Kafka: asynchronously), which bumps the epoch; the next heartbeat assigns.
    r = hb(c, 0, regex=r"logs\..*", topics=None)
    assert r["member_epoch"] == 1 and r["assignment"]["topic_partitions"] == []
    assert c.next_deadline() == 0
    c.tick(5)
    r = hb(c, 10, "m1", 1, owned={})
    got = sorted((tp["topic_id"], p) for tp in r["assignment"]["topic_partitions"] for p in tp["partitions"])
    assert r["member_epoch"] == 2 and got == [(TID("logs.a"), 0), (TID("logs.a"), 1)]
    # A new matching topic: re-resolved on a heartbeat once the last resolution is 10 s old.
    c.topics.counts["logs.b"] = 1  # type: ignore[attr-defined]
    c.tick(100)
    r = hb(c, 200, "m1", 2, owned={"logs.a": [0, 1]})
    assert r["member_epoch"] == 2 and r["assignment"] is None  # unchanged
    c.tick(9_000)
    assert hb(c, 10_006, "m1", 2, owned={"logs.a": [0, 1]})["member_epoch"] == 2  # schedules it
    c.tick(10_007)
    r = hb(c, 10_100, "m1", 2, owned={"logs.a": [0, 1]})
    assert r["member_epoch"] == 3 and parts(r, "logs.b") == [0]
    c.topics.counts["logs.a"] = 3  # type: ignore[attr-defined]
    r = hb(c, 10_300, "m1", 3, owned={"logs.a": [0, 1], "logs.b": [0]})
    assert r["member_epoch"] == 4 and parts(r, "logs.a") == [0, 1, 2]
    del c.topics.counts["logs.b"]  # type: ignore[attr-defined]
    r = hb(c, 10_400, "m1", 4, owned={"logs.a": [0, 1, 2], "logs.b": [0]})
    # The deleted topic's partition is revoked first (epoch unchanged), then the epoch moves on.
    assert r["member_epoch"] == 4 and parts(r, "logs.b") == [] and parts(r, "logs.a") == [0, 1, 2]
    r = hb(c, 10_500, "m1", 4, owned={"logs.a": [0, 1, 2]})
    assert r["member_epoch"] == 5


def test_subscription_change_over_several_topics(tmp_path: Any) -> None:
    c = make(tmp_path, t=2, u=2)
    hb(c, 0, topics=["t"])
    r = hb(c, 10, "m1", 1, topics=["t", "u"], owned={"t": [0, 1]})
    assert r["member_epoch"] == 2 and parts(r, "u") == [0, 1] and parts(r, "t") == [0, 1]


def test_describe(tmp_path: Any) -> None:
    c = make(tmp_path)
    hb(c, 0, instance="i1")
    d = c.admin.consumer_describe(["g", "missing"])
    g = d[0]
    assert (g["group_state"], g["group_epoch"], g["assignment_epoch"], g["assignor_name"]) == \
        ("Stable", 1, 1, "uniform")
    m = g["members"][0]
    assert (m["member_id"], m["instance_id"], m["client_id"], m["client_host"], m["member_epoch"]) == (
        "m1", "i1", "client", "10.0.0.2", 1)
    assert m["subscribed_topic_names"] == ["t"]
    assert m["assignment"]["topic_partitions"] == [{"topic_id": TID("t"), "topic_name": "t",
                                                    "partitions": [0, 1, 2, 3]}]
    assert d[1]["error_code"] == E.GROUP_ID_NOT_FOUND
    listed = c.admin.list_groups()
    assert listed == [{"group_id": "g", "protocol_type": "consumer", "group_state": "Stable", "group_type": "consumer"}]
    assert c.admin.delete_groups(["g"]) == [("g", E.NON_EMPTY_GROUP)]
    assert c.admin.describe_group("g", 5)["group_state"] == "Dead"


def test_offset_commit_with_member_epoch(tmp_path: Any) -> None:
    c = make(tmp_path)
    hb(c, 0)
    assert c.offsets.commit_offsets(10, "g", "m1", None, 1, 9, [("t", 0, 5, -1, None)]) == [E.NONE]
    assert c.offsets.commit_offsets(10, "g", "m1", None, 0, 9, [("t", 0, 5, -1, None)]) == [E.STALE_MEMBER_EPOCH]
    assert c.offsets.commit_offsets(10, "g", "ghost", None, 1, 9, [("t", 0, 5, -1, None)]) == [E.UNKNOWN_MEMBER_ID]
    assert c.offsets.commit_offsets(10, "g", "", None, -1, 9, [("t", 0, 5, -1, None)]) == [E.UNKNOWN_MEMBER_ID]
    assert c.offsets.fetch_offsets("g", [("t", [0])], "m1", 0)[0] is E.STALE_MEMBER_EPOCH
    assert c.offsets.fetch_offsets("g", [("t", [0])], "m1", 1)[1] == [("t", [(0, 5, -1, "", E.NONE)])]
    code, rows = c.offsets.delete_offsets("g", [("t", [0])])
    assert rows == [("t", [(0, E.GROUP_SUBSCRIBED_TO_TOPIC)])]


def test_offset_fetch_accepts_the_epoch_just_replaced(tmp_path: Any) -> None:
    """A fetch built before the heartbeat answer that moved the epoch is still served."""
    c = make(tmp_path)
    hb(c, 0)
    hb(c, 10)  # m2 joins: epoch 2
    hb(c, 20, "m1", 1, owned={"t": [0, 1, 2, 3]})
    assert hb(c, 30, "m1", 1, owned={"t": [0, 1]})["member_epoch"] == 2
    assert c.offsets.fetch_offsets("g", [("t", [0])], "m1", 1)[0] is E.NONE
    assert c.offsets.fetch_offsets("g", [("t", [0])], "m1", 2)[0] is E.NONE
    hb(c, 40, "m3")  # m3 joins: epoch 3; m1 gives up partition 1, then moves to epoch 3
    assert parts(hb(c, 50, "m1", 2, owned={"t": [0, 1]})) == [0]
    assert hb(c, 60, "m1", 2, owned={"t": [0]})["member_epoch"] == 3
    assert c.offsets.fetch_offsets("g", [("t", [0])], "m1", 2)[0] is E.NONE
    assert c.offsets.fetch_offsets("g", [("t", [0])], "m1", 1)[0] is E.STALE_MEMBER_EPOCH


def test_offset_commit_with_an_older_epoch_for_partitions_held_since(tmp_path: Any) -> None:
    """Kafka 4.3 (KIP-1251): a commit with an epoch older than the member's is accepted for
    partitions the member holds since that epoch or before (one sent just before a heartbeat
    moved the epoch: the Java consumer logs a refused auto-commit as an ERROR); refused for a
    partition it gained after it or no longer holds, and for a newer epoch."""
    c = make(tmp_path)
    hb(c, 0)  # m1: epoch 1, t0-3
    hb(c, 10)  # m2 joins: epoch 2
    hb(c, 20, "m1", 1, owned={"t": [0, 1, 2, 3]})
    assert hb(c, 30, "m1", 1, owned={"t": [0, 1]})["member_epoch"] == 2
    hb(c, 40, "m3")  # m3 joins: epoch 3; m1 gives up partition 1, then moves to epoch 3
    hb(c, 50, "m1", 2, owned={"t": [0, 1]})
    assert hb(c, 60, "m1", 2, owned={"t": [0]})["member_epoch"] == 3

    def commit(epoch: int, partition: int, version: int = 9) -> list[E]:
        return c.offsets.commit_offsets(70, "g", "m1", None, epoch, version, [("t", partition, 5, -1, None)])

    assert commit(2, 0) == commit(1, 0) == [E.NONE]  # t0 is m1's since epoch 1
    assert commit(2, 1) == [E.STALE_MEMBER_EPOCH]  # given up
    assert commit(4, 0) == [E.STALE_MEMBER_EPOCH]  # newer than the member's
    assert commit(2, 0, version=8) == [E.ILLEGAL_GENERATION]  # before v9: the epoch itself
    assert c.offsets.txn_offset_commit(70, "g", "x", 1, 0, "m1", 2, None,
                                       [("t", 1, 5, -1, None)]) == [E.ILLEGAL_GENERATION]
    assert c.offsets.txn_offset_commit(70, "g", "x", 1, 0, "m1", 2, None, [("t", 0, 5, -1, None)]) == [E.NONE]
    hb(c, 80, "m2", -1)  # m2 leaves: epoch 4; m1 gains partitions at epoch 4
    gained = parts(hb(c, 90, "m1", 3, owned={"t": [0]}))
    assert gained is not None and 0 in gained and len(gained) > 1, gained
    assert commit(3, 0) == [E.NONE]
    assert commit(3, max(gained)) == [E.STALE_MEMBER_EPOCH]
    assert c.offsets.commit_offsets(95, "g", "m1", None, 4, 9,
                                    [("t", p, 6, -1, None) for p in gained]) == [E.NONE] * len(gained)


def test_protocol_conflicts(tmp_path: Any) -> None:
    from tests.test_coordinator import Capture, join_body

    c = make(tmp_path)
    c.config.classic.initial_rebalance_delay_ms = 0
    hb(c, 0)
    r = Capture()
    c.join_group(10, join_body(), 7, "c", "h", r)
    assert r.code is E.INCONSISTENT_GROUP_PROTOCOL
    c.join_group(10, join_body(group="classic"), 3, "c", "h", r)
    assert hb(c, 20, group="classic")["error_code"] == E.GROUP_ID_NOT_FOUND
    # An empty consumer group can become classic (and an empty classic one a consumer group).
    hb(c, 30, "m1", -1)
    r = Capture()
    c.join_group(40, join_body(), 3, "c", "h", r)
    assert r.code is E.NONE


def test_restart_keeps_epochs_and_assignments(tmp_path: Any) -> None:
    store = Store(str(tmp_path / "data"))
    c = make(tmp_path, store=store)
    hb(c, 0)
    hb(c, 10)
    hb(c, 20, "m1", 1, owned={"t": [0, 1, 2, 3]})
    hb(c, 30, "m1", 1, owned={"t": [0, 1]})
    hb(c, 40, "m2", 2)
    c.offsets.commit_offsets(50, "g", "m1", None, 2, 9, [("t", 0, 9, -1, None)])
    store.close()
    store = Store(str(tmp_path / "data"))
    c2 = make(tmp_path, store=store)
    g = c2.groups["g"]
    assert (g.group_epoch, g.assignment_epoch) == (2, 2)
    r = hb(c2, 0, "m2", 2, owned={"t": [2, 3]})
    assert r["error_code"] == 0 and r["member_epoch"] == 2
    r = hb(c2, 0, "m1", 2, owned={"t": [0, 1]})
    assert r["error_code"] == 0 and r["member_epoch"] == 2
    assert c2.admin.consumer_describe(["g"])[0]["group_state"] == "Stable"
    assert c2.offsets.fetch_offsets("g", [("t", [0])])[1] == [("t", [(0, 9, -1, "", E.NONE)])]
    store.close()


@pytest.mark.parametrize("n", [1, 2, 3, 5])
def test_joining_member_knows_its_target_immediately(tmp_path: Any, n: int) -> None:
    c = make(tmp_path)
    for _ in range(n):
        hb(c, 0)
    d = c.admin.consumer_describe(["g"])[0]
    sizes = sorted(sum(len(tp["partitions"]) for tp in m["target_assignment"]["topic_partitions"])
                   for m in d["members"])
    assert sizes == {1: [4], 2: [2, 2], 3: [1, 1, 2], 5: [0, 1, 1, 1, 1]}[n]
    assert d["assignment_epoch"] == d["group_epoch"]


def test_join_under_another_live_members_id_is_refused(tmp_path: Any) -> None:
    """A joining heartbeat may not take over a member id another live member holds: neither a
    static member coming back nor a member naming a different instance id. Before, the
    takeover overwrote the live member, and the next join with its instance id raised KeyError."""
    c = make(tmp_path)
    assert hb(c, 0, instance="i1")["member_id"] == "m1"
    assert hb(c, 10, instance="i2")["member_id"] == "m2"
    hb(c, 20, "m1", -2, instance="i1")  # i1 leaves temporarily
    taken = hb(c, 30, "m2", 0, instance="i1")
    assert taken["error_code"] == E.INVALID_REQUEST
    assert hb(c, 31, "m2", 0, instance="i9")["error_code"] == E.INVALID_REQUEST
    assert hb(c, 32, "m2", 0)["error_code"] == E.INVALID_REQUEST
    # The group is as it was: m2 is still i2's, and i1 can still come back.
    assert hb(c, 40, "m2", -1, instance="i2")["member_epoch"] == -1
    again = hb(c, 50, instance="i2")
    assert again["error_code"] == 0 and again["member_id"] == "m3"
    back = hb(c, 60, instance="i1")
    assert back["error_code"] == 0 and back["member_id"] == "m4"


def test_a_groups_own_config_applies_from_its_next_heartbeat(tmp_path: Any) -> None:
    """GroupConfig (IncrementalAlterConfigs on the GROUP resource): the group's members get its
    heartbeat interval and session timeout from their next heartbeat; other groups keep the
    broker's; taken away, the broker's again."""
    from tmqgate.coordinator.consumer import ConsumerConfig

    c = make(tmp_path)
    hb(c, 0)
    hb(c, 0, group="other")
    c.set_consumer_config("g", ConsumerConfig(session_timeout_ms=30_000, heartbeat_interval_ms=4000))
    r = hb(c, 1000, "m1", 1, owned={"t": [0, 1, 2, 3]})
    assert r["heartbeat_interval_ms"] == 4000
    assert hb(c, 1000, "m2", 1, owned={"t": [0, 1, 2, 3]}, group="other")["heartbeat_interval_ms"] == 1000
    c.tick(13_001)  # past the broker's 12 s: "other"'s member is gone, "g"'s stays (30 s)
    assert list(c.groups["g"].members) == ["m1"] and not c.groups["other"].members
    c.tick(31_001)
    assert not c.groups["g"].members
    r = hb(c, 31_100, group="g")
    assert r["heartbeat_interval_ms"] == 4000  # a new member of the group gets it too
    c.set_consumer_config("g", None)
    assert hb(c, 31_200, r["member_id"], r["member_epoch"], owned={"t": [0, 1, 2, 3]})["heartbeat_interval_ms"] == 1000


class Describable:
    """The authorizer's DESCRIBE as the coordinator asks it: principal -> the topics it may describe."""

    def __init__(self, **allowed: set[str]) -> None:
        self.allowed = allowed
        self.asked: list[tuple[str, str]] = []

    def describable(self, principal: str, host: str, topics: Any) -> set[str]:
        self.asked.append((principal, host))
        return set(topics) & self.allowed.get(principal.removeprefix("User:"), set())


def test_regex_resolves_to_what_each_member_may_describe(tmp_path: Any) -> None:
    """KAFKA-18813: each member's regex topics are filtered by its own principal's DESCRIBE;
    a restored group resolves them again for the same principals."""
    access = Describable(alice={"logs.a"}, bob={"logs.a", "logs.b"})
    store = Store(str(tmp_path / "data"))
    c = GroupCoordinator(store, Topics(**{"logs.a": 1, "logs.b": 1}), now_ms=0,
                         new_consumer_id=iter(["m1", "m2"]).__next__, access=access)

    def join(now: int, principal: str) -> dict[str, Any]:
        return c.consumer_heartbeat(now, {"group_id": "g", "member_id": "", "member_epoch": 0,
                                          "rebalance_timeout_ms": 60_000,
                                          "subscribed_topic_regex": r"logs\..*", "topic_partitions": []},
                                    "client", "/10.0.0.2", principal)

    join(0, "User:alice")
    join(1, "User:bob")
    c.tick(5)
    group = c.groups["g"]
    assert {m: group.member_topics(group.members[m]) for m in ("m1", "m2")} == \
        {"m1": {"logs.a"}, "m2": {"logs.a", "logs.b"}}
    assert set(access.asked) == {("User:alice", "/10.0.0.2"), ("User:bob", "/10.0.0.2")}
    assert all(tp[0] == "logs.a" for tp in group.target["m1"])
    store.close()
    store = Store(str(tmp_path / "data"))
    restored = GroupCoordinator(store, Topics(**{"logs.a": 1, "logs.b": 1}), now_ms=100, access=access).groups["g"]
    assert {m: restored.member_topics(restored.members[m]) for m in ("m1", "m2")} == \
        {"m1": {"logs.a"}, "m2": {"logs.a", "logs.b"}}
    store.close()
