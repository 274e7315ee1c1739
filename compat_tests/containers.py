"""The broker under test as a container, with testcontainers: `--target kafka-container` runs
Apache Kafka's own image (apache/kafka:4.3.1, the version of the jar-based reference broker),
`--target tmqgate-container` the tmqgate image built from deploy/Dockerfile. The suite is the
same as for `--target kafka` / `--target tmqgate`; only how the broker runs differs.

Where no Docker engine is reachable (or testcontainers is not installed) every test is
skipped with one line saying so (`docker_unavailable()`), never a traceback — except under CI
(TMQGATE_CI / CI set), where `--target tmqgate-container` and the tests that call
`require_docker()` fail instead: CI installs Docker (scripts/install_docker.sh), so a missing
engine there is a broken install, not a reason to pass. `--target kafka-container` needs the
apache/kafka image, which a machine without a registry cannot pull: it skips with one line, in
CI too (it is not part of CI).

The tmqgate image is built by compat_tests/images.py (the local base image and wheels built on
the host where no registry or index is reachable). testcontainers' Ryuk reaper container is not
used (its image is pulled from a registry too): each container is removed when the session ends.

Each broker listens on a fixed free port published on the host's loopback at the same number,
so the address it advertises (127.0.0.1:PORT, as the process targets' brokers do) is the one
clients reach; SIGKILL and restart
keep the container, so its data survives as on a real host.
"""

from __future__ import annotations

import atexit
import os
import time
from pathlib import Path
from typing import Any

from .brokers import TEST_DEFAULTS, BrokerProcess, _toml_value
from .helpers import api_versions_ok, free_port, missing_dependency
from .kafka_ref import SINGLE_NODE_CONFIG

KAFKA_IMAGE = "apache/kafka:4.3.1"
ROOT = Path(__file__).resolve().parent.parent
CONTAINER_TARGETS = {"kafka-container": "kafka", "tmqgate-container": "tmqgate"}
INSTALL = "scripts/install_docker.sh"
#: Set on every container the tests start (docker ps -a -f label=org.tmqgate.test finds leftovers).
TEST_LABEL = "org.tmqgate.test"
# Ryuk's image comes from a registry: without one, the first container start would fail on it
os.environ.setdefault("TESTCONTAINERS_RYUK_DISABLED", "true")
_unavailable: list[str | None] = []
_kafka_image: list[str | None] = []


def docker_unavailable() -> str | None:
    """Why container targets cannot run here (one line), or None when a Docker engine answers."""
    if not _unavailable:
        _unavailable.append(_probe())
    return _unavailable[0]


def _probe() -> str | None:
    try:
        import docker
        import testcontainers.core.container  # noqa: F401 - the fixtures need it
    except ImportError as exc:
        return f"container targets need testcontainers (pip install -e '.[test]'): {exc.name} is missing"
    try:
        docker.from_env().ping()
    except Exception:  # noqa: BLE001 - any failure means: no engine to use
        where = os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
        return f"no Docker engine reachable at {where}"
    return None


def require_docker() -> None:
    """A test that needs a Docker engine: skipped with one line where none is reachable, failed
    under CI (compat_tests/helpers.missing_dependency)."""
    __tracebackhide__ = True
    reason = docker_unavailable()
    if reason:
        missing_dependency(reason, "pip install -e '.[test]'" if "testcontainers" in reason else INSTALL)


def kafka_image_unavailable() -> str | None:
    """Why apache/kafka's image cannot be had (one line), or None: it is here, or a pull got it."""
    if not _kafka_image:
        import docker

        client = docker.from_env()
        try:
            client.images.get(KAFKA_IMAGE)
            _kafka_image.append(None)
        except docker.errors.ImageNotFound:
            try:
                client.images.pull(KAFKA_IMAGE)
                _kafka_image.append(None)
            except docker.errors.APIError as exc:
                why = str(exc.explanation or exc).splitlines()[0][:200]
                _kafka_image.append(f"the image {KAFKA_IMAGE} is not here and cannot be pulled ({why})")
    return _kafka_image[0]


