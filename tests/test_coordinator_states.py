"""The coordinator's state machines as data: the tables, the one checked transition per machine,
and random walks that drive the real machines through their events on a fake clock."""

from __future__ import annotations

import ast
import itertools
import random
from pathlib import Path
from typing import Any

import pytest

import tmqgate.coordinator.classic as classic_mod
import tmqgate.coordinator.consumer as consumer_mod
from tests.test_coordinator import Topics
from tests.test_coordinator import join as classic_join
from tests.test_coordinator import make as make_classic
from tests.test_coordinator import sync as classic_sync
from tests.test_coordinator_consumer import hb
from tests.test_coordinator_consumer import make as make_consumer
from tmqgate.coordinator.classic import VALID_PREVIOUS, ClassicConfig, ClassicGroup, ClassicGroupState
from tmqgate.coordinator.consumer import (
    GROUP_VALID_PREVIOUS,
    MEMBER_VALID_PREVIOUS,
    ConsumerConfig,
    ConsumerGroup,
    ConsumerGroupState,
    ConsumerMember,
    MemberState,
)
from tmqgate.coordinator.coordinator import GroupCoordinator
from tmqgate.protocol.transitions import IllegalStateTransition, valid_transitions

CS = ClassicGroupState
GS = ConsumerGroupState
MS = MemberState


# ---- the classic table -------------------------------------------------------------------


def test_classic_state_names_are_kafkas() -> None:
    assert [s.value for s in CS] == ["Empty", "PreparingRebalance", "CompletingRebalance", "Stable", "Dead"]
    assert CS.STABLE == "Stable" and type(CS.STABLE.value) is str


def test_classic_table_is_kafkas_classic_group_state() -> None:
    """Apache Kafka's ClassicGroupState.validPreviousStates, spelled out."""
    assert VALID_PREVIOUS == {
        CS.EMPTY: {CS.PREPARING_REBALANCE},
        CS.PREPARING_REBALANCE: {CS.STABLE, CS.COMPLETING_REBALANCE, CS.EMPTY},
        CS.COMPLETING_REBALANCE: {CS.PREPARING_REBALANCE},
        CS.STABLE: {CS.COMPLETING_REBALANCE},
        CS.DEAD: {CS.STABLE, CS.PREPARING_REBALANCE, CS.COMPLETING_REBALANCE, CS.EMPTY, CS.DEAD},
    }


def _classic(state: ClassicGroupState) -> ClassicGroup:
    return ClassicGroup("g", ClassicConfig(), lambda: "x", state=state)


@pytest.mark.parametrize(("prev", "target"), sorted(valid_transitions(VALID_PREVIOUS)))
def test_classic_valid_transition_accepted(prev: ClassicGroupState, target: ClassicGroupState) -> None:
    group = _classic(prev)
    group._transition(target)
    assert group.state is target


@pytest.mark.parametrize(("prev", "target"),
                         sorted(set(itertools.product(CS, CS)) - valid_transitions(VALID_PREVIOUS)))
def test_classic_invalid_transition_refused(prev: ClassicGroupState, target: ClassicGroupState) -> None:
    group = _classic(prev)
    with pytest.raises(IllegalStateTransition) as exc:
        group._transition(target)
    assert group.state is prev and exc.value.current is prev and exc.value.target is target


def test_classic_refusals_include_the_documented_ones() -> None:
    refused = set(itertools.product(CS, CS)) - valid_transitions(VALID_PREVIOUS)
    assert (CS.EMPTY, CS.STABLE) in refused  # Stable only from CompletingRebalance
    assert (CS.STABLE, CS.EMPTY) in refused  # Empty only from PreparingRebalance
    assert (CS.PREPARING_REBALANCE, CS.PREPARING_REBALANCE) in refused
    assert all((CS.DEAD, s) in refused for s in CS if s is not CS.DEAD)  # no way out of Dead
    assert all((s, CS.DEAD) not in refused for s in CS)  # Dead from any


# ---- the KIP-848 tables ------------------------------------------------------------------


def test_consumer_state_names() -> None:
    assert [s.value for s in GS] == ["Empty", "Assigning", "Reconciling", "Stable", "Dead"]


def test_consumer_group_table() -> None:
    live = {GS.EMPTY, GS.ASSIGNING, GS.RECONCILING, GS.STABLE}
    assert GROUP_VALID_PREVIOUS == {**{s: live - {s} for s in live}, GS.DEAD: {GS.EMPTY}}


def _consumer(state: ConsumerGroupState) -> ConsumerGroup:
    return ConsumerGroup("g", ConsumerConfig(), Topics(t=4), lambda: "m", state=state)


@pytest.mark.parametrize(("prev", "target"), sorted(valid_transitions(GROUP_VALID_PREVIOUS)))
def test_consumer_group_valid_transition_accepted(prev: ConsumerGroupState, target: ConsumerGroupState) -> None:
    group = _consumer(prev)
    group._transition(target)
    assert group.state is target


