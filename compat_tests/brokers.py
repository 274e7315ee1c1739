"""Starting, killing and restarting the broker under test.

tmqgate runs as `tmqgate serve` on free loopback ports with a temporary data dir; the
reference Apache Kafka broker comes from `compat_tests/kafka_ref.py`.  Both are wrapped in
`BrokerProcess` so a test can SIGKILL a broker and bring it back on the same port and data.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from .helpers import api_versions_ok, free_port


class BrokerProcess:
    """A broker the test owns: start, SIGKILL, restart on the same address and data."""

    bootstrap: str

    @property
    def nodes(self) -> tuple[str, ...]:
        """Every broker this one runs, as HOST:PORT (one: the bootstrap)."""
        return (self.bootstrap,)

    def start(self) -> None:
        raise NotImplementedError

    def kill(self) -> None:
        """SIGKILL: no chance to flush or close anything."""
        raise NotImplementedError

    def stop(self) -> None:
        """Clean shutdown (SIGTERM for tmqgate)."""
        raise NotImplementedError

    def restart(self) -> None:
        self.start()

    def log_tail(self, n: int = 60) -> str:
        return ""


def _tmqgate_cmd() -> list[str]:
    exe = shutil.which("tmqgate")
    if exe:
        return [exe]
    return [sys.executable, "-c", "import sys; from tmqgate.broker.cli import main; sys.exit(main())"]


def add_user_offline(proc: TmqgateProcess, name: str, password: str, iterations: int = 4096) -> None:
    """`tmqgate user add` (SCRAM-SHA-512) into the data directory of `proc` before it first
    starts: the first user of a broker whose HTTP front or SASL listener needs one."""
    proc.data_dir.mkdir(parents=True, exist_ok=True)
    added = subprocess.run([*_tmqgate_cmd(), "user", "add", name, "--mechanism", "SCRAM-SHA-512",
                            "--iterations", str(iterations), "--data-dir", str(proc.data_dir)],
                           input=password + "\n", capture_output=True, text=True, timeout=60)
    assert added.returncode == 0, added.stderr


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(str(k))} = {_toml_value(v)}" for k, v in value.items()) + "}"
    return json.dumps(str(value))  # a TOML basic string


def _toml(config: dict[str, Any]) -> str:
    """TOML of broker settings (bools, numbers, strings, lists, tables of strings)."""
    return "".join(f"{key} = {_toml_value(value)}\n" for key, value in config.items())


TEST_DEFAULTS: dict[str, Any] = {"group_initial_rebalance_delay_ms": 0}


class ChildProcess:
    """A server run as a child process ``proc`` that writes to ``log_path``: ``kill`` (SIGKILL,
    then up to ``kill_wait`` s for it to end), ``stop`` (SIGTERM, SIGKILL after ``stop_wait``
    s) and ``log_tail``. (TmqgateProcess; kafka_cluster.RefKafkaBroker;
    connect_helpers.ConnectWorker.)"""

    proc: subprocess.Popen[bytes] | None
    log_path: Path
    kill_wait = 10.0
    stop_wait = 20.0
    tail_lines = 60

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(self.kill_wait)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(self.stop_wait)
            except subprocess.TimeoutExpired:
                self.kill()

    def log_tail(self, n: int | None = None) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-(n or self.tail_lines):])
        except OSError:
            return ""


def stop_all(processes: Iterable[ChildProcess]) -> None:
    """Stop each (SIGTERM); one the test left dead or hung is killed."""
    for p in processes:
        try:
            p.stop()
        except Exception:  # noqa: BLE001 - killed by the test already
            p.kill()


class TmqgateProcess(ChildProcess, BrokerProcess):
    """`tmqgate serve` as a child process."""

    def __init__(self, workdir: Path, port: int | None = None, http_port: int | None = None,
                 ready_timeout: float = 60.0, config: dict[str, Any] | None = None,
                 extra_listeners: dict[str, str] | None = None, workers: int = 1) -> None:
        """`config`: broker settings (fields of broker/configs/config.py) written to a TOML file
        in `workdir` and passed as `serve --config`; `extra_listeners` (name -> security
        protocol) are listeners on free ports beside the PLAINTEXT one (`listener_ports`);
        `workers`: `serve --workers` (worker i on every port + i, broker/workers.py)."""
        self.workdir = workdir
        self.workers = workers
        # The reference broker runs with group.initial.rebalance.delay.ms=0 (kafka_ref.py);
        # tmqgate gets the same so group tests compare like with like.
        self.config = {**TEST_DEFAULTS, **(config or {})}
        self.port = port or free_port(workers)
        self.http_port = http_port or free_port(workers)
        while http_port is None and abs(self.http_port - self.port) < workers:  # two draws met (CI r61)
            self.http_port = free_port(workers)
        self.data_dir = workdir / "data"
        self.log_path = workdir / "tmqgate.log"
        self.bootstrap = f"127.0.0.1:{self.port}"
        self.listener_ports = {"PLAINTEXT": self.port, **{name: free_port(workers) for name in extra_listeners or {}}}
        if extra_listeners:
            self.config.setdefault("listeners", [f"{n}://127.0.0.1:{p}" for n, p in self.listener_ports.items()])
            self.config.setdefault("listener_security_protocol_map",
                                   {"PLAINTEXT": "PLAINTEXT", **extra_listeners})
        self.ready_timeout = ready_timeout
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def nodes(self) -> tuple[str, ...]:
        """The workers' PLAINTEXT addresses: worker i on the port + i."""
        return tuple(f"127.0.0.1:{self.port + i}" for i in range(self.workers))

    def start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        cmd = _tmqgate_cmd() + ["serve", "--listen", self.bootstrap, "--http", f"127.0.0.1:{self.http_port}",
                                "--data-dir", str(self.data_dir), "--workers", str(self.workers)]
        if self.config:
            config_path = self.workdir / "tmqgate.toml"
            config_path.write_text(_toml(self.config))
            cmd += ["--config", str(config_path)]
        log = open(self.log_path, "ab")  # noqa: SIM115 - handed to the child
        log.write(f"\n=== start {time.strftime('%H:%M:%S')}: {' '.join(cmd)}\n".encode())
        log.flush()
        self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=str(self.workdir),
                                     env={**os.environ, "PYTHONUNBUFFERED": "1"})
        log.close()
        deadline = time.monotonic() + self.ready_timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"tmqgate exited with {self.proc.returncode}:\n{self.log_tail()}")
            # the HTTP front starts listening after the Kafka listeners (cli.py): ready is both,
            # on every worker
            if all(api_versions_ok(f"127.0.0.1:{self.port + i}") and _listening(self.http_port + i)
                   for i in range(self.workers)):
                return
            time.sleep(0.1)
        self.kill()
        raise RuntimeError(f"tmqgate not ready after {self.ready_timeout}s:\n{self.log_tail()}")


