"""Consumer groups: committed offsets.

Done-when items:
- the broker restarted, a new consumer in the same group resumes right after the last
  committed offset (the committed offsets read back exactly through each client's admin API,
  and the first offset received per partition); a group with no commits starts at earliest
  or latest per its auto.offset.reset; two groups on one topic progress independently;
- auto.offset.reset=none with no commit raises the client's no-offset error
  (NoOffsetForPartitionError, librdkafka's _AUTO_OFFSET_RESET error event);
- the admin API's list_consumer_group_offsets returns exactly the committed offsets.
"""

from __future__ import annotations

import base64
import uuid
from typing import Any

import pytest

from .brokers import BrokerProcess
from .conftest import Broker
from .group_helpers import (
    ADMIN_CLIENTS,
    GROUP_KINDS,
    ConsumerGroup,
    commit_offsets,
    committed_offsets,
    committed_offsets_after_restart,
    consume_reset_none,
    consumer_heartbeat,
    create_topic,
    produce_values,
    unique_name,
)
from .helpers import wait_until
from .raw import RoutedConn

PARTITIONS = 4


@pytest.fixture(scope="module")
def topic40(broker: Broker) -> str:
    """A 4-partition topic with 10 records in each partition."""
    topic = unique_name("offsets")
    create_topic(broker.bootstrap, topic, PARTITIONS)
    produce_values(broker.bootstrap, topic, dict.fromkeys(range(PARTITIONS), 10))
    return topic


@pytest.mark.parametrize("kind", GROUP_KINDS)
def test_offset_reset_none_without_commit_raises(broker: Broker, topic40: str, kind: str) -> None:
    group = unique_name(f"g-none-{kind}")
    no_offset, firsts, errors = consume_reset_none(kind, broker.bootstrap, group, topic40, PARTITIONS)
    assert firsts == {}, f"records delivered without a committed offset: {firsts}"
    assert no_offset == set(range(PARTITIONS)), f"no-offset error for {no_offset} only: {errors}"
    assert all(not e.startswith("unexpected") for e in errors), errors


@pytest.mark.parametrize("kind", GROUP_KINDS)
def test_offset_reset_none_partly_committed(broker: Broker, topic40: str, kind: str) -> None:
    """Partitions with a commit are consumed from it; only the others raise the error."""
    group = unique_name(f"g-none2-{kind}")
    commit_offsets("confluent", broker.bootstrap, group, topic40, {0: 3, 1: 7})
    no_offset, firsts, errors = consume_reset_none(kind, broker.bootstrap, group, topic40, PARTITIONS)
    assert firsts == {0: 3, 1: 7}
    assert no_offset == {2, 3}, f"no-offset error for {no_offset}: {errors}"
    assert all(not e.startswith("unexpected") for e in errors), errors


@pytest.mark.parametrize("client", ADMIN_CLIENTS)
def test_list_consumer_group_offsets(broker: Broker, topic40: str, client: str) -> None:
    """What one client commits, every client's admin API lists exactly."""
    group = unique_name(f"g-list-{client}")
    offsets = {0: 0, 1: 4, 2: 10, 3: 9}
    commit_offsets(client, broker.bootstrap, group, topic40, offsets)
    want = {(topic40, p): o for p, o in offsets.items()}
    for admin in ADMIN_CLIENTS:
        assert committed_offsets(admin, broker.bootstrap, group) == want, admin
    # a commit overwrites per partition, leaving the others
    commit_offsets(client, broker.bootstrap, group, topic40, {1: 6})
    want[(topic40, 1)] = 6
    for admin in ADMIN_CLIENTS:
        assert committed_offsets(admin, broker.bootstrap, group) == want, admin
    assert committed_offsets(client, broker.bootstrap, unique_name("g-never")) == {}


def _consume_all(kind: str, bootstrap: str, group: str, topic: str, ends: dict[int, int],
                 **kw: object) -> tuple[dict[int, int], dict[tuple[str, int], int]]:
    """One member of `kind` in `group` reads up to `ends` (committing after each batch), then
    leaves. Returns (first offset received per partition, the group's committed offsets)."""
    with ConsumerGroup(kind, bootstrap, group, topic, PARTITIONS, **kw) as g:  # type: ignore[arg-type]
        g.add()
        g.wait_balanced([PARTITIONS], 30)
        wait_until(lambda: all(g.next_offsets().get(p, 0) >= e for p, e in ends.items()), 30,
                   what=lambda: f"{group} to read up to {ends}; at {g.next_offsets()}")
        want = {(topic, p): e for p, e in ends.items()}
        wait_until(lambda: committed_offsets("confluent", bootstrap, group) == want, 15,
                   what=lambda: f"{group} commits {want}; have {committed_offsets('confluent', bootstrap, group)}")
        g.check()
        return g.first_offsets(), want


