"""Transactional offsets in the group coordinator (TxnOffsetCommit, OffsetFetch require_stable,
the transaction's end) on a real LevelDB store and a fake clock — Kafka's OffsetMetadataManager
rules: pending until the transaction ends, invisible to OffsetFetch, UNSTABLE_OFFSET_COMMIT
when a stable answer is required, committed or dropped by ``complete_transaction``."""

from __future__ import annotations

from typing import Any

import pytest

from tests.test_coordinator import join, make, stable_pair, sync
from tests.test_coordinator_consumer import hb
from tests.test_coordinator_consumer import make as make_consumer
from tmqgate.coordinator.coordinator import GroupCoordinator
from tmqgate.coordinator.offsets import OffsetEntry, TxnOffsetsGate
from tmqgate.coordinator.runtime import CoordinatorRuntime
from tmqgate.protocol.errors import ErrorCode
from tmqgate.storage import Store

E = ErrorCode
PID, EPOCH = 4000, 3


def txn_commit(c: GroupCoordinator, entries: list[OffsetEntry], group: str = "g", pid: int = PID,
               member: str = "", generation: int = -1, instance: str | None = None,
               gate: TxnOffsetsGate | None = None) -> list[ErrorCode]:
    return c.offsets.txn_offset_commit(100, group, "txn-1", pid, EPOCH, member, generation, instance, entries,
                                       gate=gate)


def fetch(c: GroupCoordinator, stable: bool, group: str = "g", parts: tuple[int, ...] = (0, 1)) -> list[Any]:
    code, rows = c.offsets.fetch_offsets(group, [("t", list(parts))], require_stable=stable)
    assert code is E.NONE
    return [(p, off, err) for _, part_rows in rows for p, off, _, _, err in part_rows]


def test_pending_offsets_are_invisible_and_unstable(tmp_path: Any) -> None:
    c = make(tmp_path)
    assert c.offsets.commit_offsets(0, "g", "", None, -1, 8, [("t", 0, 5, -1, None)]) == [E.NONE]
    assert txn_commit(c, [("t", 0, 42, 7, "m"), ("t", 1, 9, -1, None)]) == [E.NONE, E.NONE]
    # Without require_stable: the last committed offsets (partition 1 has none).
    assert fetch(c, False) == [(0, 5, E.NONE), (1, -1, E.NONE)]
    # With it: both partitions have a pending offset, so UNSTABLE_OFFSET_COMMIT and -1.
    assert fetch(c, True) == [(0, -1, E.UNSTABLE_OFFSET_COMMIT), (1, -1, E.UNSTABLE_OFFSET_COMMIT)]
    assert fetch(c, True, parts=(2,)) == [(2, -1, E.NONE)]  # per partition, as Kafka
    # All topics (null topics): the committed ones, the unstable one flagged.
    assert c.offsets.fetch_offsets("g", None, require_stable=True) == (
        E.NONE, [("t", [(0, -1, -1, "", E.UNSTABLE_OFFSET_COMMIT)])])
    assert c.offsets.fetch_offsets("g", None) == (E.NONE, [("t", [(0, 5, -1, "", E.NONE)])])
    # A group that exists only through its transactional offsets is listed (Kafka's simple group).
    assert txn_commit(c, [("t", 0, 1, -1, None)], group="only-txn") == [E.NONE]
    assert "only-txn" in c.admin.group_ids()


def test_commit_makes_them_visible(tmp_path: Any) -> None:
    c = make(tmp_path)
    txn_commit(c, [("t", 0, 42, 7, "m"), ("t", 1, 9, -1, None)])
    c.offsets.complete_transaction("g", PID, EPOCH, True)
    assert fetch(c, True) == [(0, 42, E.NONE), (1, 9, E.NONE)]
    code, rows = c.offsets.fetch_offsets("g", [("t", [0])])
    assert rows == [("t", [(0, 42, 7, "m", E.NONE)])]
    assert c.offsets.pending_offsets("g") == {}
    # A second marker for the same producer finds nothing pending: nothing changes.
    c.offsets.complete_transaction("g", PID, EPOCH, False)
    assert fetch(c, True) == [(0, 42, E.NONE), (1, 9, E.NONE)]


