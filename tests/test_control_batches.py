"""Transaction markers (control batches) built and parsed as Kafka's EndTransactionMarker /
ControlRecordType lay them out: checked byte for byte against the documented v2 layout."""

from __future__ import annotations

import struct

import pytest
from crc32c import crc32c

from tmqgate.protocol.records import (
    ControlRecordType,
    CorruptRecord,
    EndTxnMarker,
    build_batch,
    build_end_txn_marker,
    parse_end_txn_marker,
    parse_header,
)


def _kafka_layout(base_offset: int, pid: int, epoch: int, kind: int, coordinator_epoch: int, ts: int) -> bytes:
    """The marker as Kafka's MemoryRecords.withEndTransactionMarker writes it, spelled out."""
    record = bytes([
        0x00,  # record attributes
        0x00,  # timestamp delta 0 (zigzag)
        0x00,  # offset delta 0
        0x08,  # key length 4 (zigzag)
    ]) + struct.pack(">hh", 0, kind) + bytes([0x0C]) + struct.pack(">hi", 0, coordinator_epoch) + bytes([0x00])
    assert len(record) == 16  # Kafka's CURRENT_END_TXN_SCHEMA_RECORD_SIZE is 17 with the length varint
    records = bytes([0x20]) + record  # length 16 (zigzag)
    tail = struct.pack(">hiqqqhii", 0x30, 0, ts, ts, pid, epoch, -1, 1)
    crc = crc32c(records, crc32c(tail))
    head = struct.pack(">qiibI", base_offset, 49 + len(records), -1, 2, crc)
    return head + tail + records


@pytest.mark.parametrize("commit", [True, False])
def test_marker_bytes_match_kafkas_layout(commit: bool) -> None:
    built = build_end_txn_marker(4242, 3, commit, 17, base_offset=99, timestamp=1_700_000_000_123)
    kind = ControlRecordType.COMMIT if commit else ControlRecordType.ABORT
    assert built == _kafka_layout(99, 4242, 3, int(kind), 17, 1_700_000_000_123)
    header = parse_header(built)
    assert header.is_control and header.is_transactional
    assert (header.producer_id, header.producer_epoch, header.base_sequence, header.record_count) == (4242, 3, -1, 1)
    assert parse_end_txn_marker(built) == EndTxnMarker(commit, 17)


def test_parse_refuses_data_batches_and_other_control_types() -> None:
    with pytest.raises(CorruptRecord):
        parse_end_txn_marker(build_batch([(b"k", b"v")]))
    # a control record of another type (e.g. a KRaft LeaderChange, type 2) is no marker
    other = build_batch([(struct.pack(">hh", 0, 2), struct.pack(">hi", 0, 0))], is_control=True)
    with pytest.raises(CorruptRecord):
        parse_end_txn_marker(other)
