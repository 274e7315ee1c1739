"""The broker's group coordinator: ``coordinator``'s runtime fed by this broker's topic
registry and group.* settings.

``coordinator`` knows nothing of the broker; it asks for a ``TopicSource`` (topic ids and
partition counts), a ``TopicAccess`` (the authorizer's DESCRIBE filter of KIP-848 regex
topics, KAFKA-18813) and its config dataclasses. This module is the one place that builds them
from the broker's settings, topic registry and authorizer.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from tmqgate.broker.acl.model import Operation, ResourceType
from tmqgate.broker.metadata.view import state_partitioner
from tmqgate.coordinator.classic import ClassicConfig
from tmqgate.coordinator.consumer import ConsumerConfig
from tmqgate.coordinator.coordinator import CoordinatorConfig, GroupCoordinator
from tmqgate.coordinator.runtime import CoordinatorRuntime, monotonic_ms

if TYPE_CHECKING:
    from tmqgate.broker.acl.authorizer import Authorizer
    from tmqgate.broker.configs.config import BrokerConfig
    from tmqgate.broker.topics import TopicRegistry
    from tmqgate.storage import Store


class RegistryTopics:
    """The broker's topic registry seen through the coordinator's TopicSource protocol."""

    def __init__(self, registry: TopicRegistry) -> None:
        self._registry = registry

    def lookup(self, name: str) -> tuple[bytes, int] | None:
        topic = self._registry.get(name)
        return (topic.topic_id, topic.partitions) if topic is not None else None

    def name_of(self, topic_id: bytes) -> str | None:
        topic = self._registry.by_id(topic_id)
        return topic.name if topic is not None else None

    def names(self) -> Iterable[str]:
        return [t.name for t in self._registry.all()]


class AuthorizerAccess:
    """The broker's authorizer seen through the coordinator's TopicAccess protocol."""

    def __init__(self, authorizer: Authorizer) -> None:
        self._authorizer = authorizer

    def describable(self, principal: str, host: str, topics: Iterable[str]) -> set[str]:
        # the member's host as Kafka reports it ("/1.2.3.4"); the ACLs name the address
        return self._authorizer.authorize(principal, host.removeprefix("/"), Operation.DESCRIBE,
                                          ResourceType.TOPIC, topics)


def coordinator_config(cfg: BrokerConfig) -> CoordinatorConfig:
    """The coordinator's settings from the broker's group.* (and offset.metadata.max.bytes) ones."""
    return CoordinatorConfig(
        classic=ClassicConfig(min_session_timeout_ms=cfg.group_min_session_timeout_ms,
                              max_session_timeout_ms=cfg.group_max_session_timeout_ms,
                              initial_rebalance_delay_ms=cfg.group_initial_rebalance_delay_ms),
        consumer=ConsumerConfig(session_timeout_ms=cfg.group_consumer_session_timeout_ms,
                                heartbeat_interval_ms=cfg.group_consumer_heartbeat_interval_ms),
        offset_metadata_max_bytes=cfg.offset_metadata_max_bytes,
    )


def group_coordinator(store: Store, topics: TopicRegistry, cfg: BrokerConfig,
                      authorizer: Authorizer | None = None) -> CoordinatorRuntime:
    """The broker's coordinator over its store and topics, with its group.* settings; KIP-848
    regexes resolve to the topics each member may DESCRIBE when there is an authorizer."""
    # On a cluster it coordinates no group until it leads a group-state partition
    # (broker/cluster/coordinator_state.py loads them).
    machine = GroupCoordinator(store, RegistryTopics(topics), coordinator_config(cfg), monotonic_ms(),
                               owned=None if cfg.cluster is None else set(),
                               partition_of=state_partitioner(cfg.cluster_state_partitions),
                               access=AuthorizerAccess(authorizer) if authorizer is not None else None)
    return CoordinatorRuntime(machine)
