"""The classic group protocol and offsets on a fake clock: no sockets, no asyncio, no sleeping."""

from __future__ import annotations

import struct
from typing import Any

import pytest

from tmqgate.coordinator.classic import ClassicConfig
from tmqgate.coordinator.coordinator import CoordinatorConfig, GroupCoordinator
from tmqgate.protocol.errors import ErrorCode
from tmqgate.storage import Store

E = ErrorCode


class Topics:
    """A TopicSource over a dict name → partition count (ids derived from the name)."""

    def __init__(self, **counts: int) -> None:
        self.counts = dict(counts)

    @staticmethod
    def tid(name: str) -> bytes:
        return name.encode().ljust(16, b"\0")[:16]

    def lookup(self, name: str) -> tuple[bytes, int] | None:
        return (self.tid(name), self.counts[name]) if name in self.counts else None

    def name_of(self, topic_id: bytes) -> str | None:
        return next((n for n in self.counts if self.tid(n) == topic_id), None)

    def names(self) -> list[str]:
        return list(self.counts)


class Capture:
    """A reply callable that remembers what it was called with (None until answered)."""

    def __init__(self) -> None:
        self.value: dict[str, Any] | None = None
        self.calls = 0

    def __call__(self, result: dict[str, Any]) -> None:
        self.value = result
        self.calls += 1

    @property
    def code(self) -> ErrorCode:
        assert self.value is not None, "no reply yet"
        return ErrorCode(self.value["error_code"])


def subscription(*topics: str) -> bytes:
    """A consumer-protocol Subscription v0 as Java/kafka-python encode it."""
    out = struct.pack(">hi", 0, len(topics))
    for t in topics:
        out += struct.pack(">h", len(t)) + t.encode()
    return out + struct.pack(">i", -1)


def make(tmp_path: Any, delay: int = 0, store: Store | None = None, **topics: int) -> GroupCoordinator:
    counter = iter(range(1, 1_000_000))
    config = CoordinatorConfig(classic=ClassicConfig(initial_rebalance_delay_ms=delay))
    return GroupCoordinator(store or Store(str(tmp_path / "data")), Topics(**(topics or {"t": 4})), config,
                            now_ms=0, new_id=lambda: f"id{next(counter)}")


def join_body(member_id: str = "", protocols: tuple[str, ...] = ("range",), group: str = "g",
              session: int = 10_000, rebalance: int = 30_000, instance: str | None = None,
              ptype: str = "consumer", topics: tuple[str, ...] = ("t",)) -> dict[str, Any]:
    return {"group_id": group, "session_timeout_ms": session, "rebalance_timeout_ms": rebalance,
            "member_id": member_id, "group_instance_id": instance, "protocol_type": ptype,
            "protocols": [{"name": p, "metadata": subscription(*topics)} for p in protocols]}


def join(c: GroupCoordinator, now: int, version: int = 7, client: str = "c", **kw: Any) -> Capture:
    r = Capture()
    c.join_group(now, join_body(**kw), version, client, "10.0.0.1", r)
    return r


def join_new(c: GroupCoordinator, now: int, **kw: Any) -> tuple[str, Capture]:
    """The v4+ two-step join: MEMBER_ID_REQUIRED, then the real join with that id."""
    first = join(c, now, **kw)
    assert first.code is E.MEMBER_ID_REQUIRED
    member_id = first.value["member_id"]  # type: ignore[index]
    return member_id, join(c, now, member_id=member_id, **kw)


def sync(c: GroupCoordinator, now: int, member_id: str, generation: int, assignments: dict[str, bytes] | None = None,
         group: str = "g", instance: str | None = None) -> Capture:
    r = Capture()
    c.sync_group(now, {"group_id": group, "generation_id": generation, "member_id": member_id,
                       "group_instance_id": instance,
                       "assignments": [{"member_id": m, "assignment": a} for m, a in (assignments or {}).items()]}, r)
    return r


