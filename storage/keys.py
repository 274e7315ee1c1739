"""The LevelDB key layout of tmqgate — the one place it is written down.

A store is two LevelDBs and a folder of segment files (layout version 3):

* the *main* DB, in the data directory itself: the catalog, the WAL *index*, the vnode
  counters, the time index, the producer state, group offsets and the log history — small
  values that one atomic ``WriteBatch`` keeps consistent;
* the *payload log*: the WAL entries' bytes, appended once to segment files
  (``<data dir>/wal-segments``), and in ``<data dir>/wal-payloads`` (a LevelDB) their places,
  keyed by one global, strictly increasing payload sequence number (u64 big-endian). A record
  batch is written once; LevelDB carries 16 bytes of it (layout 2 kept the bytes themselves
  in that LevelDB: written twice, log and table, and through its memtable).

Integers in keys are big-endian unsigned so that byte order is numeric order and range scans
come out sorted. ``db`` is the numeric database id (u32, never reused), not the name: a
dropped and recreated database of the same name gets a new id and can never see the old data.

Main DB:

===========  =====================================================  ===============================================
prefix       key (after the prefix byte)                            value
===========  =====================================================  ===============================================
0x00 LAYOUT  (nothing)                                              layout version u32 (3; 2 is converted at open);
                                                                    a non-empty DB without it is of layout 1
                                                                    (entries inline): refused
0x00 CREATED 0x01                                                   when the data directory was made: ms u64 (a
                                                                    store older than the key: its first opening
                                                                    since; SHOW DNODES' create_time)
0x00 JOINED  0x02                                                   the id (utf-8) of the cluster whose ACLs and
                                                                    users this store holds (absent: never joined
                                                                    one; broker/cluster/catalog.py)
0x01 NAME    database name (utf-8)                                  db id u32
0x02 DBINFO  db u32                                                 JSON {name, vgroups, topic_id (hex), created_ms,
                                                                    kind ("kafka" | "tsdb"; absent = "kafka"),
                                                                    options (TDengine options as given; absent = {})}
0x03 DBCONF  db u32                                                 JSON {config name: string value}
0x04 TOPICID topic id (16 bytes, uuid4)                             db id u32
0x05 NEXTDB  (nothing)                                              next db id u32
0x06 NEXTPID (nothing)                                              next producer id u64
0x07 STABLE  db u32, supertable name (utf-8)                        schema JSON (opaque: the broker's StableSchema)
0x08 CTABLE  db u32, child table name (utf-8)                       JSON [name, stable name, {tag: value}, vnode]
0x09 TMQTOPIC TDengine topic name (utf-8)                           JSON {topic_id (hex), definition (opaque JSON),
                                                                    created_ms}
0x10 WAL     db u32, vnode u32, base version u64, kind u8           the entry's index: payload sequence u64, payload
                                                                    length u32, age timestamp i64, index timestamp
                                                                    i64 (data and rows: max timestamp; meta: 0)
0x11 PAYSEQ  (nothing)                                              last committed payload sequence u64 (in every
                                                                    WriteBatch that adds WAL index keys)
0x12 PAYGC   (nothing)                                              payload sequences u64 x n whose index keys the
                                                                    same WriteBatch deleted (redone at open)
0x20 VNODE   db u32, vnode u32                                      next version u64, log start u64, bytes u64,
                                                                    entries u64 (absent in stores written before
                                                                    it existed: counted once at open)
0x21 CLEANER db u32, vnode u32                                      the log cleaner's checkpoint: first dirty offset
                                                                    u64 (entries below it were cleaned; Kafka's
                                                                    cleaner-offset-checkpoint), written after the
                                                                    last step of a cleaning (``storage.cleaner``)
0x22 EPOCH   db u32, vnode u32, leader epoch u32                   the version where that leader epoch starts u64
                                                                    (Kafka's leader-epoch cache) of a replicated
                                                                    SQL database's vnode, whose rows and meta
                                                                    entries carry no epoch: written by a leader
                                                                    taking a term (at its log end) and by a
                                                                    follower appending a later epoch's entry;
                                                                    rolled back with the entries it starts
0x30 TIME    db u32, vnode u32, max timestamp (i64 + 2**63) u64     base version u64 (sparse: only entries that
                                                                    raise the vnode's running max timestamp; data
                                                                    and rows entries, never meta)
0x40 PRODUCER db u32, vnode u32, producer id u64                    epoch i16, last update ms i64, n u8, then n
                                                                    (<= 5) x (first seq i32, last seq i32,
                                                                    base offset i64, last offset i64), oldest first
                                                                    (a database topic's batch: the first and last
                                                                    versions of the rows it became), then the
                                                                    coordinator epoch i32 of the producer's last
                                                                    transaction marker there (absent: none, -1)
0x41 TXNOPEN db u32, vnode u32, producer id u64                    an open transaction's first offset u64, the
                                                                    producer's epoch i16, then n x (base u64, count
                                                                    u32): its rows entries (absent: none) (written
                                                                    with the first transactional batch or rows
                                                                    entry, deleted with its marker)
0x42 ABORTED db u32, vnode u32, last offset u64, producer id u64    an aborted transaction's first offset u64, then
                                                                    its rows entries as in TXNOPEN (Kafka's aborted-
                                                                    transaction index; last offset = the abort
                                                                    marker's; written with the marker)
0x50 OFFSET  group (u16 len + utf-8), topic (u16 len + utf-8),      offset i64, leader epoch i32, commit ms i64,
             partition u32                                          metadata flag u8 (0 = null) + utf-8 metadata
0x51 TXNOFF  group (u16 len + utf-8), producer id u64, topic         producer epoch i16, superseded u8 (1: a plain
             (u16 len + utf-8), partition u32                       OffsetCommit of the partition came later, so
                                                                    the transaction's commit keeps that one), then
                                                                    the OFFSET value; a transactional offset
                                                                    pending until the producer's transaction ends
0x52 GROUPLOG partition u32 (of __consumer_offsets; 2**31 + p:     one batch of that partition: timestamp i64,
             partition p of __transaction_state), base offset u64   count u32, then count x (key: u32 len + bytes,
                                                                    value: i32 len (-1 = tombstone) + bytes) —
                                                                    protocol.internal_topics' records (a commit's
                                                                    offsets, tombstones, group metadata; a
                                                                    transactional id's states), built
                                                                    into a v2 record batch when read; written in
                                                                    the WriteBatch of the change it records; a
                                                                    partition's offsets increase, never reused
                                                                    (compaction leaves gaps: storage.group_log)
0x60 GROUP   group (utf-8)                                          opaque bytes owned by the group coordinator
0x70 HISTORY sequence u64 (global, increasing; oldest trimmed)      one removal of a vnode's head entries: db u32,
                                                                    vnode u32, first version u64, last version
                                                                    u64, entries u32, bytes u64, first ts i64,
                                                                    last ts i64, removed ms i64, reason u8
0x7F SYNC    (nothing)                                              marker written with sync=True by Store.sync()
0x88 QUOTA   entity: n u8, then n x (type (u8 len + utf-8), named  JSON {quota key: float} (the entity's client
             flag u8 (0 = the default entity), name (u16 len +      quota values, Kafka's ClientQuotaRecord state)
             utf-8)), types in byte order
0x90 SCRAM   user (u16 len + utf-8), mechanism name (utf-8, e.g.       iterations u32, then salt, StoredKey, ServerKey
             "SCRAM-SHA-512")                                       each u16 len + bytes (RFC 5802; never the
                                                                    password nor the salted password)
0xA0 ACL     resource type u8, pattern type u8, resource name       (empty: the key is the whole ACL binding, so
             (u16 len + utf-8), principal (u16 len + utf-8), host    adding one twice keeps one)
             (u16 len + utf-8), operation u8, permission u8
0xB0 TXNSTATE transactional id (utf-8)                            JSON of storage.txn_coordinator.TxnRecord: the
                                                                    transaction coordinator's state of that id
                                                                    (producer id/epoch, state, partitions, groups,
                                                                    timeout, start/update ms), written before
                                                                    the coordinator answers
0xC0 DYNCONF resource type u8 (Kafka's ConfigResource type: 4      JSON {config name: string value} (the dynamic
             BROKER, 32 GROUP), resource name (utf-8; "" = the      configs set on that resource by AlterConfigs /
             BROKER cluster default)                                IncrementalAlterConfigs; absent = none set)
0xC1 SHARE   topic id (16 bytes), partition u32, share group id     a share-partition's state (KIP-932's share
             (utf-8)                                                coordinator state, ``storage.share_state``):
                                                                    start offset i64, batches u32, then per batch
                                                                    first i64, last i64, state u8, delivery count
                                                                    u16; then the state epoch u32 when not 0 (start
                                                                    -1: to start again); written before ShareFetch /
                                                                    ShareAcknowledge answer; a group state key (on a
                                                                    cluster replicated with the group's)
0xC2 SHAREGRP share group id (utf-8)                               empty: the share group exists (made by its first
                                                                    member or AlterShareGroupOffsets, gone with
                                                                    DeleteGroups), so it is listed after a restart
===========  =====================================================  ===============================================

Payload log: the bytes in append-only segment files ``<data dir>/wal-segments/<id>.seg``
(``id`` u32, 8 decimal digits), and where each payload lies in a LevelDB,
``<data dir>/wal-payloads``:

===========  =====================================================  ===============================================
key          payload sequence u64 (global, strictly increasing)     its place: segment id u32, position u64,
                                                                    length u32 (``pack_payload_ptr``). The bytes:
                                                                    data (kind 0): the record batch, base offset
                                                                    already set to the version; meta (kind 1): i64
                                                                    append time ms + payload; rows (kind 2): i64
                                                                    append time ms, i64 max timestamp, i64 min
                                                                    timestamp + payload (Arrow IPC, opaque here)
0xFF "fmt"   (nothing)                                              u32 1: the values are places (a payload log of
                                                                    before it held the bytes as values)
0xFF "mig"   (nothing)                                              u64: while one of those is converted, the first
                                                                    sequence still holding bytes (below: places)
0xFF "seg"   segment id u32                                         the segment's figures: live bytes u64 (what
                                                                    places point at), lowest and highest sequence
                                                                    pointing into it u64 x 2; put in the batch that
                                                                    changes its places, deleted with its last one
                                                                    (so open reads them instead of every place)
===========  =====================================================  ===============================================

A segment's bytes are written (and, under the sync rule, fdatasynced) before the places
that point into them. Open drops the newest places that point past their segment's end (a
power loss took those bytes: the payloads are lost, as a LevelDB tail would be) and
continues appending at the newest segment's end. A deleted payload's bytes are punched out
and a segment no place points into is unlinked, after the deletes are synced; a segment
mostly dead is copied forward (its live payloads appended to the newest segment,
fdatasynced, their places moved in one synced batch) and then unlinked.

Writing WAL entries: the payloads go to the payload log first (with the same sync rule),
then the main WriteBatch with their index keys, the counters and PAYSEQ = the highest
sequence written. A payload above PAYSEQ was never indexed (the process died between the
two writes, so it was never acknowledged): the store deletes those at open and continues
at PAYSEQ + 1, so a WriteBatch stays all-or-nothing for readers across kill -9. Within a
vnode, later versions have higher sequences.

Replacing WAL entries (the log cleaner, ``storage.cleaner``): the new payloads are staged,
then one main WriteBatch points the same index keys at them (or deletes the keys of entries
left with no record), lists the old sequences under PAYGC and sets PAYSEQ; then the old
payloads are deleted. Killed before the WriteBatch, the old entries stay (the staged ones,
above PAYSEQ, are dropped at open); after it, the new ones (open finishes the deletes). A
rewritten entry's payload sequence is above its neighbours', so the cleaner stages its payloads
with sync=True: a power loss cannot then take a rewritten payload whose index survived.

Removing WAL entries: the main WriteBatch deletes the index keys and puts their sequences
under PAYGC; then the payloads are deleted from the payload log. A store killed in between
finishes the payload deletes at open.

Limit: the two LevelDBs recover their logs independently. kill -9 loses nothing either has
written, but a power loss (or kernel crash) with writes not yet fsynced (wal_level 1, or
inside a fsync period) could keep index keys whose payloads were lost (the payload log then
ends below PAYSEQ). Open rolls those back: within a vnode sequences grow with versions, so
they are each vnode's newest entries; their index keys, time index entries and producer
batches go and the vnode's next version moves back (``storage.payloads``).
``Store.sync()`` fsyncs the payload log before the main DB, so a synced state never needs it.

A vnode's versions are dense: a data entry of N records takes N consecutive versions, a rows
entry of N rows takes N, a meta entry takes one, so an entry's last version is the next entry's base - 1 (or next
version - 1). Because the kind byte follows the base version, kind does not disturb version order, and a
reader knows an entry's kind from its key alone.

The time index is Kafka's: an index entry is added only when a batch's max timestamp exceeds
every earlier one in the vnode, so index order is both timestamp and version order, and
"first batch whose max timestamp >= ts" is one seek.

An entry's *age timestamp* (what retention.ms / WAL_RETENTION_PERIOD and the archiver order
by, and what the log history reports) is the batch's max timestamp for data entries and the
append time for meta and rows entries (TDengine ages WAL by write time; rows may carry
back-filled timestamps of any age).

HISTORY reason codes index ``storage.model.REMOVAL_REASONS`` (0 delete_records, 1 retention.ms,
2 retention.bytes, 3 wal_retention_period, 4 wal_retention_size, 5 archiver_age,
6 archiver_size, 7 archiver_disk); append new reasons only at the end.

A HISTORY record is written in the same WriteBatch as the deletion it describes, so the log
history never misses or invents a removal. Catalog rows (STABLE, CTABLE, TMQTOPIC) changed
together with a meta entry go in one WriteBatch too (``Store.transaction``).
"""

