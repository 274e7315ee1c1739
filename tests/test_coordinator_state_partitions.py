"""A cluster's group state, below the network (issue 16, step 4): every change of a group's
state keys goes to the store's mirror before it is written (a refusal changes nothing), a
partition's replayed changes replace what another store held of its groups, and a coordinator
serves only the partitions it loaded — unloading one answers its waiting members
NOT_COORDINATOR. Real LevelDB; the coordinator on a fake clock."""

from __future__ import annotations

from typing import Any

import pytest

from tests.test_coordinator import Topics, join, join_new
from tmqgate.coordinator.classic import ClassicConfig
from tmqgate.coordinator.coordinator import CoordinatorConfig, GroupCoordinator
from tmqgate.protocol.errors import ErrorCode
from tmqgate.protocol.internal_topics import group_metadata_key, parse_offset_commit_key
from tmqgate.protocol.records import decode_records
from tmqgate.storage import Store, keys
from tmqgate.storage.model import StateNotReplicated

PARTITIONS = 4


def _store(path: Any) -> Store:
    store = Store(str(path))
    store.group_log.configure(PARTITIONS)
    return store


def _groups_in(store: Store, partition: int, count: int) -> list[str]:
    """``count`` group ids whose group-state partition is ``partition``."""
    out = [g for g in (f"g{i}" for i in range(1000)) if store.group_log.partition_of(g) == partition]
    return out[:count]


def test_every_state_change_is_mirrored_before_it_is_written(tmp_path: Any) -> None:
    store = _store(tmp_path / "a")
    seen: list[tuple[str, list[tuple[bytes, bytes | None]]]] = []
    store.mirror_groups(lambda group, ops: seen.append((group, list(ops))))
    store.commit_offsets("g", [("t", 0, 5, -1, None), ("t", 1, 7, 2, "m")])
    store.put_group_metadata("g", b"{}")
    store.delete_offsets("g", "t", [0])
    assert [g for g, _ in seen] == ["g", "g", "g"]
    # each change's state keys, then (a commit, a deletion) its batch of __consumer_offsets' log
    (*commit, commit_log), (meta,), (delete, delete_log) = (ops for _, ops in seen)
    assert [k for k, _ in commit] == [keys.offset_key("g", "t", 0), keys.offset_key("g", "t", 1)]
    assert [keys.unpack_offset(v)[:2] for _, v in commit if v is not None] == [(5, -1), (7, 2)]
    assert meta == (keys.group_key("g"), b"{}")
    assert delete[1] is None and delete[0] == commit[0][0]
    p = store.group_log.partition_of("g")
    assert [k for k, _ in (commit_log, delete_log)] == [keys.group_log_key(p, 0), keys.group_log_key(p, 2)]
    assert [dict(db.iterator(prefix=keys.group_log_prefix(p))) for db in [store.core.db]] == \
        [dict([commit_log, delete_log])], "the log's batches as they were mirrored"

    def refuse(group: str, ops: list[tuple[bytes, bytes | None]]) -> None:
        raise StateNotReplicated("not the leader")

    store.mirror_groups(refuse)
    with pytest.raises(StateNotReplicated):
        store.commit_offsets("g", [("t", 1, 99, -1, None)])
    with pytest.raises(StateNotReplicated):
        store.delete_group("g")
    assert {tp: o.offset for tp, o in store.fetch_offsets("g").items()} == {("t", 1): 7}, "nothing written"
    assert store.get_group_metadata("g") == b"{}"
    store.close()


