"""Broker settings: command-line flags, an optional TOML file, and Kafka-compatible defaults.

The defaults are Apache Kafka's where Kafka has the setting, and TDengine's for the WAL
(WAL_LEVEL 1, WAL_FSYNC_PERIOD 3000 ms), so that a Kafka user meets no surprise.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field, fields
from pathlib import Path


def parse_hostport(text: str, default_host: str = "127.0.0.1") -> tuple[str, int]:
    """Split "host:port" (the host may be omitted, IPv6 in brackets) into its parts."""
    host, _, port = text.rpartition(":")
    host = host.strip("[]") or default_host
    return host, int(port)


@dataclass
class BrokerConfig:
    """Everything the broker reads at start-up."""

    listen: str = "127.0.0.1:9092"
    http: str = "127.0.0.1:6041"
    data_dir: str = "./data"
    advertised_listener: str | None = None
    node_id: int = 1
    cluster_id: str = "tmqgate-cluster-00000"
    # socket.request.max.bytes in Kafka: a frame larger than this closes the connection.
    socket_request_max_bytes: int = 104_857_600
    # TDengine WAL_LEVEL: 1 = written to the OS before the ack (survives a process kill),
    # 2 = fsync'd; WAL_FSYNC_PERIOD in ms (0 = fsync every write when WAL_LEVEL is 2).
    wal_level: int = 1
    wal_fsync_period_ms: int = 3000
    auto_create_topics_enable: bool = True
    num_partitions: int = 1
    # How often retention runs (log.retention.check.interval.ms in Kafka).
    retention_check_interval_ms: int = 300_000
    topic_defaults: dict[str, str] = field(default_factory=dict)
    # The archiver (003): oldest WAL entries are collected first when the data volume passes
    # disk_usage_max_percent of its filesystem (or of disk_volume_bytes, if set), or when the
    # data passes data_max_bytes; checked every archiver_interval_ms.
    disk_usage_max_percent: float | None = 90.0
    disk_volume_bytes: int | None = None
    data_max_bytes: int | None = None
    archiver_interval_ms: int = 10_000
    # Consumer groups (Kafka's group.* settings). The KIP-848 session timeout is TDengine's 12 s.
    # A KIP-848 member learns of a rebalance only from its next heartbeat, so the interval is
    # short (1 s, where Kafka says 5 s): a heartbeat costs the broker ~0.1 ms, and a member that
    # must give up partitions finds out within a second instead of five.
    group_initial_rebalance_delay_ms: int = 3000
    group_min_session_timeout_ms: int = 6000
    group_max_session_timeout_ms: int = 1_800_000
    group_consumer_session_timeout_ms: int = 12_000
    group_consumer_heartbeat_interval_ms: int = 1000
    offset_metadata_max_bytes: int = 4096
    # Log lines about bad input and failed requests: at most log_rate_limit_messages of a kind
    # per log_rate_limit_interval_ms, then one line saying how many were suppressed.
    log_rate_limit_messages: int = 10
    log_rate_limit_interval_ms: int = 60_000

    @classmethod
    def load(cls, path: str | Path | None, **overrides: object) -> BrokerConfig:
        """Read a TOML file (keys as the field names) and apply non-None overrides."""
        values: dict[str, object] = {}
        if path:
            with open(path, "rb") as fh:
                values.update(tomllib.load(fh))
        known = {f.name for f in fields(cls)}
        unknown = set(values) - known
        if unknown:
            raise ValueError(f"unknown settings in {path}: {', '.join(sorted(unknown))}")
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)  # type: ignore[arg-type]

    @property
    def listen_address(self) -> tuple[str, int]:
        return parse_hostport(self.listen)

    @property
    def http_address(self) -> tuple[str, int]:
        return parse_hostport(self.http)
