"""The cluster view from etcd's keys (broker.metadata.view): pure, no etcd needed."""

from __future__ import annotations

import pytest

from tmqgate.broker.metadata.view import (
    PREFERRED,
    UNCLEAN,
    BrokerInfo,
    PartitionState,
    Placement,
    assign,
    broker_key,
    broker_value,
    controller_value,
    elect,
    elect_asked,
    parse_cluster,
    placement_value,
    placements_from,
    reassign,
    rebalance,
    topic_key,
    view_from,
)
from tmqgate.protocol.errors import ErrorCode


def test_view_from_registrations_and_the_controller_key() -> None:
    view, bad = view_from([(broker_key(2), broker_value("h2", 9093)), (broker_key(0), broker_value("h0", 9092)),
                           ("/tmqgate/brokers/x", "{}"), (broker_key(5), "not json")],
                          (controller_value(2), 41))
    assert view.live() == [BrokerInfo(0, "h0", 9092), BrokerInfo(2, "h2", 9093)]
    assert (view.controller_id, view.controller_epoch) == (2, 41)
    assert sorted(bad) == ["/tmqgate/brokers/5", "/tmqgate/brokers/x"]
    empty, _ = view_from([], None)
    assert (empty.live(), empty.controller_id) == ([], -1)


def test_a_registration_carries_what_show_dnodes_shows() -> None:
    facts = {"started_ms": 1_700_000_000_500, "created_ms": 1_600_000_000_000, "support_vnodes": 500, "other": 1}
    view, bad = view_from([(broker_key(1), broker_value("h1", 9094, facts))], None)
    assert (view.live(), bad) == ([BrokerInfo(1, "h1", 9094, 1_700_000_000_500, 1_600_000_000_000, 500)], [])


def test_cluster_urls() -> None:
    assert parse_cluster("etcd://127.0.0.1:2379,10.0.0.2:2380") == [("127.0.0.1", 2379), ("10.0.0.2", 2380)]
    for bad in ("127.0.0.1:2379", "etcd://host", "etcd://:2379", "http://h:1"):
        with pytest.raises(ValueError):
            parse_cluster(bad)


def test_assign_spreads_leaders_evenly_from_the_start_broker() -> None:
    states = assign(6, 1, [3, 1, 2], start=1)
    assert [s.leader for s in states] == [2, 3, 1, 2, 3, 1]
    assert all(s.replicas == s.isr == (s.leader,) and s.epoch == 0 for s in states)
    three = assign(3, 3, [1, 2, 3], start=0)
    assert [s.replicas for s in three] == [(1, 2, 3), (2, 3, 1), (3, 1, 2)]
    with pytest.raises(ValueError, match="factor of 2 cannot be reached because only 1 broker"):
        assign(1, 2, [1], start=0)


def _placement(*states: PartitionState) -> Placement:
    return Placement("t", bytes(range(16)), {"retention.ms": "1000"}, states)


def test_elect_moves_a_dead_leader_to_the_next_in_sync_replica_and_bumps_the_epoch() -> None:
    p = _placement(PartitionState((1, 2, 3), 1, 4, (1, 2, 3)), PartitionState((2, 3, 1), 2, 0, (2, 3, 1)))
    assert elect(p, {1, 2, 3}) is p
    moved = elect(p, {2, 3})
    # the second partition keeps its live leader and epoch; the dead broker leaves its ISR at once
    assert moved.partitions == (PartitionState((1, 2, 3), 2, 5, (2, 3)), PartitionState((2, 3, 1), 2, 0, (2, 3)))


def test_elect_takes_a_partition_offline_and_back_only_through_its_isr() -> None:
    p = _placement(PartitionState((1,), 1, 0, (1,)), PartitionState((1, 2), 1, 0, (1,)))
    offline = elect(p, {2})
    # (1, 2) with ISR (1,): 2 is not in sync, so no unclean election
    assert offline.partitions == (PartitionState((1,), -1, 1, (1,)), PartitionState((1, 2), -1, 1, (1,)))
    assert elect(offline, {2}) is offline
    back = elect(offline, {1, 2})
    assert [(s.leader, s.epoch) for s in back.partitions] == [(1, 2), (1, 2)]


def test_placements_round_trip_and_unreadable_ones_are_reported() -> None:
    p = _placement(PartitionState((1, 2), 2, 7, (2,)))
    found, bad = placements_from([(topic_key("t"), placement_value(p)), (topic_key("u"), "{}"),
                                  (topic_key("v"), placement_value(p).replace(bytes(range(16)).hex(), "ab"))])
    assert found == {"t": p}
    assert sorted(bad) == [topic_key("u"), topic_key("v")]


