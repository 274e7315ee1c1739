"""On a cluster Kafka's internal topics follow the state topics (``TopicRegistry``'s
``internal_sources``, broker/topics.py): ``__consumer_offsets`` appears on every broker once the
group-state topic is placed, with its partitions' leaders, epochs and replicas, so a reader is
sent to the coordinator of each partition's groups and fenced as that partition is."""

from __future__ import annotations

from pathlib import Path

from tmqgate.broker.metadata.view import GROUP_STATE_TOPIC, PartitionState, Placement
from tmqgate.broker.topics import CLUSTER_INTERNAL_SOURCES, TopicRegistry
from tmqgate.broker.tsdb.catalog import TsdbCatalog
from tmqgate.protocol.errors import ErrorCode
from tmqgate.protocol.internal_topics import GROUP_METADATA_TOPIC, TRANSACTION_STATE_TOPIC, partition_for
from tmqgate.storage import Store


def test_consumer_offsets_follows_the_group_state_placement(tmp_path: Path) -> None:
    with Store(tmp_path / "s") as store:
        registry = TopicRegistry(store, TsdbCatalog(store), offsets_partitions=3, transaction_partitions=3,
                                 node_id=1, internal_sources=CLUSTER_INTERNAL_SOURCES)
        assert registry.get(GROUP_METADATA_TOPIC) is None  # nobody asked for a group coordinator yet
        states = (PartitionState((1, 2), 1, 4, (1, 2)), PartitionState((2, 1), 2, 7, (2, 1)),
                  PartitionState((1, 2), -1, 9, ()))
        registry.place({GROUP_STATE_TOPIC: Placement(GROUP_STATE_TOPIC, b"\x01" * 16, {}, states)})
        offsets = registry.get(GROUP_METADATA_TOPIC)
        assert offsets is not None and offsets.partitions == 3
        assert registry.get(TRANSACTION_STATE_TOPIC) is None  # its state topic is not placed
        assert [registry.partition_state(offsets, p) for p in range(3)] == list(states)
        # served where the group-state partition is led, fenced by its epoch
        assert registry.partition_error(offsets, 0) is None
        assert registry.partition_error(offsets, 0, leader_epoch=3) is ErrorCode.FENCED_LEADER_EPOCH
        assert registry.partition_error(offsets, 1) is ErrorCode.NOT_LEADER_OR_FOLLOWER
        assert registry.partition_error(offsets, 2) is ErrorCode.LEADER_NOT_AVAILABLE
        # a group's partition is the same in both topics (Kafka's hash of its id)
        assert store.group_log.partition_of("g-42") == partition_for("g-42", 3)


def test_one_broker_leads_its_internal_topics(tmp_path: Path) -> None:
    with Store(tmp_path / "s") as store:
        registry = TopicRegistry(store, TsdbCatalog(store), node_id=1)
        registry.ensure_internal(GROUP_METADATA_TOPIC)
        offsets = registry.get(GROUP_METADATA_TOPIC)
        assert offsets is not None and offsets.partitions == 50
        states = (PartitionState((2,), 2, 1, (2,)),)
        registry.place({GROUP_STATE_TOPIC: Placement(GROUP_STATE_TOPIC, b"\x01" * 16, {}, states)})
        assert registry.partition_state(offsets, 0) is None and registry.partition_error(offsets, 0) is None
