"""The log cleaner (storage.cleaner) on real LevelDB: newest record per key kept at its
offset, tombstones and delete.retention.ms, the lag settings on a fake clock, the head left
alone, open and aborted transactions, and a crash between the cleaner's writes."""

from __future__ import annotations

from pathlib import Path

import pytest

from tmqgate.protocol.records import build_batch, decode_records, parse_header
from tmqgate.storage import Store

T0 = 1_700_000_000_000
COMPACT = {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.01", "segment.ms": "1000"}


def _append(s: Store, records: list[tuple[bytes | None, bytes | None]], ts: int, **kw: int | bool) -> int:
    batch = build_batch([(k, v, [], ts) for k, v in records], **kw)  # type: ignore[arg-type]
    h = parse_header(batch)
    return s.append("t", 0, batch, h.record_count, h.max_timestamp).base


def _all(s: Store) -> list[tuple[int, bytes | None, bytes | None]]:
    out = []
    for batch in s.read("t", 0, 0, 1 << 30):
        out.extend((r.offset, r.key, r.value) for r in decode_records(batch))
    return out


@pytest.fixture
def store(tmp_path: Path) -> Store:
    s = Store(tmp_path / "data")
    s.create_database("t", 1, configs=dict(COMPACT))
    return s


def _updates(s: Store, rounds: int = 5, keys: int = 4) -> None:
    for r in range(rounds):
        _append(s, [(b"k%d" % k, b"v%d-%d" % (k, r)) for k in range(keys)], T0 + r * 10)


def test_newest_per_key_kept_at_their_offsets_head_alone(store: Store) -> None:
    _updates(store)
    _append(store, [(b"k0", b"head")], T0 + 60_000)  # the head: 60 s after, segment.ms 1 s
    size_before = store.log_size("t", 0)
    [stats] = store.cleaner.clean_all(T0 + 120_000)
    assert stats.cleaned_to == 20  # the head (offset 20) is not cleaned
    assert _all(store) == [(16, b"k0", b"v0-4"), (17, b"k1", b"v1-4"), (18, b"k2", b"v2-4"),
                           (19, b"k3", b"v3-4"), (20, b"k0", b"head")]
    assert store.log_size("t", 0) < size_before
    assert store.log_entries("t", 0) == 2  # four emptied batches removed
    assert store.next_version("t", 0) == 21  # offsets never change
    # Nothing new: not due again.
    assert [s.cleaned_to for s in store.cleaner.clean_all(T0 + 130_000)] == [-1]


def test_partial_batch_keeps_header(store: Store) -> None:
    _append(store, [(b"a", b"1"), (b"b", b"1"), (b"c", b"1")], T0, producer_id=7, producer_epoch=2,
            base_sequence=40)
    _append(store, [(b"b", b"2")], T0 + 1)
    _append(store, [(b"z", b"head")], T0 + 60_000)
    store.cleaner.clean_all(T0 + 120_000)
    first = store.read("t", 0, 0, 1 << 20)[0]
    h = parse_header(first)
    assert (h.base_offset, h.last_offset_delta, h.record_count) == (0, 2, 2)
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (7, 2, 40)
    assert [(r.offset, r.key) for r in decode_records(first)] == [(0, b"a"), (2, b"c")]


def test_tombstone_kept_until_delete_retention_after_the_cleaning(store: Store) -> None:
    store.set_configs("t", {"delete.retention.ms": "100000"}, merge=True)
    _append(store, [(b"a", b"1"), (b"b", b"1")], T0)
    _append(store, [(b"a", None)], T0 + 1)
    _append(store, [(b"z", b"x")], T0 + 60_000)
    store.cleaner.clean_all(T0 + 100_000)
    assert _all(store) == [(1, b"b", b"1"), (2, b"a", None), (3, b"z", b"x")]
    tomb = store.read("t", 0, 2, 1 << 20)[0]
    h = parse_header(tomb)
    assert h.has_delete_horizon and h.base_timestamp == T0 + 100_000 + 100_000
    assert decode_records(tomb)[0].timestamp == T0 + 1  # the record's own timestamp stays
    # A cleaning before the horizon keeps the tombstone…
    _append(store, [(b"z", b"y")], T0 + 150_000)
    _append(store, [(b"z", b"head")], T0 + 250_000)
    [s] = store.cleaner.clean_all(T0 + 160_000)
    assert s.cleaned_to == 5
    assert _all(store) == [(1, b"b", b"1"), (2, b"a", None), (4, b"z", b"y"), (5, b"z", b"head")]
    # …one after it removes it.
    _append(store, [(b"z", b"w")], T0 + 350_000)
    _append(store, [(b"z", b"head2")], T0 + 450_000)
    [s] = store.cleaner.clean_all(T0 + 400_000)
    assert s.cleaned_to == 7
    assert _all(store) == [(1, b"b", b"1"), (6, b"z", b"w"), (7, b"z", b"head2")]


def test_min_compaction_lag_on_a_fake_clock(store: Store) -> None:
    store.set_configs("t", {"min.compaction.lag.ms": "50000"}, merge=True)
    _append(store, [(b"a", b"1")], T0)
    _append(store, [(b"a", b"2")], T0 + 100)
    _append(store, [(b"b", b"head")], T0 + 60_000)
    assert [s.cleaned_to for s in store.cleaner.clean_all(T0 + 20_000)] == [-1]  # too young
    assert len(_all(store)) == 3
    store.cleaner.clean_all(T0 + 51_000)
    assert _all(store) == [(1, b"a", b"2"), (2, b"b", b"head")]


def test_dirty_ratio_and_max_compaction_lag(store: Store) -> None:
    store.set_configs("t", {"min.cleanable.dirty.ratio": "0.9", "max.compaction.lag.ms": "200000"},
                      merge=True)
    _append(store, [(b"a", b"1")], T0)
    _append(store, [(b"a", b"2")], T0 + 1)
    _append(store, [(b"b", b"head")], T0 + 60_000)
    store.cleaner.clean_all(T0 + 61_000)  # first cleaning: everything is dirty (ratio 1)
    assert _all(store) == [(1, b"a", b"2"), (2, b"b", b"head")]
    _append(store, [(b"a", b"3")], T0 + 120_000)
    _append(store, [(b"b", b"head2")], T0 + 200_000)
    # dirty = the a=3 batch + b=head (old head) vs clean a=2: ratio < 0.9, not overdue yet
    [s] = store.cleaner.clean_all(T0 + 200_001)
    assert s.cleaned_to == -1 and 0 < s.dirty_ratio < 0.9
    [s] = store.cleaner.clean_all(T0 + 60_000 + 200_001)  # b=head's age passes max lag
    assert s.cleaned_to == 4
    # a=2 superseded; b=head stays (its newer value is in the head, which is not mapped)
    assert _all(store) == [(2, b"b", b"head"), (3, b"a", b"3"), (4, b"b", b"head2")]


def test_open_transaction_bounds_the_range_aborted_data_removed(store: Store) -> None:
    _append(store, [(b"a", b"1")], T0)
    _append(store, [(b"a", b"aborted")], T0 + 1, producer_id=5, producer_epoch=0, base_sequence=0,
            is_transactional=True)
    store.wal.append_marker("t", 0, 5, 0, False, 0, T0 + 2)  # abort at offset 2
    _append(store, [(b"a", b"2")], T0 + 3)
    _append(store, [(b"a", b"open")], T0 + 4, producer_id=6, producer_epoch=0, base_sequence=0,
            is_transactional=True)  # offset 4: an open transaction
    _append(store, [(b"a", b"3")], T0 + 5)
    _append(store, [(b"z", b"head")], T0 + 60_000)
    [s] = store.cleaner.clean_all(T0 + 120_000)
    assert s.cleaned_to == 4  # stops at the open transaction's first offset
    got = [(o, v) for o, _, v in _all(store)]
    # a=1 superseded, the aborted batch gone, the abort marker kept (a control record),
    # everything from the open transaction on untouched.
    assert got == [(2, b"\x00\x00\x00\x00\x00\x00"), (3, b"2"), (4, b"open"), (5, b"3"), (6, b"head")]
    assert parse_header(store.read("t", 0, 2, 1 << 20)[0]).is_control


def test_retention_skips_compact_only_topics(store: Store) -> None:
    store.set_configs("t", {"retention.ms": "1000"}, merge=True)
    _append(store, [(b"a", b"1")], T0)
    assert store.enforce_retention(T0 + 100_000) == 0
    store.set_configs("t", {"cleanup.policy": "compact,delete"}, merge=True)
    assert store.enforce_retention(T0 + 100_000) == 1


def test_crash_between_the_steps_keeps_old_or_new(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A cleaner killed after staging its payloads (before the index WriteBatch) leaves the old
    entries; killed after the WriteBatch (before the old payloads' deletes), the new ones —
    both seen by a store reopened on the same LevelDB files."""
    from tmqgate.storage.payloads import PayloadLog

    for crash_at in ("before-index", "after-index"):
        path = tmp_path / crash_at
        s = Store(path)
        s.create_database("t", 1, configs=dict(COMPACT))
        _updates(s, rounds=3, keys=2)
        _append(s, [(b"z", b"head")], T0 + 60_000)
        before = _all(s)

        class Killed(Exception):
            pass

        def boom_write(self: object, wb: object) -> None:
            raise Killed

        def boom_delete(self: object, seqs: object, sync: bool = False) -> None:
            raise Killed

        # Either way the payload deletes never happen (a killed process does nothing more):
        # before the index, the staged payloads stay orphaned; after it, the old ones stay.
        monkeypatch.setattr(PayloadLog, "delete", boom_delete)
        if crash_at == "before-index":
            monkeypatch.setattr(type(s.core), "write", boom_write)
        with pytest.raises(Killed):
            s.cleaner.clean_all(T0 + 120_000)
        monkeypatch.undo()
        # "kill -9": drop the handles without the store's close (no sync, no cleanup).
        s.core.payloads.close()
        s.core.db.close()
        s = Store(path)
        after = _all(s)
        if crash_at == "before-index":
            assert after == before
        else:
            assert after == [(4, b"k0", b"v0-2"), (5, b"k1", b"v1-2"), (6, b"z", b"head")]
        # Every indexed payload is there and no payload is left unindexed.
        indexed = {int.from_bytes(v[:8], "big") for _, v in s.core.db.iterator(prefix=b"\x10")}
        stored = set(s.core.payloads.sequences())
        assert indexed == stored
        s.close()


def test_marker_kept_while_its_transaction_has_records_then_after_delete_retention(store: Store) -> None:
    store.set_configs("t", {"delete.retention.ms": "100000"}, merge=True)
    _append(store, [(b"a", b"txn")], T0, producer_id=5, producer_epoch=0, base_sequence=0, is_transactional=True)
    _append(store, [(b"b", b"txn")], T0, producer_id=5, producer_epoch=0, base_sequence=1, is_transactional=True)
    store.wal.append_marker("t", 0, 5, 0, True, 0, T0 + 1)  # commit at offset 2
    _append(store, [(b"a", b"2")], T0 + 2)
    _append(store, [(b"z", b"head")], T0 + 60_000)
    store.cleaner.clean_all(T0 + 100_000)
    # b=txn is still the newest b: the transaction keeps records, so its marker stays as it was
    assert [o for o, _, _ in _all(store)] == [1, 2, 3, 4]
    assert not parse_header(store.read("t", 0, 2, 1 << 20)[0]).has_delete_horizon
    # b's newer value removes the transaction's last record: the marker gets a horizon…
    _append(store, [(b"b", b"2")], T0 + 150_000)
    _append(store, [(b"z", b"head2")], T0 + 250_000)
    store.cleaner.clean_all(T0 + 160_000)
    marker = store.read("t", 0, 2, 1 << 20)[0]
    h = parse_header(marker)
    assert h.is_control and h.has_delete_horizon and h.base_timestamp == T0 + 260_000
    assert h.base_offset == 2 and h.producer_id == 5
    # …and goes at a cleaning after it.
    _append(store, [(b"z", b"w")], T0 + 350_000)
    _append(store, [(b"z", b"head3")], T0 + 450_000)
    store.cleaner.clean_all(T0 + 400_000)
    assert not any(parse_header(b).is_control for b in store.read("t", 0, 0, 1 << 20))
    assert [(o, k, v) for o, k, v in _all(store)] == [(3, b"a", b"2"), (5, b"b", b"2"), (7, b"z", b"w"),
                                                      (8, b"z", b"head3")]


def test_idle_vnode_not_scanned_again_until_it_changes(store: Store) -> None:
    _append(store, [(b"a", b"1")], T0)
    _append(store, [(b"a", b"2")], T0 + 60_000)
    [s] = store.cleaner.clean_all(T0 + 120_000)
    assert s.cleaned_to == 1
    assert [c.cleaned_to for c in store.cleaner.clean_all(T0 + 130_000)] == [-1]  # scanned: not due
    assert store.cleaner.cleanings(T0 + 140_000) == []  # unchanged since: no scan
    _append(store, [(b"a", b"3")], T0 + 200_000)
    assert len(store.cleaner.cleanings(T0 + 210_000)) == 1  # an append: scanned again


def test_cleaning_gives_the_disk_space_back(tmp_path: Path) -> None:
    """The freed payloads' range is compacted at the end of a cleaning (LevelDB would rarely
    reach the payload log's old sequences on its own)."""
    import os

    def payload_bytes() -> int:
        return sum(os.stat(os.path.join(d, f)).st_blocks * 512  # disk blocks: holes punched are free
                   for d in (tmp_path / "data" / "wal-payloads", tmp_path / "data" / "wal-segments")
                   for f in os.listdir(d))

    s = Store(tmp_path / "data", write_buffer_size=1 << 20)  # flushed as it goes, as a long-running store
    s.create_database("t", 1, configs=dict(COMPACT))
    for r in range(20):
        _append(s, [(b"key-%04d" % k, b"v" * 1000) for k in range(200)], T0 + r)  # 4 MB in all
    _append(s, [(b"z", b"head")], T0 + 60_000)
    before = payload_bytes()
    [stats] = s.cleaner.clean_all(T0 + 120_000)
    assert stats.freed_last >= stats.freed_first >= 0
    assert payload_bytes() < before / 3  # 19 of 20 rounds superseded
    assert len(_all(s)) == 201
