"""The parts one node and a cluster build differently (issue 27): the `Roles` a broker is made
with — `LocalRoles` here (a broker in no cluster: a cluster of one, no etcd imported) and
`ClusterRoles` in broker/cluster/roles.py (etcd).

The composition root (broker/server.py) asks its roles for each part in the order the parts
depend on each other and hands every part its collaborators in its constructor; `connect`
then subscribes the parts to each other's events (on a cluster: each read of etcd, the store's
catalog changes, markers written and answered). Rules: no part is assigned into another after
construction and no constructor rewires another object; every event subscription of a broker
is in `connect`, in the order the events must run.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from tmqgate.broker.metadata.membership import LocalMembership, Members
from tmqgate.broker.runtime.coordination import (
    CoordinatorPlacement,
    LocalCoordinatorPlacement,
    LocalTxnRouting,
    TxnRouting,
)
from tmqgate.broker.runtime.replicas import LocalReplication, Replicas
from tmqgate.broker.runtime.shares import LocalEnds, PartitionEnds, SharePersister, StorePersister
from tmqgate.broker.tdengine import LocalSql, SqlCluster

if TYPE_CHECKING:
    from tmqgate.broker.configs.config import BrokerConfig
    from tmqgate.broker.runtime.txn_coordinator import TxnCoordinatorRuntime
    from tmqgate.broker.runtime.txn_markers import MarkerWriter
    from tmqgate.broker.runtime.waiters import DataNotifier
    from tmqgate.broker.topics import TopicCluster, TopicRegistry
    from tmqgate.coordinator.runtime import CoordinatorRuntime
    from tmqgate.coordinator.transactions import MarkerWriter as TxnMarkers
    from tmqgate.coordinator.transactions import TxnGroups
    from tmqgate.protocol.errors import ErrorCode
    from tmqgate.storage import Store
    from tmqgate.storage.share_state import ShareStates


class TxnChecks(Protocol):
    """The transaction checks of Produce (the handlers' ``TxnGate``) and of TxnOffsetCommit
    (``coordinator.offsets.TxnOffsetsGate``): the transaction coordinator's, on a cluster asked
    of the transactional id's coordinator wherever it is."""

    def check_produce(self, transactional_id: str | None, producer_id: int, producer_epoch: int,
                      topic: str, partition: int, add: bool = False) -> ErrorCode: ...

    def check_txn_offset_commit(self, transactional_id: str, producer_id: int, producer_epoch: int,
                                group_id: str, add: bool = False) -> ErrorCode: ...


class Roles(Protocol):
    """See the module docstring; the methods in the order the composition root calls them."""

    def membership(self) -> Members: ...

    # the topic registry's `cluster`, made by the registry over itself
    def topic_cluster(self, registry: TopicRegistry) -> TopicCluster: ...

    def replication(self, topics: TopicRegistry, notifier: DataNotifier) -> Replicas: ...

    def group_placement(self, topics: TopicRegistry, replication: Replicas, notifier: DataNotifier,
                        groups: CoordinatorRuntime) -> CoordinatorPlacement: ...

    # where the transaction coordinator's markers and group ends go
    def txn_outputs(self, topics: TopicRegistry, markers: MarkerWriter,
                    groups: CoordinatorRuntime) -> tuple[TxnMarkers, TxnGroups]: ...

    def txn_placement(self, topics: TopicRegistry, replication: Replicas, notifier: DataNotifier,
                      transactions: TxnCoordinatorRuntime) -> CoordinatorPlacement: ...

    def txn_checks(self, transactions: TxnCoordinatorRuntime) -> tuple[TxnChecks, TxnRouting]: ...

    def sql(self, topics: TopicRegistry, replication: Replicas, notify: Callable[[str, int], None]) -> SqlCluster: ...

    # where share-partitions' states are kept (KIP-932's persister)
    def share_persister(self, states: ShareStates, group_state: CoordinatorPlacement) -> SharePersister: ...

    # partitions' high watermarks as their leaders have them (share groups' lag)
    def partition_ends(self, store: Store, topics: TopicRegistry) -> PartitionEnds: ...

    # the events; `reloads`: what reads ACLs, configs and quotas again after the store took the cluster's
    def connect(self, transactions: TxnCoordinatorRuntime, markers: MarkerWriter,
                reloads: list[Callable[[], None]]) -> None: ...


class LocalRoles:
    """A cluster of one: this broker alone, its own controller and coordinator, leader of every
    partition; no events between its parts (its membership never changes)."""

    def __init__(self, config: BrokerConfig) -> None:
        self._config = config

    def membership(self) -> Members:
        return LocalMembership(self._config.node_id, self._config.cluster_id)

    def topic_cluster(self, registry: TopicRegistry) -> TopicCluster:
        return registry.local

    def replication(self, topics: TopicRegistry, notifier: DataNotifier) -> Replicas:
        return LocalReplication()

    def group_placement(self, topics: TopicRegistry, replication: Replicas, notifier: DataNotifier,
                        groups: CoordinatorRuntime) -> CoordinatorPlacement:
        return LocalCoordinatorPlacement(self._config.node_id)

    def txn_outputs(self, topics: TopicRegistry, markers: MarkerWriter,
                    groups: CoordinatorRuntime) -> tuple[TxnMarkers, TxnGroups]:
        return markers, groups

    def txn_placement(self, topics: TopicRegistry, replication: Replicas, notifier: DataNotifier,
                      transactions: TxnCoordinatorRuntime) -> CoordinatorPlacement:
        return LocalCoordinatorPlacement(self._config.node_id)

    def txn_checks(self, transactions: TxnCoordinatorRuntime) -> tuple[TxnChecks, TxnRouting]:
        return transactions, LocalTxnRouting()

    def sql(self, topics: TopicRegistry, replication: Replicas, notify: Callable[[str, int], None]) -> SqlCluster:
        return LocalSql(topics, notify)

    def share_persister(self, states: ShareStates, group_state: CoordinatorPlacement) -> SharePersister:
        return StorePersister(states)

    def partition_ends(self, store: Store, topics: TopicRegistry) -> PartitionEnds:
        return LocalEnds(store)

    def connect(self, transactions: TxnCoordinatorRuntime, markers: MarkerWriter,
                reloads: list[Callable[[], None]]) -> None:
        return None
