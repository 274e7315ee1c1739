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
