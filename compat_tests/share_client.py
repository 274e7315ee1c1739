"""The Java share consumer (KIP-932 queues: `KafkaShareConsumer` of kafka-clients 4.3.1) driven by
`compat_tests/java/ShareClient.java` (see its header for the modes, options and lines).

`run_share(config, group, topic, mode, *options)` runs it to its end and returns what it printed,
parsed (`ShareRun`); `ShareProcess` starts it in the background (several members at once, a
member that holds its records until it is killed) and parses what it printed so far.
`config` is a client properties file (`client_config` writes one for a bootstrap address).
"""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from .java_client import program_cmd
from .kafka_ref import LIB_DIR

PROGRAM = Path(__file__).resolve().parent / "java" / "ShareClient.java"

#: the option that makes a new share group start at the log's start (Kafka's default is latest)
EARLIEST = "group:share.auto.offset.reset=earliest"


def produce(bootstrap: str, topic: str, values: dict[int, list[str]]) -> None:
    """Produce `values[p]` to partition p of `topic`, in order (acks=all, idempotent): the
    i-th value of partition p lands at offset i of a new topic."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                         "linger.ms": 5, "client.id": "compat-share-producer"})
    errors: list[str] = []

    def delivered(err: object, _msg: object) -> None:
        if err is not None:
            errors.append(str(err))

    for part, vals in values.items():
        for value in vals:
            producer.produce(topic, value=value.encode(), partition=part, on_delivery=delivered)
    left = producer.flush(60)
    assert left == 0 and not errors, (left, errors[:3])


def client_config(directory: Path, bootstrap: str, **extra: str) -> Path:
    """A client properties file in `directory` with `bootstrap.servers` and `extra`
    (underscores in a key stand for dots)."""
    path = directory / "share-client.properties"
    props = {"bootstrap.servers": bootstrap, **{k.replace("_", "."): v for k, v in extra.items()}}
    path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    return path


@dataclass(frozen=True)
class Got:
    """One record as a poll returned it."""

    partition: int
    offset: int
    delivery_count: int  # -1: the record had none
    value: str


@dataclass(frozen=True)
class ShareRun:
    """What one ShareClient run printed, by kind (see the program's header)."""

    returncode: int | None  # None: still running (ShareProcess.snapshot)
    got: list[Got]
    acks: list[tuple[int, int, str]]  # (partition, offset, ACCEPT|RELEASE|REJECT)
    commits: list[tuple[int, str]]  # (partition, "ok" or an exception class), commitSync's
    acked: list[tuple[int, int, str]]  # (partition, offsets, "ok" or exception), the callback's
    configs: list[str]  # KEY=VALUE group configs set
    lock_ms: int | None  # acquisitionLockTimeoutMs() after the first records
    holding: bool
    closed: bool
    stdout: str
    stderr: str

    def values(self) -> list[str]:
        return [g.value for g in self.got]

    def describe(self) -> str:
        """For assertion messages: the exit code, the first and last lines out (which records
        came first, with their delivery counts, tells most failures apart) and the last of
        stderr."""
        out = self.stdout if len(self.stdout) <= 3000 else f"{self.stdout[:1500]}\n...\n{self.stdout[-1500:]}"
        return f"rc={self.returncode}; stdout {out}\nstderr ...{self.stderr[-1500:]}"


def parse(stdout: str, stderr: str, returncode: int | None) -> ShareRun:
    got: list[Got] = []
    acks: list[tuple[int, int, str]] = []
    commits: list[tuple[int, str]] = []
    acked: list[tuple[int, int, str]] = []
    configs: list[str] = []
    lock_ms: int | None = None
    holding = closed = False
    for line in stdout.splitlines():
        kind, _, rest = line.partition(" ")
        fields = rest.split(" ")
        if kind == "got":
            part, offset, count, value = rest.split(" ", 3)
            got.append(Got(int(part), int(offset), int(count), value))
        elif kind == "ack":
            acks.append((int(fields[0]), int(fields[1]), fields[2]))
        elif kind == "commit":
            commits.append((int(fields[0]), fields[1]))
        elif kind == "acked":
            acked.append((int(fields[0]), int(fields[1]), fields[2]))
        elif kind == "config":
            configs.append(rest)
        elif kind == "lock":
            lock_ms = None if rest == "none" else int(rest)
        elif kind == "holding":
            holding = True
        elif kind == "closed":
            closed = True
    return ShareRun(returncode, got, acks, commits, acked, configs, lock_ms, holding, closed, stdout, stderr)


def share_cmd(config: Path, group: str, topic: str, mode: str, *options: str) -> list[str]:
    return program_cmd(PROGRAM, f"{LIB_DIR}/*", str(config), group, topic, mode, *options)


def run_share(config: Path, group: str, topic: str, mode: str, *options: str,
              timeout: float = 120.0) -> ShareRun:
    """Run ShareClient to its end (its `max:`/`idle:`/`wait:` options say when)."""
    proc = subprocess.run(share_cmd(config, group, topic, mode, *options), stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=timeout)
    return parse(proc.stdout, proc.stderr, proc.returncode)


class ShareProcess:
    """ShareClient as a child process, its output collected by threads as it comes."""

    def __init__(self, config: Path, group: str, topic: str, mode: str, *options: str) -> None:
        self.proc = subprocess.Popen(share_cmd(config, group, topic, mode, *options), stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self._out: list[str] = []
        self._err: list[str] = []
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._read, args=(stream, into), daemon=True)
                         for stream, into in ((self.proc.stdout, self._out), (self.proc.stderr, self._err))]
        for t in self._threads:
            t.start()

    def _read(self, stream: IO[str] | None, into: list[str]) -> None:
        assert stream is not None
        for line in stream:
            with self._lock:
                into.append(line)

    def snapshot(self) -> ShareRun:
        """What it printed so far (returncode None while it runs)."""
        with self._lock:
            out, err = "".join(self._out), "".join(self._err)
        return parse(out, err, self.proc.poll())

    def wait_until(self, check: str | Callable[[ShareRun], object], timeout: float) -> ShareRun:
        """Until `check` holds for the snapshot (a function of it, or the name of one of its
        attributes, e.g. "holding"); fails if the program exits first or `timeout` passes."""
        deadline = time.monotonic() + timeout
        while True:
            run = self.snapshot()
            if check(run) if callable(check) else getattr(run, check):
                return run
            assert run.returncode is None, f"ShareClient exited before {check}: {run.describe()}"
            assert time.monotonic() < deadline, f"no {check} in {timeout} s: {run.describe()}"
            time.sleep(0.1)

    def finish(self, timeout: float = 120.0) -> ShareRun:
        """Wait for it to end by itself and return everything it printed."""
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired as exc:
            self.kill()
            raise AssertionError(f"ShareClient still running after {timeout} s: {self.snapshot().describe()}") from exc
        for t in self._threads:
            t.join(10)
        return self.snapshot()

    def stop(self, timeout: float = 60.0) -> ShareRun:
        """Ask it to stop (a `stop` line on stdin: it closes the consumer) and wait for it."""
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write("stop\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            pass
        return self.finish(timeout)

    def kill(self) -> None:
        """SIGKILL: nothing acknowledged, the consumer not closed."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(30)
