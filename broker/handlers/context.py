"""What Kafka handlers get instead of the Broker: one small frozen context per handler family,
holding only the collaborators that family uses (see broker/apis.py for how a handler module
names its family and how the server binds it).

- `DataPlane` — Produce, Fetch, ListOffsets: the store, the topic registry, the notifier that
  wakes long-polling fetches, and the SQL executor schemaless ingestion writes through; the
  broker's metrics (per-topic bytes and records, broker/ops/metrics.py), None in unit tests; the
  transaction coordinator's `TxnGate` Produce asks about transactional batches (None: none);
- `AdminApis` — topic administration, configs and client quotas: the store, the topic
  registry, the config, the quotas;
- `ClusterApis` — ApiVersions, Metadata, DescribeCluster, DescribeTopicPartitions: this node
  as clients see it, the topic registry, the config, and the API table;
- `GroupApis` — the group APIs: the coordinator runtime, the topic registry, this node;
- `TxnApis` — InitProducerId and the transaction APIs: the transaction coordinator runtime
  (broker/runtime/txn_coordinator.py), the topic registry;
- `TxnDataApis` — WriteTxnMarkers and DescribeProducers: the marker writer
  (broker/runtime/txn_markers.py), the store, the topic registry.

Every family has `authorizer`: the ACL authorizer (broker/acl/authorizer.py), None when
`authorizer = "none"` — handlers check `if ctx.authorizer is not None`, so no authorizer costs
nothing. `AclApis` (CreateAcls, DescribeAcls, DeleteAcls) holds only it.

What differs between one node and a cluster is a role the families hold, never None (issue
27): the membership (`Members`), replication (`Replicas`), who coordinates a key
(`CoordinatorPlacement`) and where a transaction's parts are (`TxnRouting`) — one node's are
broker/metadata/membership.py, broker/runtime/replicas.py and broker/runtime/coordination.py,
a cluster's are in broker/cluster/ — so each handler has one code path.

The server builds one of each at start (the advertised address is known only then).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from tmqgate.broker.acl.model import Operation, ResourceType
from tmqgate.broker.identity.client import current_client
from tmqgate.broker.runtime.coordination import CoordinatorPlacement, LocalTxnRouting, TxnRouting
from tmqgate.broker.runtime.replicas import LocalReplication, Replicas

if TYPE_CHECKING:
    from tmqgate.broker.acl.authorizer import Authorizer
    from tmqgate.broker.apis import ApiEntry
    from tmqgate.broker.configs.config import BrokerConfig
    from tmqgate.broker.dynamic_configs.broker_configs import BrokerConfigs
    from tmqgate.broker.dynamic_configs.group_configs import GroupConfigs
    from tmqgate.broker.metadata.membership import Members
    from tmqgate.broker.ops.metrics import Metrics
    from tmqgate.broker.ops.quotas.client_quotas import ClientQuotaManagers
    from tmqgate.broker.ratelimit import RateLimitedLog
    from tmqgate.broker.runtime.shares import PartitionEnds, ShareRuntime
    from tmqgate.broker.runtime.txn_coordinator import TxnCoordinatorRuntime
    from tmqgate.broker.runtime.txn_markers import MarkerWriter
    from tmqgate.broker.runtime.waiters import DataNotifier
    from tmqgate.broker.tdengine import Executor
    from tmqgate.broker.topics import TopicRegistry
    from tmqgate.coordinator.offsets import TxnOffsetsGate
    from tmqgate.coordinator.runtime import CoordinatorRuntime
    from tmqgate.protocol.errors import ErrorCode
    from tmqgate.storage import Store


@dataclass(frozen=True)
class Node:
    """This broker as clients see it: the only node, leader and coordinator of everything."""

    node_id: int
    cluster_id: str
    advertised: tuple[str, int]  # (host, port) of the first listener

    def address(self) -> tuple[str, int]:
        """Where the client being served is told to find this node: the advertised address of
        the listener its connection came in on (Kafka answers each listener with its own)."""
        client = current_client.get(None)
        if client is not None and client.advertised is not None:
            return client.advertised
        return self.advertised


class TxnGate(Protocol):
    """Produce's check with the transaction coordinator (issue 14's design; the coordinator
    implements it): may this transactional batch of (producer id, epoch) go to this
    partition? NONE: append; else the partition is answered with the code
    (INVALID_PRODUCER_EPOCH / PRODUCER_FENCED for a stale epoch, INVALID_TXN_STATE when the
    partition was not added to the ongoing transaction, TRANSACTIONAL_ID_NOT_FOUND ...)."""

    def check_produce(self, transactional_id: str | None, producer_id: int, producer_epoch: int,
                      topic: str, partition: int, add: bool = False) -> ErrorCode: ...


@dataclass(frozen=True)
class DataPlane:
    store: Store
    topics: TopicRegistry
    notifier: DataNotifier
    executor: Executor  # writes the rows Produce sends to a database topic
    max_decompressed_batch_bytes: int = 134_217_728  # BrokerConfig's: Produce's bomb bound
    quotas: ClientQuotaManagers | None = None  # Fetch caps its size under a consumer_byte_rate
    authorizer: Authorizer | None = None
    metrics: Metrics | None = None  # bytes in/out and messages in per topic (broker/ops/metrics.py)
    # Rejected batches are logged (INFO) with their reason, at most so many per interval.
    limited_log: RateLimitedLog | None = None
    # The transaction coordinator, asked before a transactional batch is appended (None: accepted).
    transactions: TxnGate | None = None
    # A transactional batch verified with its coordinator first: here at once on one node
    # (broker/runtime/coordination.py), elsewhere on a cluster (broker/cluster/transactions.py).
    txn_cluster: TxnRouting = field(default_factory=LocalTxnRouting)
    # The replicated partitions' leader and follower sides (acks=all, replica Fetch): none on one
    # node (broker/runtime/replicas.py), the cluster's (broker/cluster/replication.py) on a cluster.
    replication: Replicas = field(default_factory=LocalReplication)


@dataclass(frozen=True)
class AdminApis:
    store: Store
    topics: TopicRegistry
    config: BrokerConfig
    quotas: ClientQuotaManagers | None = None  # DescribeClientQuotas / AlterClientQuotas
    authorizer: Authorizer | None = None
    group_configs: GroupConfigs | None = None  # the GROUP config resource (KIP-848 groups)
    broker_configs: BrokerConfigs | None = None  # the BROKER config resource (dynamic configs)


@dataclass(frozen=True)
class ClusterApis:
    node: Node
    topics: TopicRegistry
    config: BrokerConfig
    apis: Mapping[int, ApiEntry]
    membership: Members  # the live brokers and the controller (this one alone on one node)
    authorizer: Authorizer | None = None

    def brokers(self) -> list[tuple[int, str, int]]:
        """(node id, host, port) of every live broker as the membership has them (this one
        alone before a cluster's first view), this one at its listener's own address."""
        out = {b.node_id: (b.node_id, b.host, b.port) for b in self.membership.view.live()}
        out[self.node.node_id] = (self.node.node_id, *self.node.address())
        return [out[n] for n in sorted(out)]

    def live_ids(self) -> set[int]:
        """The node ids of the live brokers (this one among them)."""
        return set(self.membership.view.brokers) | {self.node.node_id}

    def controller_id(self) -> int:
        return self.membership.view.controller_id

    def cluster_id(self) -> str:
        """The cluster's id (the configured one until a cluster's first read of etcd)."""
        return self.membership.cluster_id or self.node.cluster_id


@dataclass(frozen=True)
class GroupApis:
    coordinator: CoordinatorRuntime
    topics: TopicRegistry
    node: Node
    membership: Members  # where the coordinators are (this one alone on one node)
    group_state: CoordinatorPlacement  # who coordinates a group (this node alone on one node)
    txn_state: CoordinatorPlacement  # and a transactional id (FindCoordinator)
    txn_offsets: TxnOffsetsGate  # TxnOffsetCommit's check of the producer's transaction
    authorizer: Authorizer | None = None
    txn_cluster: TxnRouting = field(default_factory=LocalTxnRouting)  # TxnOffsetCommit v5 adds the group there
    shares: ShareRuntime | None = None  # share groups: ListGroups and DeleteGroups see them too

    def coordinator_node(self, key_type: int = 0, key: str = "") -> tuple[int, str, int] | None:
        """(node id, host, port) of the broker that coordinates the group (``key_type`` 0) or
        the transactional id (1) ``key``: this one alone; on a cluster, for a group, the leader
        of its partition of the group-state or the transaction-state topic
        (broker/cluster/coordinator_state.py; None while there is none)."""
        view = self.membership.view
        state = self.group_state if key_type == 0 else self.txn_state
        node_id = state.coordinator_of(key)
        if node_id < 0:
            state.ensure()  # made on first use, as Kafka's internal topics
        if node_id == self.node.node_id:
            return (self.node.node_id, *self.node.address())
        info = view.brokers.get(node_id)
        return None if info is None else (info.node_id, info.host, info.port)

    def elsewhere(self, group_id: str) -> bool:
        """The group is coordinated by another broker (NOT_COORDINATOR here)."""
        return not self.coordinator.machine.owns(group_id)

    async def replicated(self, group_id: str) -> ErrorCode | None:
        """On a cluster: wait until the group's last state change is on its in-sync replicas;
        the error to answer instead, or None (at once on one node)."""
        return await self.group_state.replicated(group_id)


@dataclass(frozen=True)
class TxnApis:
    """InitProducerId and the transaction APIs (broker/handlers/transactions.py)."""

    coordinator: TxnCoordinatorRuntime
    topics: TopicRegistry
    state: CoordinatorPlacement  # the transactional ids' (replicated on a cluster)
    authorizer: Authorizer | None = None

    def elsewhere(self, transactional_id: str) -> bool:
        """The id is coordinated by another broker (NOT_COORDINATOR here)."""
        return not self.coordinator.machine.owns(transactional_id)

    async def replicated(self, transactional_id: str) -> ErrorCode | None:
        """On a cluster: wait until the id's last state change is on its in-sync replicas; the
        error to answer instead, or None (at once on one node)."""
        return await self.state.replicated(transactional_id)


@dataclass(frozen=True)
class TxnDataApis:
    """WriteTxnMarkers and DescribeProducers (broker/handlers/txn_markers.py)."""

    markers: MarkerWriter
    store: Store
    topics: TopicRegistry
    authorizer: Authorizer | None = None
    cluster: TxnRouting = field(default_factory=LocalTxnRouting)  # on a cluster: markers of other brokers' transactions


@dataclass(frozen=True)
class AclApis:
    authorizer: Authorizer | None = None


@dataclass(frozen=True)
class ShareApis:
    shares: ShareRuntime
    store: Store
    topics: TopicRegistry
    notifier: DataNotifier
    coordinator: CoordinatorRuntime  # who coordinates a group id, and its classic/consumer groups
    node: Node
    ends: PartitionEnds  # partitions' high watermarks from their leaders (the share groups' lag)
    authorizer: Authorizer | None = None

    def group_denied(self, op: Operation, group_id: str) -> bool:
        return self.authorizer is not None and not self.authorizer.allows(op, ResourceType.GROUP, group_id)

    def topics_denied(self, op: Operation, names: set[str]) -> set[str]:
        if self.authorizer is None:
            return set()
        return names - self.authorizer.allowed(op, ResourceType.TOPIC, names)