def test_preferred_election_as_kafkas_controller_decides_it() -> None:
    s = PartitionState((1, 2, 0), 2, 4, (0, 1, 2))
    # the preferred replica (the first) is live and in sync: it leads, at the next epoch
    assert elect_asked(s, PREFERRED, {0, 1, 2}) == (PartitionState((1, 2, 0), 1, 5, (0, 1, 2)), ErrorCode.NONE)
    # it leads already; it is dead; it is live but out of the ISR: nothing changes
    led = PartitionState((1, 2, 0), 1, 4, (0, 1, 2))
    assert elect_asked(led, PREFERRED, {0, 1, 2}) == (led, ErrorCode.ELECTION_NOT_NEEDED)
    assert elect_asked(s, PREFERRED, {0, 2}) == (s, ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE)
    lagging = PartitionState((1, 2, 0), 2, 4, (0, 2))
    assert elect_asked(lagging, PREFERRED, {0, 1, 2}) == (lagging, ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE)
    # never unclean: an offline partition whose preferred replica is live but not in sync stays offline
    offline = PartitionState((1, 2, 0), -1, 6, (2,))
    assert elect_asked(offline, PREFERRED, {0, 1}) == (offline, ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE)


def test_unclean_election_only_for_a_partition_without_a_live_leader() -> None:
    led = PartitionState((1, 2, 0), 2, 4, (2,))
    assert elect_asked(led, UNCLEAN, {0, 1, 2}) == (led, ErrorCode.ELECTION_NOT_NEEDED)
    offline = PartitionState((1, 2, 0), -1, 6, (2,))
    # its last in-sync replica is back: a clean choice first
    assert elect_asked(offline, UNCLEAN, {0, 2}) == (PartitionState((1, 2, 0), 2, 7, (2,)), ErrorCode.NONE)
    # only out-of-sync replicas are live: the first of them, alone in the ISR
    assert elect_asked(offline, UNCLEAN, {0, 1}) == (PartitionState((1, 2, 0), 1, 7, (1,)), ErrorCode.NONE)
    assert elect_asked(offline, UNCLEAN, set()) == (offline, ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE)


def test_a_reassignment_adds_the_target_then_drops_the_rest_once_they_are_in_sync() -> None:
    s = PartitionState((0, 1), 0, 3, (0, 1))
    started, error, _ = reassign(s, (2, 1), {0, 1, 2})
    assert error == ErrorCode.NONE
    assert started == PartitionState((2, 1, 0), 0, 3, (0, 1), adding=(2,), removing=(0,))
    # the placement's JSON keeps the reassignment
    [back] = placements_from([(topic_key("t"), placement_value(Placement("t", b"i" * 16, {}, (started,))))])[0].values()
    assert back.partitions == (started,)
    # not finished while broker 2 is out of the ISR; once it is in, the leader (0, removed) hands
    # over to the first in-sync target replica, at the next epoch, the ISR within the target
    assert elect(Placement("t", b"i" * 16, {}, (started,)), {0, 1, 2}).partitions == (started,)
    synced = PartitionState((2, 1, 0), 0, 3, (0, 1, 2), adding=(2,), removing=(0,))
    assert elect(Placement("t", b"i" * 16, {}, (synced,)), {0, 1, 2}).partitions == \
        (PartitionState((2, 1), 2, 4, (1, 2)),)
    # a leader that stays keeps leading
    kept = PartitionState((1, 2, 0), 1, 3, (0, 1, 2), adding=(2,), removing=(0,))
    assert elect(Placement("t", b"i" * 16, {}, (kept,)), {0, 1, 2}).partitions == \
        (PartitionState((1, 2), 1, 4, (1, 2)),)


def test_reassignment_is_cancelled_back_to_the_original_replicas_and_validated() -> None:
    started = PartitionState((2, 1, 0), 0, 3, (0, 1), adding=(2,), removing=(0,))
    # (the original replicas in the order the merged list has them, as Kafka reverts)
    assert reassign(started, None, {0, 1, 2}) == (PartitionState((1, 0), 0, 4, (0, 1)), ErrorCode.NONE, None)
    # a new target replaces the running one, computed from the original replicas
    again, error, _ = reassign(started, (0, 2), {0, 1, 2})
    assert (again, error) == (PartitionState((0, 2, 1), 0, 3, (0, 1), adding=(2,), removing=(1,)), ErrorCode.NONE)
    s = PartitionState((0, 1), 0, 3, (0, 1))
    assert reassign(s, None, {0, 1})[1] == ErrorCode.NO_REASSIGNMENT_IN_PROGRESS
    assert reassign(s, (1, 0), {0, 1}) == (PartitionState((1, 0), 0, 3, (0, 1)), ErrorCode.NONE, None)  # order only
    assert reassign(s, (), {0, 1})[1:] == (ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                            "The manual partition assignment includes an empty replica list.")
    assert reassign(s, (1, 1), {0, 1})[1:] == (ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                                "The manual partition assignment includes broker ID 1 more than once.")
    assert reassign(s, (0, 7), {0, 1})[1:] == (
        ErrorCode.INVALID_REPLICA_ASSIGNMENT,
        "The manual partition assignment includes broker 7, but no such broker is registered.")
    assert reassign(s, (0, 1, 2), {0, 1, 2}, allow_factor_change=False)[1:] == (
        ErrorCode.INVALID_REPLICATION_FACTOR, "The replication factor is changed from 2 to 3")


