"""The measures client quotas take: Kafka's `Rate` (a SampledStat) and `TokenBucket`, and one
request's controller mutation quota over a bucket.

- The rate is Kafka's `Rate` over a `SampledStat`: `quota_window_num` samples of
  `quota_window_size_seconds`, the window never taken as shorter than n-1 whole samples.
- `controller_mutation_rate` (KIP-599): a token bucket of `controller_quota_window_num` x
  `controller_quota_window_size_seconds` seconds of the rate (a new bucket is full; it refills
  at the rate; tokens may go negative). `MutationQuota` is strict (a topic is refused with
  THROTTLING_QUOTA_EXCEEDED when the bucket is already below zero; one that still has tokens
  takes any number of partitions) or permissive (every topic is taken and recorded). Either
  way, once the bucket is below zero, throttle_time_ms = the time it takes to refill to zero
  (tokens / rate), less the time since it was measured.

`monotonic_ms` is the one clock of the throttling (a test replaces it here).
"""

from __future__ import annotations

import time
from typing import Any


def monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


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
        now = monotonic_ms()
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
        left = max(0, self._throttle_ms - (monotonic_ms() - self._recorded_at))
        if left and self._on_throttle is not None:
            self._on_throttle(left)
        return left
