"""The broker's log cleaner task: compacted topics cleaned off the event loop, in bounded steps.

Every ``log_cleaner_backoff_ms`` (Kafka's log.cleaner.backoff.ms) the task asks the store for
a cleaning per vnode of every topic whose cleanup.policy includes compact
(``storage.cleaner``). Each step — reading at most ``log_cleaner_io_buffer_size`` bytes of
entries, building the key map or the rewritten batches — runs in a worker thread; its plan is
committed on the event loop (the store's writes stay on one thread), one WriteBatch a step, so
Produce and Fetch wait at most for one commit. ``log_cleaner_io_max_bytes_per_second`` paces
the steps. A failing cleaning is logged and tried again on the next round.

Each round also compacts the log of ``__consumer_offsets`` / ``__transaction_state``
(``storage.group_log``: the newest record per key, tombstones kept ``delete.retention.ms``),
each due partition planned in a worker thread and written on the event loop.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from tmqgate.protocol import clock
from tmqgate.storage import StorageIOError
from tmqgate.storage.cleaner import DEFAULTS, Change, Cleaning, CleanStats

if TYPE_CHECKING:
    from tmqgate.broker.configs.config import BrokerConfig
    from tmqgate.broker.configs.topic_configs import BrokerDefault
    from tmqgate.storage import Store

log = logging.getLogger("tmqgate.cleaner")


class LogCleaner:
    """Runs the store's cleanings (see the module docstring); ``stats`` keeps the last round's
    figures and ``totals`` the running ones (Kafka's cleaner metrics)."""

    def __init__(self, store: Store, config: BrokerConfig,
                 broker_defaults: Mapping[str, BrokerDefault] | None = None) -> None:
        self.store = store
        self.config = config
        #: the broker's defaults of topic configs (log.cleaner.* and the like, static or dynamic)
        self.broker_defaults = broker_defaults
        self.last: list[CleanStats] = []
        self.max_clean_seconds = 0.0
        self.bytes_read = 0
        self.bytes_written = 0
        self.rounds = 0
        self._stepping = threading.Lock()  # held by a worker thread while a step reads the store
        self._closed = False

    async def run(self) -> None:
        while True:  # log.cleaner.backoff.ms is dynamic: read at each round
            await asyncio.sleep(self.config.log_cleaner_backoff_ms / 1000)
            try:
                await self.clean_once()
            except Exception:  # the cleaner must never take the broker down
                log.exception("log cleaner round failed")

    async def clean_once(self, now_ms: int | None = None) -> list[CleanStats]:
        """One round: every due cleaning, step by step; returns what each did."""
        cfg = self.config
        budget = cfg.log_cleaner_io_buffer_size
        rate = cfg.log_cleaner_io_max_bytes_per_second
        now = clock.now_ms() if now_ms is None else now_ms
        done: list[CleanStats] = []
        # The broker's topic_defaults (Kafka's log.* defaults) under each topic's own configs.
        defaults = self._defaults()
        cleanings = self.store.cleaner.cleanings(now, defaults, cfg.log_cleaner_dedupe_buffer_size,
                                                 cfg.log_cleaner_io_buffer_load_factor)
        for cleaning in cleanings:
            started = time.monotonic()
            read_before = 0
            while True:
                changes = await asyncio.to_thread(self._step, cleaning, budget)
                if changes is None:
                    break
                cleaning.commit(changes)
                total = cleaning.stats.bytes_read + cleaning.stats.map_bytes_read
                read = total - read_before
                read_before = total
                pause = read / rate - (time.monotonic() - started) if rate < 1e300 else 0.0
                await asyncio.sleep(max(0.0, pause))  # also lets Produce/Fetch run between steps
                started = time.monotonic()
            stats = cleaning.finish()
            try:  # the freed payloads' space back, in a worker thread (LevelDB compaction)
                await asyncio.to_thread(self._reclaim, cleaning)
            except StorageIOError as exc:
                log.error("cleaned %s-%d but could not compact what it freed, so the disk space comes back "
                          "only when LevelDB compacts on its own: %s", cleaning.db, cleaning.vnode, exc)
            if stats.cleaned_to >= 0:
                done.append(stats)
                self.max_clean_seconds = max(self.max_clean_seconds, stats.seconds)
                self.bytes_read += stats.bytes_read
                self.bytes_written += stats.bytes_written
                log.info("cleaned %s-%d up to offset %d: %d of %d records kept, %d batches rewritten, "
                         "%d removed, %d bytes read in %.3fs", cleaning.db, cleaning.vnode, stats.cleaned_to,
                         stats.records_kept, stats.records_read, stats.entries_rewritten, stats.entries_deleted,
                         stats.bytes_read, stats.seconds)
        await self._compact_group_log(now)
        self.rounds += 1
        self.last = done
        return done

    async def _compact_group_log(self, now: int) -> None:
        glog = self.store.group_log
        retention = int(self._defaults().get("delete.retention.ms", DEFAULTS["delete.retention.ms"]))
        for partition in glog.partitions_to_compact():
            plan = await asyncio.to_thread(self._plan_group_log, partition, now, retention)
            if plan is None:
                return
            deletes, puts, kept = plan
            # on a cluster only the partition's coordinator compacts it (its compaction replicated)
            if glog.apply_compaction(partition, deletes, puts, kept) and deletes:
                log.info("compacted the internal log's partition %d: %d batches rewritten, %d records kept",
                         partition, len(deletes), kept)
            await asyncio.sleep(0)

    def _plan_group_log(self, partition: int, now: int, retention: int
                        ) -> tuple[list[bytes], list[tuple[bytes, bytes]], int] | None:
        with self._stepping:
            return None if self._closed else self.store.group_log.compaction(partition, now, retention)

    def _defaults(self) -> dict[str, str]:
        """The broker's defaults of the cleaner's topic configs (under each topic's own)."""
        if self.broker_defaults is None:
            return {k: v for k, v in self.config.topic_defaults.items() if k in DEFAULTS}
        return {k: d.value for k, d in self.broker_defaults.items() if k in DEFAULTS}

    def _step(self, cleaning: Cleaning, budget: int) -> list[Change] | None:
        """One step in the worker thread; none once the broker closes (the store goes)."""
        with self._stepping:
            return None if self._closed else cleaning.step(budget)

    def _reclaim(self, cleaning: Cleaning) -> None:
        with self._stepping:
            if not self._closed:
                cleaning.reclaim()

    def close(self) -> None:
        """Stop: wait for a step still reading in its thread (a cancelled task leaves it
        running) so the store is never closed under it; later steps do nothing."""
        with self._stepping:
            self._closed = True

    def metrics(self) -> dict[str, Any]:
        """Kafka's cleaner figures (max-clean-time-secs, cleaner-recopy-percent) and totals."""
        recopy = 100.0 * self.bytes_written / self.bytes_read if self.bytes_read else 0.0
        return {"max_clean_time_secs": self.max_clean_seconds, "cleaner_recopy_percent": recopy,
                "bytes_read": self.bytes_read, "bytes_written": self.bytes_written, "rounds": self.rounds}