def kafka_environment(port: int, config: dict[str, str] | None = None) -> dict[str, str]:
    """apache/kafka's environment for a single KRaft node on `port` (the image turns KAFKA_A_B
    into a.b in server.properties): the jar-based reference's settings, then `config`."""
    props = {
        "node.id": "1",
        "process.roles": "broker,controller",
        "listeners": f"PLAINTEXT://0.0.0.0:{port},CONTROLLER://localhost:9093",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}",
        "controller.listener.names": "CONTROLLER",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "controller.quorum.voters": "1@localhost:9093",
        **SINGLE_NODE_CONFIG,
        **(config or {}),
    }
    return {"KAFKA_" + k.upper().replace(".", "_"): v for k, v in props.items()}


def tmqgate_environment(port: int, http_port: int, config: dict[str, Any] | None = None) -> dict[str, str]:
    """The tmqgate image's TMQGATE_* settings (TOML values) for a broker on `port`, told to
    clients as 127.0.0.1:`port`, its SQL front on `http_port` (published on the host's loopback
    only, so it is no more open than the process-based fixture's)."""
    settings = {**TEST_DEFAULTS, "listen": f"0.0.0.0:{port}", "advertised_listener": f"127.0.0.1:{port}",
                "http": f"0.0.0.0:{http_port}", "allow_insecure_http": True, "http_allowed_hosts": ["*"],
                **(config or {})}
    return {"TMQGATE_" + k.upper(): _toml_value(v) for k, v in settings.items()}


class ContainerBroker(BrokerProcess):
    """A broker in a container (`kind` "kafka" or "tmqgate")."""

    def __init__(self, kind: str, workdir: Path, config: dict[str, Any] | None = None,
                 ready_timeout: float = 180.0) -> None:
        self.kind = kind
        self.workdir = workdir
        self.port = free_port()
        self.http_port = free_port()
        self.bootstrap = f"127.0.0.1:{self.port}"
        self.listener_ports = {"PLAINTEXT": self.port}
        self.config = config
        self.ready_timeout = ready_timeout
        self.container: Any = None

    def _image(self) -> str:
        if self.kind == "kafka":
            return KAFKA_IMAGE
        from .images import build_image

        return build_image()

    def start(self) -> None:
        if self.container is not None:  # restart after kill(): same container, same data
            self.container.get_wrapped_container().start()
            self._wait_ready()
            return
        from testcontainers.core.container import DockerContainer

        container = DockerContainer(self._image())
        container.with_kwargs(labels={TEST_LABEL: self.kind})
        env = (kafka_environment(self.port, self.config) if self.kind == "kafka"
               else tmqgate_environment(self.port, self.http_port, self.config))
        container.with_envs(**env)
        # published on the host's loopback only (docker's (ip, port) form: testcontainers'
        # with_bind_ports takes a port alone, which docker publishes on every address)
        container.ports[f"{self.port}/tcp"] = ("127.0.0.1", self.port)
        if self.kind == "tmqgate":
            container.ports[f"{self.http_port}/tcp"] = ("127.0.0.1", self.http_port)
        self.container = container.start()
        atexit.register(self.remove)
        self._wait_ready()

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.ready_timeout
        while time.monotonic() < deadline:
            if api_versions_ok(self.bootstrap):
                return
            time.sleep(0.2)
        raise RuntimeError(f"{self.kind} container not ready after {self.ready_timeout}s:\n{self.log_tail()}")

    def kill(self) -> None:
        if self.container is not None:
            self.container.get_wrapped_container().kill()

    def stop(self) -> None:
        """SIGTERM (docker stop); the container stays, so a later start() finds its data. It is
        removed when the session ends."""
        if self.container is not None:
            self.container.get_wrapped_container().stop(timeout=30)

    def remove(self) -> None:
        if self.container is not None:
            self.container.stop()  # testcontainers' stop removes the container and its volumes
            self.container = None

    def log_tail(self, n: int = 60) -> str:
        if self.container is None:
            return ""
        out, err = self.container.get_logs()
        return "\n".join((out + err).decode(errors="replace").splitlines()[-n:])


def new_container_broker(target: str, workdir: Path, *, config: dict[str, Any] | None = None,
                         extra_listeners: dict[str, str] | None = None) -> ContainerBroker:
    """brokers.new_broker for the container targets."""
    import pytest

    require_docker()
    if extra_listeners:
        pytest.skip("container targets publish one PLAINTEXT listener; extra listeners need the process targets")
    return ContainerBroker(CONTAINER_TARGETS[target], workdir, config=config)
