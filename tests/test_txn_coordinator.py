"""The transaction coordinator's state machine (coordinator/transactions.py) on a fake clock,
over a real LevelDB store (storage/txn_coordinator.py), with in-memory recorders of the markers
and group completions it sends."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import pytest

from tmqgate.coordinator.transactions import (
    VALID_PREVIOUS,
    TransactionCoordinator,
    TxnConfig,
    TxnMetadata,
    TxnState,
)
from tmqgate.protocol.errors import ErrorCode as E
from tmqgate.protocol.transitions import IllegalStateTransition, valid_transitions
from tmqgate.storage import StorageFull, Store

S = TxnState
T0 = 1_700_000_000_000
TID = "txn-a"
P0, P1 = ("t", 0), ("t", 1)


class Markers:
    def __init__(self) -> None:
        self.calls: list[tuple[int, int, bool, list[tuple[str, int]]]] = []
        self.fail: set[tuple[str, int]] = set()
        self.deleted: set[tuple[str, int]] = set()

    def write(self, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int,
              partitions: Iterable[tuple[str, int]]) -> Mapping[tuple[str, int], E]:
        parts = list(partitions)
        self.calls.append((producer_id, producer_epoch, commit, parts))
        return {p: E.KAFKA_STORAGE_ERROR if p in self.fail
                else E.UNKNOWN_TOPIC_OR_PARTITION if p in self.deleted else E.NONE for p in parts}


class Groups:
    def __init__(self) -> None:
        self.calls: list[tuple[str, int, int, bool]] = []

    def complete_transaction(self, group_id: str, producer_id: int, producer_epoch: int, commit: bool) -> None:
        self.calls.append((group_id, producer_id, producer_epoch, commit))


@pytest.fixture
def store(tmp_path):
    s = Store(tmp_path / "data")
    yield s
    s.close()


def machine(store: Store, now: int = T0, **cfg: int) -> tuple[TransactionCoordinator, Markers, Groups]:
    m, g = Markers(), Groups()
    return TransactionCoordinator(store.txn_states, store, TxnConfig(**cfg), now, markers=m, groups=g), m, g


def init(c: TransactionCoordinator, now: int = T0, timeout: int = 60_000, tid: str = TID,
         expected: tuple[int, int] | None = None):
    r = c.init_producer_id(now, tid, timeout, expected)
    assert r.error is E.NONE, r
    return r.producer_id, r.producer_epoch


def test_table_is_kafkas() -> None:
    assert valid_transitions(VALID_PREVIOUS) == {
        (S.EMPTY, S.EMPTY), (S.COMPLETE_COMMIT, S.EMPTY), (S.COMPLETE_ABORT, S.EMPTY),
        (S.ONGOING, S.ONGOING), (S.EMPTY, S.ONGOING), (S.COMPLETE_COMMIT, S.ONGOING),
        (S.COMPLETE_ABORT, S.ONGOING), (S.ONGOING, S.PREPARE_COMMIT), (S.ONGOING, S.PREPARE_ABORT),
        (S.PREPARE_EPOCH_FENCE, S.PREPARE_ABORT), (S.EMPTY, S.PREPARE_ABORT),
        (S.COMPLETE_COMMIT, S.PREPARE_ABORT), (S.COMPLETE_ABORT, S.PREPARE_ABORT),
        (S.PREPARE_COMMIT, S.COMPLETE_COMMIT),
        (S.PREPARE_ABORT, S.COMPLETE_ABORT), (S.ONGOING, S.PREPARE_EPOCH_FENCE),
        (S.EMPTY, S.DEAD), (S.COMPLETE_COMMIT, S.DEAD), (S.COMPLETE_ABORT, S.DEAD)}


def test_the_table_refuses_an_invalid_transition(store: Store) -> None:
    c, _, _ = machine(store)
    init(c)
    meta = c.get(TID)
    assert meta is not None and meta.state is S.EMPTY
    with pytest.raises(IllegalStateTransition):
        c._transition(meta, S.PREPARE_COMMIT)
    with pytest.raises(IllegalStateTransition):
        c._transition(meta, S.COMPLETE_ABORT)
    assert c.get(TID) == meta  # nothing changed


def test_init_new_then_bump(store: Store) -> None:
    c, _, _ = machine(store)
    pid, epoch = init(c)
    assert epoch == 0
    assert init(c) == (pid, 1)
    assert c.get(TID).last_producer_epoch == -1


def test_init_timeout_bounds(store: Store) -> None:
    c, _, _ = machine(store, max_timeout_ms=10_000)
    assert c.init_producer_id(T0, TID, 10_001).error is E.INVALID_TRANSACTION_TIMEOUT
    assert c.init_producer_id(T0, TID, 0).error is E.INVALID_TRANSACTION_TIMEOUT
    assert c.init_producer_id(T0, "", 1000).error is E.INVALID_REQUEST
    assert c.init_producer_id(T0, TID, 10_000).error is E.NONE


def test_commit_writes_markers_then_completes(store: Store) -> None:
    c, markers, groups = machine(store)
    pid, epoch = init(c)
    assert c.add_partitions(T0 + 5, TID, pid, epoch, [P0, P1]) is E.NONE
    assert c.add_offsets(T0 + 6, TID, pid, epoch, "g1") is E.NONE
    meta = c.get(TID)
    assert (meta.state, meta.partitions, meta.groups, meta.start_ms) == (S.ONGOING, {P0, P1}, {"g1"}, T0 + 5)
    assert c.check_produce(TID, pid, epoch, "t", 0) is E.NONE
    assert c.check_produce(TID, pid, epoch, "t", 2) is E.INVALID_TXN_STATE
    r = c.end_txn(T0 + 10, TID, pid, epoch, commit=True)
    assert (r.error, r.producer_id, r.producer_epoch) == (E.NONE, pid, epoch)
    assert markers.calls == [(pid, epoch, True, [P0, P1])]
    assert groups.calls == [("g1", pid, epoch, True)]
    meta = c.get(TID)
    assert (meta.state, meta.partitions, meta.groups) == (S.COMPLETE_COMMIT, frozenset(), frozenset())
    # a retried EndTxn is answered as Kafka does; the other result is refused
    assert c.end_txn(T0 + 11, TID, pid, epoch, commit=True).error is E.NONE
    assert c.end_txn(T0 + 11, TID, pid, epoch, commit=False).error is E.INVALID_TXN_STATE
    assert len(markers.calls) == 1
    assert c.check_produce(TID, pid, epoch, "t", 0) is E.INVALID_TXN_STATE
    # the next transaction starts again from CompleteCommit
    assert c.add_partitions(T0 + 20, TID, pid, epoch, [P1]) is E.NONE
    assert c.get(TID).start_ms == T0 + 20
    assert c.end_txn(T0 + 21, TID, pid, epoch, commit=False).error is E.NONE
    assert c.get(TID).state is S.COMPLETE_ABORT
    assert markers.calls[-1] == (pid, epoch, False, [P1])


def test_end_txn_errors(store: Store) -> None:
    c, markers, _ = machine(store)
    pid, epoch = init(c)
    assert c.end_txn(T0, TID, pid, epoch, commit=True).error is E.INVALID_TXN_STATE  # Empty
    assert c.end_txn(T0, "other", pid, epoch, commit=True).error is E.INVALID_PRODUCER_ID_MAPPING
    assert c.end_txn(T0, TID, pid + 1, epoch, commit=True).error is E.INVALID_PRODUCER_ID_MAPPING
    assert c.end_txn(T0, TID, pid, epoch + 1, commit=True).error is E.PRODUCER_FENCED
    assert c.end_txn(T0, "", pid, epoch, commit=True).error is E.INVALID_REQUEST
    assert markers.calls == []


def test_second_producer_fences_the_first(store: Store) -> None:
    c, markers, _ = machine(store)
    pid, e0 = init(c)
    assert init(c) == (pid, e0 + 1)
    assert c.add_partitions(T0, TID, pid, e0, [P0]) is E.PRODUCER_FENCED
    assert c.add_offsets(T0, TID, pid, e0, "g") is E.PRODUCER_FENCED
    assert c.add_partitions(T0, TID, pid + 7, e0 + 1, [P0]) is E.INVALID_PRODUCER_ID_MAPPING
    assert c.add_partitions(T0, "nobody", pid, e0, [P0]) is E.INVALID_PRODUCER_ID_MAPPING
    assert c.check_produce(TID, pid, e0, "t", 0) is E.INVALID_PRODUCER_EPOCH


def test_init_during_an_ongoing_transaction_aborts_it(store: Store) -> None:
    c, markers, _ = machine(store)
    pid, e0 = init(c)
    assert c.add_partitions(T0, TID, pid, e0, [P0]) is E.NONE
    r = c.init_producer_id(T0 + 1, TID, 60_000)
    assert r.error is E.CONCURRENT_TRANSACTIONS
    # aborted with the fencing epoch, so the old producer's batches are refused
    assert markers.calls == [(pid, e0 + 1, False, [P0])]
    assert c.get(TID).state is S.COMPLETE_ABORT
    assert c.add_partitions(T0 + 2, TID, pid, e0, [P0]) is E.PRODUCER_FENCED
    assert init(c, T0 + 3) == (pid, e0 + 2)


def test_kip360_expected_epoch(store: Store) -> None:
    c, _, _ = machine(store)
    pid, e0 = init(c)
    assert init(c, expected=(pid, e0)) == (pid, e0 + 1)  # current epoch: bumped, last = e0
    assert c.get(TID).last_producer_epoch == e0
    assert init(c, expected=(pid, e0)) == (pid, e0 + 1)  # a retry: no second bump
    assert c.init_producer_id(T0, TID, 60_000, (pid + 99, 0)).error is E.PRODUCER_FENCED
    init(c)  # a new instance: last epoch forgotten
    assert c.init_producer_id(T0, TID, 60_000, (pid, e0)).error is E.PRODUCER_FENCED


def test_epoch_exhaustion_rotates_the_producer_id(store: Store) -> None:
    c, _, _ = machine(store)
    pid, _ = init(c)
    meta = c.get(TID)
    c._txns[TID] = TxnMetadata(TID, pid, 32766, meta.timeout_ms, S.EMPTY, T0)
    new_pid, epoch = init(c, expected=(pid, 32766))
    assert new_pid != pid and epoch == 0
    meta = c.get(TID)
    assert (meta.previous_producer_id, meta.last_producer_epoch) == (pid, 32766)
    # the retry of that call, with the exhausted epoch of the previous id, is not fenced
    assert c.init_producer_id(T0, TID, 60_000, (pid, 32766)).error is E.NONE


def test_concurrent_transactions_while_prepared(store: Store) -> None:
    c, markers, _ = machine(store)
    pid, e = init(c)
    c.add_partitions(T0, TID, pid, e, [P0])
    markers.fail.add(P0)
    assert c.end_txn(T0 + 1, TID, pid, e, commit=True).error is E.NONE  # answered once prepared
    assert c.get(TID).state is S.PREPARE_COMMIT
    assert c.add_partitions(T0 + 2, TID, pid, e, [P1]) is E.CONCURRENT_TRANSACTIONS
    assert c.end_txn(T0 + 2, TID, pid, e, commit=True).error is E.CONCURRENT_TRANSACTIONS
    # Kafka answers the other result so too while the markers are pending (its pending CompleteX)
    assert c.end_txn(T0 + 2, TID, pid, e, commit=False).error is E.CONCURRENT_TRANSACTIONS
    assert c.end_txn(T0 + 2, TID, pid, e + 1, commit=True).error is E.PRODUCER_FENCED
    assert c.init_producer_id(T0 + 2, TID, 60_000).error is E.CONCURRENT_TRANSACTIONS
    assert c.next_deadline() == T0 + 1 + 1000
    c.tick(T0 + 500)
    assert len(markers.calls) == 1  # not yet
    markers.fail.clear()
    c.tick(T0 + 1001)
    assert markers.calls[-1] == (pid, e, True, [P0])
    assert c.get(TID).state is S.COMPLETE_COMMIT


def test_deleted_topic_counts_as_done(store: Store) -> None:
    c, markers, _ = machine(store)
    pid, e = init(c)
    c.add_partitions(T0, TID, pid, e, [P0, P1])
    markers.deleted.add(P1)
    c.end_txn(T0, TID, pid, e, commit=False)
    assert c.get(TID).state is S.COMPLETE_ABORT


def test_timeout_aborts_and_fences(store: Store) -> None:
    c, markers, groups = machine(store)
    pid, e = init(c, timeout=1000)
    c.add_partitions(T0 + 100, TID, pid, e, [P0])
    c.add_offsets(T0 + 100, TID, pid, e, "g")
    assert c.next_deadline() == T0 + 100 + 1000 + 1
    c.tick(T0 + 1100)  # start + timeout is not yet < now
    assert c.get(TID).state is S.ONGOING
    c.tick(T0 + 1101)
    meta = c.get(TID)
    assert (meta.state, meta.producer_epoch) == (S.COMPLETE_ABORT, e + 1)
    assert markers.calls == [(pid, e + 1, False, [P0])]
    assert groups.calls == [("g", pid, e + 1, False)]
    # the zombie is fenced
    assert c.end_txn(T0 + 1200, TID, pid, e, commit=True).error is E.PRODUCER_FENCED
    assert c.add_partitions(T0 + 1200, TID, pid, e, [P0]) is E.PRODUCER_FENCED


def test_idle_ids_expire(store: Store) -> None:
    c, _, _ = machine(store, id_expiration_ms=10_000)
    pid, e = init(c)
    init(c, tid="busy")
    c.add_partitions(T0, "busy", c.get("busy").producer_id, 0, [P0])
    c.tick(T0 + 9_999)
    assert c.get(TID) is not None
    c.tick(T0 + 10_000)
    assert c.get(TID) is None
    assert TID not in store.txn_states.load()
    assert c.check_produce(TID, pid, e, "t", 0) is E.INVALID_PRODUCER_ID_MAPPING
    # Ongoing is never expired (it is aborted by its timeout, then expires from CompleteAbort)
    assert c.get("busy") is not None
    new_pid, epoch = init(c, T0 + 20_000)
    assert new_pid != pid and epoch == 0


def test_list_filters(store: Store) -> None:
    c, _, _ = machine(store)
    pa, ea = init(c, tid="a")
    pb, _ = init(c, tid="b")
    c.add_partitions(T0 + 1000, "a", pa, ea, [P0])
    err, unknown, found = c.list_transactions(T0 + 5000, states=["Ongoing", "Bogus"])
    assert (err, unknown, [m.transactional_id for m in found]) == (E.NONE, ["Bogus"], ["a"])
    assert [m.transactional_id for m in c.list_transactions(T0, producer_ids=[pb])[2]] == ["b"]
    assert [m.transactional_id for m in c.list_transactions(T0 + 5000, duration_ms=3999)[2]] == ["a", "b"]
    assert [m.transactional_id for m in c.list_transactions(T0 + 5000, duration_ms=4000)[2]] == ["b"]
    assert [m.transactional_id for m in c.list_transactions(T0, pattern="b.*")[2]] == ["b"]
    assert c.list_transactions(T0, pattern="(")[0] is E.INVALID_REGULAR_EXPRESSION


def test_state_survives_restart(tmp_path) -> None:
    path = tmp_path / "data"
    with Store(path) as store:
        c, _, _ = machine(store)
        pid, e = init(c)
        c.add_partitions(T0 + 1, TID, pid, e, [P0])
        c.add_offsets(T0 + 1, TID, pid, e, "g")
        before = c.get(TID)
    with Store(path) as store:
        c, markers, _ = machine(store, T0 + 2)
        assert c.get(TID) == before  # ongoing: left to its timeout
        assert markers.calls == []
        assert c.check_produce(TID, pid, e, "t", 0) is E.NONE
        # a new instance still fences it: the loaded transaction is aborted first
        assert c.init_producer_id(T0 + 3, TID, 60_000).error is E.CONCURRENT_TRANSACTIONS
        assert markers.calls == [(pid, e + 1, False, [P0])]
        assert init(c, T0 + 4) == (pid, e + 2)


def test_restart_completes_prepared_and_aborts_overdue(tmp_path) -> None:
    path = tmp_path / "data"
    with Store(path) as store:
        c, markers, _ = machine(store)
        pid, e = init(c)
        c.add_partitions(T0, TID, pid, e, [P0])
        c.add_offsets(T0, TID, pid, e, "g")
        markers.fail.add(P0)  # "killed" after the PrepareCommit write, before the markers
        c.end_txn(T0 + 1, TID, pid, e, commit=True)
        assert store.txn_states.load()[TID].state == "PrepareCommit"
        pid2, e2 = init(c, tid="late", timeout=1000)
        c.add_partitions(T0, "late", pid2, e2, [P1])
    with Store(path) as store:
        c, markers, groups = machine(store, T0 + 5000)
        assert (pid, e, True, [P0]) in markers.calls  # the commit completed
        assert ("g", pid, e, True) in groups.calls
        assert (pid2, e2 + 1, False, [P1]) in markers.calls  # past its timeout: aborted at once
        assert c.get(TID).state is S.COMPLETE_COMMIT
        assert c.get("late").state is S.COMPLETE_ABORT
        assert store.txn_states.load()[TID].state == "CompleteCommit"


def test_a_refused_write_changes_nothing(store: Store, monkeypatch) -> None:
    c, markers, _ = machine(store)
    pid, e = init(c)
    c.add_partitions(T0, TID, pid, e, [P0])
    before = c.get(TID)

    def full(record: object) -> None:
        raise StorageFull("disk full")

    monkeypatch.setattr(store.txn_states, "put", full)
    assert c.end_txn(T0 + 1, TID, pid, e, commit=True).error is E.NOT_COORDINATOR
    assert c.init_producer_id(T0 + 1, TID, 60_000).error is E.NOT_COORDINATOR
    assert c.add_partitions(T0 + 1, TID, pid, e, [P1]) is E.NOT_COORDINATOR
    assert c.get(TID) == before and markers.calls == []


# Transaction version 2 (KIP-890 part 2): partitions and groups added implicitly by Produce /
# TxnOffsetCommit, the epoch bumped by every EndTxn, the markers carrying the bumped epoch,
# retries known by the epoch before the bump, an exhausted epoch rotating the id at CompleteX.

def test_implicit_add_then_commit_bumps_the_epoch(store: Store) -> None:
    c, markers, groups = machine(store)
    pid, epoch = init(c)
    assert c.add_implicitly(T0 + 5, TID, pid, epoch, partitions=[P0]) is E.NONE
    assert c.add_implicitly(T0 + 6, None, pid, epoch, partitions=[P1]) is E.NONE  # found by producer id
    assert c.add_implicitly(T0 + 7, TID, pid, epoch, groups=["g1"]) is E.NONE
    meta = c.get(TID)
    assert (meta.state, meta.partitions, meta.groups, meta.start_ms, meta.transaction_version) == (
        S.ONGOING, {P0, P1}, {"g1"}, T0 + 5, 2)
    r = c.end_txn(T0 + 10, TID, pid, epoch, commit=True, transaction_version=2)
    assert (r.error, r.producer_id, r.producer_epoch) == (E.NONE, pid, epoch + 1)
    # the markers and the group's completion carry the bumped epoch
    assert markers.calls == [(pid, epoch + 1, True, [P0, P1])]
    assert groups.calls == [("g1", pid, epoch + 1, True)]
    meta = c.get(TID)
    assert (meta.state, meta.producer_epoch, meta.last_producer_epoch) == (S.COMPLETE_COMMIT, epoch + 1, epoch)
    # the next transaction goes on with the new epoch; the old one is fenced
    assert c.add_implicitly(T0 + 20, TID, pid, epoch, partitions=[P0]) is E.PRODUCER_FENCED
    assert c.add_implicitly(T0 + 20, TID, pid, epoch + 1, partitions=[P0]) is E.NONE
    r = c.end_txn(T0 + 21, TID, pid, epoch + 1, commit=False, transaction_version=2)
    assert (r.error, r.producer_id, r.producer_epoch) == (E.NONE, pid, epoch + 2)
    assert markers.calls[-1] == (pid, epoch + 2, False, [P0])
    assert c.get(TID).state is S.COMPLETE_ABORT


def test_retries_are_known_by_the_epoch_before_the_bump(store: Store) -> None:
    c, markers, _ = machine(store)
    pid, epoch = init(c)
    c.add_implicitly(T0 + 1, TID, pid, epoch, partitions=[P0])
    assert c.end_txn(T0 + 2, TID, pid, epoch, commit=True, transaction_version=2).error is E.NONE
    # the same EndTxn again (its answer lost): the same result, nothing written again
    r = c.end_txn(T0 + 3, TID, pid, epoch, commit=True, transaction_version=2)
    assert (r.error, r.producer_id, r.producer_epoch) == (E.NONE, pid, epoch + 1)
    assert len(markers.calls) == 1
    assert c.end_txn(T0 + 3, TID, pid, epoch, commit=False, transaction_version=2).error is E.INVALID_TXN_STATE
    # with the new epoch and nothing added there is no transaction to commit; older epochs are fenced
    assert c.end_txn(T0 + 4, TID, pid, epoch + 1, commit=True, transaction_version=2).error is E.INVALID_TXN_STATE
    assert c.end_txn(T0 + 4, TID, pid, epoch - 1, commit=True, transaction_version=2).error is E.PRODUCER_FENCED
    assert c.end_txn(T0 + 4, TID, pid + 100, epoch, commit=True,
                     transaction_version=2).error is E.INVALID_PRODUCER_ID_MAPPING


def test_empty_abort_bumps_the_epoch(store: Store) -> None:
    """EndTxn v5 abort with nothing added (franz-go, when every produce of its transaction
    failed client-side): answered NONE with the next epoch from Empty, CompleteCommit and
    CompleteAbort, no marker written; its retry gets the same answer; a commit with nothing
    added is INVALID_TXN_STATE; EndTxn v4 (transaction version 1) on Empty too."""
    c, markers, _ = machine(store)
    pid, epoch = init(c)
    assert c.end_txn(T0 + 1, TID, pid, epoch, commit=False).error is E.INVALID_TXN_STATE
    assert c.end_txn(T0 + 1, TID, pid, epoch, commit=True, transaction_version=2).error is E.INVALID_TXN_STATE
    for n in range(1, 3):  # from Empty, then from CompleteAbort
        r = c.end_txn(T0 + 1 + n, TID, pid, epoch + n - 1, commit=False, transaction_version=2)
        assert (r.error, r.producer_id, r.producer_epoch) == (E.NONE, pid, epoch + n)
        meta = c.get(TID)
        assert (meta.state, meta.producer_epoch, meta.start_ms) == (S.COMPLETE_ABORT, epoch + n, T0 + 1 + n)
        retry = c.end_txn(T0 + 5, TID, pid, epoch + n - 1, commit=False, transaction_version=2)
        assert (retry.error, retry.producer_epoch) == (E.NONE, epoch + n)
    assert c.end_txn(T0 + 5, TID, pid, epoch + 1, commit=True, transaction_version=2).error is E.INVALID_TXN_STATE
    assert c.end_txn(T0 + 5, TID, pid, epoch + 2, commit=True, transaction_version=2).error is E.INVALID_TXN_STATE
    # from CompleteCommit: a commit, then an abort with the epoch it answered
    assert c.add_implicitly(T0 + 6, TID, pid, epoch + 2, partitions=[P0]) is E.NONE
    assert c.end_txn(T0 + 7, TID, pid, epoch + 2, commit=True, transaction_version=2).producer_epoch == epoch + 3
    r = c.end_txn(T0 + 8, TID, pid, epoch + 3, commit=False, transaction_version=2)
    assert (r.error, r.producer_epoch, c.get(TID).state) == (E.NONE, epoch + 4, S.COMPLETE_ABORT)
    assert markers.calls == [(pid, epoch + 3, True, [P0])]
    assert c.add_implicitly(T0 + 9, TID, pid, epoch + 4, partitions=[P0]) is E.NONE


def test_retry_while_markers_are_pending_is_concurrent(store: Store) -> None:
    c, markers, _ = machine(store)
    pid, epoch = init(c)
    c.add_implicitly(T0 + 1, TID, pid, epoch, partitions=[P0])
    markers.fail = {P0}
    assert c.end_txn(T0 + 2, TID, pid, epoch, commit=True, transaction_version=2).producer_epoch == epoch + 1
    assert c.get(TID).state is S.PREPARE_COMMIT
    assert c.end_txn(T0 + 3, TID, pid, epoch, commit=True,
                     transaction_version=2).error is E.CONCURRENT_TRANSACTIONS
    assert c.add_implicitly(T0 + 3, TID, pid, epoch + 1, partitions=[P0]) is E.CONCURRENT_TRANSACTIONS
    markers.fail = set()
    c.tick(T0 + 5_000)
    assert c.get(TID).state is S.COMPLETE_COMMIT
    assert markers.calls[-1] == (pid, epoch + 1, True, [P0])


def test_empty_abort_while_the_commit_markers_are_pending_waits(store: Store) -> None:
    """KAFKA-18464: franz-go ends a transaction whose records all failed client-side with an
    abort at the epoch its commit just answered; while that commit's markers are still under way
    (a partition on another broker) the abort is CONCURRENT_TRANSACTIONS, retried, not fenced by
    the epoch the commit bumped — and once the markers are written it is an empty abort."""
    c, markers, _ = machine(store)
    pid, epoch = init(c)
    c.add_implicitly(T0 + 1, TID, pid, epoch, partitions=[P0])
    markers.fail = {P0}
    assert c.end_txn(T0 + 2, TID, pid, epoch, commit=True, transaction_version=2).producer_epoch == epoch + 1
    for asked in (False, True):
        assert c.end_txn(T0 + 3, TID, pid, epoch + 1, commit=asked,
                         transaction_version=2).error is E.CONCURRENT_TRANSACTIONS
    assert c.end_txn(T0 + 3, TID, pid + 1, epoch + 1, commit=False,
                     transaction_version=2).error is E.INVALID_PRODUCER_ID_MAPPING
    markers.fail = set()
    c.tick(T0 + 5_000)
    r = c.end_txn(T0 + 5_001, TID, pid, epoch + 1, commit=False, transaction_version=2)
    assert (r.error, r.producer_epoch, c.get(TID).state) == (E.NONE, epoch + 2, S.COMPLETE_ABORT)
    assert markers.calls[-1] == (pid, epoch + 1, True, [P0])  # the empty abort wrote no marker


def test_exhausted_epoch_rotates_the_producer_id_at_complete(store: Store) -> None:
    c, markers, _ = machine(store)
    pid, _ = init(c)
    meta = c.get(TID)
    c._txns[TID] = TxnMetadata(TID, pid, 32766, meta.timeout_ms, S.EMPTY, T0)
    assert c.add_implicitly(T0 + 1, TID, pid, 32766, partitions=[P0]) is E.NONE
    r = c.end_txn(T0 + 2, TID, pid, 32766, commit=True, transaction_version=2)
    assert r.error is E.NONE and r.producer_id != pid and r.producer_epoch == 0
    assert markers.calls == [(pid, 32767, True, [P0])]  # the last epoch of the old id fences its zombies
    meta = c.get(TID)
    assert (meta.state, meta.producer_id, meta.producer_epoch, meta.previous_producer_id, meta.next_producer_id) == (
        S.COMPLETE_COMMIT, r.producer_id, 0, pid, -1)
    # a retry with the previous id's exhausted epoch is the same EndTxn
    retry = c.end_txn(T0 + 3, TID, pid, 32766, commit=True, transaction_version=2)
    assert (retry.error, retry.producer_id, retry.producer_epoch) == (E.NONE, r.producer_id, 0)
    assert c.add_implicitly(T0 + 4, TID, r.producer_id, 0, partitions=[P1]) is E.NONE


def test_timeout_fence_is_not_bumped_twice(store: Store) -> None:
    c, markers, _ = machine(store)
    pid, epoch = init(c, timeout=1000)
    c.add_implicitly(T0 + 1, TID, pid, epoch, partitions=[P0])
    c.tick(T0 + 1002)
    assert markers.calls == [(pid, epoch + 1, False, [P0])]
    meta = c.get(TID)
    assert (meta.state, meta.producer_epoch) == (S.COMPLETE_ABORT, epoch + 1)
    # the zombie's EndTxn, with its epoch one below the fence's, is a retry only for its own
    # abort; its commit is refused
    assert c.end_txn(T0 + 1003, TID, pid, epoch, commit=True, transaction_version=2).error is E.INVALID_TXN_STATE


def test_tv2_state_survives_restart(tmp_path) -> None:
    path = tmp_path / "data"
    with Store(path) as s:
        c, markers, _ = machine(s)
        pid, epoch = init(c)
        c.add_implicitly(T0 + 1, TID, pid, epoch, partitions=[P0])
        markers.fail = {P0}
        c.end_txn(T0 + 2, TID, pid, epoch, commit=False, transaction_version=2)
        before = c.get(TID)
        assert (before.state, before.producer_epoch, before.transaction_version) == (S.PREPARE_ABORT, epoch + 1, 2)
    with Store(path) as s:
        c, markers, _ = machine(s, T0 + 3)
        assert markers.calls == [(pid, epoch + 1, False, [P0])]  # completed at restart, the bumped epoch
        meta = c.get(TID)
        assert (meta.state, meta.producer_epoch, meta.transaction_version) == (S.COMPLETE_ABORT, epoch + 1, 2)