from __future__ import annotations

import struct

LAYOUT = b"\x00"
CREATED = b"\x00\x01"
JOINED = b"\x00\x02"
NAME = b"\x01"
DBINFO = b"\x02"
DBCONF = b"\x03"
TOPICID = b"\x04"
NEXTDB = b"\x05"
NEXTPID = b"\x06"
STABLE = b"\x07"
CTABLE = b"\x08"
TMQTOPIC = b"\x09"
WAL = b"\x10"
PAYSEQ = b"\x11"
PAYGC = b"\x12"
VNODE = b"\x20"
CLEANER = b"\x21"
EPOCH = b"\x22"
TIME = b"\x30"
PRODUCER = b"\x40"
TXNOPEN = b"\x41"
ABORTED = b"\x42"
OFFSET = b"\x50"
TXNOFF = b"\x51"
GROUPLOG = b"\x52"
GROUP = b"\x60"
HISTORY = b"\x70"
ACL = b"\xa0"
SYNC = b"\x7f"
QUOTA = b"\x88"
SCRAM = b"\x90"
TXNSTATE = b"\xb0"
DYNCONF = b"\xc0"
SHARE = b"\xc1"
SHAREGRP = b"\xc2"

#: The layout this code writes and reads (see the module docstring). 3: payload bytes in
#: segment files; a layout-2 store (bytes in the payload LevelDB) is converted at open.
LAYOUT_VERSION = 3
#: Layouts this code opens: the ones it converts, and its own.
LAYOUTS_READ = (2, 3)

