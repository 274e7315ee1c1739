"""A pytest plugin (loaded for every run by pyproject's addopts): modules marked `serial` hold
a lock shared across pytest processes for as long as they run.

scripts/test.sh runs the serial modules of both targets in a lane of their own, beside lanes
with the rest; a serial module run by another pytest given the same lock file still must not
overlap them. The lock is the file named by TMQGATE_TEST_LOCK (flock); without
it the marker does nothing, so one pytest on its own runs as it always did. Waits are reported
at the end of the run.
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Iterator
from typing import Any

import pytest

LOCK_ENV = "TMQGATE_TEST_LOCK"
_WAITS: list[tuple[str, float]] = []


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "serial: kills brokers, runs a soak or starts a cluster: never at the same time as another "
        f"serial module of a side-by-side run (the lock file ${LOCK_ENV})")


@pytest.fixture(scope="module", autouse=True)
def _serial_module(request: pytest.FixtureRequest) -> Iterator[None]:
    path = os.environ.get(LOCK_ENV)
    if not path or request.node.get_closest_marker("serial") is None:
        yield
        return
    with open(path, "a+") as lock:
        started = time.monotonic()
        fcntl.flock(lock, fcntl.LOCK_EX)
        waited = time.monotonic() - started
        if waited >= 1:
            _WAITS.append((request.node.nodeid, waited))
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if _WAITS:
        terminalreporter.section("serial modules: waits for the shared lock")
        for nodeid, waited in _WAITS:
            terminalreporter.write_line(f"{waited:7.1f}s  {nodeid}")
