"""__consumer_offsets in Kafka's record format (protocol.internal_topics) and its log in the
store (storage.group_log): partitions as Kafka computes them, byte-exact records, offsets dense
and stable across a restart, tombstones for deleted offsets."""

from __future__ import annotations

import time

from tmqgate.protocol.internal_topics import (
    GroupMember,
    group_metadata_key,
    group_metadata_value,
    java_string_hash,
    offset_commit_key,
    offset_commit_value,
    parse_offset_commit_key,
    partition_for,
    transaction_log_key,
    transaction_log_value,
)
from tmqgate.protocol.records import decode_records, iter_batches, verify_crc
from tmqgate.storage import Store
from tmqgate.storage.txn_coordinator import TxnRecord


def test_java_string_hash_and_partition() -> None:
    # Java's String.hashCode: "" 0, "a" 97, "hello" 99162322, "polygenelubricants" Integer.MIN_VALUE
    assert [java_string_hash(s) for s in ("", "a", "hello", "polygenelubricants")] == [0, 97, 99162322, -(1 << 31)]
    assert java_string_hash("\u00e9\U0001f600") == (0xE9 * 31 * 31 + 0xD83D * 31 + 0xDE00)  # UTF-16 units
    assert partition_for("polygenelubricants", 50) == 0  # Utils.abs(MIN_VALUE) = 0
    assert partition_for("hello", 50) == 99162322 % 50
    assert partition_for("Aa", 7) == partition_for("BB", 7)  # the classic hashCode collision


def test_offset_commit_records_are_kafkas_bytes() -> None:
    # OffsetCommitKey: type 1, group, topic (int16 length + utf-8), partition int32
    assert offset_commit_key("g", "t", 3) == bytes.fromhex("0001" "0001" "67" "0001" "74" "00000003")
    assert parse_offset_commit_key(offset_commit_key("grp", "tóp", 7)) == ("grp", "tóp", 7)
    # OffsetCommitValue v4: offset, leader epoch, compact string metadata, commit ts, no tags
    assert offset_commit_value(5, -1, None, 1000) == bytes.fromhex(
        "0004" "0000000000000005" "ffffffff" "01" "00000000000003e8" "00")
    assert offset_commit_value(5, 2, "m", 1) == bytes.fromhex(
        "0004" "0000000000000005" "00000002" "02" "6d" "0000000000000001" "00")
    # with the topic's id: one tagged field, tag 0, 16 bytes (captured from Kafka 4.3.1)
    topic_id = bytes.fromhex("0052ebddda4d4f0bab8e91ff010a9ee3")
    assert offset_commit_value(7, -1, "", 0x1A20AA77C23, topic_id) == bytes.fromhex(
        "00040000000000000007ffffffff01000001a20aa77c230100100052ebddda4d4f0bab8e91ff010a9ee3")


def test_group_metadata_records_are_kafkas_bytes() -> None:
    assert group_metadata_key("g") == bytes.fromhex("0002" "0001" "67")
    # GroupMetadataValue v3: an empty group (protocol and leader null, no members)
    assert group_metadata_value("consumer", 2, None, None, 5, []) == bytes.fromhex(
        "0003" "0008" + b"consumer".hex() + "00000002" "ffff" "ffff" "0000000000000005" "00000000")
    member = GroupMember("m", None, "c", "/h", 300, 45, b"\x01", b"")
    assert group_metadata_value("consumer", 1, "range", "m", 0, [member]) == bytes.fromhex(
        "0003" "0008" + b"consumer".hex() + "00000001" "0005" + b"range".hex() + "0001" "6d" "0000000000000000"
        "00000001" "0001" "6d" "ffff" "0001" "63" "0002" "2f68" "0000012c" "0000002d" "00000001" "01" "00000000")


def _records(store: Store, partition: int) -> list[tuple[int, bytes | None, bytes | None, int]]:
    out = []
    for batch in store.group_log.read(partition, 0, 1 << 20):
        assert verify_crc(batch)
        for h in iter_batches(batch):
            out.extend((r.offset, r.key, r.value, r.timestamp)
                       for r in decode_records(batch[h.offset:h.offset + h.size]))
    return out