def stable_pair(c: GroupCoordinator) -> tuple[str, str, int]:
    """Two members A (leader) and B in a Stable group; returns (a, b, generation)."""
    a, ra = join_new(c, 0)
    assert ra.code is E.NONE and ra.value["generation_id"] == 1  # type: ignore[index]
    sync(c, 0, a, 1, {a: b"A"})
    b, rb = join_new(c, 10)
    assert rb.value is None  # B waits for A to rejoin
    assert c.heartbeat(20, "g", a, None, 1) is E.REBALANCE_IN_PROGRESS
    ra = join(c, 30, member_id=a)
    assert ra.code is E.NONE and rb.code is E.NONE
    gen = ra.value["generation_id"]  # type: ignore[index]
    sb = sync(c, 40, b, gen)
    assert sb.value is None
    sa = sync(c, 41, a, gen, {a: b"A2", b: b"B2"})
    assert sa.value["assignment"] == b"A2" and sb.value["assignment"] == b"B2"  # type: ignore[index]
    return a, b, gen


# ---- joining -----------------------------------------------------------------------------


def test_member_id_required_then_join_completes_alone(tmp_path: Any) -> None:
    c = make(tmp_path)
    a, r = join_new(c, 0)
    assert a.startswith("c-id")
    v = r.value
    assert v["generation_id"] == 1 and v["leader"] == a and v["member_id"] == a  # type: ignore[index]
    assert v["protocol_name"] == "range" and v["protocol_type"] == "consumer"  # type: ignore[index]
    assert [m["member_id"] for m in v["members"]] == [a]  # type: ignore[index]
    assert c.groups["g"].state == "CompletingRebalance"
    s = sync(c, 5, a, 1, {a: b"x"})
    assert s.code is E.NONE and s.value["assignment"] == b"x"  # type: ignore[index]
    assert c.groups["g"].state == "Stable"


def test_old_versions_join_without_member_id_round_trip(tmp_path: Any) -> None:
    c = make(tmp_path)
    r = join(c, 0, version=3)
    assert r.code is E.NONE and r.value["generation_id"] == 1  # type: ignore[index]


def test_initial_rebalance_delay_waits_and_extends(tmp_path: Any) -> None:
    c = make(tmp_path, delay=3000)
    a, ra = join_new(c, 0)
    b, rb = join_new(c, 100)
    assert ra.value is None and rb.value is None
    assert c.next_deadline() == 3000
    c.tick(2999)
    assert ra.value is None
    c.tick(3000)  # B joined during the delay: wait one more delay (Kafka's InitialDelayedJoin)
    assert ra.value is None and c.next_deadline() == 6000
    c.tick(6000)
    assert ra.code is E.NONE and rb.code is E.NONE
    assert ra.value["generation_id"] == rb.value["generation_id"] == 1  # type: ignore[index]
    assert len(ra.value["members"]) == 2 and rb.value["members"] == []  # type: ignore[index]


def test_second_member_triggers_rebalance_and_leader_gets_all_metadata(tmp_path: Any) -> None:
    c = make(tmp_path)
    a, b, gen = stable_pair(c)
    assert gen == 2
    g = c.groups["g"]
    assert g.state == "Stable" and g.leader_id == a and list(g.members) == [a, b]


def test_join_in_stable_with_same_protocols_returns_current_generation(tmp_path: Any) -> None:
    c = make(tmp_path)
    a, b, gen = stable_pair(c)
    r = join(c, 100, member_id=b)
    assert r.code is E.NONE and r.value["generation_id"] == gen and r.value["members"] == []  # type: ignore[index]
    assert c.groups["g"].state == "Stable"
    # A changed subscription (new protocol metadata) forces a rebalance.
    r = join(c, 110, member_id=b, topics=("t", "u"))
    assert r.value is None and c.groups["g"].state == "PreparingRebalance"


def test_protocol_vote_and_inconsistent_protocol(tmp_path: Any) -> None:
    c = make(tmp_path)
    a, _ = join_new(c, 0, protocols=("range", "roundrobin"))
    sync(c, 0, a, 1)
    b, rb = join_new(c, 1, protocols=("roundrobin", "range"))
    bad = join(c, 2, protocols=("sticky",))
    assert bad.code is E.INCONSISTENT_GROUP_PROTOCOL
    other_type = join(c, 2, ptype="connect")
    assert other_type.code is E.INCONSISTENT_GROUP_PROTOCOL
    cc, rc = join_new(c, 3, protocols=("roundrobin",))
    join(c, 4, member_id=a, protocols=("range", "roundrobin"))
    assert rb.value["protocol_name"] == "roundrobin"  # type: ignore[index]
    assert rc.code is E.NONE


