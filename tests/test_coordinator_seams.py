"""The coordinator's seams: it imports nothing from the broker, and the broker's adapter
(broker/runtime/group_coordinator.py) hands it the broker's settings and topics."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path
from typing import Any

import tmqgate.coordinator
from tmqgate.broker.configs.config import BrokerConfig
from tmqgate.broker.runtime.group_coordinator import RegistryTopics, coordinator_config
from tmqgate.coordinator.consumer import TopicSource


def _imports(path: Path) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
    return out


def test_coordinator_imports_nothing_from_the_broker() -> None:
    folder = Path(next(iter(tmqgate.coordinator.__path__)))
    files = sorted(folder.glob("*.py"))
    assert len(files) >= 6
    for path in files:
        bad = {m for m in _imports(path) if m == "tmqgate.broker" or m.startswith("tmqgate.broker.")}
        assert not bad, f"{path.name} imports {bad}"


def test_coordinator_config_takes_every_group_setting() -> None:
    cfg = BrokerConfig(group_min_session_timeout_ms=1, group_max_session_timeout_ms=2,
                       group_initial_rebalance_delay_ms=3, group_consumer_session_timeout_ms=4,
                       group_consumer_heartbeat_interval_ms=5, offset_metadata_max_bytes=6)
    config = coordinator_config(cfg)
    assert dataclasses.asdict(config) == {
        "classic": {"min_session_timeout_ms": 1, "max_session_timeout_ms": 2, "initial_rebalance_delay_ms": 3},
        "consumer": {"session_timeout_ms": 4, "heartbeat_interval_ms": 5},
        "offset_metadata_max_bytes": 6,
        "consumer_overrides": {},  # a group's own configs come later (broker.dynamic_configs.group_configs)
    }


class _Topic:
    def __init__(self, name: str, topic_id: bytes, partitions: int) -> None:
        self.name, self.topic_id, self.partitions = name, topic_id, partitions


class _Registry:
    def __init__(self, *topics: _Topic) -> None:
        self.topics = topics

    def get(self, name: str) -> _Topic | None:
        return next((t for t in self.topics if t.name == name), None)

    def by_id(self, topic_id: bytes) -> _Topic | None:
        return next((t for t in self.topics if t.topic_id == topic_id), None)

    def all(self) -> list[_Topic]:
        return list(self.topics)


def test_registry_topics_is_a_topic_source() -> None:
    registry: Any = _Registry(_Topic("a", b"A" * 16, 3), _Topic("b", b"B" * 16, 1))
    topics: TopicSource = RegistryTopics(registry)
    assert topics.lookup("a") == (b"A" * 16, 3) and topics.lookup("zz") is None
    assert topics.name_of(b"B" * 16) == "b" and topics.name_of(bytes(16)) is None
    assert list(topics.names()) == ["a", "b"]
