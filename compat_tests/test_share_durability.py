"""A share group's record states survive the broker's kill -9 (KIP-932: Kafka's share
coordinator keeps them in its state topic; tmqgate in LevelDB before it answers), with the
Java `KafkaShareConsumer` (compat_tests/share_client.py).

After the restart nothing a member acknowledged is delivered again, and nothing it did not
acknowledge is lost: records a member held when the broker died, and those never handed out,
all come to the next member."""

from __future__ import annotations

from pathlib import Path

from .brokers import BrokerProcess
from .group_helpers import create_topic, unique_name
from .helpers import wait_until
from .kafka_ref import run_tool
from .share_client import EARLIEST, ShareProcess, client_config, produce, run_share


def test_acknowledged_records_stay_done_and_none_is_lost_across_kill_9(restartable_broker: BrokerProcess,
                                                                        tmp_path: Path, target: str) -> None:
    """Kafka 4.3 writes a record's state when it is acknowledged, not when it is acquired: a
    record held when the broker died comes again with the delivery count it had before that
    delivery. tmqgate writes the count before the records go out (a poison record cannot
    dodge the delivery limit by crashing the broker), so there it comes at the next count."""
    b = restartable_broker
    topic, group = unique_name("share-kill"), unique_name("share-kill-group")
    create_topic(b.bootstrap, topic, 2)
    values = {p: [f"v-{p}-{i}" for i in range(40)] for p in (0, 1)}
    produce(b.bootstrap, topic, values)
    every = sorted((p, o, v) for p, vals in values.items() for o, v in enumerate(vals))
    config = client_config(tmp_path, b.bootstrap, max_poll_records="10")
    # A member accepts what it gets (commitSync after each poll: the broker has answered)
    first = run_share(config, group, topic, "explicit", EARLIEST, "max:30", "idle:3000")
    assert first.returncode == 0 and first.closed, first.describe()
    assert all(result == "ok" for _, result in first.commits), first.commits
    accepted = {(g.partition, g.offset, g.value) for g in first.got}
    assert len(accepted) >= 30 and {t for _, _, t in first.acks} == {"ACCEPT"}, first.describe()
    # another holds some without acknowledging when the broker is killed
    holder = ShareProcess(config, group, topic, "hold")
    try:
        held = {(g.partition, g.offset, g.value) for g in holder.wait_until("holding", 60).got}
        assert held and not held & accepted, holder.snapshot().describe()
        b.kill()
    finally:
        holder.kill()
    b.restart()
    # the group is still there, Empty (kafka-share-groups lists it as Kafka keeps its metadata)
    listed = wait_until(lambda: run_tool("kafka-share-groups", "--bootstrap-server", b.bootstrap, "--list",
                                         check=False).stdout.split(), 60, 0.5, "the share group listed again",
                        ok=lambda names: group in names)
    assert group in listed
    rest = run_share(client_config(tmp_path, b.bootstrap), group, topic, "explicit",
                     f"max:{len(every) - len(accepted)}", "idle:5000", "wait:60000", timeout=180)
    assert rest.returncode == 0, rest.describe()
    again = sorted((g.partition, g.offset, g.value) for g in rest.got)
    assert again == sorted(set(every) - accepted), rest.describe()  # each once, none acknowledged before
    # delivered at most once before each (to the first member's prefetch, released at its
    # close, or to the holder): the restart forgot no delivery and invented none
    assert all(1 <= g.delivery_count <= 3 for g in rest.got), rest.describe()
    if target == "tmqgate":
        assert all(g.delivery_count >= 2 for g in rest.got if (g.partition, g.offset, g.value) in held), \
            rest.describe()
