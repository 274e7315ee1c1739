"""A KIP-848 group's own configs: the GROUP config resource (Kafka's GroupConfig, KIP-848).

Why: Kafka lets an operator give one consumer group its own session timeout and heartbeat
interval at run time (`kafka-configs --entity-type groups --entity-name G --alter
--add-config consumer.session.timeout.ms=…`), without touching the broker's
group.consumer.* defaults. Rules, as Apache Kafka 4.3 keeps them (GroupConfig,
ControllerConfigurationValidator, ConfigHelper.createGroupConfigEntry):

- The configs tmqgate has: `consumer.session.timeout.ms`, `consumer.heartbeat.interval.ms`
  (share groups and streams groups do not exist here, so their configs are unknown names).
- A change is validated on the whole resulting set, broker defaults filled in: an unknown
  name, a value that is not an int or below 1, a value outside the broker's
  group.consumer.{min,max}.* bounds, or a session timeout not above the heartbeat interval
  is INVALID_CONFIG with Kafka's message; nothing is changed then.
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
CONFIG_TYPE_INT = 3

SESSION = "consumer.session.timeout.ms"
HEARTBEAT = "consumer.heartbeat.interval.ms"


@dataclass(frozen=True)
class _Key:
    name: str
    broker_setting: str  # the BrokerConfig field that gives its default
    min_setting: str
    max_setting: str
    doc: str


KEYS = {k.name: k for k in (
    _Key(SESSION, "group_consumer_session_timeout_ms", "group_consumer_min_session_timeout_ms",
         "group_consumer_max_session_timeout_ms",
         "The timeout to detect client failures when using the consumer group protocol."),
    _Key(HEARTBEAT, "group_consumer_heartbeat_interval_ms", "group_consumer_min_heartbeat_interval_ms",
         "group_consumer_max_heartbeat_interval_ms",
         "The heartbeat interval given to the members of a consumer group."),
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

    def _defaults(self) -> dict[str, int]:
        return {k.name: int(getattr(self._config, k.broker_setting)) for k in KEYS.values()}

    def _consumer_config(self, values: dict[str, str]) -> ConsumerConfig | None:
        if not values:
            return None
        merged = {**self._defaults(), **{k: int(v) for k, v in values.items()}}
        return ConsumerConfig(session_timeout_ms=merged[SESSION], heartbeat_interval_ms=merged[HEARTBEAT])

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
            value = own.get(key.name, str(defaults[key.name]))
            source = SOURCE_GROUP if key.name in own else SOURCE_DEFAULT
            broker_value = defaults[key.name]
            broker_source = (SOURCE_DEFAULT if broker_value == _BROKER_DEFAULTS[key.broker_setting]
                             else SOURCE_STATIC_BROKER)
            out.append({"name": key.name, "value": value, "read_only": False, "config_source": source,
                        "is_sensitive": False, "config_type": CONFIG_TYPE_INT,
                        "documentation": key.doc if docs else None,
                        "synonyms": ([{"name": key.name, "value": value, "source": source}] if key.name in own else [])
                        + [{"name": _kafka_name(key.broker_setting), "value": str(broker_value),
                            "source": broker_source}] if synonyms else []})
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
        parsed = self._defaults()
        for name, text in values.items():
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
        for name in (HEARTBEAT, SESSION):  # Kafka's order of checks
            key = KEYS[name]
            if parsed[name] < getattr(self._config, key.min_setting):
                raise TopicError(ErrorCode.INVALID_CONFIG,
                                 f"{name} must be greater than or equal to {_kafka_name(key.min_setting)}")
            if parsed[name] > getattr(self._config, key.max_setting):
                raise TopicError(ErrorCode.INVALID_CONFIG,
                                 f"{name} must be less than or equal to {_kafka_name(key.max_setting)}")
        if parsed[SESSION] <= parsed[HEARTBEAT]:
            raise TopicError(ErrorCode.INVALID_CONFIG, f"{SESSION} must be greater than {HEARTBEAT}")
