"""Kafka topics over TDengine-style databases.

A plain topic made with CreateTopics is a database of its own (one vnode per partition)
holding opaque Kafka records, plus a database topic over it (SPEC.md), so it behaves exactly
as a Kafka topic. The registry caches the catalog so the hot paths never touch LevelDB for it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from broker.topic_configs import effective, validate

if TYPE_CHECKING:
    from broker.server import Broker
    from storage import Store

_LEGAL = re.compile(r"^[a-zA-Z0-9._-]+$")
MAX_NAME_LENGTH = 249
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})


class TopicError(Exception):
    """A topic operation Kafka refuses; carries the Kafka error code name and a message."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass
class Topic:
    """What the broker knows of one Kafka topic."""

    name: str
    topic_id: bytes
    db: str
    partitions: int
    configs: dict[str, str] = field(default_factory=dict)

    def config(self, name: str) -> str:
        return effective(self.configs, name)

    @property
    def max_message_bytes(self) -> int:
        return int(self.config("max.message.bytes"))


def check_topic_name(name: str | None) -> str:
    """Kafka's topic name rules (INVALID_TOPIC_EXCEPTION otherwise)."""
    if not name:
        raise TopicError("INVALID_TOPIC_EXCEPTION", "Topic name is illegal, it can't be empty")
    if name in (".", ".."):
        raise TopicError("INVALID_TOPIC_EXCEPTION", "Topic name cannot be \".\" or \"..\"")
    if len(name) > MAX_NAME_LENGTH:
        raise TopicError("INVALID_TOPIC_EXCEPTION",
                         f"Topic name is illegal, it can't be longer than {MAX_NAME_LENGTH} characters, "
                         f"topic name: {name}")
    if not _LEGAL.match(name):
        raise TopicError("INVALID_TOPIC_EXCEPTION",
                         f"Topic name \"{name}\" is illegal, it contains a character other than "
                         "ASCII alphanumerics, '.', '_' and '-'")
    return name


def validate_configs(configs: dict[str, str | None]) -> dict[str, str]:
    """Validate topic configs (INVALID_CONFIG on an unknown key or a bad value)."""
    out: dict[str, str] = {}
    for key, value in configs.items():
        try:
            out[key] = validate(key, value)
        except ValueError as exc:
            raise TopicError("INVALID_CONFIG", str(exc)) from None
    return out


class TopicRegistry:
    """Name and id lookups of plain topics, backed by the storage catalog."""

    def __init__(self, broker: Broker, store: Store) -> None:
        self._broker = broker
        self._store = store
        self._by_name: dict[str, Topic] = {}
        self._by_id: dict[bytes, Topic] = {}
        for info in store.databases():
            self._remember(Topic(info.name, info.topic_id, info.name, info.vgroups, dict(info.configs)))

    def _remember(self, topic: Topic) -> None:
        self._by_name[topic.name] = topic
        self._by_id[topic.topic_id] = topic

    def get(self, name: str | None) -> Topic | None:
        return self._by_name.get(name) if name is not None else None

    def by_id(self, topic_id: bytes) -> Topic | None:
        return self._by_id.get(topic_id)

    def all(self) -> list[Topic]:
        return sorted(self._by_name.values(), key=lambda t: t.name)

    def create(self, name: str, partitions: int, configs: dict[str, str | None],
               validate_only: bool = False) -> Topic:
        """Create a plain topic: its database of `partitions` vnodes and the topic over it."""
        check_topic_name(name)
        if name in self._by_name:
            raise TopicError("TOPIC_ALREADY_EXISTS", f"Topic '{name}' already exists.")
        if partitions < 1:
            raise TopicError("INVALID_PARTITIONS", "Number of partitions must be larger than 0.")
        clean = validate_configs(configs)
        if validate_only:
            return Topic(name, bytes(16), name, partitions, clean)
        info = self._store.create_database(name, partitions, clean)
        topic = Topic(name, info.topic_id, name, info.vgroups, dict(info.configs))
        self._remember(topic)
        return topic

    def delete(self, topic: Topic) -> None:
        self._store.drop_database(topic.db)
        self._by_name.pop(topic.name, None)
        self._by_id.pop(topic.topic_id, None)

    def add_partitions(self, topic: Topic, count: int, validate_only: bool = False) -> None:
        if count <= topic.partitions:
            raise TopicError("INVALID_PARTITIONS",
                             f"Topic currently has {topic.partitions} partitions, which is higher than "
                             f"the requested {count}." if count < topic.partitions else
                             f"Topic already has {topic.partitions} partitions.")
        if validate_only:
            return
        self._store.add_vnodes(topic.db, count)
        topic.partitions = count

    def set_configs(self, topic: Topic, configs: dict[str, str]) -> None:
        """Replace the topic's own configs (values already validated)."""
        self._store.set_configs(topic.db, configs)
        topic.configs = dict(configs)
