"""One quota key's throttling (Kafka's ClientQuotaManager for one QuotaType): which quota
applies to a connection and who shares its rate, and the throttle time of what it records.

Which quota applies (user = the principal's name, client id = the request header's), in
Kafka's order: /users/<user>/clients/<client-id>, /users/<user>/clients/<default>,
/users/<user>, /users/<default>/clients/<client-id>, /users/<default>/clients/<default>,
/users/<default>, /clients/<client-id>, /clients/<default>. The level that matched decides
who shares the rate: e.g. a client-id quota is shared by every connection with that client
id, a user quota by all of that user's connections. A request that takes the rate over the
quota is throttled for round((rate - quota) / quota * window) ms (request_percentage: at
most one sample window).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tmqgate.broker.ops.quotas.configs import CLIENT_ID, USER, Entity, QuotaConfigs
from tmqgate.broker.ops.quotas.rates import Rate

# Kafka's QuotaTypes: which levels have a quota of one key.
_NO, _CLIENT, _USER, _USER_CLIENT = 0, 1, 2, 4


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
