"""The value rules of the broker's settings, shared by the file, the environment and the
checks: a setting's expected type, numeric ranges, host and HOST:PORT forms, and the message
for an unknown setting (with the closest known name).
"""

from __future__ import annotations

import types
import typing


class ConfigError(ValueError):
    """A setting refused at start; `key` is the setting's name (None when the file itself is bad)."""

    def __init__(self, message: str, key: str | None = None) -> None:
        super().__init__(message)
        self.key = key


# Ranges of the numeric settings (low, high or None = unbounded), checked by BrokerConfig.check;
# an integer setting not listed here must be >= 0. Kafka's ConfigDef ranges where Kafka has one.
RANGES: dict[str, tuple[float, float | None]] = {
    "node_id": (0, None),
    "cluster_session_timeout_ms": (1000, None),
    "replica_lag_time_max_ms": (100, None),
    "replica_fetch_wait_max_ms": (1, None),
    "leader_imbalance_check_interval_seconds": (1, None),
    "socket_request_max_bytes": (1, None),
    "wal_level": (1, 2),
    "num_partitions": (1, None),  # num.partitions: atLeast(1)
    "default_replication_factor": (1, None),  # default.replication.factor: atLeast(1)
    "offsets_topic_num_partitions": (1, None),  # offsets.topic.num.partitions: atLeast(1)
    "offsets_topic_replication_factor": (1, None),  # offsets.topic.replication.factor: atLeast(1)
    "cluster_state_partitions": (1, None),
    "offsets_commit_timeout_ms": (1, None),  # offsets.commit.timeout.ms: atLeast(1)
    "transaction_state_log_num_partitions": (1, None),  # transaction.state.log.num.partitions: atLeast(1)
    "transaction_state_log_replication_factor": (1, None),  # transaction.state.log.replication.factor: atLeast(1)
    "transaction_state_log_min_isr": (1, None),  # transaction.state.log.min.isr: atLeast(1)
    "retention_check_interval_ms": (1, None),
    "disk_usage_max_percent": (1, 100),
    "disk_volume_bytes": (1, None),
    "data_max_bytes": (1, None),
    "archiver_interval_ms": (1, None),
    "disk_check_interval_ms": (1, None),
    "leveldb_write_buffer_bytes": (1 << 16, None),
    "group_min_session_timeout_ms": (1, None),
    "group_max_session_timeout_ms": (1, None),
    "group_consumer_session_timeout_ms": (1, None),
    "group_consumer_heartbeat_interval_ms": (1, None),
    "group_consumer_min_session_timeout_ms": (1, None),
    "group_consumer_max_session_timeout_ms": (1, None),
    "group_consumer_min_heartbeat_interval_ms": (1, None),
    "group_consumer_max_heartbeat_interval_ms": (1, None),
    "group_share_session_timeout_ms": (1, None),
    "group_share_min_session_timeout_ms": (1, None),
    "group_share_max_session_timeout_ms": (1, None),
    "group_share_heartbeat_interval_ms": (1, None),
    "group_share_min_heartbeat_interval_ms": (1, None),
    "group_share_max_heartbeat_interval_ms": (1, None),
    "group_share_record_lock_duration_ms": (1, None),
    "group_share_min_record_lock_duration_ms": (1, None),
    "group_share_max_record_lock_duration_ms": (1, None),
    "group_share_delivery_count_limit": (1, None),
    "group_share_min_delivery_count_limit": (1, None),
    "group_share_max_delivery_count_limit": (1, None),
    "group_share_partition_max_record_locks": (1, None),
    "group_share_min_partition_max_record_locks": (1, None),
    "group_share_max_partition_max_record_locks": (1, None),
    "group_share_max_share_sessions": (1, None),
    "max_partitions_per_request": (1, None),
    "max_partitions": (1, None),
    "max_databases": (1, None),
    "connections_max_idle_ms": (1, None),
    "request_read_timeout_ms": (1, None),
    "sasl_authentication_timeout_ms": (1, None),
    "queued_max_request_bytes": (-1, None),
    "max_connections": (1, None),
    "max_connections_per_ip": (1, None),
    "max_sql_length": (1, None),
    "http_max_connections": (1, None),
    "http_header_timeout_ms": (1, None),
    "http_idle_timeout_ms": (1, None),
    "sql_parse_timeout_ms": (1, None),
    "sql_select_max_bytes": (1, None),
    "sql_select_memory_bytes": (16_777_216, None),
    "sql_select_timeout_ms": (1, None),
    "max_decompressed_batch_bytes": (1, None),
    "log_rate_limit_interval_ms": (1, None),
    "quota_window_num": (1, None),  # quota.window.num: atLeast(1)
    "quota_window_size_seconds": (1, None),  # quota.window.size.seconds: atLeast(1)
    "controller_quota_window_num": (1, None),  # controller.quota.window.num: atLeast(1)
    "controller_quota_window_size_seconds": (1, None),  # controller.quota.window.size.seconds: atLeast(1)
    "transaction_max_timeout_ms": (1, None),  # transaction.max.timeout.ms: atLeast(1)
    "transactional_id_expiration_ms": (1, None),  # transactional.id.expiration.ms: atLeast(1)
    "transaction_abort_timed_out_transaction_cleanup_interval_ms": (1, None),  # atLeast(1)
    "transaction_version": (0, 2),  # the transaction.version feature's levels (0..2)
    "log_cleaner_io_buffer_size": (1, None),
    "log_cleaner_dedupe_buffer_size": (1, None),
    "log_cleaner_io_buffer_load_factor": (0.01, 1),
    "log_cleaner_io_max_bytes_per_second": (1, None),
}