def test_abort_drops_them(tmp_path: Any) -> None:
    c = make(tmp_path)
    c.offsets.commit_offsets(0, "g", "", None, -1, 8, [("t", 0, 5, -1, None)])
    txn_commit(c, [("t", 0, 42, -1, None), ("t", 1, 9, -1, None)])
    c.offsets.complete_transaction("g", PID, EPOCH, False)
    assert fetch(c, True) == [(0, 5, E.NONE), (1, -1, E.NONE)]


def test_producers_and_groups_are_independent(tmp_path: Any) -> None:
    c = make(tmp_path)
    txn_commit(c, [("t", 0, 10, -1, None)], pid=1)
    txn_commit(c, [("t", 1, 20, -1, None)], pid=2)
    txn_commit(c, [("t", 0, 30, -1, None)], group="h", pid=1)
    c.offsets.complete_transaction("g", 1, EPOCH, True)
    assert fetch(c, True) == [(0, 10, E.NONE), (1, -1, E.UNSTABLE_OFFSET_COMMIT)]
    assert fetch(c, True, group="h") == [(0, -1, E.UNSTABLE_OFFSET_COMMIT), (1, -1, E.NONE)]
    c.offsets.complete_transaction("g", 2, EPOCH, False)
    c.offsets.complete_transaction("h", 1, EPOCH, True)
    assert fetch(c, True) == [(0, 10, E.NONE), (1, -1, E.NONE)]
    assert fetch(c, True, group="h") == [(0, 30, E.NONE), (1, -1, E.NONE)]


def test_a_later_plain_commit_wins_over_the_transaction(tmp_path: Any) -> None:
    """Kafka keeps the most recent commit when the transaction commits (record offsets)."""
    c = make(tmp_path)
    txn_commit(c, [("t", 0, 42, -1, None), ("t", 1, 9, -1, None)])
    c.offsets.commit_offsets(0, "g", "", None, -1, 8, [("t", 0, 50, -1, None)])
    assert fetch(c, True) == [(0, -1, E.UNSTABLE_OFFSET_COMMIT), (1, -1, E.UNSTABLE_OFFSET_COMMIT)]
    c.offsets.complete_transaction("g", PID, EPOCH, True)
    assert fetch(c, True) == [(0, 50, E.NONE), (1, 9, E.NONE)]


def test_restart_keeps_pending_offsets(tmp_path: Any) -> None:
    store = Store(str(tmp_path / "data"))
    c = make(tmp_path, store=store)
    txn_commit(c, [("t", 0, 42, 7, "m")])
    txn_commit(c, [("t", 1, 8, -1, None)], group="h", pid=77)
    c.offsets.commit_offsets(0, "h", "", None, -1, 8, [("t", 1, 11, -1, None)])  # supersedes pid 77's
    store.close()
    store = Store(str(tmp_path / "data"))
    c2 = make(tmp_path, store=store)
    assert fetch(c2, True) == [(0, -1, E.UNSTABLE_OFFSET_COMMIT), (1, -1, E.NONE)]
    assert fetch(c2, False) == [(0, -1, E.NONE), (1, -1, E.NONE)]
    assert "g" in c2.admin.group_ids()
    c2.offsets.complete_transaction("g", PID, EPOCH, True)
    c2.offsets.complete_transaction("h", 77, EPOCH, True)
    assert fetch(c2, True) == [(0, 42, E.NONE), (1, -1, E.NONE)]
    assert fetch(c2, True, group="h") == [(0, -1, E.NONE), (1, 11, E.NONE)]  # the later plain commit kept
    store.close()
    store = Store(str(tmp_path / "data"))
    c3 = make(tmp_path, store=store)
    assert c3.offsets.pending_offsets("g") == {} and fetch(c3, True) == [(0, 42, E.NONE), (1, -1, E.NONE)]
    store.close()