def test_empty_protocols_and_session_timeout_bounds(tmp_path: Any) -> None:
    c = make(tmp_path)
    assert join(c, 0, protocols=()).code is E.INCONSISTENT_GROUP_PROTOCOL
    assert join(c, 0, session=5999).code is E.INVALID_SESSION_TIMEOUT
    assert join(c, 0, session=1_800_001).code is E.INVALID_SESSION_TIMEOUT
    assert "g" not in c.groups  # refused joins leave no group behind


def test_unknown_member_join(tmp_path: Any) -> None:
    c = make(tmp_path)
    assert join(c, 0, member_id="nobody").code is E.UNKNOWN_MEMBER_ID


# ---- liveness ----------------------------------------------------------------------------


def test_session_expiry_removes_member_and_rebalances(tmp_path: Any) -> None:
    c = make(tmp_path)
    a, b, gen = stable_pair(c)
    for t in range(3000, 10_041, 3000):
        assert c.heartbeat(t, "g", a, None, gen) is E.NONE
    c.tick(10_039)
    assert b in c.groups["g"].members
    c.tick(10_040)  # B's last sign of life was its SyncGroup at 40; session 10 s
    g = c.groups["g"]
    assert b not in g.members and g.state == "PreparingRebalance"
    assert c.heartbeat(10_050, "g", b, None, gen) is E.UNKNOWN_MEMBER_ID
    assert c.heartbeat(10_050, "g", a, None, gen) is E.REBALANCE_IN_PROGRESS
    r = join(c, 10_060, member_id=a)
    assert r.code is E.NONE and r.value["generation_id"] == gen + 1  # type: ignore[index]
    assert [m["member_id"] for m in r.value["members"]] == [a]  # type: ignore[index]


def test_rebalance_timeout_removes_members_that_do_not_rejoin(tmp_path: Any) -> None:
    c = make(tmp_path)
    a, b, gen = stable_pair(c)
    d, rd = join_new(c, 1000)
    ra = join(c, 1100, member_id=a)
    for t in range(1200, 31_000, 3000):  # B stays alive but never rejoins
        assert c.heartbeat(t, "g", b, None, gen) is E.REBALANCE_IN_PROGRESS
    assert ra.value is None and rd.value is None
    c.tick(1000 + 29_999)
    assert ra.value is None
    c.tick(1000 + 30_000)  # the rebalance timeout (30 s) ran out: B is dropped
    assert ra.code is E.NONE and rd.code is E.NONE
    assert {m["member_id"] for m in ra.value["members"]} == {a, d}  # type: ignore[index]
    assert b not in c.groups["g"].members


def test_pending_member_expires(tmp_path: Any) -> None:
    c = make(tmp_path)
    a, b, gen = stable_pair(c)
    first = join(c, 100)
    assert first.code is E.MEMBER_ID_REQUIRED
    c.tick(100 + 10_000)
    assert c.groups["g"].pending == {}


def test_sync_timeout_removes_members_that_never_sync(tmp_path: Any) -> None:
    c = make(tmp_path)
    a, b, gen = stable_pair(c)
    join(c, 100, member_id=a, topics=("t", "u"))
    rb = join(c, 110, member_id=b)
    assert rb.code is E.NONE
    new_gen = rb.value["generation_id"]  # type: ignore[index]
    sb = sync(c, 120, b, new_gen)
    c.tick(110 + 30_000)  # leader A never sent SyncGroup
    assert a not in c.groups["g"].members
    assert sb.code is E.REBALANCE_IN_PROGRESS


# ---- fencing -----------------------------------------------------------------------------