#: The mechanisms a broker authenticates to the others with (inter_broker_sasl_mechanism).
INTER_BROKER_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


def type_name(hint: object, value: object) -> str | None:
    """None when `value` fits the field's type `hint`, else what it must be (in TOML's words)."""
    args = typing.get_args(hint)
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        if value is None:
            return None
        inner = next(a for a in args if a is not type(None))
        return type_name(inner, value)
    origin = typing.get_origin(hint) or hint
    if origin is bool:
        return None if isinstance(value, bool) else "true or false"
    if origin is int:
        return None if isinstance(value, int) and not isinstance(value, bool) else "an integer"
    if origin is float:
        return None if isinstance(value, int | float) and not isinstance(value, bool) else "a number"
    if origin is str:
        return None if isinstance(value, str) else "a string"
    if origin is list:
        ok = isinstance(value, list) and all(isinstance(v, str) for v in value)
        return None if ok else "a list of strings"
    if origin is dict:
        ok = isinstance(value, dict) and all(isinstance(v, str) for v in value.values())
        return None if ok else 'a table of strings (e.g. {"retention.ms" = "86400000"})'
    return None


def is_hostport(text: str) -> bool:
    """HOST:PORT with a port 0..65535 (the host may be empty = all addresses, IPv6 in brackets)."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        return False
    return not (":" in host and not (host.startswith("[") and host.endswith("]")))


def parse_hostport(text: str, default_host: str = "127.0.0.1") -> tuple[str, int]:
    """Split "host:port" (the host may be omitted, IPv6 in brackets) into its parts."""
    host, _, port = text.rpartition(":")
    host = host.strip("[]") or default_host
    return host, int(port)


def loopback(host: str) -> bool:
    """Whether `host` is a loopback address (or localhost): reachable from this host only."""
    import ipaddress

    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a name: it may resolve to anything


def is_host(text: str) -> bool:
    """A host name or address without a port (IPv6 in brackets)."""
    if text.startswith("[") and text.endswith("]"):
        return len(text) > 2
    return bool(text) and ":" not in text and "/" not in text and not any(c.isspace() for c in text)


def unknown_names(unknown: list[str], known: list[str], skip: int = 0,
                   listed: str = "the settings are listed in docs/CONFIG.md") -> str:
    """"unknown setting(s) A, B (B: did you mean C? <listed>)": the names refused, each with the
    known name closest to it (difflib's, compared without their first `skip` characters) where
    one is close."""
    import difflib

    bare = {name[skip:]: name for name in known}
    hints = []
    for name in unknown:
        close = difflib.get_close_matches(name[skip:], list(bare), n=1, cutoff=0.75)
        if close:
            found = bare[close[0]]
            hints.append(f"did you mean {found}? " if len(unknown) == 1 else f"{name}: did you mean {found}? ")
    return f"unknown setting{'s' if len(unknown) > 1 else ''} {', '.join(unknown)} ({''.join(hints)}{listed})"