def test_zombie_generation_is_refused(tmp_path: Any) -> None:
    """A producer fenced by a rebalance (KIP-447): its consumer's old generation is refused."""
    c = make(tmp_path)
    a, b, gen = stable_pair(c)
    assert txn_commit(c, [("t", 0, 1, -1, None)], member=a, generation=gen - 1) == [E.ILLEGAL_GENERATION]
    assert txn_commit(c, [("t", 0, 1, -1, None)], member="ghost", generation=gen) == [E.UNKNOWN_MEMBER_ID]
    assert txn_commit(c, [("t", 0, 1, -1, None)], member=a, generation=gen) == [E.NONE]
    # v0-v2 carry no member: accepted whatever the group's state (Kafka).
    assert txn_commit(c, [("t", 1, 2, -1, None)]) == [E.NONE]
    assert c.offsets.pending_offsets("g") == {PID: {("t", 0): c.offsets.pending_offsets("g")[PID][("t", 0)],
                                                    ("t", 1): c.offsets.pending_offsets("g")[PID][("t", 1)]}}
    # A rebalance in progress does not hold back a transactional commit of the current generation.
    join(c, 200, member_id=a, topics=("t", "u"))
    rb = join(c, 230, member_id=b)
    new_gen = rb.value["generation_id"]  # type: ignore[index]
    assert c.offsets.commit_offsets(240, "g", b, None, new_gen, 7, [("t", 1, 6, -1, None)]) == [E.REBALANCE_IN_PROGRESS]
    assert txn_commit(c, [("t", 1, 6, -1, None)], member=b, generation=new_gen) == [E.NONE]
    assert txn_commit(c, [("t", 1, 6, -1, None)], member=b, generation=gen) == [E.ILLEGAL_GENERATION]


def test_static_member_fenced(tmp_path: Any) -> None:
    c = make(tmp_path)
    r = join(c, 0, instance="i-1")  # a static member joins at once
    a, gen = r.value["member_id"], r.value["generation_id"]  # type: ignore[index]
    sync(c, 0, a, gen, {a: b"A"}, instance="i-1")
    assert txn_commit(c, [("t", 0, 1, -1, None)], member="other", generation=gen, instance="i-1") == [
        E.FENCED_INSTANCE_ID]
    assert txn_commit(c, [("t", 0, 1, -1, None)], member=a, generation=gen, instance="i-1") == [E.NONE]


def test_unknown_group_unknown_topic_and_bad_input(tmp_path: Any) -> None:
    c = make(tmp_path)
    # No such group and a generation claimed: ILLEGAL_GENERATION (Kafka), and no group is made.
    assert txn_commit(c, [("t", 0, 1, -1, None)], group="new", member="m", generation=3) == [E.ILLEGAL_GENERATION]
    assert "new" not in c.admin.group_ids()
    # Unknown topics and partitions are answered first; the rest is validated.
    assert txn_commit(c, [("nope", 0, 1, -1, None), ("t", 9, 1, -1, None), ("t", 0, 1, -1, None)],
                      group="new", member="m", generation=3) == [
        E.UNKNOWN_TOPIC_OR_PARTITION, E.UNKNOWN_TOPIC_OR_PARTITION, E.ILLEGAL_GENERATION]
    assert txn_commit(c, [("t", 0, 1, -1, None)], group="") == [E.INVALID_GROUP_ID]
    assert txn_commit(c, [("t", 0, 1, -1, "x" * 5000), ("t", 1, 1, -1, "ok")]) == [
        E.OFFSET_METADATA_TOO_LARGE, E.NONE]
    assert list(c.offsets.pending_offsets("g")[PID]) == [("t", 1)]


