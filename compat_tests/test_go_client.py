"""franz-go v1.22 (kgo, kadm), the Go client, over TCP (compat_tests/go/main.go through
go_client.py): keyed records with headers and each compression back with their offsets and
partitions; consumer groups of two members with the classic protocol and KIP-848, which
split a 4-partition topic and each read exactly their partitions; and kgo.GroupTransactSession
consume-transform-produce across a rebalance (a member joins, one leaves mid-transaction),
which must be exactly-once: every input record once in the output as read_committed reads it,
and the group's committed offsets at the input's end offsets.

Issue 26: every GroupTransactSession run failed on tmqgate with `INVALID_TXN_STATE` from End.
A transaction whose records all failed client-side (aborted while they waited for the output
topic's metadata) is ended by franz-go, at transaction version 2, with EndTxn v5 abort and no
partition added: Kafka 4 takes it as an empty transaction (epoch bumped, CompleteAbort); tmqgate
answered it INVALID_TXN_STATE (test_txn_version2.py has the same sequence over the wire).
"""

from __future__ import annotations

from collections import defaultdict

import pytest

from tmqgate.protocol.partitioner import murmur2

from .conftest import Broker
from .go_client import run_go
from .helpers import CODECS, unique_topic

RECORDS = 30


@pytest.mark.parametrize("codec", CODECS)
def test_produce_consume(broker: Broker, codec: str) -> None:
    """30 keyed records to 3 partitions (every third with headers h1=x<i> and an empty h2),
    compressed with `codec`, consumed back from the start: the same records at the offsets the
    producer was given, each partition from 0 without a gap, partitioned by murmur2 of the key
    as the Java client does."""
    topic = unique_topic(f"go-{codec}")
    run = run_go("roundtrip", broker.bootstrap, topic=topic, n=RECORDS, codec=codec)
    assert run.returncode == 0, run.report()
    produced = {e["key"]: (e["partition"], e["offset"]) for e in run.of("produced")}
    assert sorted(produced) == [f"key-{i:03d}" for i in range(RECORDS)]
    for key, (partition, _) in produced.items():
        assert partition == (murmur2(key.encode()) & 0x7FFFFFFF) % 3, key
    by_partition: dict[int, list[int]] = defaultdict(list)
    for partition, offset in produced.values():
        by_partition[partition].append(offset)
    assert all(sorted(offsets) == list(range(len(offsets))) for offsets in by_partition.values()), by_partition
    consumed = run.of("consumed")
    assert sorted((e["key"], e["partition"], e["offset"]) for e in consumed) == sorted(
        (key, p, o) for key, (p, o) in produced.items())
    for e in consumed:
        i = int(e["key"].removeprefix("key-"))
        assert e["value"] == f"value-{i:03d}"
        assert e["headers"] == ([["h1", f"x{i}"], ["h2", ""]] if i % 3 == 0 else []), e


@pytest.mark.parametrize(("protocol", "balancer"), [("classic", "cooperative-sticky"), ("848", "range"),
                                                    ("848", "sticky")])
def test_consumer_group_split(broker: Broker, protocol: str, balancer: str) -> None:
    """Two members of one group (classic with a client-side balancer; KIP-848 with the broker's
    range or uniform assignor, kgo.ServerSideBalancer) split 4 partitions two and two; 40
    records produced then are each consumed once, by the member owning their partition, and
    the commits reach the end offsets."""
    topic, group = unique_topic("go-group"), unique_topic("go-group")
    run = run_go("group", broker.bootstrap, topic=topic, group=group, n=40, balancer=balancer,
                 **{"848": protocol == "848"})
    assert run.returncode == 0, run.report()
    first, last = run.of("assigned")
    assert first == last, run.report()  # no rebalance while the records were read
    owned = {1: set(first["member1"]), 2: set(first["member2"])}
    assert len(owned[1]) == len(owned[2]) == 2 and owned[1] | owned[2] == {0, 1, 2, 3}
    consumed = run.of("consumed")
    assert sorted(e["key"] for e in consumed) == [f"key-{i:03d}" for i in range(40)]
    for e in consumed:
        assert e["partition"] in owned[e["member"]] and e["partition"] == int(e["key"][4:]) % 4, e
    [offsets] = run.of("offsets")
    assert offsets["committed"] == offsets["end"] == {str(p): 10 for p in range(4)}


ETL_RECORDS = 400


@pytest.mark.parametrize(("protocol", "balancer"), [("classic", "range"), ("classic", "cooperative-sticky"),
                                                    ("848", "range")])
def test_group_transact_session_exactly_once(broker: Broker, protocol: str, balancer: str) -> None:
    """kgo.GroupTransactSession from a 4-partition input (400 records produced while it runs) to
    an output topic, read_committed: member 1 starts; member 2 joins and aborts its first
    transaction (an empty one at transaction version 2: its records still waited for the output's
    metadata; issue 26 point 2); member 1 leaves, aborting the transaction it is in; member 2
    finishes. Every input record is in the output exactly once, transformed, and the group's
    committed offsets are the input's end offsets."""
    src, dst, group = unique_topic("go-etl-in"), unique_topic("go-etl-out"), unique_topic("go-etl")
    run = run_go("etl", broker.bootstrap, timeout=150, **{"in": src, "out": dst, "group": group, "n": ETL_RECORDS,
                                                          "balancer": balancer, "848": protocol == "848"})
    assert run.returncode == 0, run.report()
    assert [(e["event"], e["member"]) for e in run.events if e["event"] in ("joined", "left")] == [
        ("joined", "member2"), ("left", "member1"), ("left", "member2")]
    txns = run.of("txn")
    assert [t["committed"] for t in txns if t["member"] == "member2"][0] is False  # its first, aborted
    assert any(t["committed"] for t in txns if t["member"] == "member2")
    [output] = run.of("output")
    keys = [f"key-{i:04d}" for i in range(ETL_RECORDS)]
    assert output["keys"] == dict.fromkeys(keys, 1)
    assert output["values"] == {k: f"etl-value-{k[4:]}" for k in keys}
    [offsets] = run.of("offsets")
    assert offsets["committed"] == offsets["end"] == {str(p): ETL_RECORDS // 4 for p in range(4)}
