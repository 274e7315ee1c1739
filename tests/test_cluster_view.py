"""The cluster view from etcd's keys (coordinator.cluster): pure, no etcd needed."""

from __future__ import annotations

import pytest

from tmqgate.coordinator.cluster import (
    BrokerInfo,
    broker_key,
    broker_value,
    controller_value,
    parse_cluster,
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
