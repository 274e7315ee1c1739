"""Topic-level configuration keys: their types, Kafka defaults and validation.

DescribeConfigs lists these with their source; CreateTopics/AlterConfigs validate against
them and refuse unknown keys or bad values with INVALID_CONFIG, as Apache Kafka does.
"""

from __future__ import annotations

from dataclasses import dataclass

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


_KEYS = [
    ConfigKey("cleanup.policy", LIST, "delete", choices=("delete",),
              doc="The retention policy for old log segments; only 'delete' is supported."),
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
    ConfigKey("min.cleanable.dirty.ratio", DOUBLE, "0.5"),
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
            float(value)
        except ValueError:
            raise InvalidConfig(f"Invalid value {value} for configuration {name}: Not a number of type DOUBLE") from None
        return value
    if key.choices is not None:
        items = [v.strip() for v in value.split(",")] if key.type == LIST else [value]
        bad = [v for v in items if v not in key.choices]
        if bad:
            raise InvalidConfig(f"Invalid value {value} for configuration {name}: String must be one of: "
                                f"{', '.join(key.choices)}")
        return ",".join(items)
    return value


def effective(configs: dict[str, str], name: str) -> str:
    """The value in force: the topic's own, else the default."""
    return configs.get(name, TOPIC_CONFIGS[name].default)
