"""A follower replica's log (issue 16): appends at the leader's offsets with the leader's
epochs, OffsetForLeaderEpoch answered from the batches, a divergent tail truncated."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_storage import make_batch

from tmqgate.storage import ProducerAppend, ProducerWindow, Store


def _stored(store: Store, n: int, epoch: int, producer: tuple[int, int, int] = (-1, -1, -1)) -> bytes:
    """A batch as a leader at epoch ``epoch`` stores it (appended to ``store``, read back)."""
    pid, pepoch, seq = producer
    appended = None if pid < 0 else ProducerAppend(pid, pepoch, seq, n, store.producer_window("t", 0, pid))
    base = store.append("t", 0, make_batch(n, producer=producer), n, 1000 + n, appended, leader_epoch=epoch).base
    return store.read("t", 0, base, 1 << 20)[0]


@pytest.mark.parametrize("cache", [0, 1 << 20], ids=["nocache", "cache"])
def test_a_follower_copies_the_leaders_batches_epochs_and_producer_windows(tmp_path: Path, cache: int) -> None:
    with Store(tmp_path / "leader") as leader, Store(tmp_path / "follower", tail_cache_bytes=cache) as follower:
        for s in (leader, follower):
            s.create_database("t", 1)
        batches = [_stored(leader, 3, 0, (7, 0, 0)), _stored(leader, 2, 0, (7, 0, 3)), _stored(leader, 4, 2)]
        for b in batches:
            follower.append_replica("t", 0, b)
        assert follower.read("t", 0, 0, 1 << 20) == leader.read("t", 0, 0, 1 << 20) == batches
        assert follower.next_version("t", 0) == 9
        assert follower.producer_window("t", 0, 7) == leader.producer_window("t", 0, 7)
        assert isinstance(follower.producer_window("t", 0, 7), ProducerWindow)
        with pytest.raises(ValueError, match="replica append at 5, the log ends at 9"):
            follower.append_replica("t", 0, batches[2])
        # OffsetForLeaderEpoch: epoch 0 ends where epoch 2 starts; 1 is not there (0 is the
        # largest below it); 2 and later end at the log end; nothing is older than 0.
        assert [follower.epoch_end("t", 0, e) for e in (0, 1, 2, 5)] == [(0, 5), (0, 5), (2, 9), (2, 9)]
        assert follower.epoch_end("t", 0, -1) == (-1, -1)


def test_a_divergent_tail_is_truncated_and_the_leaders_batches_take_its_offsets(tmp_path: Path) -> None:
    with Store(tmp_path / "leader") as leader, Store(tmp_path / "follower", tail_cache_bytes=1 << 20) as follower:
        for s in (leader, follower):
            s.create_database("t", 1)
        common = _stored(leader, 3, 0, (7, 0, 0))
        follower.append_replica("t", 0, common)
        # The follower led epoch 1 for a moment: it wrote a batch nobody else has.
        follower.append("t", 0, make_batch(4, producer=(7, 0, 3)), 4, 2000, leader_epoch=1)
        theirs = _stored(leader, 2, 2, (7, 0, 3))
        assert follower.epoch_end("t", 0, 1) == (1, 7)
        end_epoch, end = leader.epoch_end("t", 0, 1)  # what the leader answers the follower
        assert (end_epoch, end) == (0, 3)
        follower.truncate("t", 0, end)
        assert follower.next_version("t", 0) == 3
        assert follower.read("t", 0, 0, 1 << 20) == [common]
        window = follower.producer_window("t", 0, 7)  # the truncated batch left the window
        assert window is not None and [b.base_offset for b in window.batches] == [0]
        follower.append_replica("t", 0, theirs)
        assert follower.read("t", 0, 0, 1 << 20) == [common, theirs]
    with Store(tmp_path / "follower") as again:  # the truncation is durable
        assert again.next_version("t", 0) == 5
        assert len(again.read("t", 0, 0, 1 << 20)) == 2


def test_a_follower_keeps_the_leaders_transactions(tmp_path: Path) -> None:
    """The leader's markers close the producer's transactions on the follower too: the same
    aborted index and last stable offset, so read_committed reads the same after a failover
    (found by the cluster's transaction test: a committed transaction's records were taken
    for an aborted one's on the new leader)."""
    from tmqgate.protocol.records import build_batch

    def txn_batch(store: Store, values: list[bytes], seq: int) -> bytes:
        batch = build_batch([(None, v, [], 1000) for v in values], producer_id=9, producer_epoch=1,
                            base_sequence=seq, is_transactional=True)
        window = store.producer_window("t", 0, 9)
        base = store.append("t", 0, batch, len(values), 1000, ProducerAppend(9, 1, seq, len(values), window),
                            leader_epoch=3).base
        return store.read("t", 0, base, 1 << 20)[0]

    def marker(store: Store, commit: bool) -> bytes:
        at = store.write_txn_marker("t", 0, 9, 1, commit, 0, leader_epoch=3)
        return store.read("t", 0, at, 1 << 20)[0]

    with Store(tmp_path / "leader") as leader, Store(tmp_path / "follower") as follower:
        for s in (leader, follower):
            s.create_database("t", 1)
        batches = [txn_batch(leader, [b"c0", b"c1"], 0), marker(leader, True),
                   txn_batch(leader, [b"a0"], 2), marker(leader, False),
                   txn_batch(leader, [b"o0"], 3)]  # still open
        for b in batches:
            follower.append_replica("t", 0, b)
        assert follower.read("t", 0, 0, 1 << 20) == leader.read("t", 0, 0, 1 << 20)
        end = leader.next_version("t", 0)
        assert follower.aborted_transactions("t", 0, 0, end) == leader.aborted_transactions("t", 0, 0, end) == [(9, 3)]
        assert follower.last_stable_offset("t", 0) == leader.last_stable_offset("t", 0) == 5
        assert follower.open_transactions("t", 0) == leader.open_transactions("t", 0) == {9: (5, 1)}


def _copy(leader: Store, follower: Store, db: str, vnode: int) -> None:
    """What a follower of a SQL database's vnode does: the leader's raw entries from its log end,
    with what the leader knows of them beside (broker/cluster/replication.py carries it)."""
    txn_rows, batch_ends = leader.replica_marks(db, vnode)
    for version, kind, value, count in leader.raw_entries(db, vnode, follower.next_version(db, vnode), 1 << 20):
        if kind == 0:
            follower.append_replica(db, vnode, value)
            continue
        with follower.transaction() as tx:
            tx.append_raw(db, vnode, version, kind, value, count, txn_producer=txn_rows.get(version),
                          producer_batch=batch_ends.get(version + count - 1))


@pytest.mark.parametrize("cache", [0, 1 << 20], ids=["nocache", "cache"])
def test_a_sql_databases_follower_stores_the_leaders_meta_and_rows_entries_as_they_are(tmp_path: Path,
                                                                                        cache: int) -> None:
    with Store(tmp_path / "leader") as leader, Store(tmp_path / "follower", tail_cache_bytes=cache) as follower:
        for s in (leader, follower):
            s.create_database("db", 2, kind="tsdb")
        leader.append_meta("db", 1, b'{"type":"create"}', timestamp_ms=111)
        leader.append_rows("db", 1, b"arrow-ipc-1", 3, 5000, 4000, timestamp_ms=222)
        leader.append_meta("db", 1, b'{"type":"alter"}', timestamp_ms=333)
        leader.append_rows("db", 1, b"arrow-ipc-2", 2, 3000, 2000, timestamp_ms=444)
        raw = leader.raw_entries("db", 1, 0, 1 << 20)
        assert [(v, k, n) for v, k, _, n in raw] == [(0, 1, 1), (1, 2, 3), (4, 1, 1), (5, 2, 2)]
        assert leader.raw_entries("db", 1, 0, 1) == raw[:1]  # at least one, then within max_bytes
        assert leader.raw_entries("db", 1, 2, 1 << 20)[0][0] == 1  # from the entry holding version 2
        _copy(leader, follower, "db", 1)
        assert follower.read_entries("db", 1, 0, 1 << 20) == leader.read_entries("db", 1, 0, 1 << 20)
        assert follower.next_version("db", 1) == 7 and follower.log_size("db", 1) == leader.log_size("db", 1)
        # the time index as the leader's: rows entries by their max timestamp
        assert [follower.offset_for_timestamp("db", 1, ts) for ts in (0, 4500, 6000)] == \
            [leader.offset_for_timestamp("db", 1, ts) for ts in (0, 4500, 6000)] == [(1, 5000), (1, 5000), None]
        with pytest.raises(ValueError, match="replica append at 4, the log ends at 7"), follower.transaction() as tx:
            tx.append_raw("db", 1, *raw[2])
        with pytest.raises(ValueError, match="not a meta or rows entry"), follower.transaction() as tx:
            tx.append_raw("db", 1, 7, 2, b"short", 1)
        assert follower.next_version("db", 1) == 7  # a refused append wrote nothing


def test_a_sql_databases_leader_epochs_are_cached_and_truncated_with_their_entries(tmp_path: Path) -> None:
    with Store(tmp_path / "s") as store:
        store.create_database("db", 1, kind="tsdb")
        assert store.epochs("db", 0) == []
        store.assign_epoch("db", 0, 0, 0)
        store.append_rows("db", 0, b"a", 4, 10, 1)
        store.assign_epoch("db", 0, 3, 4)
        store.assign_epoch("db", 0, 2, 4)  # older than the last: ignored, as Kafka's cache does
        store.append_meta("db", 0, b"{}")
        store.assign_epoch("db", 0, 5, 5)
        store.append_rows("db", 0, b"b", 2, 20, 11)
        assert store.epochs("db", 0) == [(0, 0), (3, 4), (5, 5)]
        # OffsetForLeaderEpoch from the cache: where each epoch ends
        assert [store.epoch_end("db", 0, e) for e in (0, 1, 3, 4, 5, 9)] == \
            [(0, 4), (0, 4), (3, 5), (3, 5), (5, 7), (5, 7)]
        assert store.epoch_end("db", 0, -1) == (-1, -1)
        store.truncate("db", 0, 5)  # epoch 5 started in the removed tail
        assert store.epochs("db", 0) == [(0, 0), (3, 4)] and store.next_version("db", 0) == 5
        assert store.epoch_end("db", 0, 9) == (3, 5)
    with Store(tmp_path / "s") as store:  # kept across a restart
        assert store.epochs("db", 0) == [(0, 0), (3, 4)]
        store.drop_database("db")
        store.create_database("db", 1, kind="tsdb")
        assert store.epochs("db", 0) == []


def test_a_sql_databases_follower_keeps_the_leaders_producer_windows_and_transactions(tmp_path: Path) -> None:
    from tmqgate.storage import RowsEntry

    with Store(tmp_path / "leader") as leader, Store(tmp_path / "follower") as follower:
        for s in (leader, follower):
            s.create_database("db", 1, kind="tsdb")
        # an idempotent producer's batch that became two rows entries, then another of one
        first = ProducerAppend(7, 0, 0, 5, None)
        leader.append_rows_many("db", 0, [RowsEntry(b"a", 3, 10, 1), RowsEntry(b"b", 2, 20, 11)], producer=first)
        second = ProducerAppend(7, 0, 5, 1, leader.producer_window("db", 0, 7))
        leader.append_rows_many("db", 0, [RowsEntry(b"c", 1, 30, 30)], producer=second)
        # a transaction that aborts, and one left open
        leader.append_rows("db", 0, b"t1", 2, 40, 39, txn_producer=(8, 1))
        leader.write_txn_marker("db", 0, 8, 1, False, 0)
        leader.append_rows("db", 0, b"t2", 2, 50, 49, txn_producer=(9, 3))
        _copy(leader, follower, "db", 0)
        assert follower.read_entries("db", 0, 0, 1 << 20) == leader.read_entries("db", 0, 0, 1 << 20)
        window = follower.producer_window("db", 0, 7)
        assert window == leader.producer_window("db", 0, 7)
        assert window is not None and [(b.first_seq, b.last_seq, b.base_offset, b.last_offset)
                                       for b in window.batches] == [(0, 4, 0, 4), (5, 5, 5, 5)]
        assert follower.aborted_rows("db", 0, 0, 100) == leader.aborted_rows("db", 0, 0, 100) == {6}
        assert follower.open_transactions("db", 0) == leader.open_transactions("db", 0) == {9: (9, 3)}
        assert follower.last_stable_offset("db", 0) == leader.last_stable_offset("db", 0) == 9