@pytest.mark.parametrize(("prev", "target"), [(GS.STABLE, GS.DEAD), (GS.RECONCILING, GS.DEAD),
                                              (GS.DEAD, GS.EMPTY), (GS.DEAD, GS.STABLE)])
def test_consumer_group_invalid_transition_refused(prev: ConsumerGroupState, target: ConsumerGroupState) -> None:
    group = _consumer(prev)
    with pytest.raises(IllegalStateTransition):
        group._transition(target)
    assert group.state is prev


def test_member_table() -> None:
    assert MEMBER_VALID_PREVIOUS == {
        MS.JOINING: {MS.STABLE, MS.UNREVOKED_PARTITIONS, MS.UNRELEASED_PARTITIONS},
        MS.STABLE: {MS.JOINING, MS.UNREVOKED_PARTITIONS, MS.UNRELEASED_PARTITIONS},
        MS.UNREVOKED_PARTITIONS: {MS.STABLE, MS.UNRELEASED_PARTITIONS},
        MS.UNRELEASED_PARTITIONS: {MS.JOINING, MS.STABLE, MS.UNREVOKED_PARTITIONS},
    }


@pytest.mark.parametrize(("prev", "target"), sorted(valid_transitions(MEMBER_VALID_PREVIOUS), key=str))
def test_member_valid_transition_accepted(prev: MemberState, target: MemberState) -> None:
    group, member = _consumer(GS.STABLE), ConsumerMember("m", state=prev)
    group._set_member_state(member, target)
    assert member.state is target


def test_member_invalid_transition_refused() -> None:
    group, member = _consumer(GS.STABLE), ConsumerMember("m", state=MS.JOINING)
    with pytest.raises(IllegalStateTransition):
        group._set_member_state(member, MS.UNREVOKED_PARTITIONS)  # a joining member holds nothing to revoke
    assert member.state is MS.JOINING


def test_consumer_delete_only_when_empty(tmp_path: Any) -> None:
    c = make_consumer(tmp_path)
    hb(c, 0)
    group = c.groups["g"]
    assert isinstance(group, ConsumerGroup)
    with pytest.raises(IllegalStateTransition):
        group.delete()
    hb(c, 10, "m1", -1)
    assert group.state is GS.EMPTY
    assert c.admin.delete_groups(["g"])[0][1] == 0 and group.state is GS.DEAD


# ---- one transition function per machine --------------------------------------------------


@pytest.mark.parametrize(("module", "allowed"), [(classic_mod, {"_transition"}),
                                                 (consumer_mod, {"_transition", "_set_member_state"})])
def test_state_assigned_only_by_the_transition_functions(module: Any, allowed: set[str]) -> None:
    tree = ast.parse(Path(module.__file__).read_text())
    owners: list[str] = []
    for func in ast.walk(tree):
        if isinstance(func, ast.FunctionDef):
            for node in ast.walk(func):
                targets = node.targets if isinstance(node, ast.Assign) else (
                    [node.target] if isinstance(node, ast.AugAssign | ast.AnnAssign) else [])
                for t in targets:
                    for sub in ast.walk(t):
                        if isinstance(sub, ast.Attribute) and sub.attr == "state":
                            owners.append(func.name)
    assert owners and set(owners) <= allowed


# ---- the real machines, driven at random ----------------------------------------------------


@pytest.mark.parametrize("seed", range(12))
def test_classic_random_walk_only_takes_valid_transitions(tmp_path: Any, seed: int) -> None:
    rng = random.Random(seed)
    c = make_classic(tmp_path / str(seed), delay=rng.choice([0, 0, 3000]))
    now, known, gens, seen = 0, [], {}, set()
    for _ in range(300):
        now += rng.choice([1, 50, 500, 4000, 12_000])
        c.tick(now)
        group = c.groups.get("g")
        before = group.state if group is not None else None
        action = rng.random()
        if action < 0.3 or not known:
            mid = rng.choice(["", *known]) if known else ""
            r = classic_join(c, now, version=rng.choice([3, 7]), member_id=mid,
                             protocols=rng.choice([("range",), ("range", "rr"), ("rr",)]),
                             instance=rng.choice([None, None, "i1"]), session=10_000, rebalance=8000)
            if r.value is not None and r.value["error_code"] in (0, 79):
                known.append(r.value["member_id"])
                gens[r.value["member_id"]] = r.value["generation_id"]
        elif action < 0.55:
            mid = rng.choice(known)
            group = c.groups.get("g")
            gen = group.generation if group is not None else -1
            classic_sync(c, now, mid, gen, {m: b"a" for m in known})
        elif action < 0.8:
            mid = rng.choice(known)
            group = c.groups.get("g")
            c.heartbeat(now, "g", mid, None, group.generation if isinstance(group, ClassicGroup) else -1)
        elif action < 0.95:
            c.leave_group(now, "g", [(rng.choice(known), rng.choice([None, "i1"]))])
        else:
            c.admin.delete_groups(["g"])
        group = c.groups.get("g")
        if group is not None and before is not None:
            seen.add((before, group.state))
    # With group.initial.rebalance.delay.ms = 0 a first join goes Empty -> CompletingRebalance
    # within one event (Kafka's 0 ms timer), so a walk may see as few as three (before, after) pairs.
    assert len(seen) >= 3