def _listening(port: int) -> bool:
    """A TCP connection to 127.0.0.1:port is accepted."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1.0):
            return True
    except OSError:
        return False


class RefKafkaProcess(BrokerProcess):
    """The reference Apache Kafka broker (compat_tests/kafka_ref.py) on a fixed workdir.

    Restart = start again on the same workdir; kafka_ref keeps the port and log dirs of a
    workdir it has already formatted.  SIGKILL uses the process handle kafka_ref exposes.
    """

    def __init__(self, workdir: Path, config: dict[str, str] | None = None,
                 extra_listeners: dict[str, str] | None = None) -> None:
        """`config`: broker properties; `extra_listeners`: name -> security protocol."""
        self.workdir = workdir
        self.ref: Any = None
        self.bootstrap = ""
        self.config = config
        self.extra_listeners = extra_listeners
        self.listener_ports: dict[str, int] = {}

    def start(self) -> None:
        from . import kafka_ref

        self.ref = kafka_ref.start_reference_kafka(self.workdir, extra_config=self.config,
                                                   extra_listeners=self.extra_listeners)
        self.listener_ports = self.ref.listener_ports
        if self.bootstrap and self.ref.bootstrap != self.bootstrap:
            raise RuntimeError(f"reference Kafka came back on {self.ref.bootstrap}, not {self.bootstrap}")
        self.bootstrap = self.ref.bootstrap

    def _pid(self) -> int | None:
        for attr in ("proc", "process", "popen", "_proc", "_process"):
            p = getattr(self.ref, attr, None)
            if p is not None and hasattr(p, "pid"):
                return int(p.pid)
        pid = getattr(self.ref, "pid", None)
        return int(pid) if pid is not None else None

    def kill(self) -> None:
        if self.ref is None:
            return
        kill = getattr(self.ref, "kill", None)
        if callable(kill):
            kill()
            return
        pid = self._pid()
        if pid is None:
            raise RuntimeError("kafka_ref.RefKafka exposes neither kill() nor a process handle")
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            p = getattr(self.ref, "proc", None)
            if p is not None and p.poll() is not None:
                break
            time.sleep(0.05)

    def stop(self) -> None:
        if self.ref is not None:
            self.ref.stop()


def new_broker(target: str, workdir: Path, *, config: dict[str, Any] | None = None,
               extra_listeners: dict[str, str] | None = None) -> BrokerProcess:
    """An unstarted broker of `target` ("tmqgate" | "kafka"): `config` in that broker's own
    terms (tmqgate's TOML keys, Kafka's properties), `extra_listeners` name -> security
    protocol beside PLAINTEXT; `listener_ports` has every listener's port once started."""
    if target.endswith("-container"):  # the same broker as an image, with testcontainers
        from .containers import new_container_broker

        return new_container_broker(target, workdir, config=config, extra_listeners=extra_listeners)
    if target == "kafka":
        return RefKafkaProcess(workdir, config=config, extra_listeners=extra_listeners)
    workers = 2 if target == "tmqgate-workers" else 1  # serve --workers 2 (issue 28)
    return TmqgateProcess(workdir, config=config, extra_listeners=extra_listeners, workers=workers)
