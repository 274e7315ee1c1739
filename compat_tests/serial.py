"""A pytest plugin (loaded for every run by pyproject's addopts): modules marked `serial` hold
a lock shared across pytest processes for as long as they run.

scripts/test.sh runs the suite against tmqgate and against the reference Kafka side by side;
the modules that kill brokers, run soaks or start clusters are timing-sensitive and each loads
the machine on its own, so no two of them run at once, whichever run they belong to. The lock
is the file named by TMQGATE_TEST_LOCK (flock); without it the marker does nothing, so one
pytest on its own runs as it always did. Waits are reported at the end of the run.

So that the lanes seldom wait, TMQGATE_TEST_SERIAL=first runs a lane's serial modules before
everything else and =last after it (each module whole, in its order): one lane's while the
other runs its ordinary tests.
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Iterator
from typing import Any

import pytest

LOCK_ENV = "TMQGATE_TEST_LOCK"
ORDER_ENV = "TMQGATE_TEST_SERIAL"
_WAITS: list[tuple[str, float]] = []


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "serial: kills brokers, runs a soak or starts a cluster: never at the same time as another "
        f"serial module of a side-by-side run (the lock file ${LOCK_ENV})")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    order = os.environ.get(ORDER_ENV, "")
    if order not in ("first", "last"):
        return
    serial = [item for item in items if item.get_closest_marker("serial") is not None]
    others = [item for item in items if item.get_closest_marker("serial") is None]
    items[:] = serial + others if order == "first" else others + serial


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
