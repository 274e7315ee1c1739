"""franz-go (kgo, kadm; Go) driven by a small program: `compat_tests/go/main.go`, built once by
`scripts/install_go_client.sh` into `compat_tests/go/bin/` (see the program's header for its
modes and the JSON lines it prints)."""

from __future__ import annotations

import hashlib
import json
import subprocess
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .helpers import require

GO_DIR = Path(__file__).resolve().parent / "go"
INSTALL = "scripts/install_go_client.sh"


def program() -> Path:
    """The built program for the sources as they are (the installer's hash), or
    missing_dependency naming the installer."""
    __tracebackhide__ = True
    digest = hashlib.sha256(b"".join((GO_DIR / name).read_bytes() for name in ("main.go", "go.mod", "go.sum")))
    path = GO_DIR / "bin" / f"gokafka-{digest.hexdigest()[:16]}"
    require(path.is_file(), f"the franz-go test program is not built for these sources ({path.name})", INSTALL)
    return path


@dataclass(frozen=True)
class GoRun:
    returncode: int
    events: list[dict[str, Any]]
    stderr: str  # kgo's log (info)

    def of(self, event: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e["event"] == event]

    def report(self) -> str:
        """What to show when an assertion fails: the errors and the tail of kgo's log."""
        return f"exit {self.returncode}; errors {self.of('error')}; kgo's log:\n{self.stderr[-6000:]}"


def go_command(mode: str, bootstrap: str, **flags: str | int | float | bool) -> list[str]:
    """`gokafka MODE -brokers BOOTSTRAP -flag value...` (a True flag is given bare, False left out)."""
    args = [str(program()), mode, "-brokers", bootstrap]
    for name, value in flags.items():
        if value is True:
            args.append(f"-{name}")
        elif value is not False:
            args += [f"-{name}", str(value)]
    return args


def go_events(stdout: str) -> list[dict[str, Any]]:
    """The program's result lines (one JSON object each)."""
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]


def run_go(mode: str, bootstrap: str, timeout: float = 120.0, **flags: str | int | bool) -> GoRun:
    """`go_command(...)` with kgo's log at info, run to its end."""
    proc = subprocess.run(go_command(mode, bootstrap, log="info", **flags), capture_output=True, text=True,
                          timeout=timeout)
    return GoRun(proc.returncode, go_events(proc.stdout), proc.stderr)


# --------------------------------------------------------------------------- share groups


@dataclass(frozen=True)
class ShareRecord:
    """A `record` line of `gokafka share`: a record its share consumer polled."""

    partition: int
    offset: int
    count: int  # its delivery count (Record.DeliveryCount)
    value: str
    ack: str  # how it acknowledged it: accept, release, reject; none (held)
    at: float  # time.monotonic() when the line came


@dataclass(frozen=True)
class ShareRun:
    """What one `gokafka share` printed, once it ended (or was killed)."""

    returncode: int
    events: list[dict[str, Any]]
    records: list[ShareRecord]
    stderr: str  # kgo's log (info)
    started: float  # time.monotonic() when the process was started

    def of(self, event: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e["event"] == event]

    def ack_errors(self) -> list[dict[str, Any]]:
        """The ShareAckCallback's partition results that were errors."""
        return [e for e in self.of("acked") if e["error"] is not None]

    def report(self) -> str:
        """What to show when an assertion fails: the errors, the end and the tail of kgo's log."""
        return (f"exit {self.returncode}; errors {self.of('error')}; acknowledgement errors {self.ack_errors()}; "
                f"stopped {self.of('stopped')}; {len(self.records)} records; kgo's log:\n{self.stderr[-6000:]}")