def test_offsets_survive_restart_and_groups_are_independent(restartable_broker: BrokerProcess) -> None:
    b = restartable_broker
    bs = b.bootstrap
    topic = unique_name("restart-offsets")
    create_topic(bs, topic, PARTITIONS)
    n1 = {p: 10 + 3 * p for p in range(PARTITIONS)}
    produce_values(bs, topic, n1, prefix="a")
    group_a, group_b = unique_name("g-a"), unique_name("g-b")

    # group A (confluent) reads everything there is now and commits it
    first, committed_a = _consume_all("confluent", bs, group_a, topic, n1)
    assert first == dict.fromkeys(range(PARTITIONS), 0)
    n2 = {p: n1[p] + 5 + p for p in range(PARTITIONS)}
    produce_values(bs, topic, {p: n2[p] - n1[p] for p in range(PARTITIONS)}, prefix="b")
    # group B (kafka-python) reads further; A's offsets do not move
    first, committed_b = _consume_all("kafka-python", bs, group_b, topic, n2)
    assert first == dict.fromkeys(range(PARTITIONS), 0)
    assert committed_offsets("kafka-python", bs, group_a) == committed_a

    b.kill()
    b.restart()

    for admin in ADMIN_CLIENTS:
        assert committed_offsets_after_restart(admin, bs, group_a) == committed_a, admin
        assert committed_offsets_after_restart(admin, bs, group_b) == committed_b, admin

    n3 = {p: n2[p] + 3 for p in range(PARTITIONS)}
    produce_values(bs, topic, dict.fromkeys(range(PARTITIONS), 3), prefix="c")
    # a new consumer in each group resumes right after its group's last commit
    first, _ = _consume_all("confluent", bs, group_a, topic, n3)
    assert first == n1, "group A did not resume at its committed offsets after the restart"
    first, _ = _consume_all("aiokafka", bs, group_b, topic, n3)
    assert first == n2, "group B did not resume at its committed offsets after the restart"

    # groups without commits: earliest -> from the start; latest -> only what comes next
    first, _ = _consume_all("kafka-python", bs, unique_name("g-earliest"), topic, n3,
                            auto_offset_reset="earliest")
    assert first == dict.fromkeys(range(PARTITIONS), 0)
    group_l = unique_name("g-latest")
    with ConsumerGroup("confluent", bs, group_l, topic, PARTITIONS, auto_offset_reset="latest") as g:
        g.add()
        g.wait_balanced([PARTITIONS], 30)
        assert g.consumed() == [], "auto.offset.reset=latest delivered old records"
        produce_values(bs, topic, dict.fromkeys(range(PARTITIONS), 2), prefix="d")
        wait_until(lambda: len(g.first_offsets()) == PARTITIONS, 20,
                   what=lambda: f"records, have {g.first_offsets()}")
        assert g.first_offsets() == n3
    # and A's and B's commits are still their own
    assert committed_offsets("aiokafka", bs, group_a) == {(topic, p): n3[p] for p in range(PARTITIONS)}
    assert committed_offsets("aiokafka", bs, group_b) == {(topic, p): n3[p] for p in range(PARTITIONS)}


def test_commit_with_the_epoch_a_heartbeat_just_replaced(broker: Any) -> None:
    """Kafka 4.3 (KIP-1251): an OffsetCommit with the member epoch a heartbeat has just
    replaced commits the partitions the member held since that epoch, and is refused
    (STALE_MEMBER_EPOCH) for one it gave up and for an epoch newer than its own. tmqgate
    refused every older epoch, and the Java consumer logs such a refused auto-commit as an
    ERROR (test_cli_groups' KIP-848 console consumers, when one of them left)."""
    topic = unique_name("kip1251")
    create_topic(broker.bootstrap, topic, 2)
    group = unique_name("kip1251-group")
    with RoutedConn(broker.bootstrap) as c1, RoutedConn(broker.bootstrap) as c2:
        find = c1.request(10, 4, {"key_type": 0, "coordinator_keys": [group]})
        assert find["coordinators"][0]["error_code"] in (0, 15), find
        members: dict[str, dict[str, Any]] = {}

        def beat(conn: RoutedConn, name: str) -> dict[str, Any]:
            m = members.setdefault(name, {"id": base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("="),
                                          "epoch": 0, "owned": []})
            body: dict[str, Any] = {"group_id": group, "member_id": m["id"], "member_epoch": m["epoch"],
                                    "topic_partitions": m["owned"]}
            if m["epoch"] == 0:
                body.update(rebalance_timeout_ms=30_000, subscribed_topic_names=[topic])
            answer = consumer_heartbeat(conn, body)
            assert answer["error_code"] == 0, answer
            m["epoch"] = answer["member_epoch"]
            if answer["assignment"] is not None:
                m["owned"] = answer["assignment"]["topic_partitions"]
            return m

        def held(m: dict[str, Any]) -> list[int]:
            return sorted(p for tp in m["owned"] for p in tp["partitions"])

        first = wait_until(lambda: beat(c1, "m1"), 30, 0.2, "m1 holding both partitions",
                           ok=lambda m: held(m) == [0, 1])
        before = first["epoch"]
        beat(c2, "m2")  # joins: one partition moves to it once m1 gives it up
        wait_until(lambda: beat(c1, "m1"), 30, 0.2, "m1 told to give up a partition", ok=lambda m: len(held(m)) == 1)
        [kept] = held(members["m1"])
        wait_until(lambda: beat(c1, "m1"), 30, 0.2, "m1 at the new epoch", ok=lambda m: m["epoch"] > before)

        def commit(epoch: int, partition: int) -> int:
            body = c1.request(8, 9, {"group_id": group, "generation_id_or_member_epoch": epoch,
                                     "member_id": members["m1"]["id"], "group_instance_id": None, "topics": [
                                         {"name": topic,
                                          "partitions": [{"partition_index": partition, "committed_offset": 1,
                                                                        "committed_leader_epoch": -1,
                                                                        "committed_metadata": ""}]}]})
            return int(body["topics"][0]["partitions"][0]["error_code"])

        assert commit(before, kept) == 0
        assert commit(before, 1 - kept) == 113  # STALE_MEMBER_EPOCH: given up
        assert commit(members["m1"]["epoch"] + 1, kept) == 113  # newer than its own
        assert commit(members["m1"]["epoch"], kept) == 0
        for conn, name in ((c1, "m1"), (c2, "m2")):
            consumer_heartbeat(conn, {"group_id": group, "member_id": members[name]["id"], "member_epoch": -1})
