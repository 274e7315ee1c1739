"""DescribeTopicPartitions (KIP-966), which kafka-topics --describe uses in Kafka 4.x: pages of
at most response_partition_limit partitions, in topic-name order, continued by a cursor."""

from __future__ import annotations

from confluent_kafka.admin import AdminClient, NewTopic

from .conftest import Broker
from .helpers import unique_topic, wait_until
from .raw import RoutedConn

DESCRIBE_TOPIC_PARTITIONS = 75


def test_paged_by_cursor(broker: Broker) -> None:
    prefix = unique_topic("dtp")
    names = [f"{prefix}-a", f"{prefix}-b", f"{prefix}-c"]
    counts = {names[0]: 3, names[1]: 1, names[2]: 2}
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for f in admin.create_topics([NewTopic(n, c, 1) for n, c in counts.items()]).values():
        f.result(30)
    with RoutedConn(broker.bootstrap) as c:
        def page(cursor: dict | None) -> dict:
            return c.request(DESCRIBE_TOPIC_PARTITIONS, 0, {
                "topics": [{"name": n} for n in reversed(names)], "response_partition_limit": 2,
                "cursor": cursor})

        # Kafka fills partition metadata asynchronously after creation
        wait_until(lambda: all(len(t["partitions"]) > 0 for t in page(None)["topics"][:1]), 30)
        seen: list[tuple[str, int]] = []
        cursor = None
        pages = 0
        while True:
            body = page(cursor)
            pages += 1
            for t in body["topics"]:
                assert t["error_code"] == 0, t
                seen += [(t["name"], p["partition_index"]) for p in t["partitions"]]
            cursor = body["next_cursor"]
            if cursor is None:
                break
            assert pages < 10
    assert seen == [(names[0], 0), (names[0], 1), (names[0], 2), (names[1], 0), (names[2], 0), (names[2], 1)]
    assert pages == 3


def test_unknown_topic(broker: Broker) -> None:
    name = unique_topic("dtp-missing")
    with RoutedConn(broker.bootstrap) as c:
        body = c.request(DESCRIBE_TOPIC_PARTITIONS, 0, {"topics": [{"name": name}],
                                                        "response_partition_limit": 2000, "cursor": None})
    assert [(t["name"], t["error_code"], t["partitions"]) for t in body["topics"]] == [(name, 3, [])]
