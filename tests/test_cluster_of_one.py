"""A broker in no cluster is a cluster of one (issue 27): its handler contexts hold the one-node
implementations of the cluster roles, never None, and those answer as one node does."""

from __future__ import annotations

import asyncio

import pytest

from tmqgate.broker.configs.config import BrokerConfig
from tmqgate.broker.handlers.context import ClusterApis, DataPlane, GroupApis, TxnApis, TxnDataApis
from tmqgate.broker.metadata.membership import LocalMembership
from tmqgate.broker.runtime.coordination import LocalCoordinatorPlacement, LocalTxnRouting
from tmqgate.broker.runtime.replicas import LocalReplication
from tmqgate.broker.server import Broker
from tmqgate.broker.topics import LocalTopics, TopicError
from tmqgate.protocol.errors import ErrorCode as E


def test_one_node_contexts_hold_the_local_roles(tmp_path) -> None:
    async def scenario() -> None:
        broker = Broker(BrokerConfig(listen="127.0.0.1:0", data_dir=str(tmp_path / "data"), node_id=7))
        await broker.start()
        try:
            contexts = broker._contexts()
            cluster, groups = contexts[ClusterApis], contexts[GroupApis]
            assert isinstance(cluster.membership, LocalMembership)
            assert cluster.brokers() == [(7, "127.0.0.1", broker.port)]
            assert cluster.live_ids() == {7} and cluster.controller_id() == 7
            assert cluster.cluster_id() == broker.config.cluster_id
            assert groups.coordinator_node(0, "g") == (7, "127.0.0.1", broker.port)
            assert groups.coordinator_node(1, "tx") == (7, "127.0.0.1", broker.port)
            assert await groups.replicated("g") is None
            assert isinstance(groups.group_state, LocalCoordinatorPlacement)
            assert isinstance(contexts[TxnApis].state, LocalCoordinatorPlacement)
            assert isinstance(contexts[DataPlane].replication, LocalReplication)
            assert isinstance(contexts[DataPlane].txn_cluster, LocalTxnRouting)
            assert isinstance(contexts[TxnDataApis].cluster, LocalTxnRouting)
            assert broker.topics.cluster is broker.topics.local
        finally:
            await broker.stop()

    asyncio.run(scenario())


def test_local_topics_answer_as_one_node(tmp_path) -> None:
    async def scenario() -> None:
        broker = Broker(BrokerConfig(listen="127.0.0.1:0", data_dir=str(tmp_path / "data"), node_id=3))
        await broker.start()
        try:
            local = broker.topics.cluster
            assert isinstance(local, LocalTopics) and local.alone
            with pytest.raises(TopicError) as refused:
                await local.create("t", 2, {}, replication_factor=2)
            assert refused.value.code == E.INVALID_REPLICATION_FACTOR
            with pytest.raises(TopicError) as refused:
                await local.create("t", 1, {}, replicas=[[4]])
            assert refused.value.code == E.INVALID_REPLICA_ASSIGNMENT
            topic = await local.create("t", 2, {}, replicas=[[3], [3]])
            assert broker.topics.get("t") is topic and topic.partitions == 2
            assert await local.elect_leaders(0, None) == {"t": [(0, E.ELECTION_NOT_NEEDED, None),
                                                                (1, E.ELECTION_NOT_NEEDED, None)]}
            assert (await local.elect_leaders(0, {"t": [5], "u": [0]}) ==
                    {"t": [(5, E.UNKNOWN_TOPIC_OR_PARTITION, "No such partition as t-5")],
                     "u": [(0, E.UNKNOWN_TOPIC_OR_PARTITION, "No such topic as u")]})
            assert (await local.reassign({"t": {0: (3,), 9: (3,)}}, True))["t"][1][1] == E.UNKNOWN_TOPIC_OR_PARTITION
            assert await local.reassignments(None) == {}
            with pytest.raises(TopicError) as refused:
                await local.add_partitions(topic, 3, [[4]], validate_only=False)
            assert refused.value.code == E.INVALID_REPLICA_ASSIGNMENT
            await local.add_partitions(topic, 3, [[3]], validate_only=False)
            assert topic.partitions == 3
            await local.delete(topic)
            assert broker.topics.get("t") is None
        finally:
            await broker.stop()

    asyncio.run(scenario())


