"""Topic-level configuration keys: their types, Kafka defaults and validation.

DescribeConfigs lists these with their source; CreateTopics/AlterConfigs validate against
them and refuse unknown keys or bad values with INVALID_CONFIG, as Apache Kafka does.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import NamedTuple

# DescribeConfigs config_type values (KIP-569).
BOOLEAN, STRING, INT, SHORT, LONG, DOUBLE, LIST = 1, 2, 3, 4, 5, 6, 7

# DescribeConfigs config_source values.
SOURCE_DYNAMIC_TOPIC = 1
SOURCE_STATIC_BROKER = 4
SOURCE_DEFAULT = 5


@dataclass(frozen=True)
class ConfigKey:
    """One topic config: name, type, default and the smallest value it may take."""

    name: str
    type: int
    default: str
    minimum: int | None = None
    choices: tuple[str, ...] | None = None
    doc: str = ""
    maximum: int | None = None


_KEYS = [
    ConfigKey("cleanup.policy", LIST, "delete", choices=("compact", "delete"),
              doc="'delete' removes old entries by retention.ms / retention.bytes; 'compact' keeps "
                  "the newest record per key (the log cleaner); both may be listed; an empty "
                  "list keeps everything."),
    ConfigKey("compression.type", STRING, "producer",
              choices=("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"),
              doc="Batches are stored as the producer compressed them."),
    ConfigKey("delete.retention.ms", LONG, "86400000", 0),
    ConfigKey("file.delete.delay.ms", LONG, "60000", 0),
    ConfigKey("flush.messages", LONG, "9223372036854775807", 1),
    ConfigKey("flush.ms", LONG, "9223372036854775807", 0),
    ConfigKey("index.interval.bytes", INT, "4096", 0),
    ConfigKey("max.compaction.lag.ms", LONG, "9223372036854775807", 1),
    ConfigKey("max.message.bytes", INT, "1048588", 0,
              doc="The largest record batch size allowed."),
    ConfigKey("message.timestamp.type", STRING, "CreateTime", choices=("CreateTime", "LogAppendTime")),
    ConfigKey("message.timestamp.after.max.ms", LONG, "3600000", 0),
    ConfigKey("message.timestamp.before.max.ms", LONG, "9223372036854775807", 0),
    ConfigKey("min.cleanable.dirty.ratio", DOUBLE, "0.5", 0, maximum=1),
    ConfigKey("min.compaction.lag.ms", LONG, "0", 0),
    ConfigKey("min.insync.replicas", INT, "1", 1),
    ConfigKey("preallocate", BOOLEAN, "false", choices=("true", "false")),
    ConfigKey("retention.bytes", LONG, "-1", -1,
              doc="The most bytes a partition keeps before old entries are removed; -1 = no limit."),
    ConfigKey("retention.ms", LONG, "604800000", -1,
              doc="How long entries are kept; -1 = no time limit."),
    ConfigKey("segment.bytes", INT, "1073741824", 14),
    ConfigKey("segment.index.bytes", INT, "10485760", 4),
    ConfigKey("segment.jitter.ms", LONG, "0", 0),
    ConfigKey("segment.ms", LONG, "604800000", 1),
    ConfigKey("unclean.leader.election.enable", BOOLEAN, "false", choices=("true", "false")),
]
TOPIC_CONFIGS: dict[str, ConfigKey] = {k.name: k for k in _KEYS}


class InvalidConfig(ValueError):
    """A config key or value a Kafka broker would refuse (INVALID_CONFIG)."""


def validate(name: str, value: str | None) -> str:
    """Check one topic config and return its normalised value."""
    key = TOPIC_CONFIGS.get(name)
    if key is None:
        raise InvalidConfig(f"Unknown topic config name: {name}")
    if value is None:
        raise InvalidConfig(f"Null value not supported for topic configs: {name}")
    value = value.strip()
    if key.type in (INT, LONG, SHORT):
        try:
            number = int(value)
        except ValueError:
            raise InvalidConfig(
                f"Invalid value {value} for configuration {name}: Not a number of type "
                f"{'INT' if key.type == INT else 'LONG'}") from None
        if key.type == INT and not -(2**31) <= number < 2**31:
            raise InvalidConfig(f"Invalid value {value} for configuration {name}: Not a number of type INT")
        if key.minimum is not None and number < key.minimum:
            raise InvalidConfig(f"Invalid value {value} for configuration {name}: Value must be at least {key.minimum}")
        return str(number)
    if key.type == DOUBLE:
        try:
            real = float(value)
        except ValueError:
            raise InvalidConfig(
                f"Invalid value {value} for configuration {name}: Not a number of type DOUBLE") from None
        if key.minimum is not None and real < key.minimum:
            raise InvalidConfig(
                f"Invalid value {real!r} for configuration {name}: Value must be at least {key.minimum}")
        if key.maximum is not None and real > key.maximum:
            raise InvalidConfig(f"Invalid value {real!r} for configuration {name}: Value must be no more than "
                                f"{key.maximum}")
        return value
    if key.type == LIST:
        return ",".join(_valid_list(key, value))
    if key.choices is not None and value not in key.choices:
        raise InvalidConfig(f"Invalid value {value} for configuration {name}: String must be one of: "
                            f"{', '.join(key.choices)}")
    return value


def _valid_list(key: ConfigKey, value: str) -> list[str]:
    """A LIST value checked as Kafka's ConfigDef.ValidList does: an empty list is allowed;
    items may not be empty, and each must be one of the choices (Kafka names the offending
    item, not the whole list). A repeated item is kept once (Kafka 4.3 shows
    "compact,compact" as "compact")."""
    if not value:
        return []
    items = list(dict.fromkeys(v.strip() for v in value.split(",")))
    for item in items:
        if not item:
            raise InvalidConfig(f"Configuration '{key.name}' values must not be empty.")
        if key.choices is not None and item not in key.choices:
            raise InvalidConfig(f"Invalid value {item} for configuration {key.name}: String must be one of: "
                                f"{', '.join(key.choices)}")
    return items


def validate_together(configs: dict[str, str]) -> None:
    """The checks Kafka's LogConfig.validateValues makes across keys (values already valid)."""
    min_lag = int(effective(configs, "min.compaction.lag.ms"))
    max_lag = int(effective(configs, "max.compaction.lag.ms"))
    if min_lag > max_lag:
        raise InvalidConfig(f"conflict topic config setting min.compaction.lag.ms ({min_lag}) > "
                            f"max.compaction.lag.ms ({max_lag})")


def cleanup_policies(configs: dict[str, str]) -> set[str]:
    """The topic's cleanup.policy as a set: "compact" and/or "delete" (empty: keep everything)."""
    return {p for p in effective(configs, "cleanup.policy").split(",") if p}


def is_compacted(configs: dict[str, str]) -> bool:
    """Whether the topic's cleanup.policy includes compact (keyless records refused, cleaner runs)."""
    return "compact" in cleanup_policies(configs)


#: A broker-level default of a topic config (Kafka's log.* synonyms, e.g. log.retention.ms for
#: retention.ms): its value, its DescribeConfigs source and the broker config's name.
class BrokerDefault(NamedTuple):
    value: str
    source: int
    broker_name: str


def effective(configs: dict[str, str], name: str, broker: Mapping[str, BrokerDefault] | None = None) -> str:
    """The value in force: the topic's own, else the broker's default (``broker``: topic
    config name -> BrokerDefault, broker.broker_configs), else Kafka's default."""
    if name in configs:
        return configs[name]
    if broker and name in broker:
        return broker[name].value
    return TOPIC_CONFIGS[name].default
