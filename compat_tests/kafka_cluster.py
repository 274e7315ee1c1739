"""A reference Apache Kafka cluster for the cluster tests (issue 16): one KRaft controller and
three brokers (node ids 0, 1, 2, as the tmqgate cluster tests use) from the Maven jars, each
with its own ports, config, data dir and log under the given workdir.

A dedicated controller (rather than three combined nodes) keeps the metadata quorum up while a
test kills brokers — two of three, even — as the tmqgate cluster's etcd stays up. Each broker
can be killed (SIGKILL), paused (SIGSTOP on ``proc.pid``, the JVM itself) and started again on
its own data, like ``compat_tests.brokers.TmqgateProcess``.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from .brokers import ChildProcess
from .kafka_ref import (
    HEAP_OPTS,
    JVM_OPTS,
    RefKafkaError,
    _child_env,
    _format_storage,
    _launch,
    api_versions_ok,
    free_port,
    kafka_storage,
    random_cluster_id,
    tool,
)

CONTROLLER_ID = 100
#: broker settings the controller needs too: it places the partitions of new topics,
#: rebalances leaders and keeps the ACLs
CONTROLLER_KEYS = {"default.replication.factor", "num.partitions", "leader.imbalance.check.interval.seconds",
                   "auto.leader.rebalance.enable",
                   # the controller keeps the ACLs (CreateAcls and DeleteAcls are forwarded to it)
                   "authorizer.class.name", "allow.everyone.if.no.acl.found", "super.users"}


def _write(path: Path, config: dict[str, str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("# written by compat_tests/kafka_cluster.py\n" + "".join(f"{k}={v}\n" for k, v in config.items()))


class RefKafkaBroker(ChildProcess):
    """One broker of the cluster; ``start`` (again) on its own config and data."""

    kill_wait = 30.0

    def __init__(self, workdir: Path, node_id: int, port: int) -> None:
        self.workdir = workdir
        self.node_id = node_id
        self.port = port
        self.config_path = workdir / "server.properties"
        self.log_path = workdir / "kafka.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.cluster_id = ""  # set when formatted
        self.heap_opts, self.jvm_opts = HEAP_OPTS, JVM_OPTS

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def launch(self) -> None:
        self.proc = _launch(self.workdir, self.config_path, self.log_path, _child_env(self.heap_opts, self.jvm_opts))

    def wait_ready(self, timeout: float = 90.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc is None or self.proc.poll() is not None:
                raise RefKafkaError(f"Kafka broker {self.node_id} exited:\n{self.log_tail()}")
            if api_versions_ok("127.0.0.1", self.port):
                return
            time.sleep(0.2)
        raise RefKafkaError(f"Kafka broker {self.node_id} not ready in {timeout}s:\n{self.log_tail()}")

    def start(self) -> None:
        self.launch()
        self.wait_ready()


class RefKafkaCluster:
    """The controller and the brokers by node id; ``stop`` ends them all."""

    def __init__(self, controller: RefKafkaBroker, brokers: dict[int, RefKafkaBroker],
                 broker_config: dict[str, str] | None = None) -> None:
        self.controller = controller
        self.brokers = brokers
        self.broker_config = broker_config

    def add_broker(self, node_id: int) -> RefKafkaBroker:
        """A broker more, formatted for this cluster and started (a broker added to a running
        cluster); it is in ``brokers`` from then on."""
        first = next(iter(self.brokers.values()))
        b = RefKafkaBroker(first.workdir.parent / f"broker{node_id}", node_id, free_port())
        _configure_broker(b, self.controller.port, self.broker_config, first.heap_opts, first.jvm_opts)
        _format_broker(b, first.cluster_id)
        self.brokers[node_id] = b
        b.start()
        return b

    def stop(self) -> None:
        for b in self.brokers.values():
            b.kill()
        self.controller.kill()


def start_reference_kafka_cluster(workdir: Path, node_ids: tuple[int, ...] = (0, 1, 2),
                                  broker_config: dict[str, str] | None = None, heap_opts: str = HEAP_OPTS,
                                  jvm_opts: str = JVM_OPTS, scram: list[str] | None = None) -> RefKafkaCluster:
    """Format and start the controller and the brokers; returns once every broker answers.
    ``broker_config`` adds or overrides broker properties (e.g. replica.lag.time.max.ms);
    ``scram``: SCRAM users in the metadata from the start (``_format_storage``);
    ``heap_opts`` / ``jvm_opts``: the brokers' JVM (the tests' C1-only JIT by default, which
    starts fast; bench/cluster_bench.py gives the full JIT)."""
    tool("kafka-server-start")  # the jars and wrappers are there (raises otherwise)
    workdir = Path(workdir).resolve()
    cluster_id = random_cluster_id()
    cport = free_port()
    controller = RefKafkaBroker(workdir / "controller", CONTROLLER_ID, cport)
    _write(controller.config_path, {
        "process.roles": "controller", "node.id": str(CONTROLLER_ID),
        "listeners": f"CONTROLLER://127.0.0.1:{cport}", "controller.listener.names": "CONTROLLER",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT",
        "controller.quorum.bootstrap.servers": f"127.0.0.1:{cport}",
        "log.dirs": str(controller.workdir / "kafka-logs"),
        # no KIP-835 no-op record every 500 ms (kafka_ref.SINGLE_NODE_CONFIG): the metadata log
        # moves only when the metadata does, and idle brokers replay nothing
        "metadata.max.idle.interval.ms": "0",
        # topic defaults a KRaft controller applies itself (CreateTopics with -1)
        **{k: v for k, v in (broker_config or {}).items() if k in CONTROLLER_KEYS},
    })
    brokers = {n: RefKafkaBroker(workdir / f"broker{n}", n, free_port()) for n in node_ids}
    for b in brokers.values():
        _configure_broker(b, cport, broker_config, heap_opts, jvm_opts)
    _format_storage(controller.config_path, cluster_id, controller.log_path, scram=scram)
    for b in brokers.values():
        _format_broker(b, cluster_id)
    controller.proc = _launch(controller.workdir, controller.config_path, controller.log_path,
                              _child_env(HEAP_OPTS, JVM_OPTS))
    cluster = RefKafkaCluster(controller, brokers, broker_config)
    try:
        for b in brokers.values():
            b.launch()
        for b in brokers.values():
            b.wait_ready()
    except BaseException:
        cluster.stop()
        raise
    return cluster


def _configure_broker(b: RefKafkaBroker, cport: int, broker_config: dict[str, str] | None, heap_opts: str,
                      jvm_opts: str) -> None:
    b.heap_opts, b.jvm_opts = heap_opts, jvm_opts
    _write(b.config_path, {
        "process.roles": "broker", "node.id": str(b.node_id),
        "listeners": f"PLAINTEXT://{b.bootstrap}", "advertised.listeners": f"PLAINTEXT://{b.bootstrap}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "inter.broker.listener.name": "PLAINTEXT", "controller.listener.names": "CONTROLLER",
        "controller.quorum.bootstrap.servers": f"127.0.0.1:{cport}",
        "log.dirs": str(b.workdir / "kafka-logs"),
        "group.initial.rebalance.delay.ms": "0",
        "broker.heartbeat.interval.ms": "500", "broker.session.timeout.ms": "2000",
        **(broker_config or {}),
    })


def _format_broker(b: RefKafkaBroker, cluster_id: str) -> None:
    """`kafka-storage format` of a broker's log dir (again, after a test wiped it)."""
    b.cluster_id = cluster_id
    result = kafka_storage(["format", "--config", str(b.config_path), f"--cluster-id={cluster_id}",
                            "--no-initial-controllers"], b.log_path)
    if result.returncode != 0:
        raise RefKafkaError(f"kafka-storage format of broker {b.node_id} failed:\n{result.stdout}{result.stderr}")
