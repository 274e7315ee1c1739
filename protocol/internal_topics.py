"""Kafka's internal topics as its clients and tools see them: their names, which partition a
group or a transactional id lives in, and the records of ``__consumer_offsets`` in Kafka's own
format (what ``kafka-console-consumer --formatter OffsetsMessageFormatter`` /
``GroupMetadataMessageFormatter`` / ``TransactionLogMessageFormatter`` and lag monitors such as
Burrow decode).

Apache Kafka 4.3 (``GroupCoordinatorRecordSerde``, ``CoordinatorRecordType``,
``GroupCoordinatorRecordHelpers``) writes a record of ``__consumer_offsets`` as

* key = int16 record type, then the key message (non-flexible): an offset commit is type 1,
  ``OffsetCommitKey`` = group (int16 length + utf-8), topic (same), partition int32;
* value = int16 value version, then the value message; an offset commit's value is
  ``OffsetCommitValue`` version 4 (flexible; version 1 only with an expire timestamp, which
  OffsetCommit v2+ no longer carries): offset int64, leader epoch int32, metadata as a compact
  string (unsigned varint length + 1, then utf-8), commit timestamp int64, then the tagged
  fields: tag 0, the topic's id, when the broker knows the topic (Kafka 4.3 writes it for
  every OffsetCommit version, by name too; not for TxnOffsetCommit);
* a deleted offset (OffsetDelete, DeleteGroups, expiry) is a tombstone: the key, a null value.

A classic group's metadata is type 2, ``GroupMetadataKey`` = group (int16 length + utf-8),
with ``GroupMetadataValue`` version 3 (non-flexible): protocol type, generation int32, protocol
and leader (nullable strings: int16 length, -1 for null), current state timestamp int64, then
the members (int32 count), each member id, group instance id (nullable), client id, client
host, rebalance timeout int32, session timeout int32, subscription and assignment (int32
length + bytes). Kafka writes one when a generation's assignment is synced and when the group
becomes empty (no members, protocol and leader null), a tombstone when it is deleted.

A transactional id's state in ``__transaction_state`` (Kafka 4.3's ``TransactionLog``) is
key type 0, ``TransactionLogKey`` = transactional id (int16 length + utf-8), and
``TransactionLogValue`` version 1 (flexible) when the cluster's transaction.version is 1 or
2, else version 0: producer id int64, producer epoch int16, timeout int32, status int8 (Empty 0,
Ongoing 1, PrepareCommit 2, PrepareAbort 3, CompleteCommit 4, CompleteAbort 5, Dead 6,
PrepareEpochFence 7), the partitions grouped by topic (null when Empty), last update and start
timestamps int64; version 1 adds tagged fields: 0 previous producer id, 1 next producer id,
2 the client's transaction version (each only when not its default: -1, -1, 0).

The partition of a group (and of a transactional id in ``__transaction_state``) is Kafka's
``Utils.abs(id.hashCode()) % partitions`` with Java's ``String.hashCode`` (over UTF-16 code
units, wrapping at 32 bits) and ``Utils.abs`` mapping ``Integer.MIN_VALUE`` to 0.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass

from tmqgate.protocol.varint import encode_uvarint

GROUP_METADATA_TOPIC = "__consumer_offsets"
TRANSACTION_STATE_TOPIC = "__transaction_state"
#: Kafka's ``Topic.INTERNAL_TOPICS`` that tmqgate shows (share groups are not served).
INTERNAL_TOPICS = (GROUP_METADATA_TOPIC, TRANSACTION_STATE_TOPIC)

#: ``CoordinatorRecordType`` ids (the key's leading int16).
OFFSET_COMMIT = 1
GROUP_METADATA = 2
#: The ``OffsetCommitValue`` version Kafka 4.3 writes (no expire timestamp).
OFFSET_COMMIT_VALUE_VERSION = 4
#: The ``GroupMetadataValue`` version Kafka 4.3 writes.
GROUP_METADATA_VALUE_VERSION = 3

_H = struct.Struct(">h")
_OFFSET_HEAD = struct.Struct(">qi")
_Q = struct.Struct(">q")


def is_internal(name: str | None) -> bool:
    """Kafka's ``Topic.isInternal`` for the internal topics tmqgate has."""
    return name in INTERNAL_TOPICS


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode``: s[0]*31^(n-1) + … + s[n-1] over UTF-16 code units, as int32."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for(key: str, partitions: int) -> int:
    """The internal topic's partition of a group id or transactional id (Kafka's
    ``Utils.abs(key.hashCode()) % partitions``)."""
    h = java_string_hash(key)
    return (0 if h == -(1 << 31) else abs(h)) % partitions


def _string(text: str) -> bytes:
    raw = text.encode()
    return _H.pack(len(raw)) + raw


def _nullable(text: str | None) -> bytes:
    return _H.pack(-1) if text is None else _string(text)


def _bytes(data: bytes) -> bytes:
    return struct.pack(">i", len(data)) + data