def test_a_replayed_partition_replaces_what_the_store_held_of_its_groups(tmp_path: Any) -> None:
    leader, follower = _store(tmp_path / "leader"), _store(tmp_path / "follower")
    log: dict[int, list[tuple[bytes, bytes | None]]] = {}
    leader.mirror_groups(lambda group, ops: log.setdefault(leader.group_log.partition_of(group), []).extend(ops))
    ours, theirs = _groups_in(leader, 1, 2), _groups_in(leader, 2, 1)
    leader.commit_offsets(ours[0], [("t", 0, 10, -1, None), ("t", 1, 11, -1, None)])
    leader.commit_offsets(ours[0], [("t", 0, 12, -1, None)])
    leader.commit_offsets(ours[1], [("t", 0, 3, -1, "meta")])
    leader.put_group_metadata(ours[1], b'{"type": "classic"}')
    leader.delete_offsets(ours[1], "t", [0])
    leader.commit_offsets(theirs[0], [("t", 0, 1, -1, None)])
    # what the follower held of partition 1 before (it led it once): replaced
    follower.commit_offsets(ours[1], [("t", 3, 30, -1, None)])
    follower.commit_offsets(_groups_in(follower, 1, 3)[2], [("t", 0, 8, -1, None)])
    follower.commit_offsets(theirs[0], [("t", 0, 99, -1, None)])  # another partition: untouched

    in_one = lambda group: follower.group_log.partition_of(group) == 1  # noqa: E731
    junk = [(b"\x10not a state key", b"x"), (keys.offset_key(theirs[0], "t", 0), b"y")]  # skipped
    before = follower.group_log.next_offset(1)
    # state replicated before its log was (test_the_log_is_replicated_with_the_state has it)
    log[1] = [(k, v) for k, v in log[1] if not k.startswith(keys.GROUPLOG)]
    held = follower.replace_group_partition(in_one, log[1] + junk, 1, PARTITIONS)
    assert held == 3
    for g in ours:
        assert follower.fetch_offsets(g) == leader.fetch_offsets(g)
    assert {tp: o.offset for tp, o in follower.fetch_offsets(ours[0]).items()} == {("t", 0): 12, ("t", 1): 11}
    assert follower.fetch_offsets(ours[1]) == {}
    assert follower.get_group_metadata(ours[1]) == b'{"type": "classic"}'
    assert follower.fetch_offsets(_groups_in(follower, 1, 3)[2]) == {}
    assert {tp: o.offset for tp, o in follower.fetch_offsets(theirs[0]).items()} == {("t", 0): 99}
    # __consumer_offsets-1 ends with what it took over: a reader of the partition (compacted:
    # the newest record of each key) sees the leader's committed offsets, its own stale ones gone
    log_1 = _compacted(follower, 1)
    assert {parse_offset_commit_key(k): _offset_of(v) for k, v in log_1.items()} == {
        (ours[0], "t", 0): 12, (ours[0], "t", 1): 11}
    assert follower.group_log.next_offset(1) > before
    # taking it over again with nothing changed appends nothing
    after = follower.group_log.next_offset(1)
    follower.replace_group_partition(in_one, log[1], 1, PARTITIONS)
    assert follower.group_log.next_offset(1) == after
    # another partition count (one broker's 50) leaves the log alone
    follower.replace_group_partition(in_one, [], 1, PARTITIONS + 1)
    assert follower.group_log.next_offset(1) == after and _compacted(follower, 1) == log_1
    leader.close()
    follower.close()


def _mirrored_into(store: Store, log: dict[int, list[tuple[bytes, bytes | None]]]) -> None:
    """The store's group state mirrored, as a cluster does, into per-partition op lists."""
    store.mirror_groups(lambda group, ops: log.setdefault(store.group_log.partition_of(group), []).extend(ops),
                        lambda partition, ops: log.setdefault(partition, []).extend(ops))


def _log_of(store: Store, partition: int) -> list[tuple[int, list[tuple[bytes | None, bytes | None]]]]:
    """The partition of __consumer_offsets as a reader fetching it from offset 0 gets it."""
    from tmqgate.protocol.records import parse_header

    return [(parse_header(b).base_offset, [(r.key, r.value) for r in decode_records(b)])
            for b in store.group_log.read(partition, 0, 1 << 30)]


def test_the_log_is_replicated_with_the_state(tmp_path: Any) -> None:
    """A broker taking a partition over serves __consumer_offsets' partition as the previous
    leader did, every record at its offset, and appends after it: the log's batches went to
    the mirror with the changes they describe (a log of its own had appended what it took
    over at its own log end, so offsets changed: CI r64)."""
    leader, follower = _store(tmp_path / "leader"), _store(tmp_path / "follower")
    log: dict[int, list[tuple[bytes, bytes | None]]] = {}
    _mirrored_into(leader, log)
    ours = _groups_in(leader, 1, 2)
    for i in range(5):
        leader.commit_offsets(ours[0], [("t", 0, 10 + i, -1, None), ("t", 1, 20 + i, -1, None)])
    leader.put_group_metadata(ours[1], b'{"type": "classic"}', (group_metadata_key(ours[1]), b"metadata value"))
    leader.commit_offsets(ours[1], [("t", 0, 3, -1, "meta")])
    leader.delete_offsets(ours[1], "t", [0])
    # the follower led partition 1 once and kept a log of its own there, at other offsets
    follower.commit_offsets(_groups_in(follower, 1, 3)[2], [("t", 0, 8, -1, None)])
    follower.commit_offsets(ours[0], [("t", 5, 1, -1, None)])

    in_one = lambda group: follower.group_log.partition_of(group) == 1  # noqa: E731
    follower.replace_group_partition(in_one, log[1], 1, PARTITIONS)
    assert _log_of(follower, 1) == _log_of(leader, 1), "the same records at the same offsets"
    assert follower.group_log.next_offset(1) == leader.group_log.next_offset(1) == 13, "no snapshot appended"
    # the new coordinator's next commit comes after them, and is mirrored in its turn
    _mirrored_into(follower, log)
    follower.commit_offsets(ours[0], [("t", 0, 99, -1, None)])
    assert _log_of(follower, 1)[-1][0] == 13
    leader.replace_group_partition(in_one, log[1], 1, PARTITIONS)  # and back: the same log again
    assert _log_of(leader, 1) == _log_of(follower, 1)
    leader.close()
    follower.close()


