"""The wall clock in milliseconds since the epoch, as Kafka stamps records, commits and
metadata: one function, so every layer reads the same clock (and a test can see where)."""

from __future__ import annotations

import time


def now_ms() -> int:
    return time.time_ns() // 1_000_000
