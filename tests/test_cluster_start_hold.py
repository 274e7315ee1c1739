"""A restarted `serve --workers N` keeps each partition with the worker that led it
(broker/cluster/membership.py): its controller elects nothing until the workers started with
it (``siblings``) have registered, for at most a session timeout; and a broker whose shutdown
began (``leaving``) takes no controller role and elects nothing.

Real rounds of Membership over a real cluster file (local_kv's SQLite), as the workers of one
`serve` share it: without the hold the first worker up takes the leadership of every partition
its siblings led (compat_tests/test_internal_topics.py's kill-and-restart on the workers target
saw __consumer_offsets read from the other worker's log)."""

from __future__ import annotations

import time
from pathlib import Path

from tmqgate.broker.cluster.local_kv import LocalKv
from tmqgate.broker.cluster.membership import Membership
from tmqgate.broker.metadata.view import PartitionState, Placement, placement_from, placement_value, topic_key

SESSION_MS = 3000


def _cluster(tmp_path: Path) -> tuple[str, LocalKv]:
    """A cluster file holding topic t as two workers (nodes 1 and 2) left it: p0 led by 1, p1 by 2."""
    url = f"local:{tmp_path / 'cluster.db'}"
    kv = LocalKv(tmp_path / "cluster.db")
    parts = (PartitionState((1, 2), 1, 0, (1, 2)), PartitionState((2, 1), 2, 0, (2, 1)))
    kv.put(topic_key("t"), placement_value(Placement("t", b"\x01" * 16, {}, parts)))
    return url, kv


def _leaders(kv: LocalKv) -> list[int]:
    [(value, _)] = kv.get(topic_key("t"), metadata=True)
    return [s.leader for s in placement_from(topic_key("t"), value.decode()).partitions]


def _worker(url: str, node: int, siblings: tuple[int, ...]) -> Membership:
    m = Membership(url, node, SESSION_MS, siblings=siblings)
    m.advertised = ("127.0.0.1", 9090 + node)
    return m


def test_the_first_worker_up_waits_for_its_sibling_before_electing(tmp_path: Path) -> None:
    url, kv = _cluster(tmp_path)
    second = _worker(url, 2, siblings=(1,))
    second._round()
    assert second.view.controller_id == 2 and set(second.view.brokers) == {2}
    assert _leaders(kv) == [1, 2]  # node 1 is not up, but is expected: p0 keeps its leader

    first = _worker(url, 1, siblings=(2,))
    first._round()  # registers (node 2 is the controller)
    second._round()
    assert set(second.view.brokers) == {1, 2}
    assert _leaders(kv) == [1, 2]  # no partition moved
    assert second._awaited == frozenset()  # the hold is over for good


def test_a_sibling_that_does_not_come_is_elected_around_after_a_session_timeout(tmp_path: Path) -> None:
    url, kv = _cluster(tmp_path)
    second = _worker(url, 2, siblings=(1,))
    second._round()
    assert _leaders(kv) == [1, 2]
    second._born = time.monotonic() - SESSION_MS / 1000  # a session timeout since it started
    second._round()
    assert _leaders(kv) == [2, 2]  # p0 to the live member of its ISR


def test_a_broker_without_siblings_elects_at_once(tmp_path: Path) -> None:
    url, kv = _cluster(tmp_path)
    alone = _worker(url, 2, siblings=())
    alone._round()
    assert _leaders(kv) == [2, 2]


def test_a_worker_restarted_alone_finds_its_siblings_live(tmp_path: Path) -> None:
    url, kv = _cluster(tmp_path)
    first = _worker(url, 1, siblings=(2,))
    first._round()  # controller: node 2 not up yet, held
    assert first.view.controller_id == 1 and _leaders(kv) == [1, 2]
    restarted = _worker(url, 2, siblings=(1,))
    restarted._round()
    assert restarted._awaited == frozenset()  # its sibling was live: nothing to wait for
    first._round()
    assert _leaders(kv) == [1, 2]


def test_a_broker_on_its_way_out_neither_takes_the_controller_role_nor_elects(tmp_path: Path) -> None:
    """The workers of one `serve` stop together: the last one still registered must not take the
    partitions of the sibling that revoked its lease a moment before (they would stay with it
    after the restart, both workers live again)."""
    url, kv = _cluster(tmp_path)
    stopping = _worker(url, 2, siblings=())  # no start hold: only `leaving` is in play
    stopping.leaving()
    stopping._round()
    assert stopping.view.controller_id != 2  # the role stays free for a broker that stays
    assert _leaders(kv) == [1, 2]  # node 1 is gone, yet p0 keeps its leader
    staying = _worker(url, 3, siblings=())
    staying._round()
    assert staying.view.controller_id == 3
    assert _leaders(kv) == [2, 2]  # a broker that stays elects p0's live in-sync replica
