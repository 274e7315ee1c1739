"""Consumer groups: a group growing 1 -> 2 -> 3 -> 5 members over 4 partitions.

Done-when item: with kafka-python, aiokafka, confluent-kafka (classic protocol) and
confluent-kafka with `group.protocol=consumer` (KIP-848), every step ends in the even split
TDengine's rebalance gives (4 vnodes: {4}, {2,2}, {2,1,1}, {1,1,1,1,0}) -- checked on the
partitions each consumer actually holds, all covered, none twice -- and every record
produced throughout is consumed (at-least-once: duplicates across rebalances allowed).
"""

from __future__ import annotations

import time

import pytest

from .conftest import Broker
from .group_helpers import GROUP_KINDS, BackgroundProducer, ConsumerGroup, create_topic, unique_name
from .helpers import wait_until

PARTITIONS = 4
STEPS = [(1, [4]), (2, [2, 2]), (3, [2, 1, 1]), (5, [1, 1, 1, 1, 0])]
# KIP-848 members learn of a new target assignment on their next heartbeat, whose interval the
# broker chooses (Kafka: group.consumer.heartbeat.interval.ms = 5 s), so give it longer.
STEP_TIMEOUT = {"confluent-consumer": 60.0}


@pytest.mark.parametrize("kind", GROUP_KINDS)
def test_group_grows_1_2_3_5(broker: Broker, kind: str) -> None:
    topic = unique_name("grow")
    group = unique_name(f"g-grow-{kind}")
    create_topic(broker.bootstrap, topic, PARTITIONS)
    prod = BackgroundProducer(broker.bootstrap, topic, PARTITIONS, rate=100)
    prod.start()
    try:
        with ConsumerGroup(kind, broker.bootstrap, group, topic, PARTITIONS) as g:
            timings = []
            for n, sizes in STEPS:
                t0 = time.monotonic()
                while len(g.members) < n:
                    g.add()
                got = g.wait_balanced(sizes, timeout=STEP_TIMEOUT.get(kind, 30.0))
                timings.append(round(time.monotonic() - t0, 1))
                # the even split, on the partitions each consumer actually holds
                assert sorted(len(a) for a in got.values()) == sorted(sizes), got
                assert set().union(*got.values()) == set(range(PARTITIONS)), got
                assert sum(len(a) for a in got.values()) == PARTITIONS, f"a partition assigned twice: {got}"
            # the five-member group still consumes: every member holding a partition gets records
            mark = prod.n_delivered()
            wait_until(lambda: prod.n_delivered() >= mark + 40, 20, what="40 more deliveries")
            produced = prod.finish()
            wait_until(lambda: g.consumed_values() >= produced, 30, 0.2,
                       lambda: f"all {len(produced)} produced values consumed; "
                               f"missing {len(produced - g.consumed_values())}, e.g. "
                               f"{sorted(produced - g.consumed_values())[:5]}")
            g.check()
            consumed = g.consumed_values()
            assert consumed == produced, f"unexpected values consumed: {sorted(consumed - produced)[:5]}"
            print(f"{kind}: step times {timings}s, {len(produced)} records, "
                  f"{len(g.consumed())} deliveries incl. duplicates")
    finally:
        prod.stop_flag.set()