def share_args(bootstrap: str, topic: str, group: str, *, configs: dict[str, str | int] | None = None,
               create: bool = False, partitions: int = 1, values: Sequence[str] = (), setup: bool = False,
               rules: Sequence[str] = (), max_records: int = 0, idle: float = 5.0, wait: float = 30.0,
               hold: bool = False, fetch_max_records: int = 0, timeout: float = 90.0) -> list[str]:
    """The command line of `gokafka share` (main.go's header says what each option does): group
    `configs` set first, the topic created (`create`, `partitions`) and `values` produced (value
    i to partition i % partitions); then, unless `setup`, a share consumer that acknowledges by
    `rules` ("release-below:K", "accept:PREFIX", "release:PREFIX", "reject:PREFIX"; otherwise
    accept) and stops after `max_records`, after `idle` seconds without a record or when none
    came within `wait` seconds; `hold`: holds the first poll's records until killed."""
    assert not any("," in v for v in values), "values are passed comma separated"
    args = [str(program()), "share", "-brokers", bootstrap, "-topic", topic, "-group", group, "-log", "info",
            "-partitions", str(partitions), "-idle", f"{idle}s", "-wait", f"{wait}s", "-timeout", f"{timeout}s"]
    if configs:
        args += ["-config", ",".join(f"{k}={v}" for k, v in configs.items())]
    if create:
        args.append("-create")
    if values:
        args += ["-values", ",".join(values)]
    if setup:
        args.append("-setup")
    if rules:
        args += ["-rules", ",".join(rules)]
    if max_records:
        args += ["-max", str(max_records)]
    if hold:
        args.append("-hold")
    if fetch_max_records:
        args += ["-maxrecords", str(fetch_max_records)]
    return args


class ShareConsumer:
    """A `gokafka share` process running (`start_share`); its lines are read as they come."""

    def __init__(self, args: list[str]) -> None:
        self.started = time.monotonic()
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self._lines: list[tuple[float, dict[str, Any]]] = []
        self._stderr: list[str] = []
        self._cond = threading.Condition()
        self._readers = [threading.Thread(target=self._read_stdout, daemon=True),
                         threading.Thread(target=self._read_stderr, daemon=True)]
        for reader in self._readers:
            reader.start()

    def _read_stdout(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("{"):
                with self._cond:
                    self._lines.append((time.monotonic(), json.loads(line)))
                    self._cond.notify_all()

    def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self._stderr.append(line)

    def wait_for(self, event: str, timeout: float) -> dict[str, Any]:
        """The first `event` line, once it came; AssertionError (with the run so far) if the
        process ended or `timeout` passed first."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                for _, e in self._lines:
                    if e["event"] == event:
                        return e
                left = deadline - time.monotonic()
                if left <= 0 or (self.proc.poll() is not None and not self._readers[0].is_alive()):
                    break
                self._cond.wait(min(left, 0.2))
        raise AssertionError(f"no {event!r} line from gokafka share: {self._run(self.proc.poll()).report()}")

    def signal(self, sig: int) -> None:
        self.proc.send_signal(sig)

    def kill(self) -> None:
        """SIGKILL (a consumer that dies), if it still runs."""
        if self.proc.poll() is None:
            self.proc.kill()

    def finish(self, timeout: float = 120.0) -> ShareRun:
        """Wait for it to end (SIGKILL after `timeout`) and return what it printed."""
        try:
            returncode = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            returncode = self.proc.wait()
        for reader in self._readers:
            reader.join(10)
        return self._run(returncode)

    def _run(self, returncode: int | None) -> ShareRun:
        with self._cond:
            lines = list(self._lines)
        records = [ShareRecord(e["partition"], e["offset"], e["count"], e["value"], e["ack"], at)
                   for at, e in lines if e["event"] == "record"]
        return ShareRun(-999 if returncode is None else returncode, [e for _, e in lines], records,
                        "".join(self._stderr), self.started)


def start_share(bootstrap: str, topic: str, group: str, **options: Any) -> ShareConsumer:
    """`gokafka share` started in the background (options: `share_args`)."""
    return ShareConsumer(share_args(bootstrap, topic, group, **options))


def run_share(bootstrap: str, topic: str, group: str, timeout: float = 120.0, **options: Any) -> ShareRun:
    """`gokafka share` run to its end (options: `share_args`)."""
    return start_share(bootstrap, topic, group, **options).finish(timeout)