#: Payload-log meta keys (above every sequence key).
PAYLOG_META = b"\xff"
PAYLOG_FORMAT = b"\xfffmt"
PAYLOG_MIGRATING = b"\xffmig"
PAYLOG_SEGMENT = b"\xffseg"
_SEGFIG = struct.Struct(">QQq")
_PTR = struct.Struct(">IQI")
PAYLOAD_PTR_SIZE = _PTR.size


def pack_payload_ptr(segment: int, pos: int, size: int) -> bytes:
    """A payload's place: segment id, position in it, length."""
    return _PTR.pack(segment, pos, size)


def payload_segment_key(segment: int) -> bytes:
    return PAYLOG_SEGMENT + _U32.pack(segment)


def pack_segment_figures(live: int, lo: int, hi: int) -> bytes:
    """A segment's live bytes and the range of sequences pointing into it."""
    return _SEGFIG.pack(live, lo, hi)


def read_segment_figures(b: bytes) -> tuple[int, int, int]:
    live, lo, hi = _SEGFIG.unpack(b)
    return live, lo, hi


def read_payload_ptr(b: bytes) -> tuple[int, int, int]:
    """(segment id, position, length) of a payload's place."""
    seg, pos, size = _PTR.unpack(b)
    return seg, pos, size

KIND_DATA = 0
KIND_META = 1
KIND_ROWS = 2

