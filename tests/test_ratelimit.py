"""broker.ratelimit: the first N messages of a kind per interval, then a count of the rest."""

from __future__ import annotations

import logging

import pytest

from tmqgate.broker.ratelimit import RateLimitedLog


def test_first_n_per_interval_then_a_suppressed_count(caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    limited = RateLimitedLog(logging.getLogger("test.ratelimit"), per_interval=3, interval_s=60.0,
                             clock=lambda: now[0])
    with caplog.at_level(logging.WARNING, logger="test.ratelimit"):
        logged = [limited.warning("bad-frame", "bad frame %d", i) for i in range(100_000)]
        assert logged[:3] == [True] * 3 and not any(logged[3:])
        assert limited.warning("other", "another kind") is True  # kinds are counted apart
        assert limited.suppressed("bad-frame") == 99_997
        now[0] = 61.0
        assert limited.warning("bad-frame", "bad frame again") is True
        for _ in range(5):
            limited.warning("bad-frame", "and again")
        now[0] = 70.0
        limited.flush()  # at shutdown: the current interval's count
        limited.flush()  # said once
    assert [r.getMessage() for r in caplog.records] == [
        "bad frame 0", "bad frame 1", "bad frame 2", "another kind",
        "suppressed 99997 similar messages (bad-frame) in the last 61 s", "bad frame again",
        "and again", "and again", "suppressed 3 similar messages (bad-frame) in the last 9 s"]
