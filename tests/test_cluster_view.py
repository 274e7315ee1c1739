"""The cluster view from etcd's keys (coordinator.cluster): pure, no etcd needed."""

from __future__ import annotations

import pytest

from tmqgate.coordinator.cluster import (
    BrokerInfo,
    PartitionState,
    Placement,
    assign,
    broker_key,
    broker_value,
    controller_value,
    elect,
    parse_cluster,
    placement_value,
    placements_from,
    topic_key,
    view_from,
)


def test_view_from_registrations_and_the_controller_key() -> None:
    view, bad = view_from([(broker_key(2), broker_value("h2", 9093)), (broker_key(0), broker_value("h0", 9092)),
                           ("/tmqgate/brokers/x", "{}"), (broker_key(5), "not json")],
                          (controller_value(2), 41))
    assert view.live() == [BrokerInfo(0, "h0", 9092), BrokerInfo(2, "h2", 9093)]
    assert (view.controller_id, view.controller_epoch) == (2, 41)
    assert sorted(bad) == ["/tmqgate/brokers/5", "/tmqgate/brokers/x"]
    empty, _ = view_from([], None)
    assert (empty.live(), empty.controller_id) == ([], -1)


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
    assert moved.partitions == (PartitionState((1, 2, 3), 2, 5, (2, 3)), p.partitions[1])


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