def test_consumer_group_members(tmp_path: Any) -> None:
    """KIP-848 groups: the member epoch is the generation; a stale one is ILLEGAL_GENERATION for
    a transactional commit (Kafka maps STALE_MEMBER_EPOCH to it there)."""
    c = make_consumer(tmp_path)
    r = hb(c, 0)
    member, epoch = r["member_id"], r["member_epoch"]
    assert c.offsets.txn_offset_commit(1, "g", "x", PID, EPOCH, member, epoch + 1, None, [("t", 0, 3, -1, None)]) == [
        E.ILLEGAL_GENERATION]
    assert c.offsets.txn_offset_commit(1, "g", "x", PID, EPOCH, "ghost", epoch, None, [("t", 0, 3, -1, None)]) == [
        E.UNKNOWN_MEMBER_ID]
    assert c.offsets.txn_offset_commit(1, "g", "x", PID, EPOCH, member, epoch, None,
                                       [("t", 0, 3, -1, None)]) == [E.NONE]
    assert c.offsets.txn_offset_commit(1, "g", "x", PID, EPOCH, "", -1, None, [("t", 1, 4, -1, None)]) == [E.NONE]
    c.offsets.complete_transaction("g", PID, EPOCH, True)
    assert c.offsets.fetch_offsets("g", [("t", [0, 1])], member, epoch, require_stable=True) == (
        E.NONE, [("t", [(0, 3, -1, "", E.NONE), (1, 4, -1, "", E.NONE)])])


def test_deleting_offsets_group_or_topic_drops_pending(tmp_path: Any) -> None:
    c = make(tmp_path, t=4, u=2)
    txn_commit(c, [("t", 0, 1, -1, None), ("t", 1, 2, -1, None), ("u", 0, 3, -1, None)])
    # OffsetDelete of one partition: its pending offset goes too (Kafka's tombstone).
    assert c.offsets.delete_offsets("g", [("t", [0])]) == (E.NONE, [("t", [(0, E.NONE)])])
    assert fetch(c, True) == [(0, -1, E.NONE), (1, -1, E.UNSTABLE_OFFSET_COMMIT)]
    # A deleted topic loses its pending offsets.
    del c.topics.counts["u"]  # type: ignore[attr-defined]
    c.tick(1)
    assert set(c.offsets.pending_offsets("g")[PID]) == {("t", 1)}
    # Commit after those deletions: only what is left is committed.
    txn_commit(c, [("t", 2, 5, -1, None)], group="h")
    assert c.admin.delete_groups(["h"]) == [("h", E.NONE)]
    assert c.offsets.pending_offsets("h") == {} and "h" not in c.admin.group_ids()
    c.offsets.complete_transaction("g", PID, EPOCH, True)
    c.offsets.complete_transaction("h", PID, EPOCH, True)
    assert fetch(c, False, parts=(0, 1, 2)) == [(0, -1, E.NONE), (1, 2, E.NONE), (2, -1, E.NONE)]
    assert c.offsets.fetch_offsets("h", [("t", [2])]) == (E.NONE, [("t", [(2, -1, -1, "", E.NONE)])])
    assert c.offsets.fetch_offsets("g", None)[1] == [("t", [(1, 2, -1, "", E.NONE)])]
    # The store agrees after a restart.
    c.store.close()
    c2 = make(tmp_path, t=4)
    assert c2.offsets.pending_offsets("g") == {}
    assert c2.offsets.fetch_offsets("g", None)[1] == [("t", [(1, 2, -1, "", E.NONE)])]
    c2.store.close()


def test_runtime_exposes_both(tmp_path: Any) -> None:
    c = make(tmp_path)
    rt = CoordinatorRuntime(c, clock=lambda: 5)
    assert rt.txn_offset_commit("g", "txn-1", PID, EPOCH, "", -1, None, [("t", 0, 7, -1, None)]) == [E.NONE]
    assert fetch(c, True) == [(0, -1, E.UNSTABLE_OFFSET_COMMIT), (1, -1, E.NONE)]
    rt.complete_transaction("g", PID, EPOCH, True)
    assert fetch(c, True) == [(0, 7, E.NONE), (1, -1, E.NONE)]


