"""A KIP-848 group's own configs: the GROUP config resource (Kafka's GroupConfig, KIP-848).

Why: Kafka lets an operator give one consumer group its own session timeout and heartbeat
interval at run time (`kafka-configs --entity-type groups --entity-name G --alter
--add-config consumer.session.timeout.ms=…`), without touching the broker's
group.consumer.* defaults. Rules, as Apache Kafka 4.3 keeps them (GroupConfig,
ControllerConfigurationValidator, ConfigHelper.createGroupConfigEntry):

- The configs tmqgate has: `consumer.session.timeout.ms`, `consumer.heartbeat.interval.ms`, and
  the share groups' (KIP-932) `share.session.timeout.ms`, `share.heartbeat.interval.ms`,
  `share.record.lock.duration.ms`, `share.delivery.count.limit`,
  `share.partition.max.record.locks`, `share.auto.offset.reset` (latest | earliest |
  by_duration:ISO-8601 duration) and
  `share.isolation.level` (read_uncommitted | read_committed); streams groups do not exist
  here, so their configs are unknown names.
- A change is validated on the whole resulting set, broker defaults filled in: an unknown
  name, a value that is not an int or below 1, a value outside the broker's
  group.{consumer,share}.{min,max}.* bounds, a string not among its values, or a session
  timeout not above the heartbeat interval is INVALID_CONFIG with Kafka's message; nothing is
  changed then.
- A group need not exist; its configs are kept (LevelDB, ``storage.dynconfigs``, resource
  type 32) and given to the coordinator, which applies them from the group's members' next
  heartbeats (the interval in the answer, the session deadline it sets).
- DescribeConfigs shows every config: a group's own value with source GROUP_CONFIG (8), else
  the broker's with DEFAULT_CONFIG (5); never read-only; the synonyms are the group's own value
  (when set), then the broker's setting it defaults to (group.consumer.…: STATIC_BROKER_CONFIG (4) when the config
  file changed it, else DEFAULT_CONFIG).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

from tmqgate.broker.configs.config import BrokerConfig
from tmqgate.broker.topics import TopicError
from tmqgate.coordinator.consumer import ConsumerConfig
from tmqgate.coordinator.share_group import BY_DURATION, ShareSettings, reset_duration_ms
from tmqgate.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from tmqgate.coordinator.runtime import CoordinatorRuntime
    from tmqgate.storage import Store

#: Kafka's ConfigResource type of a group.
GROUP_RESOURCE = 32
#: DescribeConfigs' config sources.
SOURCE_GROUP = 8
SOURCE_STATIC_BROKER = 4
SOURCE_DEFAULT = 5
CONFIG_TYPE_STRING = 2
CONFIG_TYPE_INT = 3

SESSION = "consumer.session.timeout.ms"
HEARTBEAT = "consumer.heartbeat.interval.ms"
SHARE_SESSION = "share.session.timeout.ms"
SHARE_HEARTBEAT = "share.heartbeat.interval.ms"


@dataclass(frozen=True)
class _Key:
    name: str
    broker_setting: str | None  # the BrokerConfig field that gives its default (ints)
    min_setting: str | None
    max_setting: str | None
    doc: str
    choices: tuple[str, ...] = ()  # a string config's values, the first its default

    @property
    def is_int(self) -> bool:
        return not self.choices


def _share_int(name: str, doc: str) -> _Key:
    """A share group int config: its broker default group.share.X and bounds group.share.{min,max}.X."""
    field = name.removeprefix("share.").replace(".", "_")
    return _Key(name, f"group_share_{field}", f"group_share_min_{field}", f"group_share_max_{field}", doc)


KEYS = {k.name: k for k in (
    _Key(SESSION, "group_consumer_session_timeout_ms", "group_consumer_min_session_timeout_ms",
         "group_consumer_max_session_timeout_ms",
         "The timeout to detect client failures when using the consumer group protocol."),
    _Key(HEARTBEAT, "group_consumer_heartbeat_interval_ms", "group_consumer_min_heartbeat_interval_ms",
         "group_consumer_max_heartbeat_interval_ms",
         "The heartbeat interval given to the members of a consumer group."),
    _share_int(SHARE_SESSION, "The timeout to detect client failures when using the share group protocol."),
    _share_int(SHARE_HEARTBEAT, "The heartbeat interval given to the members of a share group."),
    _share_int("share.record.lock.duration.ms", "The record acquisition lock duration in milliseconds for share "
               "groups."),
    _share_int("share.delivery.count.limit", "The maximum number of delivery attempts for a record delivered to a "
               "share group."),
    _share_int("share.partition.max.record.locks", "Share-group record lock limit per share-partition."),
    _Key("share.auto.offset.reset", None, None, None, "The strategy to initialize the share-partition start "
         "offset.", ("latest", "earliest")),
    _Key("share.isolation.level", None, None, None, "Controls how to read records written transactionally.",
         ("read_uncommitted", "read_committed")),
)}


#: BrokerConfig's own defaults: a setting that differs came from the config file.
_BROKER_DEFAULTS = {f.name: f.default for f in fields(BrokerConfig)}


def _kafka_name(setting: str) -> str:
    return setting.replace("_", ".")


class GroupConfigs:
    """The GROUP resource: validation, persistence, and the coordinator it configures."""

    def __init__(self, store: Store, config: BrokerConfig, coordinator: CoordinatorRuntime) -> None:
        self._store = store
        self._config = config
        self._coordinator = coordinator
        self._own: dict[str, dict[str, str]] = {}
        self.reload()

    def reload(self) -> None:
        """Take the stored group configs (at start; on a cluster, after another broker's change)."""
        own = {name: values for (rtype, name), values in self._store.load_dynamic_configs().items()
               if rtype == GROUP_RESOURCE}
        for group in self._own.keys() | own.keys():
            if self._own.get(group) != own.get(group):
                self._coordinator.machine.set_consumer_config(group, self._consumer_config(own.get(group, {})))
        self._own = own

    def _defaults(self) -> dict[str, str]:
        return {k.name: str(getattr(self._config, k.broker_setting)) if k.broker_setting else k.choices[0]
                for k in KEYS.values()}

    def _consumer_config(self, values: dict[str, str]) -> ConsumerConfig | None:
        if not any(k.startswith("consumer.") for k in values):
            return None
        merged = {**self._defaults(), **values}
        return ConsumerConfig(session_timeout_ms=int(merged[SESSION]), heartbeat_interval_ms=int(merged[HEARTBEAT]))

    def share_settings(self, group: str) -> ShareSettings:
        """A share group's configs as they apply now: its own over the broker's."""
        merged = {**self._defaults(), **self._own.get(group, {})}
        return ShareSettings(
            auto_offset_reset=merged["share.auto.offset.reset"].strip(),
            isolation_level=merged["share.isolation.level"].strip().lower(),
            record_lock_duration_ms=int(merged["share.record.lock.duration.ms"]),
            delivery_count_limit=int(merged["share.delivery.count.limit"]),
            partition_max_record_locks=int(merged["share.partition.max.record.locks"]),
            session_timeout_ms=int(merged[SHARE_SESSION]), heartbeat_interval_ms=int(merged[SHARE_HEARTBEAT]))

    def describe(self, group: str, names: Iterable[str] | None, synonyms: bool, docs: bool) -> list[dict[str, Any]]:
        """DescribeConfigs' entries for the group (raises TopicError on an empty name)."""
        if not group:
            raise TopicError(ErrorCode.INVALID_REQUEST, "Group name must not be empty")
        wanted = set(names) if names else None
        own = self._own.get(group, {})
        defaults = self._defaults()
        out = []
        for key in KEYS.values():
            if wanted is not None and key.name not in wanted:
                continue
            value = own.get(key.name, defaults[key.name])
            source = SOURCE_GROUP if key.name in own else SOURCE_DEFAULT
            broker: list[dict[str, Any]] = []
            if key.broker_setting is not None:
                broker_value = getattr(self._config, key.broker_setting)
                broker_source = (SOURCE_DEFAULT if broker_value == _BROKER_DEFAULTS[key.broker_setting]
                                 else SOURCE_STATIC_BROKER)
                broker = [{"name": _kafka_name(key.broker_setting), "value": str(broker_value),
                           "source": broker_source}]
            out.append({"name": key.name, "value": value, "read_only": False, "config_source": source,
                        "is_sensitive": False, "config_type": CONFIG_TYPE_INT if key.is_int else CONFIG_TYPE_STRING,
                        "documentation": key.doc if docs else None,
                        "synonyms": ([{"name": key.name, "value": value, "source": source}] if key.name in own else [])
                        + broker if synonyms else []})
        return out

    def alter(self, group: str, compute: Callable[[dict[str, str]], dict[str, str | None]],
              validate_only: bool) -> None:
        """Apply `compute(the group's configs) -> new configs`; raises TopicError (Kafka's code
        and message) and changes nothing when the result is refused."""
        if not group:
            raise TopicError(ErrorCode.INVALID_REQUEST, "Group name must not be empty")
        new = {k: v for k, v in compute(dict(self._own.get(group, {}))).items() if v is not None}
        self._validate(new)
        if validate_only:
            return
        self._store.write_dynamic_configs([((GROUP_RESOURCE, group), new)])
        if new:
            self._own[group] = new
        else:
            self._own.pop(group, None)
        self._coordinator.machine.set_consumer_config(group, self._consumer_config(new))

    def _validate(self, values: dict[str, str]) -> None:
        for name in values:
            if name not in KEYS:
                raise TopicError(ErrorCode.INVALID_CONFIG, f"Unknown group config name: {name}")
        parsed = {k: int(v) for k, v in self._defaults().items() if KEYS[k].is_int}
        for name, text in values.items():
            key = KEYS[name]
            if not key.is_int:
                if name == "share.auto.offset.reset" and text.strip().lower().startswith(BY_DURATION):
                    if reset_duration_ms(text) is None:
                        raise TopicError(ErrorCode.INVALID_CONFIG, f"Invalid value {text} for configuration {name}: "
                                         "by_duration must be followed by an ISO-8601 duration, e.g. PT1H")
                    continue
                if text.strip().lower() not in key.choices:
                    raise TopicError(ErrorCode.INVALID_CONFIG, f"Invalid value {text} for configuration {name}: "
                                     f"String must be one of: {', '.join(key.choices)}")
                continue
            try:
                number = int(text.strip())
            except ValueError:
                raise TopicError(ErrorCode.INVALID_CONFIG,
                                 f"Invalid value {text} for configuration {name}: Not a number of type INT") from None
            if not -(2**31) <= number < 2**31:
                raise TopicError(ErrorCode.INVALID_CONFIG,
                                 f"Invalid value {text} for configuration {name}: Not a number of type INT")
            if number < 1:
                raise TopicError(ErrorCode.INVALID_CONFIG,
                                 f"Invalid value {number} for configuration {name}: Value must be at least 1")
            parsed[name] = number
        for name in (HEARTBEAT, SESSION, *(k for k in KEYS if k.startswith("share.") and KEYS[k].is_int)):
            key = KEYS[name]  # Kafka's order of checks
            assert key.min_setting is not None and key.max_setting is not None
            if parsed[name] < getattr(self._config, key.min_setting):
                raise TopicError(ErrorCode.INVALID_CONFIG,
                                 f"{name} must be greater than or equal to {_kafka_name(key.min_setting)}")
            if parsed[name] > getattr(self._config, key.max_setting):
                raise TopicError(ErrorCode.INVALID_CONFIG,
                                 f"{name} must be less than or equal to {_kafka_name(key.max_setting)}")
        for session, heartbeat in ((SESSION, HEARTBEAT), (SHARE_SESSION, SHARE_HEARTBEAT)):
            if parsed[session] <= parsed[heartbeat]:
                raise TopicError(ErrorCode.INVALID_CONFIG, f"{session} must be greater than {heartbeat}")
