"""Fixtures for the compatibility suite.

`--target tmqgate` (default) starts `tmqgate serve` once per session; `--target kafka` starts
the reference Apache Kafka broker instead, which is how we check the tests themselves are
honest; `--bootstrap HOST:PORT` uses a broker that is already running (restart tests skip).
`--target kafka-container` / `--target tmqgate-container` run the same suite against the
apache/kafka image / the tmqgate image (deploy/Dockerfile) with testcontainers where a Docker
engine is reachable, and skip it with one line where not (compat_tests/containers.py).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from .brokers import BrokerProcess, new_broker

# The brokers the tests start are single brokers unless a test asks for workers (`--workers N`,
# `--target tmqgate-workers`): `tmqgate serve`'s default, one worker per core, is what the README
# test (compat_tests/test_readme.py) and tests/test_workers_config.py run.
os.environ.setdefault("TMQGATE_WORKERS", "1")

_FIGURES: list[str] = []


@pytest.fixture
def figures() -> Callable[[str], None]:
    """Soak tests report their figures here (cycles, records, lost, duplicated, failover
    times); they are printed in a "figures" section at the end of the run, so the CI's log
    has them without -s."""
    return _FIGURES.append


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if _FIGURES:
        terminalreporter.section("figures")
        for line in _FIGURES:
            terminalreporter.write_line(line)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("compat", "tmqgate compatibility suite")
    group.addoption("--bootstrap", default=None, metavar="HOST:PORT",
                    help="use this already running broker (restart tests are skipped)")
    group.addoption("--target", default="tmqgate",
                    choices=("tmqgate", "kafka", "tmqgate-container", "kafka-container", "tmqgate-workers"),
                    help="which broker to start: tmqgate (default) or the reference Apache Kafka; "
                         "*-container: the same in a container (testcontainers, needs Docker); "
                         "tmqgate-workers: `tmqgate serve --workers 2` as the session's broker")


def _kind(target: str) -> str:
    """The broker a target runs: "tmqgate" or "kafka" (a container target runs the same one)."""
    return target.removesuffix("-container").removesuffix("-workers")


def pytest_configure(config: pytest.Config) -> None:
    # kafka-python loads its JSON schemas through a deprecated importlib API; noise only
    config.addinivalue_line("filterwarnings", "ignore:read_text is deprecated:DeprecationWarning")
    config.addinivalue_line("filterwarnings", "ignore:open_text is deprecated:DeprecationWarning")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    target = str(config.getoption("--target"))
    if target.endswith("-container") and not config.getoption("--bootstrap"):
        from .containers import INSTALL, docker_unavailable, kafka_image_unavailable
        from .helpers import in_ci

        reason = docker_unavailable()
        if reason and target == "tmqgate-container" and in_ci():
            # CI installs Docker and builds the image: a missing engine is a failure there
            pytest.exit(f"--target {target}: {reason}; run {INSTALL} (under CI a missing dependency "
                        "fails the run)", returncode=1)
        if not reason and target == "kafka-container":
            reason = kafka_image_unavailable()
        if reason:
            skip_all = pytest.mark.skip(reason=f"--target {target}: {reason}")
            for item in items:
                item.add_marker(skip_all)
            return
    if _kind(target) != "kafka":
        return
    skip = pytest.mark.skip(reason="tmqgate-only feature; target is reference Kafka")
    for item in items:
        if "tmqgate_only" in item.keywords:
            item.add_marker(skip)


@dataclass(frozen=True)
class Broker:
    """The session's broker: where it listens and what it is."""

    bootstrap: str
    target: str  # "tmqgate" | "kafka"
    external: bool  # given by --bootstrap; we cannot restart it
    nodes: tuple[str, ...] = ()  # every broker it runs (`serve --workers 2`: two); () = the bootstrap alone

    @property
    def addresses(self) -> list[tuple[str, int]]:
        """(host, port) of every broker, as DescribeCluster lists them."""
        return [(a.rpartition(":")[0], int(a.rpartition(":")[2])) for a in self.nodes or (self.bootstrap,)]

    @property
    def host(self) -> str:
        return self.bootstrap.rpartition(":")[0]

    @property
    def port(self) -> int:
        return int(self.bootstrap.rpartition(":")[2])


def _new_process(target: str, workdir: Path) -> BrokerProcess:
    return new_broker(target, workdir)


@pytest.fixture(scope="session")
def target(pytestconfig: pytest.Config) -> str:
    """The broker under test, "tmqgate" or "kafka", however it runs (process or container)."""
    return _kind(str(pytestconfig.getoption("--target")))


def _runtime(pytestconfig: pytest.Config) -> str:
    """--target as given: how new_broker starts the session's broker."""
    return str(pytestconfig.getoption("--target"))


@pytest.fixture(scope="session")
def broker(pytestconfig: pytest.Config, tmp_path_factory: pytest.TempPathFactory, target: str) -> Iterator[Broker]:
    """One broker for the whole session (starting Kafka takes seconds)."""
    bootstrap = pytestconfig.getoption("--bootstrap")
    if bootstrap:
        yield Broker(bootstrap, target, external=True)
        return
    proc = _new_process(_runtime(pytestconfig), tmp_path_factory.mktemp(f"{target}-session"))
    proc.start()
    try:
        yield Broker(proc.bootstrap, target, external=False, nodes=proc.nodes)
    finally:
        proc.stop()


@pytest.fixture
def restartable_broker(pytestconfig: pytest.Config, tmp_path: Path, target: str) -> Iterator[BrokerProcess]:
    """A broker of the test's own that it may SIGKILL and restart on the same port and data."""
    if pytestconfig.getoption("--bootstrap"):
        pytest.skip("--bootstrap given: cannot kill and restart an external broker")
    proc = _new_process(_runtime(pytestconfig), tmp_path / "restartable")
    proc.start()
    try:
        yield proc
    finally:
        try:
            proc.stop()
        except Exception:  # noqa: BLE001 - best effort: the test may have left it dead
            proc.kill()


@pytest.fixture(scope="session")
def txn_broker(pytestconfig: pytest.Config, tmp_path_factory: pytest.TempPathFactory, target: str,
               broker: Broker) -> Iterator[Broker]:
    """The transaction tests' broker (compat_tests/txn_helpers.py): coordinator timeout checks
    every 500 ms; both brokers at transaction.version 1 (`txn_broker_tv2`: at 2)."""
    from .txn_helpers import txn_broker_fixture

    yield from txn_broker_fixture(pytestconfig, tmp_path_factory, target, broker, "txn")


@pytest.fixture(scope="session")
def txn_broker_tv2(pytestconfig: pytest.Config, tmp_path_factory: pytest.TempPathFactory, target: str,
                   broker: Broker) -> Iterator[Broker]:
    """`txn_broker` at transaction version 2 (KIP-890 part 2) on both brokers."""
    from .txn_helpers import txn_broker_fixture

    yield from txn_broker_fixture(pytestconfig, tmp_path_factory, target, broker, "txn2", transaction_version=2)