def offset_commit_key(group: str, topic: str, partition: int) -> bytes:
    """The key of a group's committed offset of one partition (type 1, ``OffsetCommitKey``)."""
    return _H.pack(OFFSET_COMMIT) + _string(group) + _string(topic) + struct.pack(">i", partition)


def offset_commit_value(offset: int, leader_epoch: int, metadata: str | None, commit_ms: int,
                        topic_id: bytes | None = None) -> bytes:
    """The value of a committed offset: ``OffsetCommitValue`` v4 as Kafka 4.3 writes it (a
    null metadata is written empty, as Kafka's OffsetCommit stores it; the topic id as tag 0
    unless None or zero)."""
    raw = (metadata or "").encode()
    tags = b"\x01\x00\x10" + topic_id if topic_id and any(topic_id) else b"\x00"
    return (_H.pack(OFFSET_COMMIT_VALUE_VERSION) + _OFFSET_HEAD.pack(offset, leader_epoch)
            + encode_uvarint(len(raw) + 1) + raw + _Q.pack(commit_ms) + tags)


def parse_offset_commit_key(key: bytes) -> tuple[str, str, int]:
    """(group, topic, partition) of an ``OffsetCommitKey`` record key (type 0 or 1)."""
    kind = _H.unpack_from(key, 0)[0]
    if kind not in (0, OFFSET_COMMIT):
        raise ValueError(f"not an offset commit key (type {kind})")
    pos = 2
    names = []
    for _ in range(2):
        n = _H.unpack_from(key, pos)[0]
        names.append(key[pos + 2:pos + 2 + n].decode())
        pos += 2 + n
    return names[0], names[1], struct.unpack_from(">i", key, pos)[0]


@dataclass(frozen=True)
class GroupMember:
    """One member in a ``GroupMetadataValue``."""

    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes
    assignment: bytes


def group_metadata_key(group: str) -> bytes:
    """The key of a classic group's metadata (type 2, ``GroupMetadataKey``)."""
    return _H.pack(GROUP_METADATA) + _string(group)


def group_metadata_value(protocol_type: str, generation: int, protocol: str | None, leader: str | None,
                         state_ms: int, members: Sequence[GroupMember]) -> bytes:
    """A classic group's metadata: ``GroupMetadataValue`` v3 as Kafka 4.3 writes it."""
    parts = [_H.pack(GROUP_METADATA_VALUE_VERSION), _string(protocol_type), struct.pack(">i", generation),
             _nullable(protocol), _nullable(leader), _Q.pack(state_ms), struct.pack(">i", len(members))]
    for m in members:
        parts += [_string(m.member_id), _nullable(m.instance_id), _string(m.client_id), _string(m.client_host),
                  struct.pack(">ii", m.rebalance_timeout_ms, m.session_timeout_ms),
                  _bytes(m.subscription), _bytes(m.assignment)]
    return b"".join(parts)


TRANSACTION_LOG = 0
#: ``TransactionState`` ids.
TXN_STATUS = {"Empty": 0, "Ongoing": 1, "PrepareCommit": 2, "PrepareAbort": 3, "CompleteCommit": 4,
              "CompleteAbort": 5, "Dead": 6, "PrepareEpochFence": 7}


def transaction_log_key(transactional_id: str) -> bytes:
    """The key of a transactional id's state (type 0, ``TransactionLogKey``)."""
    return _H.pack(TRANSACTION_LOG) + _string(transactional_id)


def _compact(text: str) -> bytes:
    raw = text.encode()
    return encode_uvarint(len(raw) + 1) + raw


def transaction_log_value(version: int, producer_id: int, producer_epoch: int, timeout_ms: int, status: int,
                          partitions: Sequence[tuple[str, Sequence[int]]] | None, update_ms: int, start_ms: int,
                          previous_producer_id: int = -1, next_producer_id: int = -1,
                          client_transaction_version: int = 0) -> bytes:
    """A transactional id's state: ``TransactionLogValue`` v0 or v1 as Kafka 4.3 writes it."""
    head = _H.pack(version) + struct.pack(">qhib", producer_id, producer_epoch, timeout_ms, status)
    tail = struct.pack(">qq", update_ms, start_ms)
    if version == 0:
        if partitions is None:
            parts = struct.pack(">i", -1)
        else:
            parts = struct.pack(">i", len(partitions)) + b"".join(
                _string(t) + struct.pack(f">i{len(ids)}i", len(ids), *ids) for t, ids in partitions)
        return head + parts + tail
    if partitions is None:
        parts = b"\x00"
    else:
        parts = encode_uvarint(len(partitions) + 1) + b"".join(
            _compact(t) + encode_uvarint(len(ids) + 1) + struct.pack(f">{len(ids)}i", *ids) + b"\x00"
            for t, ids in partitions)
    tags = []
    if previous_producer_id != -1:
        tags.append(b"\x00\x08" + _Q.pack(previous_producer_id))
    if next_producer_id != -1:
        tags.append(b"\x01\x08" + _Q.pack(next_producer_id))
    if client_transaction_version != 0:
        tags.append(b"\x02\x02" + _H.pack(client_transaction_version))
    return head + parts + tail + encode_uvarint(len(tags)) + b"".join(tags)
