"""Log lines at a bounded rate: a peer sending garbage must not fill the disk with our log.

`RateLimitedLog` lets the first `per_interval` messages of a kind through in each interval
and counts the rest; the first message of the kind after the interval says how many were
suppressed ("suppressed 99812 similar messages (bad-frame) in the last 60 s").
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable


class RateLimitedLog:
    """A logger's messages, grouped by a kind, at most `per_interval` of a kind per interval."""

    def __init__(self, logger: logging.Logger, per_interval: int = 10, interval_s: float = 60.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.logger = logger
        self.per_interval = per_interval
        self.interval_s = interval_s
        self.clock = clock
        self._windows: dict[str, list[float]] = {}  # kind -> [window start, logged, suppressed]

    def log(self, level: int, kind: str, msg: str, *args: object, exc_info: bool = False) -> bool:
        """Log `msg % args` (with the exception being handled if `exc_info`) unless `kind` has
        used its share of this interval; True if logged."""
        now = self.clock()
        window = self._windows.get(kind)
        if window is None or now - window[0] >= self.interval_s:
            if window is not None and window[2]:
                self.logger.log(level, "suppressed %d similar messages (%s) in the last %.0f s",
                                int(window[2]), kind, now - window[0])
            window = self._windows[kind] = [now, 0, 0]
        if window[1] >= self.per_interval:
            window[2] += 1
            return False
        window[1] += 1
        self.logger.log(level, msg, *args, exc_info=exc_info)
        return True

    def warning(self, kind: str, msg: str, *args: object) -> bool:
        return self.log(logging.WARNING, kind, msg, *args)

    def error(self, kind: str, msg: str, *args: object) -> bool:
        return self.log(logging.ERROR, kind, msg, *args)

    def flush(self, level: int = logging.WARNING) -> None:
        """Say how many were suppressed in each kind's current interval (at shutdown)."""
        now = self.clock()
        for kind, window in self._windows.items():
            if window[2]:
                self.logger.log(level, "suppressed %d similar messages (%s) in the last %.0f s",
                                int(window[2]), kind, now - window[0])
                window[2] = 0

    def suppressed(self, kind: str) -> int:
        """Messages of `kind` suppressed in its current interval."""
        window = self._windows.get(kind)
        return int(window[2]) if window is not None else 0
