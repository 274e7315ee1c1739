"""Transactions on the WAL (storage.wal_txns) against a real LevelDB: open transactions, the
last stable offset, commit/abort markers, the aborted index, restarts, kill -9, dropping a
database, and removals that stop at the first offset of an open transaction."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tmqgate.protocol.errors import ErrorCode
from tmqgate.protocol.records import EndTxnMarker, build_batch, parse_end_txn_marker, parse_header
from tmqgate.storage import Store, keys
from tmqgate.storage.producers import ProducerAppend, check_sequence

PID = 4000


def txn_batch(n: int, pid: int = PID, epoch: int = 0, seq: int = 0, ts: int = 1000) -> bytes:
    return build_batch([(None, b"v%d" % i, None, ts + i) for i in range(n)], producer_id=pid,
                       producer_epoch=epoch, base_sequence=seq, is_transactional=True)


def plain_batch(n: int, ts: int = 1000) -> bytes:
    return build_batch([(None, b"p%d" % i, None, ts + i) for i in range(n)])


def add(store: Store, batch: bytes, vnode: int = 0, db: str = "t") -> int:
    h = parse_header(batch)
    return store.append(db, vnode, batch, h.record_count, h.max_timestamp).base


@pytest.fixture
def store(tmp_path: Path) -> Store:
    s = Store(tmp_path / "data")
    s.create_database("t", 2)
    yield s
    s.close()


def test_transactional_batch_opens_a_transaction_and_holds_the_lso(store: Store) -> None:
    assert add(store, plain_batch(2)) == 0
    assert store.last_stable_offset("t", 0) == 2
    assert add(store, txn_batch(3)) == 2
    assert add(store, plain_batch(1)) == 5
    assert add(store, txn_batch(2, seq=3)) == 6
    assert store.open_transactions("t", 0) == {PID: (2, 0)}
    assert store.last_stable_offset("t", 0) == 2
    assert store.next_version("t", 0) == 8
    assert store.last_stable_offset("t", 1) == 0  # the other vnode has none
    assert store.open_transactions("t", 1) == {}


def test_commit_marker_takes_the_next_offset_and_moves_the_lso(store: Store) -> None:
    add(store, txn_batch(3))
    assert store.write_txn_marker("t", 0, PID, 0, True, 7) == 3
    assert store.next_version("t", 0) == 4
    assert store.last_stable_offset("t", 0) == 4
    assert store.open_transactions("t", 0) == {}
    assert store.aborted_transactions("t", 0, 0, 4) == []
    marker = store.read("t", 0, 3, 1 << 20)[0]
    h = parse_header(marker)
    assert (h.base_offset, h.is_control, h.producer_id, h.producer_epoch) == (3, True, PID, 0)
    assert parse_end_txn_marker(marker) == EndTxnMarker(True, 7)


def test_abort_adds_an_aborted_index_entry(store: Store) -> None:
    add(store, plain_batch(1))
    add(store, txn_batch(2))  # 1..2
    add(store, txn_batch(1, pid=PID + 1))  # 3, another producer
    assert store.last_stable_offset("t", 0) == 1
    assert store.write_txn_marker("t", 0, PID, 0, False, 0) == 4
    assert store.last_stable_offset("t", 0) == 3  # the other producer's is still open
    assert store.aborted_transactions("t", 0, 0, 5) == [(PID, 1)]
    assert store.aborted_transactions("t", 0, 4, 5) == [(PID, 1)]  # last offset 4 >= 4
    assert store.aborted_transactions("t", 0, 5, 9) == []  # ended before 5
    assert store.aborted_transactions("t", 0, 0, 1) == []  # starts at 1, not below 1
    assert store.write_txn_marker("t", 0, PID + 1, 0, True, 0) == 5
    assert store.last_stable_offset("t", 0) == 6


def test_marker_without_an_open_transaction_is_written(store: Store) -> None:
    assert store.write_txn_marker("t", 1, PID, 2, False, 1) == 0
    assert store.aborted_transactions("t", 1, 0, 1) == [(PID, 0)]
    assert store.write_txn_marker("t", 1, PID, 2, True, 1) == 1
    assert store.last_stable_offset("t", 1) == 2


def test_marker_epoch_updates_the_producer_window(store: Store) -> None:
    add(store, txn_batch(2, epoch=0))
    store.write_txn_marker("t", 0, PID, 1, False, 0)  # the coordinator bumped the epoch (fencing)
    window = store.producer_window("t", 0, PID)
    assert window is not None and window.epoch == 1
    assert check_sequence(window, 0, 2, 1).error == ErrorCode.INVALID_PRODUCER_EPOCH
    assert check_sequence(window, 1, 0, 1).error == ErrorCode.NONE


def test_state_survives_reopen(tmp_path: Path) -> None:
    path = tmp_path / "data"
    with Store(path) as s:
        s.create_database("t", 1)
        add(s, txn_batch(2))  # 0..1, aborted at 2
        s.write_txn_marker("t", 0, PID, 0, False, 3)
        add(s, txn_batch(1, pid=PID + 1))  # 3, still open
    with Store(path) as s:
        assert s.open_transactions("t", 0) == {PID + 1: (3, 0)}
        assert s.last_stable_offset("t", 0) == 3
        assert s.aborted_transactions("t", 0, 0, 4) == [(PID, 0)]
        assert s.write_txn_marker("t", 0, PID + 1, 0, True, 3) == 4
    with Store(path) as s:
        assert s.open_transactions("t", 0) == {}
        assert s.last_stable_offset("t", 0) == 5


def test_the_last_markers_coordinator_epoch_is_kept(tmp_path: Path) -> None:
    """DescribeProducers' coordinator epoch: the producer's last marker's on that vnode (-1
    before any), kept with its window across a reopen, and the idempotence window kept too."""
    path = tmp_path / "data"
    with Store(path) as s:
        s.create_database("t", 1)
        s.append("t", 0, txn_batch(2), 2, 1001, ProducerAppend(PID, 0, 0, 2, None))
        assert [p.coordinator_epoch for p in s.active_producers("t", 0)] == [-1]
        s.write_txn_marker("t", 0, PID, 0, True, 5)
        assert [p.coordinator_epoch for p in s.active_producers("t", 0)] == [5]
        s.append("t", 0, txn_batch(1, seq=2), 1, 1000, ProducerAppend(PID, 0, 2, 1, s.producer_window("t", 0, PID)))
    with Store(path) as s:
        [p] = s.active_producers("t", 0)
        assert (p.coordinator_epoch, p.last_sequence, p.current_txn_start_offset) == (5, 2, 3)
        window = s.producer_window("t", 0, PID)
        assert window is not None and check_sequence(window, 0, 0, 2).duplicate_of == 0  # a retry: its offset
        s.write_txn_marker("t", 0, PID, 0, False, 6)
        assert [p.coordinator_epoch for p in s.active_producers("t", 0)] == [6]


def test_a_producer_value_without_a_coordinator_epoch_reads_as_none() -> None:
    """Values written before the coordinator epoch was kept end after their batches."""
    old = keys.pack_producer(3, 1000, [(0, 1, 10, 11)])
    assert keys.producer_coordinator_epoch(old) == -1
    assert keys.unpack_producer(keys.pack_producer(3, 1000, [(0, 1, 10, 11)], 4)) == (3, 1000, [(0, 1, 10, 11)])
    assert keys.producer_coordinator_epoch(keys.pack_producer(3, 1000, [], 4)) == 4


KILLED_WRITER = textwrap.dedent(
    """
    import sys, time
    from tmqgate.protocol.records import build_batch
    from tmqgate.storage import Store
    s = Store(sys.argv[1])
    s.create_database("t", 1)
    b = build_batch([(None, b"x")], producer_id=4000, producer_epoch=0, base_sequence=0, is_transactional=True)
    s.append("t", 0, b, 1, 1000)
    s.write_txn_marker("t", 0, 4000, 0, False, 0)
    b = build_batch([(None, b"y")], producer_id=4001, producer_epoch=0, base_sequence=0, is_transactional=True)
    s.append("t", 0, b, 1, 1000)
    print("done", flush=True)
    time.sleep(60)
    """
)


def test_markers_and_open_transactions_survive_kill_9(tmp_path: Path) -> None:
    path = tmp_path / "data"
    env = dict(os.environ)
    proc = subprocess.Popen([sys.executable, "-c", KILLED_WRITER, str(path)], stdout=subprocess.PIPE, env=env)
    assert proc.stdout is not None
    assert proc.stdout.readline() == b"done\n"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    with Store(path) as s:
        assert s.next_version("t", 0) == 3
        assert s.aborted_transactions("t", 0, 0, 3) == [(4000, 0)]
        assert s.open_transactions("t", 0) == {4001: (2, 0)}
        assert s.last_stable_offset("t", 0) == 2


def test_dropped_database_drops_its_transactions(store: Store) -> None:
    add(store, txn_batch(1))
    store.write_txn_marker("t", 0, PID, 0, False, 0)
    add(store, txn_batch(1, pid=PID + 1))
    store.drop_database("t")
    db = store.core.db
    assert list(db.iterator(prefix=keys.TXNOPEN)) == []
    assert list(db.iterator(prefix=keys.ABORTED)) == []
    store.create_database("t", 1)
    assert store.open_transactions("t", 0) == {}
    assert store.aborted_transactions("t", 0, 0, 10) == []
    assert store.last_stable_offset("t", 0) == 0


def test_delete_records_keeps_an_open_transactions_data(store: Store) -> None:
    add(store, plain_batch(2))  # 0..1
    add(store, txn_batch(2))  # 2..3
    add(store, plain_batch(2))  # 4..5
    assert store.delete_before("t", 0, 6) == 6  # log start moves as Kafka's does (<= high watermark)
    assert store.log_entries("t", 0) == 2  # but the entries from the open transaction stay
    assert store.last_stable_offset("t", 0) == 6  # never below log start (Kafka's first unstable offset)
    assert store.open_transactions("t", 0) == {PID: (2, 0)}
    store.write_txn_marker("t", 0, PID, 0, True, 0)  # 6
    assert store.delete_before("t", 0, 7) == 7
    assert store.log_entries("t", 0) == 0  # the transaction ended: everything below 7 went


def test_retention_and_archiver_stop_at_the_lso(store: Store) -> None:
    add(store, plain_batch(1, ts=1))  # 0
    add(store, txn_batch(1, ts=2))  # 1
    add(store, plain_batch(1, ts=3))  # 2
    add(store, plain_batch(1, ts=4))  # 3
    store.set_configs("t", {"retention.ms": "0"})
    assert store.enforce_retention(now_ms=10_000) == 1  # only entry 0: 1 is the open txn's
    assert store.log_start("t", 0) == 1
    assert store.collect(now_ms=10_000, max_total_bytes=0) == []
    store.write_txn_marker("t", 0, PID, 0, False, 0)  # 4: aborted (1..4)
    assert store.aborted_transactions("t", 0, 1, 5) == [(PID, 1)]
    assert store.enforce_retention(now_ms=10_000) == 3  # 1, 2, 3; the marker is newer
    assert store.aborted_transactions("t", 0, 4, 5) == [(PID, 1)]  # ends at 4: kept
    records = store.collect(now_ms=20_000, max_total_bytes=0)
    assert records == []  # never a vnode's newest entry


def test_rows_entries_of_a_transactional_producer_join_its_transaction(tmp_path: Path) -> None:
    path = tmp_path / "data"
    with Store(path) as s:
        s.create_database("d", 1, kind="tsdb")
        assert s.append_rows("d", 0, b"plain", 2, 10, 9) == 0  # 0..1
        assert s.append_rows("d", 0, b"txn-a", 3, 10, 9, txn_producer=(PID, 0)) == 2  # 2..4
        with s.transaction() as tx:  # two entries of the producer in one WriteBatch
            assert tx.append_rows("d", 0, b"txn-b", 1, 10, 9, txn_producer=(PID, 0)) == 5
            assert tx.append_rows("d", 0, b"other", 1, 10, 9) == 6
            assert tx.append_rows("d", 0, b"txn-c", 2, 10, 9, txn_producer=(PID, 0)) == 7  # 7..8
        assert s.open_transactions("d", 0) == {PID: (2, 0)}
        assert s.last_stable_offset("d", 0) == 2
    with Store(path) as s:  # reloaded with its rows entries
        assert s.last_stable_offset("d", 0) == 2
        assert s.write_txn_marker("d", 0, PID, 0, False, 0) == 9
        assert s.aborted_rows("d", 0, 0, 10) == {2, 5, 7}
        assert s.aborted_rows("d", 0, 6, 10) == {7}
        assert s.aborted_rows("d", 0, 5, 6) == {5}
    with Store(path) as s:
        assert s.aborted_rows("d", 0, 0, 10) == {2, 5, 7}
        assert s.aborted_transactions("d", 0, 0, 10) == [(PID, 2)]


def test_power_loss_of_a_marker_reopens_its_transaction(tmp_path: Path) -> None:
    """A payload log that lost its unsynced tail (storage.payloads) rolls the transaction keys
    back with the vnode: a lost abort marker's transaction is open again, one opened in the
    lost tail is gone."""
    import plyvel

    from tmqgate.storage.payloads import PAYLOAD_DIR

    path = tmp_path / "d"
    with Store(path, tail_cache_bytes=0) as s:
        s.create_database("t", 1)
        add(s, txn_batch(1), db="t")  # 0 (payload 0)
        s.write_txn_marker("t", 0, PID, 0, False, 0)  # 1 (payload 1)
        add(s, txn_batch(1, pid=PID + 1), db="t")  # 2 (payload 2)
    plog = plyvel.DB(os.path.join(path, PAYLOAD_DIR))
    for seq in (1, 2):
        plog.delete(keys.u64(seq))
    plog.close()
    with Store(path) as s:
        assert s.next_version("t", 0) == 1
        assert s.open_transactions("t", 0) == {PID: (0, 0)}
        assert s.aborted_transactions("t", 0, 0, 10) == []
        assert s.last_stable_offset("t", 0) == 0
        assert s.write_txn_marker("t", 0, PID, 0, False, 0) == 1  # the coordinator's resend
        assert s.aborted_transactions("t", 0, 0, 2) == [(PID, 0)]


def test_aborted_lookup_finds_a_long_transaction_behind_short_ones(store: Store) -> None:
    add(store, txn_batch(1, pid=1))  # 0: the long transaction starts
    for pid in range(2, 6):  # short ones, aborted at once: 1..2, 3..4, 5..6, 7..8
        add(store, txn_batch(1, pid=pid))
        store.write_txn_marker("t", 0, pid, 0, False, 0)
    add(store, plain_batch(5))  # 9..13
    assert store.write_txn_marker("t", 0, 1, 0, False, 0) == 14
    assert store.aborted_transactions("t", 0, 9, 12) == [(1, 0)]
    assert store.aborted_transactions("t", 0, 2, 3) == [(2, 1), (1, 0)]
    assert store.aborted_transactions("t", 0, 15, 20) == []