def test_generation_fencing(tmp_path: Any) -> None:
    c = make(tmp_path)
    a, b, gen = stable_pair(c)
    assert c.heartbeat(100, "g", a, None, gen - 1) is E.ILLEGAL_GENERATION
    assert c.heartbeat(100, "g", "ghost", None, gen) is E.UNKNOWN_MEMBER_ID
    assert c.heartbeat(100, "nogroup", a, None, gen) is E.UNKNOWN_MEMBER_ID
    assert sync(c, 100, a, gen - 1).code is E.ILLEGAL_GENERATION
    assert c.offsets.commit_offsets(100, "g", a, None, gen - 1, 7, [("t", 0, 5, -1, None)]) == [E.ILLEGAL_GENERATION]
    assert c.offsets.commit_offsets(100, "g", a, None, gen, 7, [("t", 0, 5, -1, None)]) == [E.NONE]
    join(c, 200, member_id=a, topics=("t", "u"))
    assert sync(c, 210, b, gen).code is E.REBALANCE_IN_PROGRESS
    # During PreparingRebalance a commit of the current generation is still accepted (Kafka does).
    assert c.offsets.commit_offsets(220, "g", b, None, gen, 7, [("t", 1, 5, -1, None)]) == [E.NONE]
    rb = join(c, 230, member_id=b)
    new_gen = rb.value["generation_id"]  # type: ignore[index]
    assert c.offsets.commit_offsets(240, "g", b, None, new_gen, 7, [("t", 1, 6, -1, None)]) == [E.REBALANCE_IN_PROGRESS]


def test_static_member_rejoins_with_new_member_id_without_rebalance(tmp_path: Any) -> None:
    c = make(tmp_path)
    ra = join(c, 0, instance="i1")
    a = ra.value["member_id"]  # type: ignore[index]
    assert ra.code is E.NONE and a.startswith("i1-")  # static members skip MEMBER_ID_REQUIRED
    rb = join(c, 10, instance="i2")
    join(c, 20, member_id=a, instance="i1")
    gen = rb.value["generation_id"]  # type: ignore[index]
    b = rb.value["member_id"]  # type: ignore[index]
    sync(c, 30, b, gen)
    sync(c, 31, a, gen, {a: b"A", b: b"B"})
    # i2 restarts: a new member id, same instance id — same generation, same assignment, no rebalance.
    rb2 = join(c, 100, instance="i2")
    b2 = rb2.value["member_id"]  # type: ignore[index]
    assert rb2.code is E.NONE and b2 != b and rb2.value["generation_id"] == gen  # type: ignore[index]
    assert c.groups["g"].state == "Stable"
    assert sync(c, 110, b2, gen, instance="i2").value["assignment"] == b"B"  # type: ignore[index]
    # The old incarnation is fenced.
    assert c.heartbeat(120, "g", b, "i2", gen) is E.FENCED_INSTANCE_ID
    assert join(c, 130, member_id=b, instance="i2").code is E.FENCED_INSTANCE_ID
    assert c.leave_group(140, "g", [(b, "i2")]) == (E.NONE, [E.FENCED_INSTANCE_ID])
    # A different instance id is a new member: rebalance.
    r3 = join(c, 150, instance="i3")
    assert r3.value is None and c.groups["g"].state == "PreparingRebalance"


def test_static_leader_rejoin_triggers_rebalance(tmp_path: Any) -> None:
    c = make(tmp_path)
    ra = join(c, 0, instance="i1")
    a = ra.value["member_id"]  # type: ignore[index]
    sync(c, 1, a, 1)
    ra2 = join(c, 10, instance="i1")
    assert ra2.code is E.NONE  # the only member: the rebalance completes at once
    assert ra2.value["member_id"] != a and ra2.value["leader"] == ra2.value["member_id"]  # type: ignore[index]


# ---- leaving -----------------------------------------------------------------------------


def test_leave_group_batched_and_unknown(tmp_path: Any) -> None:
    c = make(tmp_path)
    a, b, gen = stable_pair(c)
    top, codes = c.leave_group(100, "g", [(b, None), ("ghost", None)])
    assert top is E.NONE and codes == [E.NONE, E.UNKNOWN_MEMBER_ID]
    assert c.groups["g"].state == "PreparingRebalance"
    assert c.leave_group(110, "g", [(a, None)])[1] == [E.NONE]
    g = c.groups["g"]
    assert g.state == "Empty" and g.generation == gen + 1 and not g.members


# ---- offsets -----------------------------------------------------------------------------


