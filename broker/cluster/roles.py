"""A cluster broker's `Roles` (broker/runtime/roles.py): its parts over etcd, built in the
order the composition root asks for them, and `connect`, every event between them.

What a cluster broker is made of, beside what one node has:
- `Membership` (membership.py): this broker registered in etcd, the view of the others, the
  controller's placements;
- `ClusterTopics` (topics.py): topics placed in etcd, the registry's `cluster`;
- `Replication` (replication.py): leaders, followers, ISR, high watermarks;
- two `CoordinatorState`s (coordinator_state.py): the group and transaction state topics,
  replicated, their leaders the coordinators;
- `ClusterMarkers` and `ClusterTransactions` (transactions.py): markers and group ends sent
  to other brokers, transactional batches verified with their coordinator;
- `ClusterSql` (sql.py): SQL databases placed in etcd, statements sent to their leader;
- `SharedCatalog` (catalog.py): ACLs, SCRAM users, dynamic configs and quotas kept in etcd.

The events (`connect`): after each read of etcd the topics, then replication (its
leadership), the shared catalog, the SQL outbox, then the group and transaction state (which
follow replication's leadership; groups first: a transaction's markers end them); the
store's catalog changes are published, its coordinator-state changes mirrored into their
replicated partitions; a marker written here forgets the producer's verified partitions; an
answer to markers sent lets the transaction coordinator retry at once.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable
from typing import TYPE_CHECKING

from tmqgate.broker.cluster.catalog import SharedCatalog
from tmqgate.broker.cluster.coordinator_state import CoordinatorState, kinds
from tmqgate.broker.cluster.membership import Membership
from tmqgate.broker.cluster.replication import Replication
from tmqgate.broker.cluster.share_state import ClusterEnds, ClusterSharePersister
from tmqgate.broker.cluster.sql import ClusterSql
from tmqgate.broker.cluster.topics import ClusterTopics
from tmqgate.broker.cluster.transactions import ClusterMarkers, ClusterTransactions, Peers
from tmqgate.broker.metadata.view import state_partitioner
from tmqgate.broker.runtime.shares import PartitionEnds, SharePersister, StorePersister

if TYPE_CHECKING:
    from tmqgate.broker.cluster.peer import PeerSecurity
    from tmqgate.broker.configs.config import BrokerConfig
    from tmqgate.broker.metadata.membership import Members
    from tmqgate.broker.runtime.coordination import CoordinatorPlacement, TxnRouting
    from tmqgate.broker.runtime.replicas import Replicas
    from tmqgate.broker.runtime.roles import TxnChecks
    from tmqgate.broker.runtime.txn_coordinator import TxnCoordinatorRuntime
    from tmqgate.broker.runtime.txn_markers import MarkerWriter
    from tmqgate.broker.runtime.waiters import DataNotifier
    from tmqgate.broker.tdengine import SqlCluster
    from tmqgate.broker.topics import TopicCluster, TopicRegistry
    from tmqgate.coordinator.runtime import CoordinatorRuntime
    from tmqgate.coordinator.transactions import MarkerWriter as TxnMarkers
    from tmqgate.coordinator.transactions import TxnGroups
    from tmqgate.storage import Store
    from tmqgate.storage.share_state import ShareStates

#: how long a statement sent to the broker leading its database may take there (a 1 MiB INSERT: seconds)
SQL_FORWARD_TIMEOUT_S = 120.0


class ClusterRoles:
    """See the module docstring. ``peer_security``: how this broker dials the others' first
    listener (TLS, SASL as the brokers' user: broker/network/listeners.py); ``siblings``: on a
    worker of `serve --workers N`, the other workers' node ids (membership.py)."""

    def __init__(self, config: BrokerConfig, store: Store, peer_security: PeerSecurity,
                 siblings: tuple[int, ...] = ()) -> None:
        assert config.cluster is not None
        self._config = config
        self._store = store
        state_partitions = state_partitioner(config.cluster_state_partitions)
        self._kinds = kinds(store, config, state_partitions, state_partitions)
        self._membership = Membership(config.cluster, config.node_id, config.cluster_session_timeout_ms,
                                      config.leader_imbalance_check_interval_seconds
                                      if config.auto_leader_rebalance_enable else None,
                                      http=config.http, peer_security=peer_security, siblings=siblings)
        self._peers = Peers(self._membership, f"tmqgate-txn-{config.node_id}")

    def membership(self) -> Members:
        return self._membership

    def topic_cluster(self, registry: TopicRegistry) -> TopicCluster:
        self._topics = ClusterTopics(self._membership, registry)
        return self._topics

    def replication(self, topics: TopicRegistry, notifier: DataNotifier) -> Replicas:
        cfg = self._config
        self._replication = Replication(cfg.node_id, self._store, topics, self._membership, notifier,
                                        cfg.replica_lag_time_max_ms, cfg.replica_fetch_wait_max_ms)
        return self._replication

    def _placement(self, index: int, topics: TopicRegistry, notifier: DataNotifier,
                   runtime: CoordinatorRuntime | TxnCoordinatorRuntime) -> CoordinatorState:
        cfg = self._config
        return CoordinatorState(self._kinds[index], cfg.node_id, self._store, topics, self._topics, self._membership,
                                self._replication, notifier, runtime, cfg.offsets_commit_timeout_ms)

    def group_placement(self, topics: TopicRegistry, replication: Replicas, notifier: DataNotifier,
                        groups: CoordinatorRuntime) -> CoordinatorPlacement:
        self._group_state = self._placement(0, topics, notifier, groups)
        return self._group_state

    def txn_outputs(self, topics: TopicRegistry, markers: MarkerWriter,
                    groups: CoordinatorRuntime) -> tuple[TxnMarkers, TxnGroups]:
        self._markers = ClusterMarkers(self._config.node_id, topics, self._group_state, markers, groups, self._peers)
        return self._markers, self._markers

    def txn_placement(self, topics: TopicRegistry, replication: Replicas, notifier: DataNotifier,
                      transactions: TxnCoordinatorRuntime) -> CoordinatorPlacement:
        self._txn_state = self._placement(1, topics, notifier, transactions)
        return self._txn_state

    def txn_checks(self, transactions: TxnCoordinatorRuntime) -> tuple[TxnChecks, TxnRouting]:
        self._txns = ClusterTransactions(self._config.node_id, self._txn_state, transactions, self._markers,
                                         self._peers)
        return self._txns, self._txns

    def sql(self, topics: TopicRegistry, replication: Replicas, notify: Callable[[str, int], None]) -> SqlCluster:
        cfg = self._config
        http_tls = ssl.create_default_context(cafile=cfg.ssl_cafile) if cfg.http_tls else None
        self._sql = ClusterSql(cfg.node_id, self._membership, self._topics, topics, self._store, self._replication,
                               http_tls, SQL_FORWARD_TIMEOUT_S, cfg.replica_lag_time_max_ms / 1000)
        return self._sql

    def share_persister(self, states: ShareStates, group_state: CoordinatorPlacement) -> SharePersister:
        return ClusterSharePersister(self._config.node_id, group_state, self._peers,
                                     StorePersister(states, group_state.replicated))

    def partition_ends(self, store: Store, topics: TopicRegistry) -> PartitionEnds:
        return ClusterEnds(self._config.node_id, store, topics, self._peers)

    def connect(self, transactions: TxnCoordinatorRuntime, markers: MarkerWriter,
                reloads: list[Callable[[], None]]) -> None:
        store = self._store
        catalog = SharedCatalog(self._membership, store, reloads)
        self._membership.on_change.extend([self._topics.apply, self._replication.apply, catalog.apply,
                                           self._sql.retry, self._group_state.apply, self._txn_state.apply])
        store.acls.observers.append(catalog.acls_changed)
        store.users.observers.append(catalog.user_changed)
        store.dynamic_configs.observers.append(catalog.configs_changed)
        store.client_quotas.observers.append(catalog.quotas_changed)
        for state in (self._group_state, self._txn_state):
            state.kind.mirror(state.mirrored, state.mirrored_at)
        markers.on_written.append(self._txns.marker_written)
        self._markers.on_answered.append(transactions.markers_answered)
        store.producers.use_slot(self._config.node_id)  # producer ids unique in the cluster
