"""Retention and DeleteRecords: a vnode's head entries removed by its database's limits, or
up to the offset an operator asks for.

Why together: both cut one vnode's head while a rule holds for its oldest entry
(``Retention._truncate_head``), through the routine that every removal shares
(``storage.head_removal``: counters, time-index repair, log-history record and the index
deletes in one WriteBatch, then the payloads); the archiver (``storage.archiver``) cuts the
oldest entries across all vnodes instead.

* Retention (``enforce_retention``), per vnode. Kafka databases follow Kafka:
  ``retention.ms`` removes entries while their age timestamp < now - retention.ms;
  ``retention.bytes`` removes the oldest entry while the vnode stays >= retention.bytes
  without it; ``-1`` or a missing config means unlimited; a topic whose ``cleanup.policy``
  lacks ``delete`` (compact only, or empty) keeps everything from retention (the broker fills Kafka's defaults
  into a database's configs when it creates one). tsdb databases apply the same two rules
  with their options WAL_RETENTION_PERIOD (seconds) and WAL_RETENTION_SIZE (KB), -1 or
  missing = unlimited.
* DeleteRecords (``delete_before``).

Neither removes an entry holding an offset at or beyond the first offset of an open
transaction (the last stable offset, ``storage.wal_txns``): removal stops there. DeleteRecords
still moves log start to the offset asked for (up to the high watermark, as Kafka's
maybeIncrementLogStartOffset allows), so readers see the new log start, but the entries from
the open transaction on stay stored until it ends and a later removal takes them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tmqgate.protocol import clock
from tmqgate.storage import keys
from tmqgate.storage.head_removal import Dead
from tmqgate.storage.model import OffsetOutOfRange, StorageIOError

if TYPE_CHECKING:
    from tmqgate.storage.catalog import Catalog
    from tmqgate.storage.core import Core
    from tmqgate.storage.head_removal import HeadRemoval
    from tmqgate.storage.wal import Vnode

log = logging.getLogger("tmqgate.storage")

#: remove(key, idx, end, size): whether a head entry goes (see ``Retention._truncate_head``).
_Predicate = Callable[[bytes, tuple[int, int, int, int], int, int], bool]


class Retention:
    """See the module docstring."""

    def __init__(self, core: Core, catalog: Catalog, heads: HeadRemoval) -> None:
        self._core = core
        self._catalog = catalog
        self._heads = heads

    def delete_before(self, db: str, vnode: int, offset: int) -> int:
        """Kafka DeleteRecords: log start becomes ``offset`` (-1 = high watermark).

        Entries whose last version < offset are removed; one straddling it stays, and what
        was removed is compacted so the disk space comes back now (an operator freeing a full
        disk). Returns the new log start; raises OffsetOutOfRange beyond the high watermark.
        """
        dbid, vs = self._catalog.vnode(db, vnode)
        if offset == -1:
            offset = vs.next
        if offset < 0 or offset > vs.next:
            raise OffsetOutOfRange(f"{offset} outside 0..{vs.next}")
        if offset <= vs.log_start:
            return vs.log_start
        self._truncate_head(
            dbid, vnode, vs, lambda key, idx, end, size: end <= offset, offset, reason="delete_records",
            compact=True,
        )
        return vs.log_start

    def enforce_retention(self, now_ms: int | None = None, defaults: dict[str, str] | None = None) -> int:
        """Apply the age limit then the size limit to every vnode; returns entries removed.

        Kafka databases: retention.ms / retention.bytes from their configs; ``defaults``
        supplies the values for databases that set none of their own (the broker's Kafka
        defaults). tsdb databases: the options wal_retention_period (seconds) and
        wal_retention_size (KB per vnode); ``defaults`` never applies to them. A missing
        setting or -1 means no limit.
        """
        now = clock.now_ms() if now_ms is None else now_ms
        removed = 0
        for d in list(self._catalog.all_databases()):
            if d.info.kind == "tsdb":
                period = _int_option(d.info.options, "wal_retention_period")
                kb = _int_option(d.info.options, "wal_retention_size")
                rms = period * 1000 if period >= 0 else -1
                rbytes = kb * 1024 if kb >= 0 else -1
                age_reason, size_reason = "wal_retention_period", "wal_retention_size"
            else:
                configs = {**defaults, **d.info.configs} if defaults else d.info.configs
                if "delete" not in configs.get("cleanup.policy", "delete").split(","):
                    continue  # compact only (the log cleaner's), or an empty policy: kept
                rms = _int_config(configs, "retention.ms")
                rbytes = _int_config(configs, "retention.bytes")
                age_reason, size_reason = "retention.ms", "retention.bytes"
            if rms < 0 and rbytes < 0:
                continue
            for vnode, vs in enumerate(d.vnodes):
                if rms >= 0:
                    removed += self._truncate_head(
                        d.info.id, vnode, vs, _older_than(now - rms), reason=age_reason, now_ms=now
                    )
                if rbytes >= 0 and vs.size > rbytes:
                    removed += self._truncate_head(
                        d.info.id, vnode, vs, _above_without(rbytes), reason=size_reason, now_ms=now
                    )
        return removed

    def _truncate_head(
        self,
        dbid: int,
        vnode: int,
        vs: Vnode,
        remove: _Predicate,
        new_log_start: int | None = None,
        *,
        reason: str,
        now_ms: int | None = None,
        compact: bool = False,
    ) -> int:
        """Remove the longest prefix of entries for which remove(key, idx, end, size) holds.

        ``idx`` is the WAL key's value unpacked (payload sequence, length, age timestamp,
        index timestamp: no payload is read), ``end`` the entry's last version + 1 and
        ``size`` the vnode size before removing it. Moves log start to max(old, first kept
        base, new_log_start), repairs the time index head and records the removal in the log
        history. Returns how many entries were removed.
        """
        p = keys.vnode_prefix(keys.WAL, dbid, vnode)
        it = self._core.db.iterator(start=p, stop=keys.prefix_end(p))
        dead: list[Dead] = []
        freed = 0
        stable = self._heads.stable_end(dbid, vnode, vs)
        cur = next(it, None)
        while cur is not None:
            nxt = next(it, None)
            key, idx = cur[0], keys.unpack_wal_index(cur[1])
            end = keys.wal_key_version(nxt[0]) if nxt is not None else vs.next
            if end > stable or not remove(key, idx, end, vs.size - freed):
                break
            dead.append(Dead(key, idx[1], idx[2], idx[0]))
            freed += idx[1]
            cur = nxt
        if not dead:
            if new_log_start is not None and new_log_start > vs.log_start:
                self._core.put(
                    keys.vnode_key(dbid, vnode), keys.pack_vnode_state(vs.next, new_log_start, vs.size, vs.entries)
                )
                vs.log_start = new_log_start
            return 0
        first_kept = keys.wal_key_version(cur[0]) if cur is not None else vs.next
        self._heads.remove(
            dbid, vnode, vs, dead, first_kept, new_log_start, reason, clock.now_ms() if now_ms is None else now_ms
        )
        if compact:
            try:
                self._heads.compact([(p, keys.wal_seek_key(dbid, vnode, first_kept))], [e.seq for e in dead])
            except StorageIOError as exc:
                log.error("removed %d WAL entries but could not compact them, so their disk space "
                          "comes back only when LevelDB compacts on its own: %s", len(dead), exc)
        return len(dead)


def _older_than(limit: int) -> _Predicate:
    """retention.ms: the entry's age timestamp is below ``limit``."""
    return lambda key, idx, end, size: idx[2] < limit


def _above_without(limit: int) -> _Predicate:
    """retention.bytes: the vnode stays >= ``limit`` bytes without the entry."""
    return lambda key, idx, end, size: size - idx[1] >= limit


def _int_option(options: dict[str, Any], name: str) -> int:
    """A tsdb option as an int, looked up case-insensitively (stored as the broker gave it);
    missing or unparsable = -1 (no limit)."""
    raw = options.get(name)
    if raw is None:
        lname = name.lower()
        raw = next((v for k, v in options.items() if str(k).lower() == lname), None)
    if raw is None:
        return -1
    try:
        return int(raw)
    except (TypeError, ValueError):
        return -1


def _int_config(configs: dict[str, str], name: str) -> int:
    raw = configs.get(name)
    if raw is None:
        return -1
    try:
        return int(raw)
    except ValueError:
        return -1