#: Prefixes whose keys start with the db id; dropping a database deletes these ranges.
PER_DB_PREFIXES = (WAL, VNODE, CLEANER, EPOCH, TIME, PRODUCER, TXNOPEN, ABORTED, STABLE, CTABLE)

_DV = struct.Struct(">II")
_DVQ = struct.Struct(">IIQ")
_DVE = struct.Struct(">III")
_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")
TS_BIAS = 1 << 63


def prefix_end(prefix: bytes) -> bytes:
    """Smallest key greater than every key starting with ``prefix`` (exclusive stop)."""
    p = bytearray(prefix)
    while p and p[-1] == 0xFF:
        p.pop()
    if not p:
        raise ValueError("no upper bound for an all-0xff prefix")
    p[-1] += 1
    return bytes(p)


def u32(n: int) -> bytes:
    return _U32.pack(n)


def u64(n: int) -> bytes:
    return _U64.pack(n)


def read_u32(b: bytes) -> int:
    n: int = _U32.unpack(b)[0]
    return n


def read_u64(b: bytes) -> int:
    n: int = _U64.unpack(b)[0]
    return n


def txn_state_key(transactional_id: str) -> bytes:
    return TXNSTATE + transactional_id.encode()


# catalog -------------------------------------------------------------------------------------


