"""Consumer groups: a member killed with SIGKILL.

Done-when item: a consumer killed with SIGKILL (a child process that commits after every
batch) loses its partitions to the survivors within the session timeout plus 2 s, and the
survivors resume each of those partitions exactly at the last committed offset, so nothing
is lost (at-least-once).
"""

from __future__ import annotations

import time

import pytest

from .conftest import Broker
from .group_helpers import (
    SESSION_TIMEOUT_MS,
    BackgroundProducer,
    ConsumerGroup,
    KillableConsumer,
    committed_offsets,
    create_topic,
    unique_name,
)
from .helpers import wait_until

# kills brokers, runs a soak or starts a cluster: one such module at a time (compat_tests/serial.py)
pytestmark = pytest.mark.serial

PARTITIONS = 4


@pytest.mark.parametrize("kind", ["confluent", "kafka-python"])
def test_sigkilled_member_partitions_reach_survivors(broker: Broker, kind: str) -> None:
    topic = unique_name("failover")
    group = unique_name(f"g-failover-{kind}")
    create_topic(broker.bootstrap, topic, PARTITIONS)
    prod = BackgroundProducer(broker.bootstrap, topic, PARTITIONS, rate=100)
    prod.start()
    victim = KillableConsumer(kind, broker.bootstrap, group, topic, f"{group}-victim")
    try:
        wait_until(lambda: victim.snapshot()[0] == list(range(PARTITIONS)) and victim.snapshot()[1] > 0, 40,
                   what=victim.describe)
        with ConsumerGroup(kind, broker.bootstrap, group, topic, PARTITIONS) as g:
            g.add()
            g.add()

            def three_way() -> bool:
                v = frozenset(victim.snapshot()[0])
                parts = [v, *g.assignments().values()]
                return (sorted(len(a) for a in parts) == [1, 1, 2] and len(v) > 0
                        and frozenset().union(*parts) == frozenset(range(PARTITIONS)))

            # settled: three_way has held for 1.5 s
            held: list[float] = []

            def settled() -> bool:
                g.check()
                if not three_way():
                    held.clear()
                    return False
                if not held:
                    held.append(time.monotonic())
                return time.monotonic() - held[0] > 1.5

            wait_until(settled, 40, 0.05, lambda: f"victim {victim.snapshot()[0]} + survivors "
                                                    f"{g.describe_assignments()} to split 2/1/1")
            victim_parts = set(victim.snapshot()[0])
            # let it consume and commit on its partitions after the rebalance
            base = victim.snapshot()[1]
            wait_until(lambda: victim.snapshot()[1] > base + 20 and
                       all(p in victim.snapshot()[2] for p in victim_parts), 20,
                       what=victim.describe)

            victim.freeze()  # from here on it neither heartbeats nor commits
            t_dead = time.monotonic()
            time.sleep(0.3)  # a commit already on the wire lands before we look
            at_kill = committed_offsets("confluent", broker.bootstrap, group)
            victim.kill()
            assert victim_parts == set(victim.snapshot()[0]), "victim's assignment changed while frozen"
            v_committed, v_committing = victim.snapshot()[2], dict(victim.committing)
            for p in victim_parts:
                assert at_kill.get((topic, p)) in (v_committed.get(p), v_committing.get(p)), \
                    (p, at_kill, v_committed, v_committing)

            # the survivors take over every partition: all 4 split 2/2
            def taken_over() -> bool:
                g.check()
                a = list(g.assignments().values())
                return sorted(len(x) for x in a) == [2, 2] and frozenset().union(*a) == frozenset(range(PARTITIONS))

            wait_until(taken_over, SESSION_TIMEOUT_MS / 1000 + 30, 0.05,
                       lambda: f"survivors {g.describe_assignments()} to take over {sorted(victim_parts)}")
            t_moved = max(min(t for m in g.members for t, a in m.assign_history if t > t_dead and p in a)
                          for p in victim_parts)
            took = t_moved - t_dead
            limit = SESSION_TIMEOUT_MS / 1000 + 2
            assert took <= limit, \
                f"partitions {sorted(victim_parts)} reached the survivors after {took:.1f}s > {limit}s"

            # the survivors resume each of the victim's partitions at its last committed offset
            def firsts() -> dict[int, int]:
                out: dict[int, int] = {}
                for r in sorted(g.consumed(), key=lambda r: r.at):
                    if r.at > t_dead and r.partition in victim_parts and r.partition not in out:
                        out[r.partition] = r.offset
                return out

            wait_until(lambda: set(firsts()) == victim_parts, 20,
                       what=lambda: f"records of {victim_parts}: {firsts()}")
            assert firsts() == {p: at_kill[(topic, p)] for p in victim_parts}, \
                "survivors did not resume at the last committed offsets"

            produced = prod.finish()
            victim_values = {v for _, _, v in victim.consumed}

            def missing() -> set[bytes]:
                return produced - g.consumed_values() - victim_values

            wait_until(lambda: not missing(), 30, 0.2,
                       lambda: f"{len(missing())} values never consumed, e.g. {sorted(missing())[:5]}")
            assert g.consumed_values() | victim_values == produced
            g.check()
            print(f"{kind}: partitions {sorted(victim_parts)} moved {took:.1f}s after the kill")
    finally:
        prod.stop_flag.set()
        victim.kill()