def test_rebalance_gives_partitions_back_to_live_in_sync_preferred_replicas() -> None:
    moved = PartitionState((1, 2, 0), 2, 4, (0, 1, 2))  # 1 is back and in sync: it leads again
    lagging = PartitionState((0, 1, 2), 1, 2, (1, 2))  # 0 is not in sync yet: stays
    home = PartitionState((2, 0, 1), 2, 0, (0, 1, 2))
    p = Placement("t", b"i" * 16, {}, (moved, lagging, home))
    assert rebalance(p, {0, 1, 2}).partitions == (PartitionState((1, 2, 0), 1, 5, (0, 1, 2)), lagging, home)
    balanced = Placement("u", b"j" * 16, {}, (lagging, home))
    assert rebalance(balanced, {0, 1, 2}) is balanced
    assert rebalance(p, {0, 2}) is p  # 1 is dead


def test_a_replicas_role_in_show_vgroups() -> None:
    from tmqgate.broker.cluster.dnodes import role

    led = PartitionState((0, 1, 2, 3), leader=1, epoch=4, isr=(1, 2), adding=(3,))
    live = {0, 1, 2, 3}
    assert [role(r, led, live) for r in led.replicas] == ["learner", "leader", "follower", "learner"]
    assert [role(r, led, live - {2}) for r in led.replicas] == ["learner", "leader", "offline", "learner"]
    offline = PartitionState((0, 1), leader=-1, epoch=5, isr=(0,))  # unclean election off: no leader
    assert [role(r, offline, {1}) for r in offline.replicas] == ["offline", "candidate"]


def _db(*states: tuple[int, tuple[int, ...]], replicas: tuple[int, ...] = (0, 1, 2)) -> Placement:
    """A SQL database's placement: each vnode's (leader, ISR) at epoch 3."""
    from tmqgate.broker.metadata.view import DEFINITION, KIND, TSDB_KIND

    return Placement("db", b"\x01" * 16, {KIND: TSDB_KIND, DEFINITION: "{}"},
                     tuple(PartitionState(replicas, leader, 3, isr) for leader, isr in states))


def test_a_sql_databases_vnodes_are_elected_together() -> None:
    from tmqgate.broker.metadata.view import elect, rebalance

    # a live leader of every vnode stays; dead members leave the ISRs
    p = _db((0, (0, 1, 2)), (0, (0, 2)))
    assert [(s.leader, s.epoch, s.isr) for s in elect(p, {0, 1}).partitions] == [(0, 3, (0, 1)), (0, 3, (0,))]
    assert elect(p, {0, 1, 2}) is p
    # the leader dies: the first replica in every vnode's ISR leads them all (2, not 1: 1 is out
    # of vnode 1's ISR and may lack what it acknowledged)
    p = _db((0, (0, 1, 2)), (0, (0, 2)), (0, (0, 2, 1)))
    assert [(s.leader, s.epoch, s.isr) for s in elect(p, {1, 2}).partitions] == \
        [(2, 4, (1, 2)), (2, 4, (2,)), (2, 4, (2, 1))]
    # no replica in every ISR: every vnode offline (never one leader here, another there)
    p = _db((0, (0, 1)), (0, (0, 2)))
    assert [(s.leader, s.epoch) for s in elect(p, {1, 2}).partitions] == [(-1, 4), (-1, 4)]
    # vnodes led apart (never written so, but read so): brought under one leader
    p = _db((1, (0, 1, 2)), (2, (0, 1, 2)))
    assert [s.leader for s in elect(p, {0, 1, 2}).partitions] == [0, 0]
    # the preferred leader back in every ISR takes all the vnodes back; in one only, none
    p = _db((1, (0, 1, 2)), (1, (1, 0)))
    assert [(s.leader, s.epoch) for s in rebalance(p, {0, 1, 2}).partitions] == [(0, 4), (0, 4)]
    p = _db((1, (0, 1, 2)), (1, (1, 2)))
    assert rebalance(p, {0, 1, 2}) is p