def test_commits_and_deletes_in_the_log_across_a_restart(tmp_path) -> None:
    path = str(tmp_path / "data")
    store = Store(path)
    p = store.group_log.partition_of("g1")
    assert store.group_log.next_offset(p) == 0 and store.internal_topics_used() == []
    store.commit_offsets("g1", [("t", 0, 10, -1, None), ("t", 1, 20, 4, "x")], commit_ms=111)
    store.commit_offset("g1", "t", 0, 11, commit_ms=222)
    assert store.group_log.next_offset(p) == 3
    assert store.internal_topics_used() == ["__consumer_offsets"]
    store.close()

    store = Store(path)  # offsets go on after a restart: read back from the last batch
    assert store.group_log.next_offset(p) == 3
    store.delete_partitions("g1", [("t", [1, 1])])
    store.commit_offset("g1", "t", 0, 12, commit_ms=333)
    store.delete_group("g1")
    got = _records(store, p)
    assert [(o, k, v) for o, k, v, _ in got] == [
        (0, offset_commit_key("g1", "t", 0), offset_commit_value(10, -1, None, 111)),
        (1, offset_commit_key("g1", "t", 1), offset_commit_value(20, 4, "x", 111)),
        (2, offset_commit_key("g1", "t", 0), offset_commit_value(11, -1, None, 222)),
        (3, offset_commit_key("g1", "t", 1), None),  # OffsetDelete's tombstone, once
        (4, offset_commit_key("g1", "t", 0), offset_commit_value(12, -1, None, 333)),
        (5, offset_commit_key("g1", "t", 0), None),  # DeleteGroups: a tombstone per offset
    ]
    assert [ts for *_, ts in got][:3] == [111, 111, 222]
    # a read from the middle of a batch starts at that batch; past the end, nothing
    assert [len(b) for b in store.group_log.read(p, 1, 1 << 20)] == \
        [len(b) for b in store.group_log.read(p, 0, 1 << 20)]
    assert store.group_log.read(p, 6, 1 << 20) == []
    store.close()


def test_the_log_is_compacted_to_the_newest_record_per_key_offsets_kept(tmp_path) -> None:
    """Kafka's __consumer_offsets is compacted: the newest record of each key stays at its
    offset, superseded ones go, tombstones go after delete.retention.ms; the last batch (the
    head) is never rewritten, so the next offset never goes back, also after a restart."""
    path = str(tmp_path / "data")
    store = Store(path)
    log = store.group_log
    p = log.partition_of("g1")
    store.commit_offsets("g1", [("t", 0, 10, -1, None), ("t", 1, 20, -1, None)], commit_ms=100)  # 0, 1
    for i in range(5):
        store.commit_offset("g1", "t", 0, 11 + i, commit_ms=200 + i)  # 2..6
    store.delete_partitions("g1", [("t", [1])])  # 7: t-1's tombstone
    store.commit_offset("g1", "t", 0, 99, commit_ms=300)  # 8: the head
    assert log.partitions_to_compact() == [p]  # not looked at since the store opened
    assert log.compaction(p, now_ms=1000, delete_retention_ms=10_000) == ([], [], 9)  # all in the head
    deletes, puts, kept = log.compaction(p, now_ms=1000, delete_retention_ms=10_000, active=0)
    log.apply_compaction(p, deletes, puts, kept)
    assert kept == 2
    assert [(o, k, v) for o, k, v, _ in _records(store, p)] == [
        (7, offset_commit_key("g1", "t", 1), None),  # a tombstone younger than the retention
        (8, offset_commit_key("g1", "t", 0), offset_commit_value(99, -1, None, 300)),
    ]
    assert log.partitions_to_compact() == []  # nothing appended since
    # past delete.retention.ms the tombstone goes too; the head stays
    later = int(time.time() * 1000) + 20_000  # the tombstone's batch has the wall clock's time
    log.apply_compaction(p, *log.compaction(p, now_ms=later, delete_retention_ms=10_000, active=0))
    assert [o for o, *_ in _records(store, p)] == [8]
    assert log.read(p, 0, 1 << 20) == log.read(p, 8, 1 << 20)  # a read from a gap starts after it
    store.commit_offset("g1", "t", 0, 100, commit_ms=400)
    assert log.next_offset(p) == 10
    assert log.partitions_to_compact(min_dirty=1) == [p] and log.partitions_to_compact() == []
    store.close()
    store = Store(path)
    assert store.group_log.next_offset(p) == 10
    assert [o for o, *_ in _records(store, p)] == [8, 9]
    store.close()


def test_compaction_keeps_the_surviving_runs_of_a_batch(tmp_path) -> None:
    """A batch whose middle record was superseded becomes two batches at their own offsets."""
    store = Store(str(tmp_path / "data"))
    log = store.group_log
    p = log.partition_of("g2")
    store.commit_offsets("g2", [("t", 0, 1, -1, None), ("t", 1, 2, -1, None), ("t", 2, 3, -1, None)], commit_ms=5)
    store.commit_offset("g2", "t", 1, 7, commit_ms=6)  # supersedes offset 1
    store.commit_offset("g2", "t", 2, 8, commit_ms=7)  # the head; offset 2 superseded too
    log.apply_compaction(p, *log.compaction(p, now_ms=10, delete_retention_ms=1000, active=0))
    assert [(o, v) for o, _k, v, _ in _records(store, p)] == [
        (0, offset_commit_value(1, -1, None, 5)), (3, offset_commit_value(7, -1, None, 6)),
        (4, offset_commit_value(8, -1, None, 7))]
    store.close()


