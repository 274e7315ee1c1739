"""Kafka Connect's distributed worker (Apache Kafka 4.3.1, `compat_tests/bin/connect-distributed`)
against the broker under test, driven over its REST API.

`ConnectWorker(workdir, bootstrap, group)` writes a worker properties file (its own group,
config/offset/status topics that the worker creates itself, compacted, replication factor 1;
StringConverter keys and values so the topic holds the file's lines as they are; offsets
flushed every 500 ms; REST on a free loopback port) and runs the worker as a child process
whose output goes to `worker.log` in the workdir.  `kill()` is SIGKILL; `start()` again
restarts it on the same properties (same REST port).

The REST calls use urllib: `rest(method, path, body)` returns (status, decoded JSON).
"""

from __future__ import annotations

import json
import os
import subprocess
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from .brokers import ChildProcess
from .helpers import free_port, wait_until
from .kafka_ref import BIN_DIR

CONNECT_LIB_DIR = BIN_DIR.parent / "java" / "connect-lib"


def connect_jars_installed() -> bool:
    """True when scripts/install_java.sh has fetched connect-runtime and connect-file."""
    return any(CONNECT_LIB_DIR.glob("connect-runtime-*.jar")) and any(CONNECT_LIB_DIR.glob("connect-file-*.jar"))


class ConnectWorker(ChildProcess):
    """One distributed Connect worker process."""

    kill_wait = stop_wait = 30.0
    tail_lines = 80

    def __init__(self, workdir: Path, bootstrap: str, group: str, *, name: str = "worker",
                 extra: dict[str, str] | None = None) -> None:
        self.workdir = workdir
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.name = name
        self.group = group
        self.rest_port = free_port()
        self.props_path = workdir / f"{name}.properties"
        self.log_path = workdir / f"{name}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        props = {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "config.storage.topic": f"{group}-configs",
            "offset.storage.topic": f"{group}-offsets",
            "status.storage.topic": f"{group}-status",
            "config.storage.replication.factor": "1",
            "offset.storage.replication.factor": "1",
            "status.storage.replication.factor": "1",
            # fewer partitions than the defaults (25 / 5): smaller and quicker to read to the end
            "offset.storage.partitions": "5",
            "status.storage.partitions": "3",
            "key.converter": "org.apache.kafka.connect.storage.StringConverter",
            "value.converter": "org.apache.kafka.connect.storage.StringConverter",
            "offset.flush.interval.ms": "500",
            "listeners": f"http://127.0.0.1:{self.rest_port}",
            "rest.advertised.host.name": "127.0.0.1",
            "rest.advertised.port": str(self.rest_port),
            # connect-file is on the worker's classpath (connect-lib/); no plugin scanning
            "plugin.discovery": "only_scan",
            # a lone worker leaving for good hands its work on quickly (default 5 min)
            "scheduled.rebalance.max.delay.ms": "3000",
        }
        props.update(extra or {})
        self.props_path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.rest_port}"

    def start(self, ready_timeout: float = 180.0) -> None:
        env = dict(os.environ)
        env.setdefault("KAFKA_HEAP_OPTS", "-Xmx384m")
        log = self.log_path.open("ab")
        self.proc = subprocess.Popen([str(BIN_DIR / "connect-distributed"), str(self.props_path)],
                                     stdout=log, stderr=subprocess.STDOUT, env=env)
        log.close()
        wait_until(self._ready, ready_timeout, interval=0.5, what=f"Connect {self.name} REST at {self.url}")

    def _ready(self) -> bool:
        if self.proc is not None and self.proc.poll() is not None:
            raise AssertionError(f"Connect {self.name} exited {self.proc.returncode}:\n{self.log_tail()}")
        try:
            status, body = self.rest("GET", "/connectors")
        except OSError:
            return False
        return status == 200 and isinstance(body, list)

    def rest(self, method: str, path: str, body: Any = None, timeout: float = 30.0) -> tuple[int, Any]:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json", "Accept": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                raw = resp.read()
                return resp.status, (json.loads(raw) if raw else None)
        except urllib.error.HTTPError as e:
            raw = e.read()
            try:
                return e.code, json.loads(raw) if raw else None
            except ValueError:
                return e.code, raw.decode(errors="replace")

    def put_connector(self, name: str, config: dict[str, str]) -> Any:
        """Create or update a connector (PUT /connectors/<name>/config); retried while the
        worker answers 409 (a rebalance in progress) or 5xx (not the leader yet)."""
        result: list[Any] = []

        def put() -> bool:
            status, body = self.rest("PUT", f"/connectors/{name}/config", config)
            if status in (200, 201):
                result.append(body)
                return True
            if status in (409, 500, 503):
                return False
            raise AssertionError(f"PUT /connectors/{name}/config: {status} {body}")

        wait_until(put, 120, interval=1.0, what=f"connector {name} created")
        return result[0]

    def status(self, name: str) -> dict[str, Any] | None:
        status, body = self.rest("GET", f"/connectors/{name}/status")
        return body if status == 200 and isinstance(body, dict) else None

    def running(self, name: str, tasks: int = 1) -> bool:
        """The connector and `tasks` tasks are all RUNNING (as this worker sees them)."""
        s = self.status(name)
        if not s or s.get("connector", {}).get("state") != "RUNNING":
            return False
        states = [t.get("state") for t in s.get("tasks", [])]
        failed = [t for t in s.get("tasks", []) if t.get("state") == "FAILED"]
        if failed:
            raise AssertionError(f"connector {name} task failed: {failed}")
        return len(states) == tasks and all(x == "RUNNING" for x in states)