def name_key(name: str) -> bytes:
    return NAME + name.encode()


def dbinfo_key(db: int) -> bytes:
    return DBINFO + u32(db)


def dbconf_key(db: int) -> bytes:
    return DBCONF + u32(db)


def topic_id_key(topic_id: bytes) -> bytes:
    return TOPICID + topic_id


def db_prefix(prefix: bytes, db: int) -> bytes:
    """All keys of one database under one of PER_DB_PREFIXES."""
    return prefix + u32(db)


def stable_key(db: int, name: str) -> bytes:
    return STABLE + u32(db) + name.encode()


def ctable_key(db: int, name: str) -> bytes:
    return CTABLE + u32(db) + name.encode()


def catalog_key_db(key: bytes) -> int:
    """The db id of a STABLE or CTABLE key."""
    n: int = _U32.unpack_from(key, 1)[0]
    return n


def catalog_key_name(key: bytes) -> str:
    """The object name of a STABLE or CTABLE key."""
    return key[5:].decode()


def tmq_topic_key(name: str) -> bytes:
    return TMQTOPIC + name.encode()


# WAL -----------------------------------------------------------------------------------------


def vnode_prefix(prefix: bytes, db: int, vnode: int) -> bytes:
    """All keys of one vnode under one of PER_DB_PREFIXES."""
    return prefix + _DV.pack(db, vnode)


def wal_key(db: int, vnode: int, version: int, kind: int) -> bytes:
    return WAL + _DVQ.pack(db, vnode, version) + bytes((kind,))


def wal_seek_key(db: int, vnode: int, version: int) -> bytes:
    """Sorts before any entry whose base version is ``version`` (and after all lower ones)."""
    return WAL + _DVQ.pack(db, vnode, version)


def wal_key_version(key: bytes) -> int:
    n: int = _U64.unpack_from(key, 9)[0]
    return n


def wal_key_kind(key: bytes) -> int:
    return key[17]


_WIDX = struct.Struct(">QIqq")


def pack_wal_index(seq: int, size: int, age_ts: int, index_ts: int) -> bytes:
    """A WAL key's value: payload sequence, payload length, age timestamp, index timestamp."""
    return _WIDX.pack(seq, size, age_ts, index_ts)


def unpack_wal_index(b: bytes) -> tuple[int, int, int, int]:
    """(payload sequence, payload length, age timestamp, index timestamp)."""
    return _WIDX.unpack(b)


def wal_index_seq(b: bytes) -> int:
    n: int = _U64.unpack_from(b, 0)[0]
    return n


def pack_seqs(seqs: list[int]) -> bytes:
    """PAYGC value: payload sequences, u64 each."""
    return struct.pack(f">{len(seqs)}Q", *seqs)


def unpack_seqs(b: bytes) -> tuple[int, ...]:
    return struct.unpack(f">{len(b) // 8}Q", b)


def vnode_key(db: int, vnode: int) -> bytes:
    return VNODE + _DV.pack(db, vnode)


def cleaner_key(db: int, vnode: int) -> bytes:
    return CLEANER + _DV.pack(db, vnode)


def epoch_key(db: int, vnode: int, epoch: int) -> bytes:
    return EPOCH + _DVE.pack(db, vnode, epoch)


def epoch_key_epoch(key: bytes) -> int:
    return int(_DVE.unpack_from(key, 1)[2])


def parse_vnode_key(key: bytes) -> tuple[int, int]:
    return _DV.unpack_from(key, 1)


_VSTATE = struct.Struct(">QQQQ")
_VSTATE_OLD = struct.Struct(">QQQ")


def pack_vnode_state(next_version: int, log_start: int, size: int, entries: int) -> bytes:
    return _VSTATE.pack(next_version, log_start, size, entries)


