"""Plain Kafka topics shared by the brokers of a cluster (issue 16, step 1b).

The cluster's catalog of topics and the placement of their partitions live in etcd
(``coordinator.cluster``: ``/tmqgate/topics/<name>``). Rules:

- CreateTopics (or a Metadata auto-creation) on any broker checks the topic as one node would
  (``TopicRegistry.create(validate_only=True)``), then puts its placement in etcd with a create
  that succeeds only while the name is free — two brokers creating one name at once: one
  wins, the other answers TOPIC_ALREADY_EXISTS — and then makes the topic locally.
- Every broker applies the placements it reads (``apply``, after each etcd round): a topic it
  lacks is created with the cluster's topic id (the same id on every broker, as clients
  expect), a topic whose id changed (deleted and created again) is replaced, a topic that
  left etcd since the last round is deleted. Every broker holds every partition's log; only
  the leader serves it (``TopicRegistry.partition_error``); with a replication factor above 1
  the other replicas fetch from it (``broker.cluster.replication``).
- DeleteTopics removes the placement; every broker deletes the topic when it reads that.
- Topics this node had before it joined the cluster and that etcd does not know stay local
  (served by this node); SQL databases and TDengine topics are not shared yet (step 5).
"""

from __future__ import annotations

import logging
import random
from typing import TYPE_CHECKING

from tmqgate.broker.topics import KAFKA, Topic, TopicError
from tmqgate.coordinator.cluster import PartitionState, Placement, assign
from tmqgate.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from tmqgate.broker.cluster.membership import Membership
    from tmqgate.broker.topics import TopicRegistry

log = logging.getLogger("tmqgate.cluster")


class ClusterTopics:
    """See the module docstring; the registry's ``cluster`` on a cluster."""

    def __init__(self, membership: Membership, registry: TopicRegistry) -> None:
        self._membership = membership
        self._registry = registry
        self._seen: set[str] = set()  # names in etcd at the last apply
        registry.node_id = membership.node_id
        registry.cluster = self
        membership.on_change.append(self.apply)

    def apply(self) -> None:
        """Bring the local topics in line with etcd's placements (on the event loop)."""
        placements = self._membership.placements
        registry = self._registry
        for name, placement in placements.items():
            topic = registry.get(name)
            if topic is not None and topic.topic_id != placement.topic_id and topic.kind == KAFKA:
                log.info("cluster: topic %s was deleted and created again; replacing it", name)
                registry.delete(topic)
                topic = None
            try:
                if topic is None:
                    registry.create(name, len(placement.partitions), dict(placement.configs),
                                    topic_id=placement.topic_id)
                elif topic.kind == KAFKA and topic.partitions < len(placement.partitions):
                    registry.add_partitions(topic, len(placement.partitions))
            except TopicError as exc:  # e.g. a name this node uses for a database: not shared
                log.warning("cluster: cannot make topic %s here: %s", name, exc.message)
        for name in self._seen - set(placements):
            topic = registry.get(name)
            if topic is not None and topic.kind == KAFKA:
                log.info("cluster: topic %s was deleted", name)
                registry.delete(topic)
        self._seen = set(placements)
        registry.placements = placements

    async def create(self, name: str, partitions: int, configs: dict[str, str | None],
                     replicas: list[list[int]] | None = None, replication_factor: int = 1) -> Topic:
        """CreateTopics on a cluster (see the module docstring); TopicError as one node's."""
        registry = self._registry
        checked = registry.create(name, partitions, configs, validate_only=True)
        await self._membership.refresh()
        if name in self._membership.placements or registry.get(name) is not None:
            raise TopicError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
        live = sorted(self._membership.view.brokers)
        if replicas is not None:
            unknown = sorted({r for rs in replicas for r in rs} - set(live))
            if unknown:
                raise TopicError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                 f"The manual partition assignment includes broker(s) {unknown} "
                                 "that are not registered.")
            states = tuple(PartitionState(tuple(rs), rs[0], 0, tuple(rs)) for rs in replicas)
        else:
            try:  # Kafka starts each topic's round-robin at a random broker
                states = assign(partitions, replication_factor, live, random.randrange(len(live) or 1))
            except ValueError as exc:
                raise TopicError(ErrorCode.INVALID_REPLICATION_FACTOR, str(exc)) from None
        topic_id = random.randbytes(16)
        placement = Placement(name, topic_id, dict(checked.configs), states)
        try:
            created = await self._membership.create_topic(placement)
        except Exception as exc:  # noqa: BLE001 - etcd unreachable: the controller is
            raise TopicError(ErrorCode.REQUEST_TIMED_OUT, f"cannot reach the cluster's etcd: {exc}") from None
        if not created:
            raise TopicError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
        topic = registry.get(name)
        if topic is None or topic.topic_id != topic_id:  # apply could not make it here
            raise TopicError(ErrorCode.UNKNOWN_SERVER_ERROR, f"Topic '{name}' was created but not applied here.")
        return topic

    async def delete(self, topic: Topic) -> None:
        """DeleteTopics on a cluster: the placement goes from etcd, then the topic here (the
        other brokers drop it when they read etcd next)."""
        placement = self._membership.placements.get(topic.name)
        if placement is None or placement.topic_id != topic.topic_id:
            self._registry.delete(topic)  # a topic of this node alone
            return
        try:
            await self._membership.delete_topic(topic.name)
        except Exception as exc:  # noqa: BLE001 - etcd unreachable
            raise TopicError(ErrorCode.REQUEST_TIMED_OUT, f"cannot reach the cluster's etcd: {exc}") from None
        if self._registry.get(topic.name) is topic:
            self._registry.delete(topic)