def test_a_compaction_of_the_log_is_replicated_and_only_its_coordinator_compacts(tmp_path: Any) -> None:
    leader, follower = _store(tmp_path / "leader"), _store(tmp_path / "follower")
    log: dict[int, list[tuple[bytes, bytes | None]]] = {}
    _mirrored_into(leader, log)
    [g] = _groups_in(leader, 2, 1)
    for i in range(20):
        leader.commit_offsets(g, [("t", 0, i, -1, None)])
    before = _log_of(leader, 2)
    deletes, puts, kept = leader.group_log.compaction(2, 0, 86_400_000, active=3)
    assert len(deletes) == 17 and puts == [] and kept == 3
    mirrored = len(log[2])
    assert leader.group_log.apply_compaction(2, deletes, puts, kept)
    assert log[2][mirrored:] == [(k, None) for k in deletes], "the deletions went to the mirror first"
    assert _log_of(leader, 2) == before[-3:]
    in_two = lambda group: follower.group_log.partition_of(group) == 2  # noqa: E731
    follower.replace_group_partition(in_two, log[2], 2, PARTITIONS)
    assert _log_of(follower, 2) == before[-3:], "the follower took the compacted log over"

    # a broker not leading the partition (the mirror refuses) leaves its copy as it is
    def refuse(partition: int, ops: list[tuple[bytes, bytes | None]]) -> None:
        raise StateNotReplicated("not the leader")

    for i in range(5):
        follower.commit_offsets(g, [("t", 1, i, -1, None)])
    follower.mirror_groups(None, refuse)
    held = _log_of(follower, 2)
    assert 2 in follower.group_log.partitions_to_compact(min_dirty=1)
    deletes, puts, kept = follower.group_log.compaction(2, 0, 86_400_000, active=1)
    assert deletes and not follower.group_log.apply_compaction(2, deletes, puts, kept)
    assert _log_of(follower, 2) == held
    assert 2 not in follower.group_log.partitions_to_compact(), "not planned again until more is appended"
    leader.close()
    follower.close()


def _compacted(store: Store, partition: int) -> dict[bytes, bytes]:
    """The partition of __consumer_offsets as a reader of the compacted topic keeps it."""
    newest: dict[bytes, bytes | None] = {}
    for batch in store.group_log.read(partition, 0, 1 << 30):
        for r in decode_records(batch):
            assert r.key is not None
            newest[r.key] = r.value
    return {k: v for k, v in newest.items() if v is not None}


def _offset_of(value: bytes) -> int:
    return int.from_bytes(value[2:10], "big")


def _coordinator(store: Store, owned: set[int] | None) -> GroupCoordinator:
    counter = iter(range(1, 1_000_000))
    return GroupCoordinator(store, Topics(t=4), CoordinatorConfig(classic=ClassicConfig(initial_rebalance_delay_ms=0)),
                            now_ms=0, new_id=lambda: f"id{next(counter)}", owned=owned,
                            partition_of=store.group_log.partition_of)


def test_a_coordinator_serves_the_partitions_it_loaded(tmp_path: Any) -> None:
    store = _store(tmp_path / "data")
    [g1] = _groups_in(store, 1, 1)
    [g2] = _groups_in(store, 2, 1)
    store.commit_offsets(g1, [("t", 0, 4, -1, None)])
    store.commit_offsets(g2, [("t", 0, 6, -1, None)])
    c = _coordinator(store, set())
    assert not c.owns(g1) and not c.owns(g2)
    assert c.admin.list_groups() == [], "nothing loaded at start on a cluster"
    c.load_partition(1, 0)
    assert c.owns(g1) and not c.owns(g2)
    assert [g["group_id"] for g in c.admin.list_groups()] == [g1]
    code, rows = c.offsets.fetch_offsets(g1, None)
    assert code is ErrorCode.NONE and [(n, [p[:2] for p in parts]) for n, parts in rows] == [("t", [(0, 4)])]

    # a member waiting in a rebalance of a group of partition 1 ...
    a, first = join_new(c, 0, group=g1)
    assert first.code is ErrorCode.NONE
    c.sync_group(0, {"group_id": g1, "generation_id": 1, "member_id": a, "group_instance_id": None,
                     "assignments": [{"member_id": a, "assignment": b"A"}]}, lambda r: None)
    b_first = join(c, 10, group=g1)
    b = b_first.value["member_id"]  # type: ignore[index]
    waiting = join(c, 10, group=g1, member_id=b)
    assert waiting.value is None
    # ... is answered NOT_COORDINATOR when the partition goes; the group leaves memory
    c.unload_partition(1)
    assert waiting.code is ErrorCode.NOT_COORDINATOR
    assert not c.owns(g1) and c.admin.list_groups() == []
    # loaded again (led again), it is as its stored state says
    c.load_partition(1, 100)
    assert [g["group_id"] for g in c.admin.list_groups()] == [g1]
    store.close()