def unpack_vnode_state(b: bytes) -> tuple[int, int, int, int | None]:
    """(next version, log start, bytes, entries); entries is None in the older 24-byte form."""
    if len(b) == _VSTATE_OLD.size:
        return (*_VSTATE_OLD.unpack(b), None)
    return _VSTATE.unpack(b)


#: Header of a rows entry's value: append time ms, max timestamp, min timestamp (all i64).
ROWS_HEADER = struct.Struct(">qqq")


def time_key(db: int, vnode: int, timestamp: int) -> bytes:
    return TIME + _DVQ.pack(db, vnode, timestamp + TS_BIAS)


def time_key_ts(key: bytes) -> int:
    n: int = _U64.unpack_from(key, 9)[0]
    return n - TS_BIAS


# producers -----------------------------------------------------------------------------------


def producer_key(db: int, vnode: int, producer_id: int) -> bytes:
    return PRODUCER + _DVQ.pack(db, vnode, producer_id)


_PHEAD = struct.Struct(">hqB")
_PBATCH = struct.Struct(">iiqq")


_PCOORD = struct.Struct(">i")


def pack_producer(epoch: int, update_ms: int, batches: list[tuple[int, int, int, int]],
                  coordinator_epoch: int = -1) -> bytes:
    tail = b"" if coordinator_epoch < 0 else _PCOORD.pack(coordinator_epoch)
    return _PHEAD.pack(epoch, update_ms, len(batches)) + b"".join(_PBATCH.pack(*b) for b in batches) + tail


def unpack_producer(b: bytes) -> tuple[int, int, list[tuple[int, int, int, int]]]:
    epoch, update_ms, n = _PHEAD.unpack_from(b, 0)
    off = _PHEAD.size
    batches = [_PBATCH.unpack_from(b, off + i * _PBATCH.size) for i in range(n)]
    return epoch, update_ms, batches


def producer_coordinator_epoch(b: bytes) -> int:
    """The coordinator epoch of the producer's last marker, from a PRODUCER value (-1: none;
    values written before it was kept have no such field)."""
    end = _PHEAD.size + b[_PHEAD.size - 1] * _PBATCH.size
    return _PCOORD.unpack_from(b, end)[0] if len(b) >= end + _PCOORD.size else -1


# transactions on the WAL ---------------------------------------------------------------------


_TXNOPEN = struct.Struct(">Qh")
_DVQQ = struct.Struct(">IIQQ")


def txn_open_key(db: int, vnode: int, producer_id: int) -> bytes:
    return TXNOPEN + _DVQ.pack(db, vnode, producer_id)


def parse_txn_open_key(key: bytes) -> tuple[int, int, int]:
    """(db, vnode, producer id)."""
    return _DVQ.unpack_from(key, 1)


_RANGE = struct.Struct(">QI")


def _pack_ranges(ranges: tuple[tuple[int, int], ...]) -> bytes:
    return b"".join(_RANGE.pack(*r) for r in ranges)


def _unpack_ranges(b: bytes, pos: int) -> tuple[tuple[int, int], ...]:
    return tuple(_RANGE.unpack_from(b, i) for i in range(pos, len(b), _RANGE.size))


def pack_txn_open(first_offset: int, epoch: int, rows: tuple[tuple[int, int], ...] = ()) -> bytes:
    return _TXNOPEN.pack(first_offset, epoch) + _pack_ranges(rows)


def unpack_txn_open(b: bytes) -> tuple[int, int, tuple[tuple[int, int], ...]]:
    """(first offset, producer epoch, rows entries as (base, count))."""
    first, epoch = _TXNOPEN.unpack_from(b, 0)
    return first, epoch, _unpack_ranges(b, _TXNOPEN.size)


def pack_aborted(first_offset: int, rows: tuple[tuple[int, int], ...] = ()) -> bytes:
    return _U64.pack(first_offset) + _pack_ranges(rows)


def unpack_aborted(b: bytes) -> tuple[int, tuple[tuple[int, int], ...]]:
    """(first offset, rows entries as (base, count))."""
    return read_u64(b[:8]), _unpack_ranges(b, 8)


def aborted_key(db: int, vnode: int, last_offset: int, producer_id: int) -> bytes:
    return ABORTED + _DVQQ.pack(db, vnode, last_offset, producer_id)


def parse_aborted_key(key: bytes) -> tuple[int, int, int, int]:
    """(db, vnode, last offset, producer id)."""
    return _DVQQ.unpack_from(key, 1)


# group offsets and metadata ------------------------------------------------------------------