class Gate:
    """What the transaction coordinator (part T2) answers for a TxnOffsetCommit: a table."""

    def __init__(self) -> None:
        self.answers: dict[tuple[str, int, int, str], ErrorCode] = {}
        self.asked: list[tuple[str, int, int, str]] = []

    def check_txn_offset_commit(self, transactional_id: str, producer_id: int, producer_epoch: int,
                                group_id: str, add: bool = False) -> ErrorCode:
        self.asked.append((transactional_id, producer_id, producer_epoch, group_id))
        return self.answers.get((transactional_id, producer_id, producer_epoch, group_id), E.INVALID_TXN_STATE)


def test_the_transaction_coordinator_is_asked_in_kafkas_order(tmp_path: Any) -> None:
    """Unknown topics and an empty group id first, then the transaction (Kafka 4.3 answers
    INVALID_TXN_STATE without AddOffsetsToTxn), then the group."""
    c = make(tmp_path)
    gate = Gate()
    assert txn_commit(c, [("nope", 0, 1, -1, None)], gate=gate) == [E.UNKNOWN_TOPIC_OR_PARTITION]
    assert txn_commit(c, [("t", 0, 1, -1, None)], group="", gate=gate) == [E.INVALID_GROUP_ID]
    assert gate.asked == []
    assert txn_commit(c, [("t", 0, 1, -1, None), ("nope", 0, 1, -1, None)], gate=gate) == [
        E.INVALID_TXN_STATE, E.UNKNOWN_TOPIC_OR_PARTITION]
    assert gate.asked == [("txn-1", PID, EPOCH, "g")] and c.offsets.pending_offsets("g") == {}
    gate.answers[("txn-1", PID, EPOCH, "g")] = E.NONE
    assert txn_commit(c, [("t", 0, 1, -1, None)], member="m", generation=2, gate=gate) == [E.ILLEGAL_GENERATION]
    assert txn_commit(c, [("t", 0, 1, -1, None)], gate=gate) == [E.NONE]
    assert fetch(c, True) == [(0, -1, E.UNSTABLE_OFFSET_COMMIT), (1, -1, E.NONE)]


def test_a_refused_write_changes_nothing() -> None:
    """A full disk (a real Store on a small tmpfs): TxnOffsetCommit answers NOT_COORDINATOR on
    the partitions it validated, as Kafka maps KAFKA_STORAGE_ERROR, and stores nothing;
    complete_transaction raises StorageIOError and leaves the pending offsets for a retry."""
    import os

    from tests.diskfull import fill, small_fs
    from tests.test_coordinator import Topics
    from tmqgate.storage import StorageIOError

    with small_fs(16) as fs:
        store = Store(os.path.join(fs, "data"), write_buffer_size=256 << 10, lru_cache_size=1 << 20,
                      reserve_bytes=0)
        c = GroupCoordinator(store, Topics(t=4), now_ms=0)
        assert txn_commit(c, [("t", 0, 42, -1, None)]) == [E.NONE]
        filler = fill(fs)
        for i in range(100):  # until the full disk refuses (LevelDB's log may take a few pages)
            try:
                store.put_group_metadata(f"filler-{i}", b"x" * 3000)
            except StorageIOError:
                break
        assert txn_commit(c, [("t", 1, 9, -1, None), ("nope", 0, 1, -1, None)], pid=5) == [
            E.NOT_COORDINATOR, E.UNKNOWN_TOPIC_OR_PARTITION]
        assert 5 not in c.offsets.pending_offsets("g")
        with pytest.raises(StorageIOError):
            c.offsets.complete_transaction("g", PID, EPOCH, True)
        assert fetch(c, True) == [(0, -1, E.UNSTABLE_OFFSET_COMMIT), (1, -1, E.NONE)]
        os.unlink(filler)
        c.offsets.complete_transaction("g", PID, EPOCH, True)
        assert fetch(c, True) == [(0, 42, E.NONE), (1, -1, E.NONE)]
        store.close()
