"""Kafka's share-group tools against the broker: `kafka-share-groups --list / --describe /
--reset-offsets / --delete-offsets / --delete` and `kafka-console-share-consumer` (Apache Kafka
4.3.1's ShareGroupCommand and ConsoleShareConsumer), as an operator runs them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .group_helpers import create_topic, unique_name
from .helpers import wait_until
from .kafka_ref import run_tool
from .raw import RoutedConn
from .share_client import EARLIEST, ShareProcess, client_config, produce, run_share


def _share_groups(bootstrap: str, *args: str) -> str:
    done = run_tool("kafka-share-groups", "--bootstrap-server", bootstrap, *args, check=False, timeout=90)
    assert done.returncode == 0, \
        f"kafka-share-groups {' '.join(args)}: rc={done.returncode}\n{done.stdout}\n{done.stderr}"
    return done.stdout


def _table(text: str) -> list[list[str]]:
    """The rows of a table the tool printed (the header row first), split on blanks."""
    return [line.split() for line in text.splitlines() if line.strip()]


def _offsets(bootstrap: str, group: str) -> dict[tuple[str, int], tuple[int, int]]:
    """--describe --offsets: (topic, partition) -> (start offset, lag)."""
    rows = _table(_share_groups(bootstrap, "--describe", "--offsets", "--group", group))
    header, body = rows[0], rows[1:]
    assert header[:5] == ["GROUP", "TOPIC", "PARTITION", "START-OFFSET", "LAG"], rows
    return {(r[1], int(r[2])): (int(r[3]), int(r[4])) for r in body if r[0] == group}


def test_list_describe_reset_and_delete_a_share_group(broker: Any, tmp_path: Path) -> None:
    topic, group = unique_name("share-tools"), unique_name("share-tools-group")
    create_topic(broker.bootstrap, topic, 2)
    produce(broker.bootstrap, topic, {p: [f"v-{p}-{i}" for i in range(10)] for p in (0, 1)})
    config = client_config(tmp_path, broker.bootstrap)
    # a member that accepts 8 of partition 0's records and 10 of partition 1's... the rest stay
    member = ShareProcess(config, group, topic, "explicit", EARLIEST, "reject:none", "idle:600000")
    try:
        run = member.wait_until(lambda r: len(r.got) == 20 and len(r.commits) >= 1, 60)
        assert sorted(g.value for g in run.got) == sorted(f"v-{p}-{i}" for p in (0, 1) for i in range(10))
        wait_until(lambda: _share_groups(broker.bootstrap, "--list").split(), 30, 0.5, "the group listed",
                   ok=lambda names: group in names)
        members = _table(_share_groups(broker.bootstrap, "--describe", "--members", "--group", group))
        assert members[0][:4] == ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID"], members
        assert [r[0] for r in members[1:]] == [group], members
        state = _table(_share_groups(broker.bootstrap, "--describe", "--state", "--group", group))
        assert state[0] == ["GROUP", "COORDINATOR", "(ID)", "STATE", "#MEMBERS"], state
        assert (state[1][0], state[1][-2], state[1][-1]) == (group, "Stable", "1"), state
        # the group APIs of other protocols see it for what it is (ListGroups: at its
        # coordinator, which lists the groups it coordinates)
        with RoutedConn(broker.bootstrap) as c:
            listed = c.conn(c.coordinator(group, 0)).request(16, 5, {"states_filter": [],
                                                                     "types_filter": ["share"]})["groups"]
            assert [(g["group_id"], g["protocol_type"], g["group_state"], g["group_type"])
                    for g in listed if g["group_id"] == group] == [(group, "share", "Stable", "share")], listed
            described = c.conn(c.coordinator(group, 0)).request(15, 6, {"groups": [group],
                                                                         "include_authorized_operations": False})
            assert [(g["error_code"], g["error_message"], g["group_state"]) for g in described["groups"]] == \
                [(69, f"Group {group} is not a classic group.", "Dead")], described
    finally:
        member.stop()
        member.kill()
    # every record acknowledged: no lag (the start offset Kafka shows moves as its share
    # coordinator persists it, lazily: anywhere up to the end)
    offsets = wait_until(lambda: _offsets(broker.bootstrap, group), 30, 0.5, "no lag left",
                         ok=lambda o: {k: lag for k, (_, lag) in o.items()} == {(topic, 0): 0, (topic, 1): 0})
    assert all(0 <= start <= 10 for start, _ in offsets.values()), offsets
    state = _table(_share_groups(broker.bootstrap, "--describe", "--state", "--group", group))
    assert (state[1][0], state[1][-2], state[1][-1]) == (group, "Empty", "0"), state
    # back to the earliest offset of partition... both: the group gets every record again
    reset = _share_groups(broker.bootstrap, "--reset-offsets", "--to-earliest", "--execute", "--group", group,
                          "--topic", topic)
    assert group in reset and topic in reset, reset
    assert _offsets(broker.bootstrap, group) == {(topic, 0): (0, 10), (topic, 1): (0, 10)}
    again = run_share(config, group, topic, "implicit", "max:20", "idle:3000", "wait:60000")
    assert again.returncode == 0 and sorted(g.value for g in again.got) == \
        sorted(f"v-{p}-{i}" for p in (0, 1) for i in range(10)), again.describe()
    # --delete: gone from the list
    deleted = _share_groups(broker.bootstrap, "--delete", "--group", group)
    assert group in deleted, deleted
    assert group not in _share_groups(broker.bootstrap, "--list").split()


def test_console_share_consumer_prints_the_records(broker: Any, tmp_path: Path) -> None:
    topic, group = unique_name("share-console"), unique_name("share-console-group")
    create_topic(broker.bootstrap, topic, 1)
    values = [f"line-{i}" for i in range(7)]
    produce(broker.bootstrap, topic, {0: values})
    configs = run_tool("kafka-configs", "--bootstrap-server", broker.bootstrap, "--entity-type", "groups",
                       "--entity-name", group, "--alter", "--add-config", "share.auto.offset.reset=earliest",
                       check=False, timeout=90)
    assert configs.returncode == 0, configs.stderr
    done = run_tool("kafka-console-share-consumer", "--bootstrap-server", broker.bootstrap, "--topic", topic,
                    "--group", group, "--max-messages", str(len(values)), "--timeout-ms", "60000",
                    check=False, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == values, done.stdout
    assert f"Processed a total of {len(values)} messages" in done.stderr