def _lstr(s: str) -> bytes:
    b = s.encode()
    return struct.pack(">H", len(b)) + b


def offset_group_prefix(group: str) -> bytes:
    return OFFSET + _lstr(group)


def offset_topic_prefix(group: str, topic: str) -> bytes:
    return OFFSET + _lstr(group) + _lstr(topic)


def offset_key(group: str, topic: str, partition: int) -> bytes:
    return offset_topic_prefix(group, topic) + u32(partition)


def parse_offset_key(key: bytes) -> tuple[str, str, int]:
    (glen,) = struct.unpack_from(">H", key, 1)
    group = key[3 : 3 + glen].decode()
    pos = 3 + glen
    (tlen,) = struct.unpack_from(">H", key, pos)
    topic = key[pos + 2 : pos + 2 + tlen].decode()
    (partition,) = _U32.unpack_from(key, pos + 2 + tlen)
    return group, topic, partition


def txn_offset_group_prefix(group: str) -> bytes:
    return TXNOFF + _lstr(group)


def txn_offset_producer_prefix(group: str, producer_id: int) -> bytes:
    return TXNOFF + _lstr(group) + u64(producer_id)


def txn_offset_key(group: str, producer_id: int, topic: str, partition: int) -> bytes:
    return txn_offset_producer_prefix(group, producer_id) + _lstr(topic) + u32(partition)


def parse_txn_offset_key(key: bytes) -> tuple[str, int, str, int]:
    """(group, producer id, topic, partition) of a TXNOFF key."""
    (glen,) = struct.unpack_from(">H", key, 1)
    group = key[3 : 3 + glen].decode()
    pos = 3 + glen
    producer_id = read_u64(key[pos : pos + 8])
    pos += 8
    (tlen,) = struct.unpack_from(">H", key, pos)
    topic = key[pos + 2 : pos + 2 + tlen].decode()
    (partition,) = _U32.unpack_from(key, pos + 2 + tlen)
    return group, producer_id, topic, partition


_TXN_HEAD = struct.Struct(">hB")


def pack_txn_offset(producer_epoch: int, superseded: bool, offset_value: bytes) -> bytes:
    """A TXNOFF value: epoch, superseded flag, then an OFFSET value (``pack_offset``)."""
    return _TXN_HEAD.pack(producer_epoch, 1 if superseded else 0) + offset_value


def unpack_txn_offset(b: bytes) -> tuple[int, bool, bytes]:
    """(producer epoch, superseded, the OFFSET value) of a TXNOFF value."""
    epoch, flag = _TXN_HEAD.unpack_from(b, 0)
    return epoch, bool(flag), b[_TXN_HEAD.size :]


_OFFSET = struct.Struct(">qiqB")


def pack_offset(offset: int, leader_epoch: int, commit_ms: int, metadata: str | None) -> bytes:
    if metadata is None:
        return _OFFSET.pack(offset, leader_epoch, commit_ms, 0)
    return _OFFSET.pack(offset, leader_epoch, commit_ms, 1) + metadata.encode()


def unpack_offset(b: bytes) -> tuple[int, int, int, str | None]:
    offset, leader_epoch, commit_ms, flag = _OFFSET.unpack_from(b, 0)
    metadata = b[_OFFSET.size :].decode() if flag else None
    return offset, leader_epoch, commit_ms, metadata


def group_key(group: str) -> bytes:
    return GROUP + group.encode()


# log history ---------------------------------------------------------------------------------


def history_key(seq: int) -> bytes:
    return HISTORY + u64(seq)


def history_key_seq(key: bytes) -> int:
    n: int = _U64.unpack_from(key, 1)[0]
    return n


_HISTORY = struct.Struct(">IIQQIQqqqB")


def pack_history(
    db: int,
    vnode: int,
    first_version: int,
    last_version: int,
    entries: int,
    size: int,
    first_ts: int,
    last_ts: int,
    removed_ms: int,
    reason: int,
) -> bytes:
    return _HISTORY.pack(
        db, vnode, first_version, last_version, entries, size, first_ts, last_ts, removed_ms, reason
    )


def unpack_history(b: bytes) -> tuple[int, int, int, int, int, int, int, int, int, int]:
    """(db, vnode, first version, last version, entries, bytes, first ts, last ts, removed ms, reason)."""
    return _HISTORY.unpack(b)


# client quotas -------------------------------------------------------------------------------

#: A client quota entity: (entity type, name or None for the default entity), sorted by type.
QuotaEntityKey = tuple[tuple[str, str | None], ...]


