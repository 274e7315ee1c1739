"""The broker's client quotas as the server and the handlers use them: the three enforced
kinds charged after each request, connection_creation_rate at accept, controller mutation
quotas for CreateTopics, CreatePartitions and DeleteTopics, and the request's handler time.

Rules (Kafka's ClientQuotaManager, ControllerMutationQuotaManager, SocketServer):

- A request that takes the rate over the quota is answered at once with its throttle time
  (broker/ops/quotas/quota_manager.py), and its connection is not read again until that time has
  passed (Kafka mutes the channel, KIP-219). Produce counts the request's size, Fetch the
  records it returns (a throttled Fetch returns no data and its bytes are taken back, and a
  Fetch never asks for more than the quota allows in a window), request_percentage the
  handler's time (waits for data or for a group rebalance excluded: `parked`) as a
  percentage of one thread.
- `connection_creation_rate` as Kafka's SocketServer does: a new connection that takes its
  ip's rate over the quota is closed unserved after the throttle time.
- `controller_mutation_rate` (KIP-599): the partitions CreateTopics, CreatePartitions and
  DeleteTopics create or delete, per user / client id (the same levels), against a token
  bucket (broker/ops/quotas/rates.py). A request asks `mutation_quota(...)` for a `MutationQuota`
  and records each topic's partitions, after the topic's other checks, as Kafka's controller
  does (validate_only too): strict from CreateTopics v6, CreatePartitions v3, DeleteTopics
  v5, permissive before; the connection is muted for the throttle time.
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
from typing import TYPE_CHECKING, Any

from tmqgate.broker.identity.client import current_client
from tmqgate.broker.ops.quotas import rates as measures  # its clock, looked up per call (tests replace it)
from tmqgate.broker.ops.quotas.configs import (
    CONNECTION_CREATION_RATE,
    CONSUMER_BYTE_RATE,
    CONTROLLER_MUTATION_RATE,
    IP,
    PRODUCER_BYTE_RATE,
    REQUEST_PERCENTAGE,
    AlterResult,
    QuotaConfigs,
)
from tmqgate.broker.ops.quotas.quota_manager import QuotaManager
from tmqgate.broker.ops.quotas.rates import MutationQuota, Rate, TokenBucket

if TYPE_CHECKING:
    from tmqgate.broker.configs.config import BrokerConfig
    from tmqgate.broker.ratelimit import RateLimitedLog
    from tmqgate.protocol.messages import Request
    from tmqgate.storage import Store

# Kafka's ApiKeys SASL_HANDSHAKE and SASL_AUTHENTICATE never reach its request quota.
_EXEMPT = frozenset({17, 36})
# CreateTopics, DeleteTopics, CreatePartitions: the APIs under controller_mutation_rate
MUTATION_APIS = frozenset({19, 20, 37})
_PRODUCE, _FETCH = 0, 1


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
        now = measures.monotonic_ms()
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
        now = measures.monotonic_ms()
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
        now = measures.monotonic_ms()
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