def test_simple_group_commit_and_fetch(tmp_path: Any) -> None:
    c = make(tmp_path)
    codes = c.offsets.commit_offsets(0, "manual", "", None, -1, 8, [("t", 0, 42, 3, "meta"), ("t", 9, 1, -1, None),
                                                                     ("nope", 0, 1, -1, None)])
    assert codes == [E.NONE, E.UNKNOWN_TOPIC_OR_PARTITION, E.UNKNOWN_TOPIC_OR_PARTITION]
    code, rows = c.offsets.fetch_offsets("manual", [("t", [0, 1])])
    assert code is E.NONE
    assert rows == [("t", [(0, 42, 3, "meta", E.NONE), (1, -1, -1, "", E.NONE)])]
    assert c.offsets.fetch_offsets("manual", None) == (E.NONE, [("t", [(0, 42, 3, "meta", E.NONE)])])
    assert c.offsets.fetch_offsets("other", [("t", [0])]) == (E.NONE, [("t", [(0, -1, -1, "", E.NONE)])])
    assert c.offsets.fetch_offsets("other", None) == (E.NONE, [])
    assert c.offsets.commit_offsets(0, "x", "m", None, 3, 8, [("t", 0, 1, -1, None)]) == [E.ILLEGAL_GENERATION]
    assert c.offsets.commit_offsets(0, "x", "", None, -1, 8,
                                    [("t", 0, 1, -1, "m" * 4097)]) == [E.OFFSET_METADATA_TOO_LARGE]


def test_simple_commit_refused_while_group_has_members(tmp_path: Any) -> None:
    c = make(tmp_path)
    stable_pair(c)
    assert c.offsets.commit_offsets(0, "g", "", None, -1, 8, [("t", 0, 1, -1, None)]) == [E.UNKNOWN_MEMBER_ID]


def test_groups_progress_is_independent(tmp_path: Any) -> None:
    c = make(tmp_path)
    c.offsets.commit_offsets(0, "g1", "", None, -1, 8, [("t", 0, 10, -1, None)])
    c.offsets.commit_offsets(0, "g2", "", None, -1, 8, [("t", 0, 20, -1, None)])
    assert c.offsets.fetch_offsets("g1", [("t", [0])])[1][0][1][0][1] == 10
    assert c.offsets.fetch_offsets("g2", [("t", [0])])[1][0][1][0][1] == 20


def test_restart_keeps_offsets_and_stable_group(tmp_path: Any) -> None:
    store = Store(str(tmp_path / "data"))
    c = make(tmp_path, store=store)
    a, b, gen = stable_pair(c)
    c.offsets.commit_offsets(50, "g", a, None, gen, 8, [("t", 0, 7, 1, "x")])
    store.close()
    store = Store(str(tmp_path / "data"))
    c2 = make(tmp_path, store=store)
    g = c2.groups["g"]
    assert g.state == "Stable" and g.generation == gen and list(g.members) == [a, b] and g.leader_id == a
    assert c2.heartbeat(10, "g", a, None, gen) is E.NONE
    r = sync(c2, 10, b, gen)
    assert r.value["assignment"] == b"B2"  # type: ignore[index]
    assert c2.offsets.fetch_offsets("g", [("t", [0])]) == (E.NONE, [("t", [(0, 7, 1, "x", E.NONE)])])
    # Members that never come back expire as usual.
    c2.tick(10 + 10_000)
    assert a not in c2.groups["g"].members
    store.close()


def test_restart_of_empty_group_keeps_generation(tmp_path: Any) -> None:
    store = Store(str(tmp_path / "data"))
    c = make(tmp_path, store=store)
    a, b, gen = stable_pair(c)
    c.leave_group(60, "g", [(a, None), (b, None)])
    store.close()
    store = Store(str(tmp_path / "data"))
    c2 = make(tmp_path, store=store)
    assert c2.groups["g"].state == "Empty" and c2.groups["g"].generation == gen + 1
    a2, r = join_new(c2, 0)
    assert r.value["generation_id"] == gen + 2  # type: ignore[index]
    store.close()


def test_deleted_topic_loses_offsets(tmp_path: Any) -> None:
    c = make(tmp_path, t=4, u=2)
    c.offsets.commit_offsets(0, "g", "", None, -1, 8, [("t", 0, 5, -1, None), ("u", 0, 6, -1, None)])
    del c.topics.counts["u"]  # type: ignore[attr-defined]
    c.tick(1)
    assert c.offsets.fetch_offsets("g", None) == (E.NONE, [("t", [(0, 5, -1, "", E.NONE)])])


# ---- admin -------------------------------------------------------------------------------


