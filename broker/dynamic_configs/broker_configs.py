"""The BROKER config resource: the broker's settings under Kafka's names, and the subset that
changes at run time (Kafka's dynamic broker configs, KIP-226).

Why: operators read a broker's configuration with `kafka-configs --entity-type brokers
--entity-name 0 --describe --all` and change the dynamic ones without a restart, either for
one broker (`--entity-name 0`) or as the cluster default (`--entity-default`). Rules, as
Apache Kafka 4.3 keeps them (DynamicBrokerConfig, ConfigHelper.createBrokerConfigEntry,
ConfigAdminManager):

- A setting's value in force comes from, first to last: a dynamic value for this broker
  (DYNAMIC_BROKER_CONFIG, source 2), a dynamic cluster default (DYNAMIC_DEFAULT_BROKER_CONFIG,
  3), the config file (STATIC_BROKER_CONFIG, 4; a BrokerConfig field that differs from its
  default, or an entry of ``topic_defaults``), Kafka's / tmqgate's default (DEFAULT_CONFIG, 5).
  DescribeConfigs of the node id lists every setting with that source, and the synonyms in
  that order when asked; of "" (the cluster default) only the dynamic defaults set.
- Dynamic here are the broker defaults of topic configs (Kafka's log.* synonyms such as
  message.max.bytes for max.message.bytes, log.retention.ms for retention.ms: every topic
  without its own value reads them through ``TopicRegistry.broker_defaults``, so Produce,
  retention and the cleaner see a change at once) and the cleaner's pace
  (log.cleaner.backoff.ms, log.cleaner.io.max.bytes.per.second, read each round). The rest
  are read-only: a change is INVALID_REQUEST, as Kafka answers for its static configs.
- A change is validated (the topic config's rules for a log.* synonym), persisted (LevelDB,
  ``storage.dynconfigs``, resource type 4 with the node id or "") and applied before the
  answer; validate_only changes nothing. Loaded at start, before the broker serves.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING, Any

from tmqgate.broker.configs.config import BrokerConfig
from tmqgate.broker.configs.topic_configs import (
    BOOLEAN,
    DOUBLE,
    INT,
    LIST,
    LONG,
    SHORT,
    STRING,
    TOPIC_CONFIGS,
    BrokerDefault,
)
from tmqgate.broker.configs.values import ConfigError
from tmqgate.broker.topics import TopicError, validate_configs
from tmqgate.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from tmqgate.broker.topics import TopicRegistry
    from tmqgate.storage import Store

BROKER_RESOURCE = 4
SOURCE_DYNAMIC_BROKER, SOURCE_DYNAMIC_DEFAULT, SOURCE_STATIC, SOURCE_DEFAULT = 2, 3, 4, 5

_DEFAULTS = {f.name: f.default for f in fields(BrokerConfig)}


@dataclass(frozen=True)
class Setting:
    """One broker config: its Kafka name and type; where its static value comes from (a
    BrokerConfig field, the topic config it is the default of, or a fixed value); dynamic or not."""

    name: str
    type: int
    field: str | None = None
    topic: str | None = None  # the topic config this is the broker default of (dynamic)
    fixed: str | None = None  # a value tmqgate does not let change (e.g. replication factors)
    dynamic: bool = False

    def static(self, config: BrokerConfig) -> tuple[str, int]:
        """The value from the config file or the default, with its source."""
        if self.topic is not None:
            if self.topic in config.topic_defaults:
                return config.topic_defaults[self.topic], SOURCE_STATIC
            return TOPIC_CONFIGS[self.topic].default, SOURCE_DEFAULT
        if self.field is not None:
            value = getattr(config, self.field)
            source = SOURCE_DEFAULT if value == _DEFAULTS[self.field] else SOURCE_STATIC
            return _text(value), source
        return self.fixed or "", SOURCE_DEFAULT


def _text(value: Any) -> str:
    """A value as Kafka prints it (Java's booleans and doubles)."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return repr(value).replace("e+", "E").replace("e-", "E-")
    return str(value)


def _log(name: str, topic: str, type_: int) -> Setting:
    return Setting(name, type_, topic=topic, dynamic=True)


SETTINGS: dict[str, Setting] = {s.name: s for s in (
    # broker defaults of topic configs: dynamic (Kafka's DynamicLogConfig)
    _log("message.max.bytes", "max.message.bytes", INT),
    _log("log.retention.ms", "retention.ms", LONG),
    _log("log.retention.bytes", "retention.bytes", LONG),
    _log("log.segment.bytes", "segment.bytes", INT),
    _log("log.roll.ms", "segment.ms", LONG),
    _log("log.cleanup.policy", "cleanup.policy", LIST),
    _log("log.cleaner.delete.retention.ms", "delete.retention.ms", LONG),
    _log("log.cleaner.min.compaction.lag.ms", "min.compaction.lag.ms", LONG),
    _log("log.cleaner.max.compaction.lag.ms", "max.compaction.lag.ms", LONG),
    _log("log.cleaner.min.cleanable.ratio", "min.cleanable.dirty.ratio", DOUBLE),
    _log("log.message.timestamp.type", "message.timestamp.type", STRING),
    _log("log.message.timestamp.before.max.ms", "message.timestamp.before.max.ms", LONG),
    _log("log.message.timestamp.after.max.ms", "message.timestamp.after.max.ms", LONG),
    _log("compression.type", "compression.type", STRING),
    _log("min.insync.replicas", "min.insync.replicas", INT),
    # the cleaner's pace: read at each round
    Setting("log.cleaner.backoff.ms", LONG, "log_cleaner_backoff_ms", dynamic=True),
    Setting("log.cleaner.io.max.bytes.per.second", DOUBLE, "log_cleaner_io_max_bytes_per_second", dynamic=True),
    # read-only
    Setting("node.id", INT, "node_id"),
    Setting("broker.id", INT, "node_id"),
    Setting("log.dirs", STRING, "data_dir"),
    Setting("num.partitions", INT, "num_partitions"),
    Setting("default.replication.factor", INT, "default_replication_factor"),
    Setting("auto.leader.rebalance.enable", BOOLEAN, "auto_leader_rebalance_enable"),
    Setting("leader.imbalance.check.interval.seconds", LONG, "leader_imbalance_check_interval_seconds"),
    Setting("auto.create.topics.enable", BOOLEAN, "auto_create_topics_enable"),
    Setting("socket.request.max.bytes", INT, "socket_request_max_bytes"),
    Setting("max.connections", INT, "max_connections"),
    Setting("max.connections.per.ip", INT, "max_connections_per_ip"),
    Setting("connections.max.idle.ms", LONG, "connections_max_idle_ms"),
    Setting("log.retention.check.interval.ms", LONG, "retention_check_interval_ms"),
    Setting("log.cleaner.enable", BOOLEAN, "log_cleaner_enable"),
    Setting("log.cleaner.io.buffer.size", INT, "log_cleaner_io_buffer_size"),
    Setting("log.cleaner.dedupe.buffer.size", LONG, "log_cleaner_dedupe_buffer_size"),
    Setting("log.cleaner.io.buffer.load.factor", DOUBLE, "log_cleaner_io_buffer_load_factor"),
    Setting("offsets.topic.num.partitions", INT, "offsets_topic_num_partitions"),
    Setting("transaction.state.log.num.partitions", INT, "transaction_state_log_num_partitions"),
    Setting("offset.metadata.max.bytes", INT, "offset_metadata_max_bytes"),
    Setting("group.initial.rebalance.delay.ms", INT, "group_initial_rebalance_delay_ms"),
    Setting("group.min.session.timeout.ms", INT, "group_min_session_timeout_ms"),
    Setting("group.max.session.timeout.ms", INT, "group_max_session_timeout_ms"),
    Setting("group.consumer.session.timeout.ms", INT, "group_consumer_session_timeout_ms"),
    Setting("group.consumer.heartbeat.interval.ms", INT, "group_consumer_heartbeat_interval_ms"),
    Setting("group.consumer.min.session.timeout.ms", INT, "group_consumer_min_session_timeout_ms"),
    Setting("group.consumer.max.session.timeout.ms", INT, "group_consumer_max_session_timeout_ms"),
    Setting("group.consumer.min.heartbeat.interval.ms", INT, "group_consumer_min_heartbeat_interval_ms"),
    Setting("group.consumer.max.heartbeat.interval.ms", INT, "group_consumer_max_heartbeat_interval_ms"),
    Setting("transaction.max.timeout.ms", INT, "transaction_max_timeout_ms"),
    Setting("default.replication.factor", INT, fixed="1"),
    Setting("offsets.topic.replication.factor", SHORT, fixed="1"),
    Setting("transaction.state.log.replication.factor", SHORT, fixed="1"),
)}


class BrokerConfigs:
    """The BROKER resource of this node: describe, alter, and the running broker it changes."""

    def __init__(self, store: Store, config: BrokerConfig, topics: TopicRegistry) -> None:
        self._store = store
        self._config = config
        self._topics = topics
        self._node = str(config.node_id)
        #: the settings as the config file gave them (the running config's dynamic fields change)
        self._static = replace(config)
        self._dynamic: dict[str, dict[str, str]] = {}
        self.reload()

    def reload(self) -> None:
        """Take the stored dynamic values (at start; on a cluster, after another broker's change)."""
        loaded = self._store.load_dynamic_configs()
        self._dynamic = {name: values for (rtype, name), values in loaded.items()
                         if rtype == BROKER_RESOURCE and name in ("", self._node)}
        self._apply()

    # ---- what is in force -----------------------------------------------------------

    def _layers(self, setting: Setting) -> list[tuple[str, str, int]]:
        """(name, value, source) of each level that sets it, most important first."""
        out = []
        for level, source in ((self._node, SOURCE_DYNAMIC_BROKER), ("", SOURCE_DYNAMIC_DEFAULT)):
            value = self._dynamic.get(level, {}).get(setting.name)
            if value is not None:
                out.append((setting.name, value, source))
        value, source = setting.static(self._static)
        if source == SOURCE_STATIC:
            out.append((setting.name, value, SOURCE_STATIC))
            default, _ = _default_of(setting)
            out.append((setting.name, default, SOURCE_DEFAULT))
        else:
            out.append((setting.name, value, SOURCE_DEFAULT))
        return out

    def _apply(self) -> None:
        """Make the running broker use what is in force: the topics' broker defaults, the fields."""
        defaults: dict[str, BrokerDefault] = {}
        for setting in SETTINGS.values():
            if not setting.dynamic:
                continue
            name, value, source = self._layers(setting)[0]
            if setting.topic is not None:
                if source != SOURCE_DEFAULT:
                    defaults[setting.topic] = BrokerDefault(value, source, name)
            elif setting.field is not None:
                static = getattr(self._static, setting.field)
                setattr(self._config, setting.field, static if source in (SOURCE_STATIC, SOURCE_DEFAULT)
                        else type(static)(float(value)))
        self._topics.broker_defaults.clear()
        self._topics.broker_defaults.update(defaults)

    # ---- the API ----------------------------------------------------------------------

    def _check_name(self, name: str) -> None:
        try:
            requested = int(name)
        except ValueError:
            raise TopicError(ErrorCode.INVALID_REQUEST, f"Node id must be an integer, but it is: {name}") from None
        if str(requested) != self._node:
            raise TopicError(ErrorCode.INVALID_REQUEST,
                             f"Unexpected broker id, expected {self._node}, but received {name}")

    def describe(self, name: str, keys: Iterable[str] | None, synonyms: bool, docs: bool) -> list[dict[str, Any]]:
        """DescribeConfigs' entries (raises TopicError for another broker's id)."""
        wanted = set(keys) if keys else None
        out = []
        if name == "":
            for cname, value in sorted(self._dynamic.get("", {}).items()):
                if wanted is not None and cname not in wanted:
                    continue
                setting = SETTINGS.get(cname)
                entry = {"name": cname, "value": value, "read_only": False, "config_source": SOURCE_DYNAMIC_DEFAULT,
                         "is_sensitive": False, "config_type": setting.type if setting else STRING,
                         "documentation": None, "synonyms": []}
                if synonyms:
                    entry["synonyms"] = [{"name": cname, "value": value, "source": SOURCE_DYNAMIC_DEFAULT}]
                out.append(entry)
            return out
        self._check_name(name)
        for setting in SETTINGS.values():
            if wanted is not None and setting.name not in wanted:
                continue
            layers = self._layers(setting)
            _, value, source = layers[0]
            out.append({"name": setting.name, "value": value, "read_only": not setting.dynamic,
                        "config_source": source, "is_sensitive": False, "config_type": setting.type,
                        "documentation": None,
                        "synonyms": [{"name": n, "value": v, "source": s} for n, v, s in layers] if synonyms else []})
        return out

    def alter(self, name: str, compute: Callable[[dict[str, str]], dict[str, str | None]], validate_only: bool) -> None:
        """Apply `compute(this level's dynamic configs) -> new ones`; raises TopicError (Kafka's
        code and message) and changes nothing when refused."""
        if name != "":
            self._check_name(name)
        current = dict(self._dynamic.get(name, {}))
        new = {k: v for k, v in compute(current).items() if v is not None}
        changed = {k for k in set(new) | set(current) if new.get(k) != current.get(k)}
        static = sorted(k for k in changed if k in SETTINGS and not SETTINGS[k].dynamic)
        if static:
            raise TopicError(ErrorCode.INVALID_REQUEST,
                             f"Cannot update these configs dynamically: [{', '.join(static)}]")
        unknown = sorted(k for k in changed if k not in SETTINGS)
        if unknown:
            raise TopicError(ErrorCode.INVALID_CONFIG, f"Unknown broker configs: {', '.join(unknown)}")
        topic_values: dict[str, str | None] = {}
        for key, value in new.items():
            setting = SETTINGS[key]
            _check_type(key, value, setting.type)
            if setting.topic is not None:
                topic_values[setting.topic] = value
            elif setting.field is not None:  # the setting's own range (BrokerConfig.check)
                static = getattr(self._static, setting.field)
                try:
                    replace(self._static, **{setting.field: type(static)(float(value))}).check()
                except ConfigError as exc:
                    raise TopicError(ErrorCode.INVALID_REQUEST,
                                     f"Invalid value {value} for configuration {key}: {exc}") from None
        try:
            validate_configs(topic_values)
        except TopicError as exc:  # the topic config's rule, said with the broker config's name
            message = exc.message or ""
            for key, setting in SETTINGS.items():
                if setting.topic is not None and key in new:
                    message = message.replace(f"configuration {setting.topic}:", f"configuration {key}:")
            raise TopicError(ErrorCode.INVALID_REQUEST, message) from None
        if validate_only:
            return
        self._store.write_dynamic_configs([((BROKER_RESOURCE, name), new)])
        if new:
            self._dynamic[name] = new
        else:
            self._dynamic.pop(name, None)
        self._apply()


def _default_of(setting: Setting) -> tuple[str, int]:
    if setting.topic is not None:
        return TOPIC_CONFIGS[setting.topic].default, SOURCE_DEFAULT
    if setting.field is not None:
        return _text(_DEFAULTS[setting.field]), SOURCE_DEFAULT
    return setting.fixed or "", SOURCE_DEFAULT


def _check_type(name: str, value: str, type_: int) -> None:
    """Kafka's ConfigDef parse of a broker config's value (refused as INVALID_REQUEST, as
    Kafka's controller answers a broker config it cannot parse)."""
    kinds = {DOUBLE: "DOUBLE", LONG: "LONG", INT: "INT", SHORT: "SHORT"}
    if type_ not in kinds:
        return
    try:
        float(value) if type_ == DOUBLE else int(value.strip())
    except ValueError:
        raise TopicError(ErrorCode.INVALID_REQUEST,
                         f"Invalid value {value} for configuration {name}: "
                         f"Not a number of type {kinds[type_]}") from None