@pytest.mark.parametrize("seed", range(12))
def test_consumer_random_walk_states_follow_the_epochs(tmp_path: Any, seed: int) -> None:
    rng = random.Random(seed)
    c: GroupCoordinator = make_consumer(tmp_path / str(seed), t=4, u=2)
    topics = c.topics
    assert isinstance(topics, Topics)
    now = 0
    epochs: dict[str, int] = {}
    owned: dict[str, dict[str, list[int]]] = {}
    member_states: set[MemberState] = set()
    for _ in range(400):
        now += rng.choice([1, 100, 1000, 5000, 13_000])
        action = rng.random()
        if action < 0.2 or not epochs:
            # a rejoin under its own id (epoch 0) or a new member, perhaps static
            rejoin = rng.choice(list(epochs)) if epochs and rng.random() < 0.3 else ""
            r = hb(c, now, rejoin, 0, topics=rng.choice([["t"], ["t", "u"], ["u"]]),
                   instance=None if rejoin else rng.choice([None, None, "i1", "i2"]),
                   assignor=rng.choice([None, None, None, "uniform", "bogus"]),
                   rebalance_timeout=rng.choice([3000, 60_000]))
        elif action < 0.75:
            mid = rng.choice(list(epochs))
            r = hb(c, now, mid, epochs[mid] if rng.random() < 0.9 else epochs[mid] + 1,
                   owned=owned.get(mid, {}) if rng.random() < 0.8 else None,
                   topics=rng.choice([None, None, None, ["t"], ["t", "u"]]))
        elif action < 0.85:
            mid = rng.choice(list(epochs))
            r = hb(c, now, mid, rng.choice([-1, -2]), instance=rng.choice([None, "i1", "i2"]))
        elif action < 0.9:
            topics.counts["t"] = rng.choice([2, 4, 6])
            c.tick(now)
            r = {"error_code": -1}
        else:
            c.tick(now)
            r = {"error_code": -1}
        if r["error_code"] == 0 and r["member_epoch"] >= 0:
            epochs[r["member_id"]] = r["member_epoch"]
            if r["assignment"] is not None:
                owned[r["member_id"]] = {}
                for tp in r["assignment"]["topic_partitions"]:
                    name = topics.name_of(bytes(tp["topic_id"]))
                    if name is not None:
                        owned[r["member_id"]][name] = list(tp["partitions"])
        elif r["error_code"] == 0:
            epochs.pop(r["member_id"], None)
        group = c.groups.get("g")
        if isinstance(group, ConsumerGroup):
            assert group.state is group._epochs_state()
            for m in group.members.values():
                member_states.add(m.state)
                assert bool(m.revoking) == (m.state is MS.UNREVOKED_PARTITIONS)
                if m.state is MS.JOINING:
                    assert not m.assigned
        for gone in [m for m in epochs if not isinstance(group, ConsumerGroup) or m not in group.members]:
            epochs.pop(gone)
    assert {MS.STABLE, MS.UNREVOKED_PARTITIONS} <= member_states


# ---- what clients see --------------------------------------------------------------------


def test_reported_states_are_plain_strings_and_filter(tmp_path: Any) -> None:
    c = make_consumer(tmp_path)
    hb(c, 0, group="kip")
    hb(c, 10, group="kip")  # the second member waits for a release: Reconciling
    r = classic_join(c, 0, version=3, group="old")
    c.tick(3000)  # the default group.initial.rebalance.delay.ms
    classic_sync(c, 3001, r.value["member_id"], 1, group="old")  # type: ignore[index]
    listed = {g["group_id"]: g["group_state"] for g in c.admin.list_groups()}
    assert listed == {"kip": "Reconciling", "old": "Stable"}
    assert all(type(s) is str for s in listed.values())
    assert [g["group_id"] for g in c.admin.list_groups(states=["reconciling"])] == ["kip"]
    assert [g["group_id"] for g in c.admin.list_groups(states=["Stable", "Empty"])] == ["old"]
    described = c.admin.describe_group("old", 5)["group_state"]
    kip = c.admin.consumer_describe(["kip"])[0]["group_state"]
    assert (described, kip) == ("Stable", "Reconciling") and type(described) is str and type(kip) is str
