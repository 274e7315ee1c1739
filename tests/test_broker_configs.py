"""Dynamic BROKER configs (broker.dynamic_configs.broker_configs): precedence, what they change in the running
broker, persistence — on a real store, through the broker's own objects."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from tmqgate.broker.configs.config import BrokerConfig
from tmqgate.broker.server import Broker
from tmqgate.broker.topics import TopicError


def _sources(broker: Broker, name: str) -> list[tuple[str, int]]:
    [entry] = broker.broker_configs.describe(str(broker.config.node_id), [name], True, False)
    return [(s["value"], s["source"]) for s in entry["synonyms"]]


def _set(values: dict[str, str | None]) -> Any:
    return lambda current: {**current, **values}


def test_precedence_and_effect_and_persistence(tmp_path: Path) -> None:
    async def go() -> None:
        cfg = BrokerConfig(listen="127.0.0.1:0", data_dir=str(tmp_path / "d"), topic_defaults={"retention.ms": "5000"},
                           log_cleaner_backoff_ms=20_000)
        broker = Broker(cfg)
        topic = broker.topics.create("t", 1, {})
        bc = broker.broker_configs
        # the file's value over the default; a topic without its own value reads it
        assert _sources(broker, "log.retention.ms") == [("5000", 4), ("604800000", 5)]
        assert topic.config("retention.ms") == "5000" and broker.retention_defaults()["retention.ms"] == "5000"
        bc.alter("", _set({"log.retention.ms": "7000", "message.max.bytes": "2048"}), validate_only=False)
        bc.alter(str(cfg.node_id), _set({"log.retention.ms": "9000"}), validate_only=False)
        assert _sources(broker, "log.retention.ms") == [("9000", 2), ("7000", 3), ("5000", 4), ("604800000", 5)]
        assert topic.config("retention.ms") == "9000" and topic.max_message_bytes == 2048
        assert broker.retention_defaults()["retention.ms"] == "9000"
        # the cleaner's pace is read from the running config
        bc.alter("", _set({"log.cleaner.backoff.ms": "3000"}), validate_only=False)
        assert cfg.log_cleaner_backoff_ms == 3000
        with pytest.raises(TopicError, match="Invalid value -1 for configuration log.cleaner.backoff.ms"):
            bc.alter("", _set({"log.cleaner.backoff.ms": "-1"}), validate_only=False)
        with pytest.raises(TopicError, match=r"Cannot update these configs dynamically: \[num.partitions\]"):
            bc.alter(str(cfg.node_id), _set({"num.partitions": "4"}), validate_only=False)
        bc.alter("", _set({"log.retention.ms": "1"}), validate_only=True)
        assert [(c["name"], c["value"]) for c in bc.describe("", None, False, False)] == [
            ("log.cleaner.backoff.ms", "3000"), ("log.retention.ms", "7000"), ("message.max.bytes", "2048")]
        broker.store.close()

        again = Broker(BrokerConfig(listen="127.0.0.1:0", data_dir=str(tmp_path / "d"),
                                    topic_defaults={"retention.ms": "5000"}, log_cleaner_backoff_ms=20_000))
        assert _sources(again, "log.retention.ms")[:2] == [("9000", 2), ("7000", 3)]
        assert again.config.log_cleaner_backoff_ms == 3000
        t = again.topics.get("t")
        assert t is not None and t.max_message_bytes == 2048
        # DELETE goes back down the levels, to the file's value
        again.broker_configs.alter(str(again.config.node_id), lambda current: {}, validate_only=False)
        again.broker_configs.alter("", lambda current: {}, validate_only=False)
        assert t.config("retention.ms") == "5000" and t.max_message_bytes == 1048588
        assert again.config.log_cleaner_backoff_ms == 20_000
        again.store.close()

    asyncio.run(go())