def test_compaction_leaves_the_newest_records_as_they_are(tmp_path) -> None:
    """The last ``active`` records are Kafka's active segment, which its cleaner never touches:
    only what lies before them is compacted, and a batch holding the first of them stays whole."""
    store = Store(str(tmp_path / "data"))
    log = store.group_log
    p = log.partition_of("g3")
    for i in range(4):
        store.commit_offset("g3", "t", 0, i, commit_ms=i)  # 0..3, one key
    store.commit_offsets("g3", [("t", 0, 4, -1, None), ("t", 1, 5, -1, None)], commit_ms=4)  # 4, 5
    store.commit_offset("g3", "t", 1, 6, commit_ms=5)  # 6
    log.apply_compaction(p, *log.compaction(p, now_ms=10, delete_retention_ms=1000, active=2))
    # offset 5 is in the head, so its batch (4, 5) is too; 0..3 were superseded by 4
    assert [(o, v) for o, _k, v, _ in _records(store, p)] == [
        (4, offset_commit_value(4, -1, None, 4)), (5, offset_commit_value(5, -1, None, 4)),
        (6, offset_commit_value(6, -1, None, 5))]
    deletes, puts, kept = log.compaction(p, now_ms=10, delete_retention_ms=1000, active=1)
    assert (len(deletes), kept) == (1, 2)  # now 5 lies before the head and was superseded by 6
    store.close()


def test_transactional_offsets_are_logged_when_committed(tmp_path) -> None:
    store = Store(str(tmp_path / "data"))
    p = store.group_log.partition_of("g")
    store.commit_txn_offsets("g", 7, 0, [("t", 0, 5, -1, "")], commit_ms=50)
    assert store.group_log.next_offset(p) == 0  # pending: not yet an offset of the group
    store.complete_txn_offsets("g", 7, commit=True)
    store.commit_txn_offsets("g", 8, 0, [("t", 0, 9, -1, "")], commit_ms=60)
    store.complete_txn_offsets("g", 8, commit=False)  # aborted: nothing written
    assert [(k, v) for _, k, v, _ in _records(store, p)] == [
        (offset_commit_key("g", "t", 0), offset_commit_value(5, -1, "", 50))]
    store.close()


def test_transaction_log_records_are_kafkas_bytes() -> None:
    assert transaction_log_key("t") == bytes.fromhex("0000" "0001" "74")
    # v0: pid, epoch, timeout, status, partitions (int32 count; -1 null), update, start
    assert transaction_log_value(0, 7, 1, 60000, 0, None, 5, -1) == bytes.fromhex(
        "0000" "0000000000000007" "0001" "0000ea60" "00" "ffffffff" "0000000000000005" "ffffffffffffffff")
    # v1 (flexible): compact array of (compact topic, compact int32 array, no tags), then tags
    # 0 previous producer id and 2 the client's transaction version
    assert transaction_log_value(1, 7, 1, 60000, 1, [("ab", [0, 3])], 5, 4, previous_producer_id=7,
                                 client_transaction_version=2) == bytes.fromhex(
        "0001" "0000000000000007" "0001" "0000ea60" "01" "02" "03" "6162" "03" "00000000" "00000003" "00"
        "0000000000000005" "0000000000000004" "02" "0008" "0000000000000007" "0202" "0002")


def test_transaction_states_in_the_log(tmp_path) -> None:
    store = Store(str(tmp_path / "data"))
    log = store.transaction_log
    p = log.partition_of("tx")
    record = TxnRecord("tx", 1000, -1, 0, -1, 60000, "Ongoing", (("t", 1), ("t", 0)), (), 10, 11)
    store.txn_states.put(record)
    store.txn_states.delete("tx")
    assert log.next_offset(p) == 2
    assert store.internal_topics_used() == ["__transaction_state"]  # not __consumer_offsets
    got = [(r.offset, r.key, r.value) for b in log.read(p, 0, 1 << 20) for r in decode_records(b)]
    assert got == [(0, transaction_log_key("tx"), transaction_log_value(1, 1000, 0, 60000, 1, [("t", [0, 1])], 11, 10,
                                                                        previous_producer_id=1000)),
                   (1, transaction_log_key("tx"), None)]
    store.close()