def test_one_node_coordinates_every_group(tmp_path: Any) -> None:
    store = _store(tmp_path / "data")
    store.commit_offsets("g", [("t", 0, 4, -1, None)])
    c = _coordinator(store, None)
    assert c.owns("g") and c.owns("anything")
    assert [g["group_id"] for g in c.admin.list_groups()] == ["g"]
    store.close()


# ---- transactional ids -------------------------------------------------------------------


def _txn_coordinator(store: Store, owned: set[int] | None) -> tuple[Any, Any]:
    from tests.test_txn_coordinator import Markers
    from tmqgate.coordinator.transactions import TransactionCoordinator, TxnConfig

    markers = Markers()
    return TransactionCoordinator(store.txn_states, store, TxnConfig(), 1_700_000_000_000, markers=markers,
                                  owned=owned, partition_of=store.transaction_log.partition_of), markers


def test_a_transactional_ids_state_is_mirrored_and_a_new_coordinator_completes_its_prepared_commit(
        tmp_path: Any) -> None:
    """A coordinator's state changes go to the mirror (a refusal: nothing changes); replayed on
    another broker, the id's prepared commit is completed there (its markers written again)."""
    now = 1_700_000_000_000
    old, new = _store(tmp_path / "old"), _store(tmp_path / "new")
    for s in (old, new):
        s.transaction_log.partitions = PARTITIONS
    log: list[tuple[bytes, bytes | None]] = []
    old.mirror_txns(lambda tid, ops: log.extend(ops))
    c, old_markers = _txn_coordinator(old, None)
    init = c.init_producer_id(now, "tx", 60_000)
    assert init.error is ErrorCode.NONE
    assert c.add_partitions(now, "tx", init.producer_id, init.producer_epoch, [("t", 0), ("t", 1)]) is ErrorCode.NONE
    old_markers.fail = {("t", 0), ("t", 1)}  # the old coordinator dies before its markers are written:
    assert c.end_txn(now + 1, "tx", init.producer_id, init.producer_epoch, commit=True).error is ErrorCode.NONE
    # each change: the id's state, then its batch of __transaction_state's log
    assert [k[:1] for k, _ in log] == [keys.TXNSTATE, keys.GROUPLOG] * (len(log) // 2) and len(log) >= 6
    assert {k for k, _ in log[::2]} == {keys.txn_state_key("tx")}
    assert c.get("tx").state.value == "PrepareCommit"  # type: ignore[union-attr]

    def refuse(tid: str, ops: list[tuple[bytes, bytes | None]]) -> None:
        raise StateNotReplicated("not the leader")

    old.mirror_txns(refuse)
    assert c.init_producer_id(now + 2, "other", 60_000).error is not ErrorCode.NONE
    other = c.get("other")
    assert other is None or other.producer_epoch == -1, "no producer epoch handed out"
    assert "other" not in old.txn_states.load(), "nothing written"

    p = new.transaction_log.partition_of("tx")
    assert new.replace_txn_partition(lambda tid: new.transaction_log.partition_of(tid) == p, log, p,
                                     new.transaction_log.partitions) == 1
    # __transaction_state-p ends with the state taken over, as the old coordinator's log did
    [last] = new.transaction_log.read(p, new.transaction_log.next_offset(p) - 1, 1 << 20)
    [old_last] = old.transaction_log.read(p, old.transaction_log.next_offset(p) - 1, 1 << 20)
    assert [(r.key, r.value) for r in decode_records(last)] == [(r.key, r.value) for r in decode_records(old_last)]
    d, markers = _txn_coordinator(new, set())
    assert not d.owns("tx") and d.get("tx") is None
    d.load_partition(p, now + 3)
    assert d.owns("tx")
    meta = d.get("tx")
    assert meta is not None and meta.state.value == "CompleteCommit", "the prepared commit completed here"
    assert markers.calls == [(init.producer_id, init.producer_epoch, True, [("t", 0), ("t", 1)])]
    d.unload_partition(p)
    assert d.get("tx") is None and not d.owns("tx")
    old.close()
    new.close()