def test_a_cluster_broker_is_built_from_its_roles(tmp_path) -> None:
    """A cluster broker's parts come from broker/cluster/roles.py, each handed to the parts
    that use it at construction, and `connect` subscribes their events in the order they must
    run (built, not started: no etcd is reached before `start`)."""
    from tmqgate.broker.cluster.catalog import SharedCatalog
    from tmqgate.broker.cluster.coordinator_state import CoordinatorState
    from tmqgate.broker.cluster.membership import Membership
    from tmqgate.broker.cluster.replication import Replication
    from tmqgate.broker.cluster.sql import ClusterSql
    from tmqgate.broker.cluster.topics import ClusterTopics
    from tmqgate.broker.cluster.transactions import ClusterMarkers, ClusterTransactions

    broker = Broker(BrokerConfig(listen="127.0.0.1:0", data_dir=str(tmp_path / "data"), node_id=3,
                                 cluster="etcd://127.0.0.1:1", authorizer="acl"))
    try:
        membership = broker.membership
        assert isinstance(membership, Membership) and membership.node_id == 3
        assert isinstance(broker.topics.cluster, ClusterTopics) and broker.topics.local is not broker.topics.cluster
        assert isinstance(broker.replication, Replication)
        assert isinstance(broker.group_state, CoordinatorState) and broker.group_state.kind.what == "groups"
        assert isinstance(broker.txn_state, CoordinatorState) and broker.txn_state.kind.what == "transactional ids"
        assert isinstance(broker.txn_gate, ClusterTransactions) and broker.txn_routing is broker.txn_gate
        machine = broker.transactions.machine
        assert isinstance(machine.markers, ClusterMarkers) and machine.groups is machine.markers
        assert isinstance(broker.executor.cluster, ClusterSql)
        assert broker.dnodes.membership is membership
        # each read of etcd: topics, replication, the shared catalog, the SQL outbox, then the
        # group and transaction state (they follow replication's leadership; groups first)
        owners = [type(call.__self__) for call in membership.on_change]  # type: ignore[attr-defined]
        assert owners == [ClusterTopics, Replication, SharedCatalog, ClusterSql, CoordinatorState, CoordinatorState]
        assert [call.__self__ for call in membership.on_change[-2:]] == [  # type: ignore[attr-defined]
            broker.group_state, broker.txn_state]
        store = broker.store
        for table in (store.acls, store.users, store.dynamic_configs, store.client_quotas):
            assert [type(o.__self__) for o in table.observers] == [SharedCatalog]  # type: ignore[attr-defined]
        assert broker.markers.on_written == [broker.txn_gate.marker_written]
        assert machine.markers.on_answered == [broker.transactions.markers_answered]
    finally:
        broker.executor.close()
        broker.log_cleaner.close()
        broker.store.close()


def test_one_node_subscribes_nothing(tmp_path) -> None:
    """A cluster of one has no events between its parts: nothing is published or mirrored."""
    broker = Broker(BrokerConfig(listen="127.0.0.1:0", data_dir=str(tmp_path / "data")))
    try:
        assert broker.membership.on_change == [] and broker.markers.on_written == []
        assert all(t.observers == [] for t in (broker.store.acls, broker.store.users, broker.store.dynamic_configs,
                                                broker.store.client_quotas))
        assert broker.transactions.machine.markers is broker.markers
        assert broker.transactions.machine.groups is broker.coordinator
        assert broker.txn_gate is broker.transactions
    finally:
        broker.executor.close()
        broker.log_cleaner.close()
        broker.store.close()


def test_the_composition_root_assigns_nothing_into_its_parts() -> None:
    """Constructor injection (issue 27): broker/server.py and the roles never assign into an
    attribute of another object (``a.b = …``, ``self.a.b = …``); only the Broker's own
    (``self.x = …``) and the roles' own parts."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent / "broker"
    for path in (root / "server.py", root / "runtime" / "roles.py", root / "cluster" / "roles.py",
                 root / "cluster" / "topics.py", root / "cluster" / "catalog.py",
                 root / "cluster" / "transactions.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            targets = node.targets if isinstance(node, ast.Assign) else \
                [node.target] if isinstance(node, ast.AnnAssign | ast.AugAssign) else []
            for target in targets:
                for t in target.elts if isinstance(target, ast.Tuple) else [target]:
                    if isinstance(t, ast.Attribute):
                        owner = t.value
                        assert isinstance(owner, ast.Name) and owner.id == "self", \
                            f"{path.name}:{t.lineno} assigns into another object: {ast.unparse(t)}"
