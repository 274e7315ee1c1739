"""Consumer groups through each client's admin API: DescribeGroups, ListGroups, DeleteGroups.

Done-when item: describe/list show the group, its state (Stable while members are in it,
Empty once they left), its members with client ids, hosts and assignments; DeleteGroups
works on an empty group and fails with NON_EMPTY_GROUP on one with members.
aiokafka's admin client has no DeleteGroups and its ListGroups carries no state.
"""

from __future__ import annotations

import pytest

from .conftest import Broker
from .group_helpers import (
    ADMIN_CLIENTS,
    ConsumerGroup,
    GroupInfo,
    committed_offsets,
    create_topic,
    delete_groups,
    describe_group,
    list_groups,
    produce_values,
    unique_name,
)
from .helpers import wait_until

PARTITIONS = 4
PER_PARTITION = 10


@pytest.fixture(scope="module")
def topic(broker: Broker) -> str:
    topic = unique_name("admin-groups")
    create_topic(broker.bootstrap, topic, PARTITIONS)
    produce_values(broker.bootstrap, topic, dict.fromkeys(range(PARTITIONS), PER_PARTITION))
    return topic


def _check_members(info: GroupInfo, g: ConsumerGroup, topic: str) -> None:
    by_client = {m.client_id: m for m in info.members}
    assert sorted(by_client) == sorted(m.client_id for m in g.members), info
    assert len({m.member_id for m in info.members}) == len(info.members), info
    for m in g.members:
        d = by_client[m.client_id]
        assert d.member_id, d
        # Kafka reports the address the member connected from as Java's InetAddress prints it
        assert d.host == "/127.0.0.1", d
        assert d.partitions == {(topic, p) for p in m.assigned}, (m.client_id, d, sorted(m.assigned))


@pytest.mark.parametrize("client", ADMIN_CLIENTS)
def test_describe_and_list_groups(broker: Broker, topic: str, client: str) -> None:
    """Members of `client` in a group, seen through `client`'s own admin API."""
    bs = broker.bootstrap
    group = unique_name(f"g-admin-{client}")
    with ConsumerGroup(client, bs, group, topic, PARTITIONS) as g:
        g.add(f"{group}-a")
        g.add(f"{group}-b")
        g.wait_balanced([2, 2], 30)
        want_offsets = {(topic, p): PER_PARTITION for p in range(PARTITIONS)}
        wait_until(lambda: committed_offsets(client, bs, group) == want_offsets, 20,
                   what=lambda: f"commits {want_offsets}; have {committed_offsets(client, bs, group)}")

        info = describe_group(client, bs, group)
        assert info.error is None, info
        assert info.group_id == group
        assert info.state == "Stable", info
        if client == "confluent":
            assert info.group_type == "classic", info
        else:
            assert info.protocol_type == "consumer", info
        _check_members(info, g, topic)

        listed = list_groups(client, bs)
        assert group in listed, sorted(listed)
        assert listed[group] == (None if client == "aiokafka" else "Stable")

    # every member left the group (LeaveGroup on close): Empty, no members, offsets kept
    info = wait_until(lambda: (i := describe_group(client, bs, group)).state == "Empty" and i, 10,
                      what=lambda: f"state Empty; have {describe_group(client, bs, group)}")
    assert info.members == [] and info.error is None, info
    listed = list_groups(client, bs)
    assert listed.get(group, "absent") == (None if client == "aiokafka" else "Empty"), listed.get(group, "absent")
    assert committed_offsets(client, bs, group) == want_offsets


@pytest.mark.parametrize("client", ["kafka-python", "confluent"])
def test_delete_groups(broker: Broker, topic: str, client: str) -> None:
    bs = broker.bootstrap
    group = unique_name(f"g-delete-{client}")
    missing = unique_name("g-missing")
    with ConsumerGroup(client, bs, group, topic, PARTITIONS) as g:
        g.add()
        g.wait_balanced([PARTITIONS], 30)
        wait_until(lambda: len(committed_offsets(client, bs, group)) == PARTITIONS, 20, what="commits")
        assert delete_groups(client, bs, [group]) == {group: "NON_EMPTY_GROUP"}
        assert describe_group(client, bs, group).state == "Stable"
    wait_until(lambda: describe_group(client, bs, group).state == "Empty", 10, what="state Empty")

    assert delete_groups(client, bs, [group, missing]) == {group: None, missing: "GROUP_ID_NOT_FOUND"}
    assert group not in list_groups(client, bs)
    assert committed_offsets(client, bs, group) == {}
    info = describe_group(client, bs, group)
    assert info.state == "Dead" and info.members == [], info
    # deleting it again: it is gone
    assert delete_groups(client, bs, [group]) == {group: "GROUP_ID_NOT_FOUND"}


def test_describe_kip848_group(broker: Broker, topic: str) -> None:
    """A group.protocol=consumer group: confluent's admin describes it (ConsumerGroupDescribe),
    ListGroups shows it; the classic DescribeGroups answers "not a classic group"."""
    bs = broker.bootstrap
    group = unique_name("g-admin-kip848")
    with ConsumerGroup("confluent-consumer", bs, group, topic, PARTITIONS) as g:
        g.add(f"{group}-a")
        g.add(f"{group}-b")
        g.wait_balanced([2, 2], 60)
        info = describe_group("confluent", bs, group)
        assert info.state == "Stable" and info.group_type == "consumer", info
        _check_members(info, g, topic)
        assert list_groups("confluent", bs).get(group) == "Stable"
        assert list_groups("kafka-python", bs).get(group) == "Stable"
        assert group in list_groups("aiokafka", bs)
        # DescribeGroups v5 (kafka-python) on a consumer-protocol group: GROUP_ID_NOT_FOUND
        classic = describe_group("kafka-python", bs, group)
        assert classic.error is not None and "GroupIdNotFoundError" in classic.error, classic
        assert delete_groups("confluent", bs, [group]) == {group: "NON_EMPTY_GROUP"}
    wait_until(lambda: describe_group("confluent", bs, group).state == "Empty", 10, what="state Empty")
    assert delete_groups("confluent", bs, [group]) == {group: None}
    assert group not in list_groups("confluent", bs)
