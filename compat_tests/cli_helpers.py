"""Boilerplate for the Kafka command-line tool tests (`test_cli_*.py`).

Runs the Apache Kafka 4.x tools from `compat_tests/bin/` exactly as a user would type them,
with a timeout and captured output, and parses what they print: the tables of
`kafka-consumer-groups`, the `Key: value` lines of `kafka-topics --describe`, the
`name=value` lines of `kafka-configs --describe`, the `topic:partition:offset` lines of
`kafka-get-offsets`, and the summary lines of the perf tools.  A failing tool raises an
AssertionError that shows the command line, exit code, stdout and stderr, so a test failure
report is enough to reproduce the problem by hand.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from .kafka_ref import cds_opts, finish_cds, require_jars, tool

# A short-lived tool needs little heap; small heaps also keep six concurrent consumers
# affordable on a 2-core machine.
TOOL_HEAP = "-Xmx256m"
TOOL_TIMEOUT = 90.0

T = TypeVar("T")


def require_tools() -> None:
    """The Kafka tools (the reference Kafka's jars and a JDK): skipped without them, failed
    under CI (helpers.missing_dependency)."""
    __tracebackhide__ = True
    require_jars()


def _env(heap: str, extra_opts: str = "") -> dict[str, str]:
    env = dict(os.environ)
    env["KAFKA_HEAP_OPTS"] = heap
    if extra_opts:
        env["KAFKA_OPTS"] = (env.get("KAFKA_OPTS", "") + " " + extra_opts).strip()
    return env


def command_line(name: str, args: Sequence[str]) -> str:
    return " ".join([name, *(shlex.quote(a) for a in args)])


def _describe_run(name: str, args: Sequence[str], rc: int | str, stdout: str, stderr: str,
                  input: str | None = None) -> str:
    msg = f"$ {command_line(name, args)}"
    if input is not None:
        msg += f"\n  (stdin: {input!r})"
    return (f"{msg}\n  exit: {rc}\n  --- stdout ---\n{stdout.rstrip()}\n"
            f"  --- stderr ---\n{stderr.rstrip()}")


@dataclass(frozen=True)
class ToolRun:
    name: str
    args: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str

    def describe(self) -> str:
        return _describe_run(self.name, self.args, self.returncode, self.stdout, self.stderr)

    @property
    def lines(self) -> list[str]:
        return [ln for ln in self.stdout.splitlines() if ln.strip()]


def run(name: str, *args: str, input: str | None = None, timeout: float = TOOL_TIMEOUT,
        check: bool = True, heap: str = TOOL_HEAP) -> ToolRun:
    """Run `compat_tests/bin/<name> args...`; with `check`, a non-zero exit fails the test
    with the whole command and its output."""
    opts, cds_tmp, cds_final = cds_opts(name)
    try:
        cp = subprocess.run([str(tool(name)), *args], input=input, capture_output=True, text=True,
                            timeout=timeout, env=_env(heap, opts))
    except subprocess.TimeoutExpired as exc:
        finish_cds(cds_tmp, None)
        out = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        err = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else (exc.stderr or "")
        raise AssertionError("tool timed out\n" + _describe_run(name, args, f"killed after {timeout}s",
                                                                out, err, input)) from None
    finish_cds(cds_tmp, cds_final if cp.returncode == 0 else None)
    result = ToolRun(name, tuple(args), cp.returncode, cp.stdout, cp.stderr)
    if check and cp.returncode != 0:
        raise AssertionError("tool failed\n" + _describe_run(name, args, cp.returncode, cp.stdout,
                                                             cp.stderr, input))
    return result


# --------------------------------------------------------------------------- background tools


class Background:
    """A long-running tool (e.g. kafka-console-consumer) with stdout/stderr going to files."""

    def __init__(self, name: str, *args: str, workdir: Path, tag: str, heap: str = "-Xmx192m") -> None:
        self.name = name
        self.args = tuple(args)
        self.out_path = workdir / f"{tag}.out"
        self.err_path = workdir / f"{tag}.err"
        opts, self._cds_tmp, self._cds_final = cds_opts(name)
        with open(self.out_path, "wb") as out, open(self.err_path, "wb") as err:
            self.proc = subprocess.Popen([str(tool(name)), *args], stdin=subprocess.DEVNULL,
                                         stdout=out, stderr=err, env=_env(heap, opts))

    def stdout(self) -> str:
        return self.out_path.read_text(errors="replace")

    def stderr(self) -> str:
        return self.err_path.read_text(errors="replace")

    def lines(self) -> list[str]:
        # only complete lines: the last one may still be being written
        text = self.stdout()
        return [ln for ln in text.split("\n")[:-1] if ln.strip()]

    def alive(self) -> bool:
        return self.proc.poll() is None

    def describe(self) -> str:
        rc = self.proc.poll()
        return _describe_run(self.name, self.args, "running" if rc is None else rc, self.stdout(), self.stderr())

    def stop(self, timeout: float = 20.0) -> int:
        """SIGTERM (a console consumer closes cleanly, leaving its group), SIGKILL if stuck."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        # a JVM ended by SIGTERM still runs its exit hooks, so the archive may be complete
        finish_cds(self._cds_tmp, self._cds_final if self.proc.returncode in (0, 143) else None)
        return self.proc.returncode


def client_errors(stderr: str) -> list[str]:
    """Lines where a tool's Kafka client logged an error or an exception (the tools log at
    WARN and above to stderr); a clean run has none."""
    return [ln for ln in stderr.splitlines() if " ERROR " in f" {ln} " or "Exception" in ln]


# --------------------------------------------------------------------------- parsers


def parse_table(text: str, first: str = "GROUP") -> list[dict[str, str]]:
    """The whitespace-aligned tables `kafka-consumer-groups` prints, as dicts keyed by the
    header names.  Every table whose header starts with `first` is read; a row whose field
    count does not match its header (an empty value where Kafka prints `-`) is an error."""
    rows: list[dict[str, str]] = []
    header: list[str] | None = None
    for line in text.splitlines():
        if not line.strip():
            header = None
            continue
        fields = line.split()
        if fields[0] == first and len(fields) > 1 and fields[1].isupper():
            header = fields
            # "COORDINATOR (ID)" is one column printed as two words, like its values
            continue
        if header is None:
            continue
        if len(fields) != len(header):
            raise AssertionError(f"row does not match its header {header}: {line!r} in:\n{text}")
        rows.append(dict(zip(header, fields, strict=True)))
    return rows


def parse_assignment(cell: str) -> dict[str, set[int]]:
    """`t:0,1` or `t1:0,t2:1,2` (kafka-consumer-groups --members --verbose) -> {topic: {parts}};
    `-` -> {}."""
    if cell in ("-", ""):
        return {}
    out: dict[str, set[int]] = {}
    topic = None
    for piece in cell.split(","):
        if ":" in piece:
            topic, _, piece = piece.rpartition(":")
            out.setdefault(topic, set())
        assert topic is not None, cell
        if piece:
            out[topic].add(int(piece))
    return out


@dataclass(frozen=True)
class TopicDescription:
    summary: dict[str, str]
    configs: dict[str, str]
    partitions: list[dict[str, str]]


def parse_topic_describe(text: str, topic: str) -> TopicDescription:
    """`kafka-topics --describe --topic t`: a summary line `Topic: t<TAB>TopicId: ...<TAB>
    PartitionCount: n<TAB>...<TAB>Configs: a=b,c=d`, then one line per partition."""
    summary: dict[str, str] | None = None
    parts: list[dict[str, str]] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        fields: dict[str, str] = {}
        for cell in line.strip().split("\t"):
            key, sep, value = cell.partition(":")
            if sep:
                fields[key.strip()] = value.strip()
        if fields.get("Topic") != topic:
            continue
        if "Partition" in fields:
            parts.append(fields)
        elif "PartitionCount" in fields:
            summary = fields
    assert summary is not None, f"no summary line for {topic} in:\n{text}"
    configs: dict[str, str] = {}
    for item in filter(None, summary.get("Configs", "").split(",")):
        k, _, v = item.partition("=")
        configs[k] = v
    parts.sort(key=lambda p: int(p["Partition"]))
    return TopicDescription(summary, configs, parts)


_CONFIG_LINE = re.compile(r"^\s+(?P<name>[\w.\-]+)=(?P<value>.*?) sensitive=(?:true|false) synonyms=\{.*\}$")


def parse_config_describe(text: str) -> dict[str, str]:
    """`kafka-configs --describe`: the `  name=value sensitive=... synonyms={...}` lines."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        m = _CONFIG_LINE.match(line)
        if m:
            out[m.group("name")] = m.group("value")
    return out


def parse_get_offsets(text: str) -> dict[tuple[str, int], int]:
    """`kafka-get-offsets`: `topic:partition:offset` lines."""
    out: dict[tuple[str, int], int] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        topic, p, off = line.rsplit(":", 2)
        out[(topic, int(p))] = int(off) if off else -1
    return out


_PRODUCER_PERF = re.compile(r"^(?P<n>\d+) records sent, [\d.]+ records/sec .*avg latency", re.M)


def producer_perf_sent(text: str) -> int | None:
    """The final summary line of kafka-producer-perf-test: `N records sent, ... avg latency, ...`
    (the last such line; interval reports have the same shape)."""
    found = _PRODUCER_PERF.findall(text)
    return int(found[-1]) if found else None


def consumer_perf_stats(text: str) -> dict[str, str]:
    """kafka-consumer-perf-test: a CSV-ish header line then one value line."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    for i, line in enumerate(lines):
        if line.startswith("start.time") and i + 1 < len(lines):
            names = [c.strip() for c in line.split(",")]
            values = [c.strip() for c in lines[i + 1].split(",")]
            if len(names) == len(values):
                return dict(zip(names, values, strict=True))
    return {}


# --------------------------------------------------------------------------- producing data


def produce(bootstrap: str, topic: str, records: Sequence[tuple],
            timeout: float = 30.0) -> None:
    """Produce (partition, key, value[, timestamp_ms]) records with acks=all through
    librdkafka and check every delivery report; used where the producing side is not what a
    test is about."""
    from confluent_kafka import Producer

    errors: list[str] = []
    delivered = 0

    def cb(err: object, msg: object) -> None:
        nonlocal delivered
        if err is not None:
            errors.append(str(err))
        else:
            delivered += 1

    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    for part, key, value, *ts in records:
        p.produce(topic, value=value, key=key, partition=part, on_delivery=cb, timestamp=ts[0] if ts else 0)
    left = p.flush(timeout)
    assert left == 0 and not errors and delivered == len(records), \
        f"produce to {topic}: {left} undelivered, {delivered}/{len(records)} delivered, errors {errors[:5]}"
