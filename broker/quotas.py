"""Client quotas as Apache Kafka has them: entities, their values, and the throttling.

Rules (Kafka's ClientQuotaControlManager, ClientQuotasImage, ClientQuotaManager):

- An entity is a set of (type, name) with types `user`, `client-id` (together or alone) or
  `ip` (alone); a name of None is the type's default entity (`<default>`). User and client-id
  entities take `producer_byte_rate`, `consumer_byte_rate` (integral, bytes/s),
  `request_percentage` and `controller_mutation_rate`; ip entities `connection_creation_rate`.
  Every value must be > 0. All are enforced here; `connection_creation_rate` as Kafka's
  SocketServer does: a new connection that takes its ip's rate over the quota is closed unserved
  after the throttle time.
- AlterClientQuotas is checked entity by entity (an entity's changes all apply or none do),
  in one WriteBatch (`storage.quotas`); `validate_only` checks and writes nothing.
- Which quota applies to a connection (user = the principal's name, client id = the request
  header's), in Kafka's order: /users/<user>/clients/<client-id>, /users/<user>/clients/<default>,
  /users/<user>, /users/<default>/clients/<client-id>, /users/<default>/clients/<default>,
  /users/<default>, /clients/<client-id>, /clients/<default>. The level that matched decides
  who shares the rate: e.g. a client-id quota is shared by every connection with that client
  id, a user quota by all of that user's connections.
- The rate is Kafka's `Rate` over a `SampledStat`: `quota_window_num` samples of
  `quota_window_size_seconds`, the window never taken as shorter than n-1 whole samples. A
  request that takes the rate over the quota is answered at once with
  throttle_time_ms = round((rate - quota) / quota * window) (for request_percentage at most one
  sample window), and its connection is not read again until that time has passed (Kafka mutes
  the channel, KIP-219). Produce counts the request's size, Fetch the records it returns (a
  throttled Fetch returns no data and its bytes are taken back, and a Fetch never asks for
  more than the quota allows in a window), request_percentage the handler's time (waits for
  data or for a group rebalance excluded) as a percentage of one thread.
- `controller_mutation_rate` (KIP-599, Kafka's ControllerMutationQuotaManager): the partitions
  CreateTopics, CreatePartitions and DeleteTopics create or delete, per user / client id (the
  same levels), against a token bucket of `controller_quota_window_num` x
  `controller_quota_window_size_seconds` seconds of the rate (a new bucket is full; it refills
  at the rate; tokens may go negative). A request asks `mutation_quota(...)` for a
  `MutationQuota` and records each topic's partitions, after the topic's other checks, as
  Kafka's controller does (validate_only too):
  - strict (CreateTopics v6+, CreatePartitions v3+, DeleteTopics v5+): a topic is refused with
    THROTTLING_QUOTA_EXCEEDED when the bucket is already below zero (one that still has tokens
    takes any number of partitions);
  - permissive (older versions): every topic is taken and recorded.
  Either way, once the bucket is below zero, throttle_time_ms = the time it takes to refill to
  zero (tokens / rate), less the time since it was measured; the connection is muted for it.
- With no quota set, the server asks nothing of this module (`ClientQuotaManagers.active`,
  `mutation_active`).
"""

from __future__ import annotations

import ipaddress
import logging
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tmqgate.broker.client import current_client
from tmqgate.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from tmqgate.broker.config import BrokerConfig
    from tmqgate.broker.ratelimit import RateLimitedLog
    from tmqgate.protocol.messages import Request
    from tmqgate.storage import Store

log = logging.getLogger("tmqgate.quotas")

USER, CLIENT_ID, IP = "user", "client-id", "ip"
PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
CONTROLLER_MUTATION_RATE = "controller_mutation_rate"
CONNECTION_CREATION_RATE = "connection_creation_rate"

#: Kafka's QuotaConfig: the keys each kind of entity takes, with their ConfigDef types.
USER_CLIENT_KEYS = {PRODUCER_BYTE_RATE: "LONG", CONSUMER_BYTE_RATE: "LONG",
                    REQUEST_PERCENTAGE: "DOUBLE", CONTROLLER_MUTATION_RATE: "DOUBLE"}
