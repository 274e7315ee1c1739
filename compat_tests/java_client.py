"""The Java client 4.x (kafka-clients from `compat_tests/java/lib`) driven by a small program.

`java_roundtrip(config, topic, count, group)` runs `compat_tests/java/ClientRoundTrip.java`
(compiled once by `program_cmd`) with the client properties in `config` and returns what
it printed: the brokers Admin saw, the producer's offsets, the records the consumer read and
the group's committed offset (see the program's header for the lines).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from .kafka_ref import BIN_DIR, LIB_DIR, java_binary

PROGRAM = Path(__file__).resolve().parent / "java" / "ClientRoundTrip.java"
#: where `program_cmd` keeps the programs' classes, by a hash of the source and the class path
CLASSES_DIR = Path(__file__).resolve().parent / "java" / "classes"


def program_cmd(program: Path, classpath: str, *args: str) -> list[str]:
    """The command that runs the one-file Java `program` (its class named as the file) on
    `classpath` with `args`: compiled by javac once per source and class path, under a lock the
    lanes share (launched as a source file, each run would compile it again: ~2 s of CPU)."""
    java = java_binary()
    assert java, "no java on PATH"
    key = hashlib.sha256(program.read_bytes() + classpath.encode()).hexdigest()[:16]
    classes = CLASSES_DIR / f"{program.stem}-{key}"
    if not (classes / f"{program.stem}.class").is_file():
        CLASSES_DIR.mkdir(parents=True, exist_ok=True)
        with open(CLASSES_DIR / ".lock", "a+") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not (classes / f"{program.stem}.class").is_file():
                javac = os.path.join(os.path.dirname(java), "javac")
                tmp = classes.with_name(classes.name + f".tmp{os.getpid()}")
                shutil.rmtree(tmp, ignore_errors=True)
                done = subprocess.run([javac, "-nowarn", "-d", str(tmp), "-cp", classpath, str(program)],
                                      capture_output=True, text=True, timeout=300)
                assert done.returncode == 0, f"javac {program.name}:\n{done.stdout}{done.stderr}"
                os.replace(tmp, classes)
    return [java, "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
            f"-Dlog4j2.configurationFile={BIN_DIR / 'log4j2-tools.properties'}",
            "-cp", os.pathsep.join([str(classes), classpath]), program.stem, *args]


@dataclass(frozen=True)
class RoundTrip:
    returncode: int
    nodes: list[str]
    sent: list[tuple[int, int]]  # (partition, offset)
    got: list[tuple[int, str, str]]  # (offset, key, value)
    committed: int | None
    stdout: str
    stderr: str


def java_roundtrip(config: Path, topic: str, count: int, group: str, timeout: float = 180.0) -> RoundTrip:
    cmd = program_cmd(PROGRAM, f"{LIB_DIR}/*", str(config), topic, str(count), group)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    nodes: list[str] = []
    sent: list[tuple[int, int]] = []
    got: list[tuple[int, str, str]] = []
    committed = None
    for line in proc.stdout.splitlines():
        kind, _, rest = line.partition(" ")
        fields = rest.split()
        if kind == "node":
            nodes.append(rest)
        elif kind == "sent":
            sent.append((int(fields[0]), int(fields[1])))
        elif kind == "got":
            got.append((int(fields[0]), fields[1], fields[2]))
        elif kind == "committed":
            committed = int(fields[0])
    return RoundTrip(proc.returncode, nodes, sent, got, committed, proc.stdout, proc.stderr)


TXN_PROGRAM = Path(__file__).resolve().parent / "java" / "TxnClient.java"


SPARK_CLIENTS_JAR = Path(__file__).resolve().parent / "java" / "spark-lib" / "kafka-clients-3.9.2.jar"


def clients_classpath(clients_jar: Path | None = None) -> str:
    """The class path of the 4.3.1 jars (`LIB_DIR/*`), or with `clients_jar` (e.g. the
    kafka-clients 3.9 Spark ships, SPARK_CLIENTS_JAR) in place of kafka-clients-4.3.1 and
    the rest of LIB_DIR's jars (slf4j/log4j, lz4, snappy, zstd) behind it."""
    if clients_jar is None:
        return f"{LIB_DIR}/*"
    rest = sorted(str(j) for j in Path(LIB_DIR).glob("*.jar") if not j.name.startswith("kafka"))
    return os.pathsep.join([str(clients_jar), *rest])


def java_txn(bootstrap: str, mode: str, topic: str, txn_id: str,
             timeout: float = 180.0, clients_jar: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run `compat_tests/java/TxnClient.java` (the Java client's transactional producer and
    read_committed / read_uncommitted consumers; see the program's header for MODE and the
    lines it prints) with the 4.3.1 client, or the kafka-clients jar `clients_jar`."""
    cmd = program_cmd(TXN_PROGRAM, clients_classpath(clients_jar), bootstrap, mode, topic, txn_id)
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


STREAMS_PROGRAM = Path(__file__).resolve().parent / "java" / "StreamsCount.java"
CONNECT_LIB_DIR = Path(__file__).resolve().parent / "java" / "connect-lib"


def java_streams(bootstrap: str, app_id: str, input_topic: str, output_topic: str, state_dir: Path,
                 window_ms: int, log: Path, pace_ms: int = 0) -> subprocess.Popen[bytes]:
    """Start `compat_tests/java/StreamsCount.java` (a Kafka Streams 4.3.1 windowed count with a
    repartition topic, a changelogged store and exactly_once_v2; see the program's header)
    on the jars of `compat_tests/java/connect-lib`, its output appended to `log`; `pace_ms`
    pauses it that long per input record.  The caller
    stops it (SIGTERM closes it cleanly, SIGKILL does not)."""
    cmd = program_cmd(STREAMS_PROGRAM, f"{CONNECT_LIB_DIR}/*", bootstrap, app_id, input_topic,
                      output_topic, str(state_dir), str(window_ms), str(pace_ms))
    with log.open("ab") as out:
        return subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
