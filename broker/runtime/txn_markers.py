"""Transaction markers to partitions: the one writer of commit and abort markers.

It writes the partitions this broker leads (on one node every partition; on a cluster
broker/cluster/transactions.py sends the others' to their leaders, as Kafka's
TransactionMarkerChannelManager). The transaction
coordinator and WriteTxnMarkers (API 27, what `kafka-transactions abort` sends) both use this
writer: per (topic, partition) it writes one marker (a control batch, ``Store.write_txn_marker``),
wakes the Fetches waiting on the partition (a read_committed Fetch waits at the LSO the marker
moves), stamps a replicated partition's leader epoch in the marker and tells the replication
it appended (``Replicas``: nothing on one node), tells ``on_written`` (on a cluster the
producer's verified partitions are forgotten), and answers a per-partition error code:

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
    from tmqgate.broker.runtime.replicas import Replicas
    from tmqgate.broker.runtime.waiters import DataNotifier
    from tmqgate.broker.topics import Topic, TopicRegistry
    from tmqgate.storage import Store


class MarkerWriter:
    """Writes transaction markers; built by the server from the store, the topic registry,
    the fetch notifier and the replication."""

    def __init__(self, store: Store, topics: TopicRegistry, notifier: DataNotifier, replication: Replicas) -> None:
        self._store = store
        self._topics = topics
        self._notifier = notifier
        self._replication = replication
        #: told (topic, partition, producer id) once a marker was written here
        self.on_written: list[Callable[[Topic, int, int], None]] = []

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
                led = self._replication.led_state(topic, partition)  # None: not led here replicated
                self._store.write_txn_marker(topic.db, partition, producer_id, producer_epoch, commit,
                                             coordinator_epoch, -1 if led is None else led.epoch)
            except (UnknownDatabase, UnknownVnode):  # deleted meanwhile
                out[(name, partition)] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                continue
            except StorageIOError:
                out[(name, partition)] = ErrorCode.KAFKA_STORAGE_ERROR
                continue
            self._notifier.notify(topic.db, partition)
            self._replication.appended(topic, partition)
            for written in self.on_written:
                written(topic, partition, producer_id)
            out[(name, partition)] = ErrorCode.NONE
        return out
