"""Consumer groups on a query topic (000: consumption progress per vnode, shared by a group,
independent across groups; earliest/latest only without a commit), SHOW CONSUMERS,
SHOW SUBSCRIPTIONS, DROP TOPIC [FORCE] and DROP CONSUMER GROUP.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from .group_helpers import kp_subscribe
from .helpers import wait_until
from .tdengine_helpers import (
    BASE_TS,
    METERS_DDL,
    VGROUPS,
    CkConsumer,
    Rec,
    TdBroker,
    by_partition,
    end_offsets,
    expected_query,
    f32,
    insert_rows,
    make_children,
    make_rows,
    read_confluent,
    td_broker_fixture,
    unique,
)

pytestmark = pytest.mark.tmqgate_only

QUERY = "SELECT ts, current, voltage, location FROM meters WHERE voltage > 220 AND groupid = 2"


@pytest.fixture(scope="module")
def td(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TdBroker]:
    yield from td_broker_fixture(tmp_path_factory, "td-groups")


def _kp_consumer(td: TdBroker, group: str, topic: str, reset: str, client_id: str, **kw: Any) -> Any:
    from kafka import KafkaConsumer

    c = KafkaConsumer(bootstrap_servers=td.bootstrap, group_id=group, client_id=client_id,
                      auto_offset_reset=reset, enable_auto_commit=False, session_timeout_ms=10_000,
                      heartbeat_interval_ms=1000, **kw)
    kp_subscribe(c, topic)
    assert c.partitions_for_topic(topic) == set(range(VGROUPS))
    return c


def _kp_rec(tp: Any, m: Any) -> Rec:
    return Rec(tp.partition, m.offset, m.key.decode(), m.value, m.timestamp, dict(m.headers))


def _kp_poll_until(c: Any, done: Any, timeout: float = 60.0) -> list[Rec]:
    out: list[Rec] = []
    deadline = time.monotonic() + timeout
    while not done(out):
        for tp, msgs in c.poll(timeout_ms=500).items():
            out.extend(_kp_rec(tp, m) for m in msgs)
        assert time.monotonic() < deadline, f"timed out; {len(out)} records so far"
    return out


def _kp_wait_assigned(c: Any, topic: str, timeout: float = 30.0) -> list[Rec]:
    """Poll until the consumer owns every vnode; the records polled meanwhile."""
    out: list[Rec] = []
    deadline = time.monotonic() + timeout
    while len(c.assignment()) < VGROUPS:
        for tp, msgs in c.poll(timeout_ms=500).items():
            out.extend(_kp_rec(tp, m) for m in msgs)
        assert time.monotonic() < deadline, f"no assignment of {topic} after {timeout}s: {c.assignment()}"
    return out


def _kp_drain(c: Any, ends: dict[int, int], timeout: float = 60.0) -> list[Rec]:
    """Poll a subscribed kafka-python consumer until its fetch positions reached `ends`."""
    from kafka import TopicPartition

    topic = next(iter(c.subscription()))
    out = _kp_wait_assigned(c, topic)
    deadline = time.monotonic() + timeout
    while True:
        for tp, msgs in c.poll(timeout_ms=500).items():
            out.extend(_kp_rec(tp, m) for m in msgs)
        if all(c.position(TopicPartition(topic, p)) >= e for p, e in ends.items()):
            return out
        assert time.monotonic() < deadline, f"positions never reached {ends}"


def _values(recs: list[Rec]) -> list[tuple[int, int, str | None, bytes | None]]:
    return [(r.partition, r.offset, r.key, r.value) for r in recs]


def _subscriptions(td: TdBroker, topic: str, group: str) -> dict[int, dict[str, Any]]:
    return {r["vgroup_id"]: r for r in td.rows("SHOW SUBSCRIPTIONS")
            if r["topic_name"] == topic and r["consumer_group"] == group}


def _committed(td: TdBroker, group: str, topic: str) -> dict[int, int]:
    from kafka import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=td.bootstrap)
    try:
        res = admin.list_group_offsets({group: None})[group]
        return {tp.partition: om.offset for tp, om in res.items() if tp.topic == topic and om.offset >= 0}
    finally:
        admin.close()


def test_groups_on_a_query_topic(td: TdBroker) -> None:
    from kafka import TopicPartition
    from kafka.structs import OffsetAndMetadata

    db, topic = unique("grp"), unique("q")
    g1, g2, g3 = unique("g1"), unique("g2"), unique("g3")
    tables = [f"m{i:02d}" for i in range(40)]
    children = make_children(tables, seed=5)
    rows = make_rows(tables, 50, seed=6)
    td.sql(f"CREATE DATABASE {db} VGROUPS {VGROUPS}")
    td.sql(METERS_DDL.format(db=db))
    insert_rows(td, db, rows, children, batch=1000)
    td.sql(f"CREATE TOPIC {topic} AS {QUERY}", db=db)

    # the whole topic, read without a group, is exactly the independent filter
    expected = expected_query(rows, children)
    full = read_confluent(td.bootstrap, topic)
    assert {(r.key, r.json()["ts"]) for r in full} == set(expected) and len(full) == len(expected)
    for r in full:
        want = expected[(r.key, r.json()["ts"])]
        assert r.json() == {**want, "current": r.json()["current"]} and f32(r.json()["current"]) == f32(want["current"])
    full_p = by_partition(full)
    assert sorted(full_p) == list(range(VGROUPS)), "every vnode should hold matching rows"
    ends = end_offsets(td.bootstrap, topic)

    # -- group g1, first consumer (kafka-python): processes half the records, commits, leaves
    half = len(full) // 2
    a = _kp_consumer(td, g1, topic, "earliest", "td-a", max_poll_records=50)
    try:
        polled = _kp_poll_until(a, lambda out: len(out) >= half)
        processed = polled[:half]
        commit: dict[int, int] = {}
        for p, rs in by_partition(processed).items():
            done = {r.offset for r in rs}
            assert [r.offset for r in rs] == [r.offset for r in full_p[p][:len(rs)]], f"vnode {p} out of order"
            rest = [r.offset for r in full_p[p] if r.offset not in done]
            # commit the position of the next record to process: the first one not processed,
            # or just past the last record when the vnode was read to the end
            commit[p] = rest[0] if rest else rs[-1].offset + 1
        assert commit, "nothing processed"
        a.commit({TopicPartition(topic, p): OffsetAndMetadata(o, "", -1) for p, o in commit.items()})
    finally:
        a.close(autocommit=False)
    assert _committed(td, g1, topic) == commit
    subs = _subscriptions(td, topic, g1)
    assert {v: (s["offset"], s["consumer_id"]) for v, s in subs.items()} == {v: (o, None) for v, o in commit.items()}

    # -- group g2 is independent: earliest reads everything from the start
    c2 = _kp_consumer(td, g2, topic, "earliest", "td-g2")
    try:
        got2 = _kp_drain(c2, ends)
        c2.commit()
    finally:
        c2.close(autocommit=False)
    assert sorted(_values(got2)) == sorted(_values(full))
    assert _committed(td, g2, topic) == ends
    assert _committed(td, g1, topic) == commit  # g2's progress did not touch g1's

    # -- group g1 again, another client (confluent-kafka): resumes exactly at the commit
    b = CkConsumer(td.bootstrap, topic, **{"group.id": g1, "client.id": "td-b", "auto.offset.reset": "earliest",
                                           "session.timeout.ms": 10_000, "heartbeat.interval.ms": 1000})
    try:
        b.c.subscribe([topic])
        got_b = b.drain(ends, timeout=60)
        gb = by_partition(got_b)
        for p in range(VGROUPS):
            want = [r for r in full_p[p] if r.offset >= commit.get(p, 0)]
            assert _values(gb.get(p, [])) == _values(want), f"vnode {p}"
            if p in commit and want:
                # the committed offset is the next record's version: the first one read
                assert gb[p][0].offset == commit[p], (p, gb[p][0], commit[p])
        # exactly-after: the two consumers of g1 together read every record once
        assert sorted(_values(processed) + _values(got_b)) == sorted(_values(full))

        # SHOW CONSUMERS lists the live consumer; SHOW SUBSCRIPTIONS shows it owning the vnodes
        member = b.c.memberid()
        consumers = [r for r in td.rows("SHOW CONSUMERS") if r["consumer_group"] == g1]
        assert len(consumers) == 1, consumers
        assert consumers[0]["consumer_id"] == member and consumers[0]["client_id"] == "td-b"
        assert consumers[0]["topics"] == topic and consumers[0]["status"] == "ready"
        b.c.commit(asynchronous=False)
        final = {p: rs[-1].offset + 1 for p, rs in gb.items()}
        final.update({p: o for p, o in commit.items() if p not in final})
        subs = _subscriptions(td, topic, g1)
        assert {v: (s["offset"], s["consumer_id"]) for v, s in subs.items()} == \
            {v: (final.get(v, -1), member) for v in range(VGROUPS)}

        # DROP TOPIC and DROP CONSUMER GROUP are refused while the group is subscribed
        _, answer = td.sql_error(f"DROP TOPIC {topic}")
        assert g1 in answer["desc"] and "FORCE" in answer["desc"], answer
        _, answer = td.sql_error(f"DROP CONSUMER GROUP {g1} ON {topic}")
        assert g1 in answer["desc"], answer
    finally:
        b.close()
    assert _committed(td, g1, topic) == final
    wait_until(lambda: not [r for r in td.rows("SHOW CONSUMERS") if r["consumer_group"] == g1], 15,
               what="g1 to leave SHOW CONSUMERS")

    # DROP CONSUMER GROUP removes g1's committed offsets on the topic (g2's stay)
    td.sql(f"DROP CONSUMER GROUP {g1} ON {topic}")
    assert _subscriptions(td, topic, g1) == {}
    assert _committed(td, g1, topic) == {}
    assert _committed(td, g2, topic) == ends
    # ... so g1 starts over as its auto.offset.reset says
    again = CkConsumer(td.bootstrap, topic, **{"group.id": g1, "auto.offset.reset": "earliest"})
    try:
        again.c.subscribe([topic])
        got_again = again.drain(ends, timeout=60)
    finally:
        again.close()
    assert sorted(_values(got_again)) == sorted(_values(full))

    # -- group g3 with latest: only rows inserted after it joined
    c3 = _kp_consumer(td, g3, topic, "latest", "td-g3")
    try:
        assert _kp_wait_assigned(c3, topic) == []
        for p in range(VGROUPS):
            assert c3.position(TopicPartition(topic, p)) == ends[p]  # resolved to the end now
        assert c3.poll(timeout_ms=500) == {}
        new_rows = make_rows(tables, 5, seed=7, ts_base=BASE_TS + 10_000_000)
        insert_rows(td, db, new_rows, children, batch=1000)
        new_expected = expected_query(new_rows, children)
        assert new_expected
        new_ends = end_offsets(td.bootstrap, topic)
        got3 = _kp_drain(c3, new_ends)
        assert {(r.key, r.json()["ts"]) for r in got3} == set(new_expected) and len(got3) == len(new_expected)
        assert all(r.offset >= ends[r.partition] for r in got3)

        # DROP TOPIC is refused while g3 is subscribed, and done with FORCE
        _, answer = td.sql_error(f"DROP TOPIC {topic}")
        assert g3 in answer["desc"], answer
        assert topic in {t["topic_name"] for t in td.rows("SHOW TOPICS")}
        td.sql(f"DROP TOPIC {topic} FORCE")
        assert topic not in {t["topic_name"] for t in td.rows("SHOW TOPICS")}
    finally:
        c3.close(autocommit=False)
    # the dropped topic's committed offsets went with it
    assert _committed(td, g2, topic) == {}
    assert not [r for r in td.rows("SHOW SUBSCRIPTIONS") if r["topic_name"] == topic]
