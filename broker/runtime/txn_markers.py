"""Transaction markers to partitions: the one writer of commit and abort markers.

tmqgate is one node, the leader of every partition, so "sending markers to the partition
leaders" (Kafka's TransactionMarkerChannelManager) is a local call. The transaction
coordinator and WriteTxnMarkers (API 27, what `kafka-transactions abort` sends) both use this
writer: per (topic, partition) it writes one marker (a control batch, ``Store.write_txn_marker``),
wakes the Fetches waiting on the partition (a read_committed Fetch waits at the LSO the marker
moves) and answers a per-partition error code:

* UNKNOWN_TOPIC_OR_PARTITION — no such topic or partition (a deleted topic: the coordinator
  treats it as done, as Kafka does), or a TDengine topic (a view over a database: nothing is
  ever produced to it);
* KAFKA_STORAGE_ERROR — the disk refused the write (a full disk: the coordinator retries).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from tmqgate.broker.topics import TMQ
from tmqgate.protocol.errors import ErrorCode
from tmqgate.storage import StorageIOError, UnknownDatabase, UnknownVnode

if TYPE_CHECKING:
    from tmqgate.broker.runtime.waiters import DataNotifier
    from tmqgate.broker.topics import Topic, TopicRegistry
    from tmqgate.storage import Store


class MarkerWriter:
    """Writes transaction markers; built by the server from the store, the topic registry
    and the fetch notifier."""

    def __init__(self, store: Store, topics: TopicRegistry, notifier: DataNotifier) -> None:
        self._store = store
        self._topics = topics
        self._notifier = notifier
        #: On a cluster (broker/cluster/transactions.py): a partition's leader epoch to stamp in
        #: its marker (None: not a partition this broker leads replicated), and what to tell
        #: once a marker was written (the high watermark may move; the producer's verified
        #: partitions are forgotten).
        self.leader_epoch: Callable[[Topic, int], int | None] = lambda topic, partition: None
        self.written: Callable[[Topic, int, int], None] = lambda topic, partition, producer_id: None

    def write(self, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int,
              partitions: Iterable[tuple[str, int]]) -> dict[tuple[str, int], ErrorCode]:
        """One marker per (topic name, partition); the error code of each."""
        out: dict[tuple[str, int], ErrorCode] = {}
        for name, partition in partitions:
            topic = self._topics.get(name)
            if topic is None or topic.kind == TMQ or not 0 <= partition < topic.partitions:
                out[(name, partition)] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                continue
            try:
                epoch = self.leader_epoch(topic, partition)
                self._store.write_txn_marker(topic.db, partition, producer_id, producer_epoch, commit,
                                             coordinator_epoch, -1 if epoch is None else epoch)
            except (UnknownDatabase, UnknownVnode):  # deleted meanwhile
                out[(name, partition)] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                continue
            except StorageIOError:
                out[(name, partition)] = ErrorCode.KAFKA_STORAGE_ERROR
                continue
            self._notifier.notify(topic.db, partition)
            self.written(topic, partition, producer_id)
            out[(name, partition)] = ErrorCode.NONE
        return out