def quota_key(entity: QuotaEntityKey) -> bytes:
    out = bytearray(QUOTA)
    out.append(len(entity))
    for etype, name in sorted(entity):
        t = etype.encode()
        out.append(len(t))
        out += t
        if name is None:
            out.append(0)
        else:
            n = name.encode()
            out.append(1)
            out += struct.pack(">H", len(n)) + n
    return bytes(out)


def parse_quota_key(key: bytes) -> QuotaEntityKey:
    count = key[1]
    pos = 2
    parts: list[tuple[str, str | None]] = []
    for _ in range(count):
        tlen = key[pos]
        etype = key[pos + 1 : pos + 1 + tlen].decode()
        pos += 1 + tlen
        named = key[pos]
        pos += 1
        name: str | None = None
        if named:
            (nlen,) = struct.unpack_from(">H", key, pos)
            name = key[pos + 2 : pos + 2 + nlen].decode()
            pos += 2 + nlen
        parts.append((etype, name))
    return tuple(parts)
# SCRAM credentials ---------------------------------------------------------------------------


def scram_user_prefix(user: str) -> bytes:
    return SCRAM + _lstr(user)


def scram_key(user: str, mechanism: str) -> bytes:
    return scram_user_prefix(user) + mechanism.encode()


def parse_scram_key(key: bytes) -> tuple[str, str]:
    """(user, mechanism) of a SCRAM key."""
    (ulen,) = struct.unpack_from(">H", key, 1)
    return key[3 : 3 + ulen].decode(), key[3 + ulen :].decode()


def pack_scram(iterations: int, salt: bytes, stored_key: bytes, server_key: bytes) -> bytes:
    out = [_U32.pack(iterations)]
    for part in (salt, stored_key, server_key):
        out.append(struct.pack(">H", len(part)) + part)
    return b"".join(out)


def unpack_scram(b: bytes) -> tuple[int, bytes, bytes, bytes]:
    """(iterations, salt, StoredKey, ServerKey)."""
    (iterations,) = _U32.unpack_from(b, 0)
    pos = 4
    parts: list[bytes] = []
    for _ in range(3):
        (n,) = struct.unpack_from(">H", b, pos)
        parts.append(bytes(b[pos + 2 : pos + 2 + n]))
        pos += 2 + n
    return iterations, parts[0], parts[1], parts[2]


# ACLs ----------------------------------------------------------------------------------------


def acl_key(resource_type: int, resource_name: str, pattern_type: int, principal: str, host: str,
            operation: int, permission: int) -> bytes:
    return (ACL + bytes((resource_type, pattern_type)) + _lstr(resource_name) + _lstr(principal)
            + _lstr(host) + bytes((operation, permission)))


def parse_acl_key(key: bytes) -> tuple[int, str, int, str, str, int, int]:
    """(resource type, resource name, pattern type, principal, host, operation, permission)."""
    resource_type, pattern_type = key[1], key[2]
    pos = 3
    strings: list[str] = []
    for _ in range(3):
        (n,) = struct.unpack_from(">H", key, pos)
        strings.append(key[pos + 2 : pos + 2 + n].decode())
        pos += 2 + n
    return resource_type, strings[0], pattern_type, strings[1], strings[2], key[pos], key[pos + 1]


def group_log_key(partition: int, base_offset: int) -> bytes:
    return GROUPLOG + _U32.pack(partition) + _U64.pack(base_offset)


def group_log_prefix(partition: int) -> bytes:
    return GROUPLOG + _U32.pack(partition)


def group_log_base(key: bytes) -> int:
    return int(_U64.unpack_from(key, 5)[0])


# dynamic configs ------------------------------------------------------------------------------


def dynconf_key(resource_type: int, name: str) -> bytes:
    return DYNCONF + bytes([resource_type]) + name.encode()


def parse_dynconf_key(key: bytes) -> tuple[int, str]:
    return key[1], key[2:].decode()


def share_key(topic_id: bytes, partition: int, group: str) -> bytes:
    return SHARE + topic_id + partition.to_bytes(4, "big") + group.encode()


def share_group_key(group: str) -> bytes:
    return SHAREGRP + group.encode()


def parse_share_key(key: bytes) -> tuple[str, bytes, int]:
    """(group, topic id, partition) of a SHARE key."""
    return key[21:].decode(), key[1:17], int.from_bytes(key[17:21], "big")
