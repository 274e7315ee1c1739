"""Consumer groups through the Apache Kafka 4.x command-line tools: kafka-consumer-groups
(--list, --describe with offsets / --members / --state, --reset-offsets, --delete) and
groups of three kafka-console-consumer processes (Java 4.x consumers) splitting a
4-partition topic, once with the classic protocol and once with KIP-848
(`group.protocol=consumer`).  What is asserted is what a user reads off the tools' output.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from .cli_helpers import Background, client_errors, parse_assignment, parse_table, produce, require_tools, run
from .conftest import Broker
from .helpers import unique_topic, wait_until

TIMEOUT = 30
GROUP_TIMEOUT = 90  # a KIP-848 group batches assignment work; three JVMs start on 2 cores


@pytest.fixture(autouse=True)
def _tools_installed() -> None:
    require_tools()


@pytest.fixture
def admin(broker: Broker) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap})


@pytest.fixture
def topic_factory(admin: AdminClient) -> Iterator:
    made: list[str] = []

    def make(prefix: str, partitions: int) -> str:
        name = unique_topic(prefix)
        admin.create_topics([NewTopic(name, partitions, 1)])[name].result(TIMEOUT)
        wait_until(lambda: admin.list_topics(name, timeout=10).topics[name], TIMEOUT, 0.5,
                   f"{name} in metadata",
                   ok=lambda t: t.error is None and len(t.partitions) == partitions)
        made.append(name)
        return name

    yield make
    for name in made:
        try:
            admin.delete_topics([name])[name].result(TIMEOUT)
        except Exception:  # noqa: BLE001 - cleanup only
            pass


@pytest.fixture
def background(tmp_path: Path) -> Iterator:
    """Start long-running tools; all are stopped (SIGTERM) at the end of the test."""
    procs: list[Background] = []

    def start(name: str, *args: str, tag: str) -> Background:
        bg = Background(name, *args, workdir=tmp_path, tag=tag)
        procs.append(bg)
        return bg

    yield start
    for bg in procs:
        bg.stop()


def _groups(b: str, *args: str, check: bool = True):
    return run("kafka-consumer-groups", "--bootstrap-server", b, *args, check=check)


def _offsets(b: str, group: str, topic: str) -> tuple[str, dict[int, dict[str, str]]]:
    """--describe (offsets): partition -> row, for `topic` only."""
    out = _groups(b, "--describe", "--group", group)
    rows = {int(r["PARTITION"]): r for r in parse_table(out.stdout) if r["TOPIC"] == topic}
    return out.stdout + out.stderr, rows


def _triples(rows: dict[int, dict[str, str]]) -> dict[int, tuple[int, int, int]]:
    """partition -> (CURRENT-OFFSET, LOG-END-OFFSET, LAG) as ints (`-` as -1)."""
    def n(v: str) -> int:
        return -1 if v == "-" else int(v)
    return {p: (n(r["CURRENT-OFFSET"]), n(r["LOG-END-OFFSET"]), n(r["LAG"])) for p, r in rows.items()}


def _members(b: str, group: str) -> tuple[str, list[dict[str, str]]]:
    out = _groups(b, "--describe", "--group", group, "--members", "--verbose")
    return out.stdout + out.stderr, [r for r in parse_table(out.stdout) if r["GROUP"] == group]


def _console_consumer(start, b: str, topic: str, group: str, client_id: str, *extra: str) -> Background:
    return start("kafka-console-consumer", "--bootstrap-server", b, "--topic", topic, "--group", group,
                 "--command-property", f"client.id={client_id}",
                 "--command-property", "auto.offset.reset=earliest",
                 "--command-property", "auto.commit.interval.ms=300",
                 "--formatter-property", "print.partition=true",
                 *extra, tag=client_id)


def _partition_of(line: str) -> int:
    # DefaultMessageFormatter with print.partition=true: "Partition:<p>\t<value>"
    head, _, _ = line.partition("\t")
    assert head.startswith("Partition:"), line
    return int(head[len("Partition:"):])


# --------------------------------------------------------------------------- kafka-consumer-groups


def test_kafka_consumer_groups_list_describe_reset_delete(broker: Broker, topic_factory, background) -> None:
    b = broker.bootstrap
    topic = topic_factory("cli-groups", 3)
    group = unique_topic("cli-g")
    counts = {0: 4, 1: 3, 2: 1}
    produce(b, topic, [(p, None, b"r-%d-%d" % (p, i)) for p, n in counts.items() for i in range(n)])

    consumer = _console_consumer(background, b, topic, group, "cli-groups-1")
    wait_until(consumer.lines, GROUP_TIMEOUT, 0.5, "the consumer to print 8 records",
               ok=lambda ls: len(ls) >= 8, show=lambda _: consumer.describe())

    # a live member: its offsets committed up to the log end, lag 0, and who owns what
    text, rows = wait_until(lambda: _offsets(b, group, topic), TIMEOUT, 0.5,
                            "committed offsets = log end with an owner",
                            ok=lambda tr: (_triples(tr[1]) == {p: (n, n, 0) for p, n in counts.items()}
                                           and all(r["CONSUMER-ID"] != "-" for r in tr[1].values())),
                            show=lambda tr: tr[0])
    assert {r["CLIENT-ID"] for r in rows.values()} == {"cli-groups-1"}, text
    assert len({r["CONSUMER-ID"] for r in rows.values()}) == 1, text
    assert all("127.0.0.1" in r["HOST"] for r in rows.values()), text

    text, members = _members(b, group)
    assert len(members) == 1, text
    m = members[0]
    assert m["CLIENT-ID"] == "cli-groups-1" and m["#PARTITIONS"] == "3", text
    assert m["CONSUMER-ID"] == next(iter(rows.values()))["CONSUMER-ID"], text
    assert parse_assignment(m["CURRENT-ASSIGNMENT"]) == {topic: {0, 1, 2}}, text

    out = _groups(b, "--describe", "--group", group, "--state")
    state = [r for r in parse_table(out.stdout) if r["GROUP"] == group]
    assert len(state) == 1, out.describe()
    assert (state[0]["STATE"], state[0]["#MEMBERS"], state[0]["ASSIGNMENT-STRATEGY"]) == ("Stable", "1", "range"), \
        out.describe()

    listed = _groups(b, "--list")
    assert group in listed.lines, listed.describe()

    # the member leaves; 3 more records land in partition 1: lag 3 there, 0 elsewhere
    consumer.stop()
    assert not client_errors(consumer.stderr()), consumer.describe()
    produce(b, topic, [(1, None, b"late-%d" % i) for i in range(3)])
    text, rows = wait_until(lambda: _offsets(b, group, topic), TIMEOUT, 0.5, "no active member",
                            ok=lambda tr: all(r["CONSUMER-ID"] == "-" for r in tr[1].values()) and len(tr[1]) == 3,
                            show=lambda tr: tr[0])
    assert _triples(rows) == {0: (4, 4, 0), 1: (3, 6, 3), 2: (1, 1, 0)}, text
    assert f"Consumer group '{group}' has no active members." in text, text

    reset = _groups(b, "--reset-offsets", "--group", group, "--topic", topic, "--to-earliest", "--execute")
    planned = {int(r["PARTITION"]): r["NEW-OFFSET"] for r in parse_table(reset.stdout) if r["TOPIC"] == topic}
    assert planned == {0: "0", 1: "0", 2: "0"}, reset.describe()
    text, rows = _offsets(b, group, topic)
    assert _triples(rows) == {0: (0, 4, 4), 1: (0, 6, 6), 2: (0, 1, 1)}, text

    deleted = _groups(b, "--delete", "--group", group)
    assert f"Deletion of requested consumer groups ('{group}') was successful." in deleted.stdout, deleted.describe()
    listed = _groups(b, "--list")
    assert group not in listed.lines, listed.describe()
    # deleting it again: the group is gone, and the tool says so
    again = _groups(b, "--delete", "--group", group, check=False)
    assert "GroupIdNotFoundException" in again.stdout + again.stderr, again.describe()


# --------------------------------------------------------------------------- three consumers, one topic

PARTITIONS = 4
PER_PARTITION = 50


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_three_console_consumers_split_four_partitions(broker: Broker, topic_factory, background,
                                                        protocol: str) -> None:
    b = broker.bootstrap
    topic = topic_factory(f"cli-split-{protocol}", PARTITIONS)
    group = unique_topic(f"cli-split-{protocol}-g")
    client_ids = [f"cli-{protocol}-{i}" for i in range(3)]
    consumers = {cid: _console_consumer(background, b, topic, group, cid,
                                        "--command-property", f"group.protocol={protocol}")
                 for cid in client_ids}

    def settled(tm: tuple[str, list[dict[str, str]]]) -> bool:
        _, members = tm
        if len(members) != 3 or {m["CLIENT-ID"] for m in members} != set(client_ids):
            return False
        current = [parse_assignment(m["CURRENT-ASSIGNMENT"]).get(topic, set()) for m in members]
        if protocol == "consumer" and any(
                m["CURRENT-ASSIGNMENT"] != m["TARGET-ASSIGNMENT"] or m["CURRENT-EPOCH"] != m["TARGET-EPOCH"]
                for m in members):
            return False
        return sorted(len(a) for a in current) == [1, 1, 2] and set().union(*current) == set(range(PARTITIONS))

    def show(tm: tuple[str, list[dict[str, str]]]) -> str:
        return tm[0] + "\n" + "\n".join(c.describe() for c in consumers.values() if not c.alive())

    text, members = wait_until(lambda: _members(b, group), GROUP_TIMEOUT, 0.5,
                               f"3 members splitting {PARTITIONS} partitions 2+1+1",
                               ok=settled, show=show)
    owned = {m["CLIENT-ID"]: parse_assignment(m["CURRENT-ASSIGNMENT"])[topic] for m in members}
    for m in members:
        assert int(m["#PARTITIONS"]) == len(owned[m["CLIENT-ID"]]), text

    out = _groups(b, "--describe", "--group", group, "--state")
    state = [r for r in parse_table(out.stdout) if r["GROUP"] == group]
    assert [(r["STATE"], r["#MEMBERS"]) for r in state] == [("Stable", "3")], out.describe()
    assert state[0]["ASSIGNMENT-STRATEGY"] == ("range" if protocol == "classic" else "uniform"), out.describe()

    # produce only once the split is settled, so no record is read twice across a rebalance
    sent = [(p, f"k{i}".encode(), f"m-{p}-{i:03d}".encode()) for i in range(PER_PARTITION) for p in range(PARTITIONS)]
    produce(b, topic, sent)
    total = PARTITIONS * PER_PARTITION

    def all_lines() -> dict[str, list[str]]:
        return {cid: c.lines() for cid, c in consumers.items()}

    wait_until(all_lines, GROUP_TIMEOUT, 0.5, f"{total} records across the three consumers",
               ok=lambda got: sum(map(len, got.values())) >= total,
               show=lambda got: f"{ {k: len(v) for k, v in got.items()} }\n" + text)
    # every partition's owner committed up to the log end (and nothing was read twice meanwhile)
    otext, rows = wait_until(lambda: _offsets(b, group, topic), TIMEOUT, 0.5,
                             "every partition committed to its log end",
                             ok=lambda tr: _triples(tr[1]) == {p: (PER_PARTITION, PER_PARTITION, 0)
                                                               for p in range(PARTITIONS)},
                             show=lambda tr: tr[0])
    got = all_lines()

    want = Counter(f"Partition:{p}\t{v.decode()}" for p, _, v in sent)
    assert Counter(ln for lines in got.values() for ln in lines) == want, \
        {cid: len(lines) for cid, lines in got.items()}
    for cid, lines in got.items():
        parts = {_partition_of(ln) for ln in lines}
        assert parts == owned[cid], (cid, parts, owned[cid], text)
        assert len(lines) == PER_PARTITION * len(owned[cid]), (cid, len(lines))
    by_client = {int(p): r["CLIENT-ID"] for p, r in rows.items()}
    assert by_client == {p: cid for cid, ps in owned.items() for p in ps}, otext
    for c in consumers.values():
        c.stop()
        assert not client_errors(c.stderr()), c.describe()
