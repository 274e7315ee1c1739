"""Dynamic BROKER / GROUP configs in LevelDB (storage.dynconfigs, prefix 0xC0)."""

from __future__ import annotations

from pathlib import Path

from tmqgate.storage import Store


def test_dynamic_configs_persist_per_resource_and_an_empty_mapping_removes(tmp_path: Path) -> None:
    with Store(tmp_path / "d") as store:
        assert store.load_dynamic_configs() == {}
        store.write_dynamic_configs([
            ((4, "0"), {"message.max.bytes": "2048"}),
            ((4, ""), {"log.retention.ms": "60000", "message.max.bytes": "4096"}),
            ((32, "g1"), {"consumer.session.timeout.ms": "50000"}),
        ])
    with Store(tmp_path / "d") as store:
        assert store.load_dynamic_configs() == {
            (4, "0"): {"message.max.bytes": "2048"},
            (4, ""): {"log.retention.ms": "60000", "message.max.bytes": "4096"},
            (32, "g1"): {"consumer.session.timeout.ms": "50000"},
        }
        store.write_dynamic_configs([((4, ""), {}), ((32, "g1"), {"consumer.heartbeat.interval.ms": "6000"})])
    with Store(tmp_path / "d") as store:
        assert store.load_dynamic_configs() == {
            (4, "0"): {"message.max.bytes": "2048"},
            (32, "g1"): {"consumer.heartbeat.interval.ms": "6000"},
        }