IP_KEYS = {CONNECTION_CREATION_RATE: "INT"}
_MAX = {"SHORT": (2**15 - 1, "a SHORT"), "INT": (2**31 - 1, "an INT"), "LONG": (2**63 - 1, "a LONG")}

#: Match types of a DescribeClientQuotas filter component.
MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2

# Kafka's ApiKeys SASL_HANDSHAKE and SASL_AUTHENTICATE never reach its request quota.
_EXEMPT = frozenset({17, 36})
# CreateTopics, DeleteTopics, CreatePartitions: the APIs under controller_mutation_rate
MUTATION_APIS = frozenset({19, 20, 37})
_PRODUCE, _FETCH = 0, 1

Entity = tuple[tuple[str, str | None], ...]  # (type, name or None = default), sorted by type


def entity_text(entity: Mapping[str, str | None]) -> str:
    """Kafka's ClientQuotaEntity.toString (its HashMap puts client-id before user)."""
    inner = ", ".join(f"{t}={'null' if n is None else n}" for t, n in sorted(entity.items()))
    return f"ClientQuotaEntity(entries={{{inner}}})"


class QuotaError(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _check_value(valid: Mapping[str, str], key: str, value: float) -> str | None:
    """Kafka's validateQuotaKeyValue: the message of the refusal, or None."""
    kind = valid.get(key)
    if kind is None:
        return f"Invalid configuration key {key}"
    if value <= 0.0:
        return f"Quota {key} must be greater than 0"
    if kind == "DOUBLE":
        return None
    limit, name = _MAX[kind]
    if value > limit:
        return f"Proposed value for {key} is too large for {name}."
    if abs(value % 1.0) > 1e-6:
        return f"{key} cannot be a fractional value."
    return None


def valid_ip(name: str | None) -> bool:
    if name is None:
        return True
    try:
        ipaddress.ip_address(name)
        return True
    except ValueError:
        return False


@dataclass
class AlterResult:
    entity: list[tuple[str, str | None]]  # as the response lists it
    code: ErrorCode = ErrorCode.NONE
    message: str | None = None


class QuotaConfigs:
    """The entities and their values, persisted in the store; `version` changes on every
    alteration (the throttling's caches key on it)."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self.entities: dict[Entity, dict[str, float]] = store.load_client_quotas()
        self.version = 0

    def reload(self) -> None:
        self.entities = self._store.load_client_quotas()
        self.version += 1

    def alter(self, entries: list[dict[str, Any]], validate_only: bool,
              resolvable: Mapping[str, bool] | None = None) -> list[AlterResult]:
        """AlterClientQuotas: Kafka's controller's checks entity by entity; `resolvable` says
        which ip entity names that are not addresses resolve as host names."""
        results: dict[Entity, AlterResult] = {}
        changes: dict[Entity, dict[str, float]] = {}
        for entry in entries:
            as_map: dict[str, str | None] = {}
            for e in entry["entity"]:
                as_map[e["entity_type"]] = e["entity_name"]  # a Java HashMap: the last one wins
            entity: Entity = tuple(sorted(as_map.items()))
            result = AlterResult(list(entity))
            ops: dict[str, float | None] = {}
            error: str | None = None
            for op in entry["ops"]:
                if op["key"] in ops:
                    error = "duplicate key"
                else:
                    ops[op["key"]] = None if op["remove"] else float(op["value"])
            if error is not None or entity in results:
                # Kafka's controller files a duplicate key's error under the entity, then finds
                # the entity already answered: both read "Ignoring duplicate entity".
                results[entity] = AlterResult(list(entity), ErrorCode.INVALID_REQUEST,
                                              f"Ignoring duplicate entity {entity_text(as_map)}")
                continue
            results[entity] = result
            error = self._check_entity(as_map, resolvable or {})
            if error is not None:
                result.code, result.message = ErrorCode.INVALID_REQUEST, error
                continue
            valid = IP_KEYS if IP in as_map else USER_CLIENT_KEYS
            current = changes.get(entity, self.entities.get(entity, {}))
            new = dict(current)
            for key, value in ops.items():
                if value is None:
                    new.pop(key, None)
                    continue
                error = _check_value(valid, key, value)
                if error is not None:
                    break
                new[key] = value
            if error is not None:
                result.code, result.message = ErrorCode.INVALID_REQUEST, error
                continue
            if new != current:
                changes[entity] = new
        if changes and not validate_only:
            self._store.write_client_quotas(changes.items())
            for entity, values in changes.items():
                if values:
                    self.entities[entity] = values
                else:
                    self.entities.pop(entity, None)
            self.version += 1
        return list(results.values())

    @staticmethod
    def _check_entity(entity: Mapping[str, str | None], resolvable: Mapping[str, bool]) -> str | None:
        """Kafka's validateEntity and configKeysForEntityType."""
        if not entity:
            return "Invalid empty client quota entity"
        for etype, name in entity.items():
            if etype not in (USER, CLIENT_ID, IP):
                return f"Unhandled client quota entity type: {etype}"
            if name is not None and name == "":
                return f"Empty {etype} not supported"
        if IP in entity:
            if USER in entity or CLIENT_ID in entity:
                return "Invalid quota entity combination, IP entity shouldnot be combined with User or ClientId"
            name = entity[IP]
            if not valid_ip(name) and not resolvable.get(name or "", False):
                return f"{name} is not a valid IP or resolvable host."
        return None

    def describe(self, components: list[dict[str, Any]], strict: bool) -> list[dict[str, Any]]:
        """DescribeClientQuotas: Kafka's ClientQuotasImage.describe (raises QuotaError)."""
        exact: dict[str, str | None] = {}
        typed: set[str] = set()
        for c in components:
            etype = c["entity_type"]
            if not etype:
                raise QuotaError(ErrorCode.INVALID_REQUEST, "Invalid empty entity type.")
            if etype in exact or etype in typed:
                raise QuotaError(ErrorCode.INVALID_REQUEST,
                                 f"Entity type {etype} cannot appear more than once in the filter.")
            if etype not in (IP, USER, CLIENT_ID):
                raise QuotaError(ErrorCode.UNSUPPORTED_VERSION, f"Unsupported entity type {etype}")
            match, kind = c["match"], c["match_type"]
            if kind == MATCH_EXACT:
                if match is None:
                    raise QuotaError(ErrorCode.INVALID_REQUEST,
                                     "Request specified MATCH_TYPE_EXACT, but set match string to null.")
                exact[etype] = match
            elif kind == MATCH_DEFAULT:
                if match is not None:
                    raise QuotaError(ErrorCode.INVALID_REQUEST,
                                     "Request specified MATCH_TYPE_DEFAULT, but also specified a match string.")
                exact[etype] = None
            elif kind == MATCH_SPECIFIED:
                if match is not None:
                    raise QuotaError(ErrorCode.INVALID_REQUEST,
                                     "Request specified MATCH_TYPE_SPECIFIED, but also specified a match string.")
                typed.add(etype)
            else:
                raise QuotaError(ErrorCode.INVALID_REQUEST, f"Unknown match type {kind}")
        if (IP in exact or IP in typed) and ({USER, CLIENT_ID} & (set(exact) | typed)):
            raise QuotaError(ErrorCode.INVALID_REQUEST, "Invalid entity filter component combination. IP filter "
                             "component should not be used with user or clientId filter component.")
        entries = []
        for entity, values in self.entities.items():
            names = dict(entity)
            if strict and len(names) != len(exact) + len(typed):
                continue
            if any(t not in names or names[t] != n for t, n in exact.items()):
                continue
            if any(t not in names for t in typed):
                continue
            entries.append({"entity": [{"entity_type": t, "entity_name": n} for t, n in entity],
                            "values": [{"key": k, "value": v} for k, v in sorted(values.items())]})
        return entries


# --- enforcement ------------------------------------------------------------------------------

# Kafka's QuotaTypes: which levels have a quota of one key.
_NO, _CLIENT, _USER, _USER_CLIENT = 0, 1, 2, 4


class _Sample:
    __slots__ = ("start", "last_event", "value")

    def __init__(self, now: int) -> None:
        self.start = self.last_event = now
        self.value = 0.0

    def reset(self, now: int) -> None:
        self.start = self.last_event = now
        self.value = 0.0


class Rate:
    """Kafka's `Rate` over a `WindowedSum` (SampledStat): `samples` windows of `window_ms`,
    plus one slot for a sample that overlaps the monitored window.

    Kept cheap per request: the sum, the oldest sample's start and the time the next sample
    can expire are kept between calls and rescanned only when a sample is reused (once a
    window) or may have expired (a sample's start and last event only ever move forward)."""

    __slots__ = ("samples", "current", "last_record", "total", "oldest", "purge_at")

    def __init__(self) -> None:
        self.samples: list[_Sample] = []
        self.current = 0
        self.last_record = 0
        self.total = 0.0
        self.oldest = 0
        self.purge_at = 0

    def record(self, value: float, now: int, window_ms: int, n: int) -> None:
        samples = self.samples
        if not samples:
            samples.append(_Sample(now))
            self.oldest, self.purge_at = now, now + n * window_ms
        sample = samples[self.current]
        if now - sample.start >= window_ms:
            self.current = (self.current + 1) % (n + 1)
            if self.current >= len(samples):
                sample = _Sample(now)
                samples.append(sample)
            else:
                sample = samples[self.current]
                sample.reset(now)
                self._rescan(now, n * window_ms)
        sample.value += value
        sample.last_event = now
        self.total += value
        self.last_record = now

    def _rescan(self, now: int, expire: int) -> None:
        """SampledStat.purgeObsoleteSamples (samples with no event for n windows are reset),
        and the sum, the oldest start and the next possible expiry recomputed."""
        total = 0.0
        oldest = now
        first_event = now
        for s in self.samples:
            if now - s.last_event >= expire:
                s.reset(now)
            total += s.value
            if s.start < oldest:
                oldest = s.start
            if s.last_event < first_event:
                first_event = s.last_event
        self.total, self.oldest, self.purge_at = total, oldest, first_event + expire

    def measure(self, now: int, window_ms: int, n: int) -> tuple[float, int]:
        """(the rate per second, the window it was measured over in ms): the window runs from
        the oldest sample's start and is never taken as less than n - 1 whole windows."""
        if not self.samples:  # SampledStat.oldest() starts the first sample when asked
            self.samples.append(_Sample(now))
            self.oldest, self.purge_at = now, now + n * window_ms
        elif now >= self.purge_at:
            self._rescan(now, n * window_ms)
        elapsed = now - self.oldest
        full = elapsed // window_ms
        if full < n - 1:
            elapsed += (n - 1 - full) * window_ms
        window = max(elapsed, 1)
        return self.total / (window / 1000.0), window


class TokenBucket:
    """Kafka's TokenBucket stat: credits refilled at the quota's rate up to `burst`, taken by
    each record (and allowed below zero). A new bucket is full (Kafka's starts at time 0)."""

    __slots__ = ("tokens", "last")

    def __init__(self) -> None:
        self.tokens = 0.0
        self.last: int | None = None

    def _refill(self, rate: float, burst: float, now: int) -> None:
        elapsed = burst / rate if self.last is None else (now - self.last) / 1000.0
        self.tokens = min(burst, self.tokens + rate * elapsed)
        self.last = now

    def measure(self, rate: float, burst: float, now: int) -> float:
        self._refill(rate, burst, now)
        return self.tokens

    def record(self, value: float, rate: float, burst: float, now: int) -> None:
        self._refill(rate, burst, now)
        self.tokens = min(burst, self.tokens - value)


class MutationQuota:
    """One request's controller mutation quota (Kafka's Strict- / PermissiveControllerMutationQuota)."""

    __slots__ = ("_bucket", "_rate", "_burst", "strict", "_throttle_ms", "_recorded_at", "_on_throttle")

    def __init__(self, bucket: TokenBucket, rate: float, burst: float, strict: bool,
                 on_throttle: Any = None) -> None:
        self._bucket, self._rate, self._burst, self.strict = bucket, rate, burst, strict
        self._throttle_ms = 0
        self._recorded_at = 0
        self._on_throttle = on_throttle

    def record(self, permits: int) -> bool:
        """Take `permits` partition mutations; False (nothing taken) when a strict quota is
        exhausted: the topic is then answered THROTTLING_QUOTA_EXCEEDED."""
        now = _monotonic_ms()
        bucket = self._bucket
        if self.strict:
            tokens = bucket.measure(self._rate, self._burst, now)
            if tokens < 0:
                self._violated(tokens, now)
                return False
            bucket.record(permits, self._rate, self._burst, now)
            return True
        bucket.record(permits, self._rate, self._burst, now)
        tokens = bucket.measure(self._rate, self._burst, now)
        if tokens < 0:
            self._violated(tokens, now)
        return True

    def _violated(self, tokens: float, now: int) -> None:
        # ControllerMutationQuotaManager.throttleTimeMs: the time to refill the bucket to zero
        self._throttle_ms = int(-tokens / self._rate * 1000 + 0.5)
        self._recorded_at = now

    def throttle_time_ms(self) -> int:
        """The throttle time for the answer: the last violation's, less the time since."""
        if not self._throttle_ms:
            return 0
        left = max(0, self._throttle_ms - (_monotonic_ms() - self._recorded_at))
        if left and self._on_throttle is not None:
            self._on_throttle(left)
        return left


@dataclass
class ThrottleStats:
    """What a quota type has throttled since start (for logs and, later, metrics)."""

    throttled: int = 0
    throttle_ms: int = 0
    by_client: dict[tuple[str, str], int] = field(default_factory=dict)  # (user, client id) -> count


class QuotaManager:
    """One quota key's enforcement (Kafka's ClientQuotaManager for one QuotaType)."""

    def __init__(self, key: str, configs: QuotaConfigs, window_ms: int, samples: int,
                 max_throttle_ms: int | None = None) -> None:
        self.key = key
        self._configs = configs
        self.window_ms = window_ms
        self.samples = samples
        self.max_throttle_ms = max_throttle_ms
        self.sensors: dict[tuple[str, str], Rate] = {}
        self.stats = ThrottleStats()
        self._version = -1
        self._levels = _NO
        self._values: dict[Entity, float] = {}
        self._resolved: dict[tuple[str, str], tuple[tuple[str, str], float] | None] = {}

    def _refresh(self) -> None:
        configs = self._configs
        self._version = configs.version
        self._resolved.clear()
        self._values = {e: v[self.key] for e, v in configs.entities.items() if self.key in v}
        levels = _NO
        for entity in self._values:
            types = {t for t, _ in entity}
            levels |= _USER_CLIENT if types == {USER, CLIENT_ID} else _USER if types == {USER} else \
                _CLIENT if types == {CLIENT_ID} else 0
        self._levels = levels

    def resolve(self, user: str, client_id: str) -> tuple[tuple[str, str], float] | None:
        """(the sensor's tags (user, client id), the quota) for a connection, or None."""
        if self._version != self._configs.version:
            self._refresh()
        key = (user, client_id)
        try:
            return self._resolved[key]
        except KeyError:
            pass
        tags = self._tags(user, client_id)
        bound = self._limit(*tags)
        found = None if bound is None else (tags, bound)
        if len(self._resolved) > 100_000:
            self._resolved.clear()
        self._resolved[key] = found
        return found

    def _tags(self, user: str, client_id: str) -> tuple[str, str]:
        """Kafka's DefaultQuotaCallback.quotaMetricTags."""
        levels, has = self._levels, self._values.__contains__
        if levels in (_NO, _CLIENT):
            return "", client_id
        if levels == _USER:
            return user, ""
        if levels == _USER_CLIENT:
            return user, client_id
        u, c = (USER, user), (CLIENT_ID, client_id)
        du, dc = (USER, None), (CLIENT_ID, None)
        if has((c, u)) or has((dc, u)):
            return user, client_id
        if has((u,)):
            return user, ""
        if has((c, du)) or has((dc, du)):
            return user, client_id
        if has((du,)):
            return user, ""
        return "", client_id

    def _limit(self, user: str, client_id: str) -> float | None:
        """Kafka's DefaultQuotaCallback.quotaLimit for the sensor's tags."""
        u: tuple[str, str | None] = (USER, user)
        c: tuple[str, str | None] = (CLIENT_ID, client_id)
        du: tuple[str, str | None] = (USER, None)
        dc: tuple[str, str | None] = (CLIENT_ID, None)
        candidates: tuple[Entity, ...] = ()
        if user and client_id:
            candidates = ((c, u), (dc, u), (c, du), (dc, du))
        elif user:
            candidates = ((u,), (du,))
        elif client_id:
            candidates = ((c,), (dc,))
        for entity in candidates:
            if (v := self._values.get(entity)) is not None:
                return v
        return None

    def record(self, user: str, client_id: str, value: float, now: int) -> int:
        """Record `value` for the connection; the throttle time in ms (0 within the quota)."""
        found = self.resolve(user, client_id)
        if found is None:
            return 0
        tags, bound = found
        sensor = self.sensors.get(tags)
        if sensor is None:
            sensor = self.sensors[tags] = Rate()
        sensor.record(value, now, self.window_ms, self.samples)
        rate, window = sensor.measure(now, self.window_ms, self.samples)
        if rate <= bound:
            return 0
        throttle = int((rate - bound) / bound * window + 0.5)  # Java's Math.round
        if self.max_throttle_ms is not None:
            throttle = min(throttle, self.max_throttle_ms)
        return throttle

    def unrecord(self, user: str, client_id: str, value: float, now: int) -> None:
        found = self.resolve(user, client_id)
        if found is not None and (sensor := self.sensors.get(found[0])) is not None:
            sensor.record(-value, now, self.window_ms, self.samples)

    def max_value_in_window(self, user: str, client_id: str) -> float | None:
        """Kafka's getMaxValueInQuotaWindow: the most one request may take without being
        throttled for sure (quota x (samples - 1) windows); None without a quota."""
        found = self.resolve(user, client_id)
        if found is None:
            return None
        return found[1] * (self.samples - 1) * self.window_ms / 1000

    def note_throttle(self, user: str, client_id: str, ms: int) -> None:
        s = self.stats
        s.throttled += 1
        s.throttle_ms += ms
        if len(s.by_client) < 10_000 or (user, client_id) in s.by_client:
            s.by_client[(user, client_id)] = s.by_client.get((user, client_id), 0) + 1

    def expire(self, now: int, idle_ms: int) -> None:
        """Drop sensors idle for `idle_ms` (Kafka: an hour)."""
        for tags in [t for t, s in self.sensors.items() if now - s.last_record >= idle_ms]:
            del self.sensors[tags]


class RequestClock:
    """A request's handler time, without the time it waited parked (Fetch's long poll, a
    group rebalance): Kafka counts request-handler thread time, and a parked request uses none."""

    __slots__ = ("start", "parked")

    def __init__(self) -> None:
        self.start = time.perf_counter()
        self.parked = 0.0

    def busy_seconds(self) -> float:
        return max(0.0, time.perf_counter() - self.start - self.parked)


_clock: ContextVar[RequestClock | None] = ContextVar("tmqgate_request_clock", default=None)


@contextmanager
def parked() -> Iterator[None]:
    """Wrap a handler's wait for data or for other clients: not counted as its handler time."""
    clock = _clock.get()
    if clock is None:
        yield
        return
    t0 = time.perf_counter()
    try:
        yield
    finally:
        clock.parked += time.perf_counter() - t0


_SENSOR_IDLE_MS = 3_600_000  # Kafka's InactiveSensorExpirationTimeSeconds


def _monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


def _ip_key(address: str | None) -> str | None:
    """An ip entity's name or a peer's address in one spelling (None: the default entity)."""
    if address is None:
        return None
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return address
    mapped = getattr(ip, "ipv4_mapped", None)
    return str(mapped or ip)


def _user_of(principal: str) -> str:
    return principal.partition(":")[2] if ":" in principal else principal


class ClientQuotaManagers:
    """The broker's quotas: the configs (DescribeClientQuotas / AlterClientQuotas) and the
    three enforced kinds. The server calls `clock()` before a handler and `charge()` after it
    only while `active` (some quota is set)."""

    def __init__(self, store: Store, config: BrokerConfig, limited_log: RateLimitedLog | None = None) -> None:
        self.configs = QuotaConfigs(store)
        window_ms = config.quota_window_size_seconds * 1000
        n = config.quota_window_num
        self.produce = QuotaManager(PRODUCER_BYTE_RATE, self.configs, window_ms, n)
        self.fetch = QuotaManager(CONSUMER_BYTE_RATE, self.configs, window_ms, n)
        # ClientRequestQuotaManager bounds its throttle time to one sample window.
        self.request = QuotaManager(REQUEST_PERCENTAGE, self.configs, window_ms, n, max_throttle_ms=window_ms)
        # controller_mutation_rate: its own window settings (Kafka's controller.quota.window.*);
        # the QuotaManager resolves which quota applies, the token buckets are per sensor tags.
        self.controller_mutation = QuotaManager(CONTROLLER_MUTATION_RATE, self.configs,
                                                config.controller_quota_window_size_seconds * 1000,
                                                config.controller_quota_window_num)
        self._buckets: dict[tuple[str, str], TokenBucket] = {}
        self._next_bucket_sweep = 0
        self.mutation_active = False
        self._limited_log = limited_log
        self._next_expiry = 0
        # (principal, client id) -> whether any enforced quota applies to it (per configs.version)
        self._plans: dict[tuple[str, str], bool] = {}
        self._plans_version = -1
        self._ip_rates: dict[str | None, float] = {}
        self._ip_sensors: dict[str | None, Rate] = {}
        self.active = False
        self.ip_active = False
        self._update_active()

    def _update_active(self) -> None:
        enforced = (PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE, REQUEST_PERCENTAGE)
        entities = self.configs.entities
        self.active = any(k in v for v in entities.values() for k in enforced)
        self.mutation_active = any(CONTROLLER_MUTATION_RATE in v for v in entities.values())
        # connection_creation_rate by ip (SocketServer's ConnectionQuotas): the ip's own, else the default
        self._ip_rates = {_ip_key(e[0][1]): v[CONNECTION_CREATION_RATE] for e, v in entities.items()
                          if e[0][0] == IP and CONNECTION_CREATION_RATE in v}
        self.ip_active = bool(self._ip_rates)

    def connection_throttle(self, host: str) -> int:
        """A new connection from `host`: recorded in its ip's connection rate; the ms after
        which Kafka closes it unserved when that takes the rate over connection_creation_rate
        (at most one window; the connection is then not counted), else 0."""
        rates = self._ip_rates
        ip = _ip_key(host)
        bound = rates.get(ip, rates.get(None))
        if bound is None:
            return 0
        now = _monotonic_ms()
        sensor = self._ip_sensors.get(ip)
        if sensor is None:
            if len(self._ip_sensors) >= 100_000:
                self._ip_sensors.clear()
            sensor = self._ip_sensors[ip] = Rate()
        window_ms, n = self.request.window_ms, self.request.samples
        sensor.record(1.0, now, window_ms, n)
        rate, window = sensor.measure(now, window_ms, n)
        if rate <= bound:
            return 0
        sensor.record(-1.0, now, window_ms, n)
        return min(int((rate - bound) / bound * window + 0.5), window_ms)

    def mutation_quota(self, client_id: str | None, api_version: int, strict_since: int) -> MutationQuota | None:
        """The controller mutation quota of this request (Kafka's newQuotaFor: strict from
        `strict_since`, else permissive), or None when no controller_mutation_rate applies."""
        if not self.mutation_active:
            return None
        manager = self.controller_mutation
        user, cid = _user_of(current_client.get().principal), client_id or ""
        found = manager.resolve(user, cid)
        if found is None:
            return None
        tags, rate = found
        now = _monotonic_ms()
        if now >= self._next_bucket_sweep:  # a bucket idle long enough to be full again is a new one
            self._next_bucket_sweep = now + 60_000
            refill_ms = manager.samples * manager.window_ms
            for key in [k for k, b in self._buckets.items()
                        if b.last is not None and b.tokens >= 0 and now - b.last >= refill_ms]:
                del self._buckets[key]
        bucket = self._buckets.get(tags)
        if bucket is None:
            bucket = self._buckets[tags] = TokenBucket()
        burst = rate * manager.samples * manager.window_ms / 1000

        def on_throttle(ms: int) -> None:
            manager.note_throttle(user, cid, ms)
            if self._limited_log is not None:
                self._limited_log.log(logging.INFO, "quota-throttle", "throttled client id %r (user %r) for %d ms: "
                                      "%s quota", cid, user, ms, CONTROLLER_MUTATION_RATE)

        return MutationQuota(bucket, rate, burst, api_version >= strict_since, on_throttle)

    def alter(self, entries: list[dict[str, Any]], validate_only: bool,
              resolvable: Mapping[str, bool] | None = None) -> list[AlterResult]:
        results = self.configs.alter(entries, validate_only, resolvable)
        self._update_active()
        return results

    def reload(self) -> None:
        """Take the stored quotas (on a cluster, after another broker's change)."""
        self.configs.reload()
        self._update_active()

    def describe(self, components: list[dict[str, Any]], strict: bool) -> list[dict[str, Any]]:
        return self.configs.describe(components, strict)

    @staticmethod
    def clock() -> RequestClock:
        clock = RequestClock()
        _clock.set(clock)
        return clock

    def fetch_max_bytes(self, client_id: str | None) -> int | None:
        """A Fetch's max_bytes cap under a consumer_byte_rate quota (None: no cap)."""
        if not self.active:
            return None
        cap = self.fetch.max_value_in_window(_user_of(current_client.get().principal), client_id or "")
        return None if cap is None else int(min(cap, 2**31 - 1))

    def charge(self, request: Request, body: dict[str, Any] | None, clock: RequestClock, size: int) -> int:
        """Record what a request used (Kafka's KafkaApis + RequestHandlerHelper); put the
        throttle time in its answer and return it: the connection is then not read for that
        long. A throttled Fetch's answer loses its data (its bytes are taken back)."""
        key = request.api_key
        if key in _EXEMPT:
            return 0
        principal = current_client.get().principal
        cid = request.client_id or ""
        configs = self.configs
        if self._plans_version != configs.version:
            self._plans.clear()
            self._plans_version = configs.version
        quotaed = self._plans.get((principal, cid))
        if quotaed is None:  # the first request of this principal and client id since a change
            user = _user_of(principal)
            quotaed = any(m.resolve(user, cid) is not None for m in (self.produce, self.fetch, self.request))
            if len(self._plans) >= 100_000:
                self._plans.clear()
            self._plans[(principal, cid)] = quotaed
        if not quotaed:
            return 0
        user = _user_of(principal)
        now = _monotonic_ms()
        percent = clock.busy_seconds() * 100.0  # of one thread, per second of the window
        which = self.request
        if key == _PRODUCE:
            bandwidth = self.produce.record(user, cid, size, now)
            req = 0 if request.body.get("acks") == 0 else self.request.record(user, cid, percent, now)
            if bandwidth > req:
                which = self.produce
        elif key == _FETCH and body is not None:
            req = self.request.record(user, cid, percent, now)
            returned = _records_size(body)
            bandwidth = self.fetch.record(user, cid, returned, now)
            if max(bandwidth, req) > 0:
                self.fetch.unrecord(user, cid, returned, now)
                body["responses"] = []  # Kafka's getThrottledResponse of a sessionless fetch
            if bandwidth > req:
                which = self.fetch
        else:
            bandwidth = 0
            req = self.request.record(user, cid, percent, now)
        throttle = max(bandwidth, req)
        if throttle > 0:
            if body is not None and throttle > (body.get("throttle_time_ms") or 0):  # not a mutation quota's
                body["throttle_time_ms"] = throttle
            which.note_throttle(user, cid, throttle)
            if self._limited_log is not None:
                self._limited_log.log(logging.INFO, "quota-throttle",
                                      "throttled client id %r (user %r) for %d ms: %s quota", cid, user,
                                      throttle, which.key)
        if now >= self._next_expiry:
            self._next_expiry = now + 60_000
            for manager in (self.produce, self.fetch, self.request):
                manager.expire(now, _SENSOR_IDLE_MS)
        return throttle


def _records_size(body: dict[str, Any]) -> int:
    total = 0
    for topic in body.get("responses") or ():
        for p in topic.get("partitions") or ():
            records = p.get("records")
            if isinstance(records, list | tuple):
                total += sum(map(len, records))
            elif records:
                total += len(records)
    return total