def test_list_describe_delete(tmp_path: Any) -> None:
    c = make(tmp_path)
    a, b, gen = stable_pair(c)
    c.offsets.commit_offsets(0, "simple", "", None, -1, 8, [("t", 0, 1, -1, None)])
    groups = c.admin.list_groups()
    assert groups == [
        {"group_id": "g", "protocol_type": "consumer", "group_state": "Stable", "group_type": "classic"},
        {"group_id": "simple", "protocol_type": "", "group_state": "Empty", "group_type": "classic"},
    ]
    assert [g["group_id"] for g in c.admin.list_groups(states=["empty"])] == ["simple"]
    assert c.admin.list_groups(types=["consumer"]) == []
    d = c.admin.describe_group("g", 5)
    assert d["group_state"] == "Stable" and d["protocol_data"] == "range"
    assert [(m["member_id"], m["client_host"], m["member_assignment"]) for m in d["members"]] == [
        (a, "10.0.0.1", b"A2"), (b, "10.0.0.1", b"B2")]
    assert d["members"][0]["member_metadata"] == subscription("t")
    assert c.admin.describe_group("missing", 5)["group_state"] == "Dead"
    assert c.admin.describe_group("missing", 6)["error_code"] == E.GROUP_ID_NOT_FOUND
    assert c.admin.delete_groups(["g", "simple", "missing"]) == [
        ("g", E.NON_EMPTY_GROUP), ("simple", E.NONE), ("missing", E.GROUP_ID_NOT_FOUND)]
    assert c.offsets.fetch_offsets("simple", None) == (E.NONE, [])
    c.leave_group(0, "g", [(a, None), (b, None)])
    assert c.admin.delete_groups(["g"]) == [("g", E.NONE)]
    assert c.admin.list_groups() == []


def test_offset_delete(tmp_path: Any) -> None:
    c = make(tmp_path, t=4, u=2)
    a, b, gen = stable_pair(c)
    c.offsets.commit_offsets(0, "g", a, None, gen, 8, [("t", 0, 5, -1, None), ("u", 1, 6, -1, None)])
    code, rows = c.offsets.delete_offsets("g", [("t", [0]), ("u", [1])])
    assert code is E.NONE and rows == [("t", [(0, E.GROUP_SUBSCRIBED_TO_TOPIC)]), ("u", [(1, E.NONE)])]
    assert c.offsets.fetch_offsets("g", None)[1] == [("t", [(0, 5, -1, "", E.NONE)])]
    assert c.offsets.delete_offsets("missing", [("t", [0])])[0] is E.GROUP_ID_NOT_FOUND


def test_reply_is_called_once_per_request(tmp_path: Any) -> None:
    c = make(tmp_path)
    a, b, gen = stable_pair(c)
    rb = join(c, 100, member_id=b, topics=("u",))
    ra = join(c, 110, member_id=a)
    assert rb.calls == 1 and ra.calls == 1


@pytest.mark.parametrize("n", [1, 3])
def test_many_members_single_generation(tmp_path: Any, n: int) -> None:
    c = make(tmp_path, delay=3000)
    caps = [join_new(c, i)[1] for i in range(n)]
    c.tick(3000)
    c.tick(6000)
    gens = {r.value["generation_id"] for r in caps}  # type: ignore[index]
    assert gens == {1}


# ---- rebalance statistics (GET /metrics) -------------------------------------------------


def test_rebalances_counted_with_their_time(tmp_path: Any) -> None:
    """stable_pair: A's rebalance (join at 0, Stable at 0), then B's (B joins at 10: A's group
    goes to PreparingRebalance; Stable again when A's SyncGroup comes at 41)."""
    c = make(tmp_path)
    stable_pair(c)
    stats = c.rebalances
    assert stats.completed == {"classic": 2}
    assert stats.total_ms == {"classic": 31}
    assert stats.abandoned == {} and stats.started == {}


def test_rebalance_ending_empty_is_abandoned(tmp_path: Any) -> None:
    c = make(tmp_path)
    a, ra = join_new(c, 0)
    assert ra.code is E.NONE
    c.leave_group(5, "g", [(a, None)])  # CompletingRebalance -> Empty
    assert c.rebalances.completed == {} and c.rebalances.abandoned == {"classic": 1}
