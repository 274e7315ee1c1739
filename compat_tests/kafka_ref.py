"""A real Apache Kafka broker to check the compatibility tests against.

The jars come from `compat_tests/java/lib/` (pinned in `compat_tests/java/pom.xml`, fetched by
`scripts/install_java.sh`); the broker runs through `compat_tests/bin/kafka-server-start` as one
KRaft node in combined mode (broker + controller, node.id 1) on free loopback ports, with its
log dirs, config and output log inside the given workdir.

    from compat_tests.kafka_ref import start_reference_kafka

    with start_reference_kafka(tmp_path) as kafka:
        producer = KafkaProducer(bootstrap_servers=kafka.bootstrap)
        ...

Starting again on a workdir that was already formatted keeps its ports, cluster id and data,
so a test can `kill()` the broker (SIGKILL) and bring it back on the same address.

Run `python -m compat_tests.kafka_ref [WORKDIR]` to start one by hand (Ctrl-C stops it).
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import threading
import time
import uuid
from pathlib import Path
from types import TracebackType

from .helpers import free_port

ROOT = Path(__file__).resolve().parent
BIN_DIR = ROOT / "bin"
LIB_DIR = ROOT / "java" / "lib"

HEAP_OPTS = "-Xmx512m -Xms256m"
# Serial GC: one GC thread, small footprint, gentle on a 2-core machine.
FULL_JIT_JVM_OPTS = "-XX:+UseSerialGC -XX:+ExitOnOutOfMemoryError -Djava.awt.headless=true"
# Default for tests: C1 only, which starts the broker in ~40% less CPU time (on 2 busy cores,
# ~6 s instead of ~10 s) at the cost of peak throughput.  Pass jvm_opts=FULL_JIT_JVM_OPTS
# when comparing performance with Apache Kafka.
JVM_OPTS = FULL_JIT_JVM_OPTS + " -XX:TieredStopAtLevel=1"

CONFIG_NAME = "server.properties"
LOG_NAME = "kafka.log"
DATA_NAME = "kafka-logs"

# Settings a single-node cluster needs (internal topics with replication 1) plus a few that
# make a test broker prompt.  Everything else stays at Apache Kafka's defaults, including
# auto.create.topics.enable=true, so the reference behaves like a stock broker.
SINGLE_NODE_CONFIG: dict[str, str] = {
    "offsets.topic.replication.factor": "1",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "share.coordinator.state.topic.replication.factor": "1",
    "share.coordinator.state.topic.min.isr": "1",
    "group.initial.rebalance.delay.ms": "0",
    "num.partitions": "1",
    # After a SIGKILL the restarted node must wait out its own stale registration (default
    # 9 s session); faster heartbeats make kill-and-restart tests quicker.  Not client-visible.
    "broker.heartbeat.interval.ms": "500",
    "broker.session.timeout.ms": "3000",
    # No KIP-835 no-op record in the metadata log every 500 ms: the single node's own log has
    # nothing to prove live to anyone, and writing and replaying them was a third of an idle
    # broker's CPU (4.9 % of a core -> 3.3 %). Not client-visible.
    "metadata.max.idle.interval.ms": "0",
}


class RefKafkaError(RuntimeError):
    """The reference broker could not be set up or did not come up."""


def jars_installed(lib_dir: Path = LIB_DIR) -> bool:
    """True when `scripts/install_java.sh` has put the Kafka jars in place."""
    return any(lib_dir.glob("kafka_2.13-*.jar")) and any(lib_dir.glob("kafka-clients-*.jar"))


def require_jars() -> None:
    """The reference Kafka jars and a JDK, or the test is skipped — failed under CI
    (helpers.missing_dependency)."""
    from .helpers import require

    __tracebackhide__ = True
    java = os.environ.get("JAVA_HOME") or shutil.which("java")
    require(jars_installed() and java, "Kafka jars or java not installed", "scripts/install_java.sh")


def kafka_version(lib_dir: Path = LIB_DIR) -> str | None:
    """The installed Apache Kafka version, read from the kafka-clients jar name."""
    for jar in lib_dir.glob("kafka-clients-*.jar"):
        return jar.name[len("kafka-clients-"):-len(".jar")]
    return None


def tool(name: str) -> Path:
    """Path of a Kafka command-line tool wrapper, e.g. `tool("kafka-topics")`."""
    path = BIN_DIR / name
    if not path.is_file():
        raise FileNotFoundError(f"no such Kafka tool wrapper: {path}")
    return path


def run_tool(name: str, *args: str, timeout: float = 60.0, check: bool = True,
             input: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run a Kafka tool (`compat_tests/bin/<name>`) and return its completed process."""
    return subprocess.run([str(tool(name)), *args], input=input, capture_output=True, text=True,
                          timeout=timeout, check=check)


def random_cluster_id() -> str:
    """A Kafka cluster id: 16 random bytes, URL-safe base64 without padding (as Uuid.toString)."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode("ascii").rstrip("=")


def api_versions_ok(host: str, port: int, timeout: float = 1.0) -> bool:
    """True when host:port answers an ApiVersions v0 request with error code 0."""
    client_id = b"kafka-ref-ready"
    # request header v1: api_key=18 ApiVersions, api_version=0, correlation_id=7, client_id
    body = struct.pack(">hhih", 18, 0, 7, len(client_id)) + client_id
    try:
        with socket.create_connection((host, port), timeout=timeout) as s:
            s.settimeout(timeout)
            s.sendall(struct.pack(">i", len(body)) + body)
            (size,) = struct.unpack(">i", _recv_exact(s, 4))
            frame = _recv_exact(s, min(size, 6))
    except (OSError, ConnectionError, struct.error):
        return False
    if len(frame) < 6:
        return False
    correlation_id, error_code = struct.unpack(">ih", frame)
    return correlation_id == 7 and error_code == 0


def _recv_exact(s: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("connection closed")
        buf += chunk
    return bytes(buf)


def _read_properties(path: Path) -> dict[str, str]:
    props: dict[str, str] = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith(("#", "!")) or "=" not in line:
            continue
        key, _, value = line.partition("=")
        props[key.strip()] = value.strip()
    return props


def _port_of(listener: str) -> int:
    return int(listener.rpartition(":")[2])


class RefKafka:
    """A running reference Apache Kafka broker (KRaft, combined mode, one node)."""

    def __init__(self, workdir: Path, port: int, controller_port: int, cluster_id: str,
                 proc: subprocess.Popen[bytes]) -> None:
        self.workdir = workdir
        self.port = port
        self.controller_port = controller_port
        self.cluster_id = cluster_id
        self.proc = proc
        self.config_path = workdir / CONFIG_NAME
        self.log_path = workdir / LOG_NAME
        self.data_dir = workdir / DATA_NAME
        listeners = _read_properties(self.config_path).get("listeners", "")
        self.listener_ports = {name: _port_of(address) for name, _, address in
                               (item.partition("://") for item in listeners.split(",") if item)}

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self, timeout: float = 20.0) -> None:
        """Controlled shutdown: SIGTERM, then SIGKILL after `timeout` seconds; waits for exit."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
                return
            except subprocess.TimeoutExpired:
                pass
        self.kill()

    def kill(self) -> None:
        """SIGKILL (no flush, no controlled shutdown) and wait for the process to be gone."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)

    def rss_bytes(self) -> int | None:
        """Resident memory of the broker JVM (Linux), or None if it is gone."""
        try:
            for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        except OSError:
            return None
        return None

    def log_tail(self, n: int = 60) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    def __enter__(self) -> RefKafka:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = "running" if self.alive() else f"exited {self.proc.returncode}"
        return f"RefKafka({self.bootstrap}, pid={self.pid}, {state}, workdir={self.workdir})"


def _write_config(workdir: Path, port: int, controller_port: int,
                  extra_config: dict[str, str] | None, extra_listeners: dict[str, str] | None = None) -> Path:
    """`extra_listeners` (name -> security protocol) get free ports beside PLAINTEXT."""
    extra = {name: (protocol, free_port()) for name, protocol in (extra_listeners or {}).items()}
    listeners = "".join(f",{name}://127.0.0.1:{p}" for name, (_, p) in extra.items())
    protocol_map = "".join(f",{name}:{protocol}" for name, (protocol, _) in extra.items())
    config = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}{listeners}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}{listeners}",
        "listener.security.protocol.map": f"PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT{protocol_map}",
        "inter.broker.listener.name": "PLAINTEXT",
        "controller.listener.names": "CONTROLLER",
        "controller.quorum.bootstrap.servers": f"127.0.0.1:{controller_port}",
        "log.dirs": str(workdir / DATA_NAME),
        **SINGLE_NODE_CONFIG,
        **(extra_config or {}),
    }
    path = workdir / CONFIG_NAME
    path.write_text("# written by compat_tests/kafka_ref.py\n"
                    + "".join(f"{k}={v}\n" for k, v in config.items()))
    return path


# Class-data sharing: the first run of each tool (and of the broker) dumps the classes it loaded
# into a dynamic CDS archive; later runs map it and start in about half the CPU time (each tool
# is a fresh JVM, and these tests start dozens; a broker's start takes 5.0 s of CPU instead of
# 7.8 s, and answers in 3.5 s instead of 6 s).  Keyed by the JDK, the jar set and where the jars
# are, since an archive is only valid for the exact classpath it was made with: another checkout's
# jars, copied with the same sizes and times, made one that every JVM here failed to map, silently
# (-Xlog:disable), and started without (2.0 s of CPU for a kafka-topics --list, against 0.85 s).
# Set KAFKA_CLI_NO_CDS=1 to disable.
_CDS_ROOT = Path(os.environ.get("TMPDIR", "/tmp")) / f"tmqgate-cli-cds-{os.getuid()}"
_CDS_DUMP_STALE_S = 600


def java_binary() -> str | None:
    """The java that runs the tools and test programs: $JAVA_HOME's, else the one on PATH."""
    return os.path.join(os.environ["JAVA_HOME"], "bin", "java") if os.environ.get("JAVA_HOME") else shutil.which("java")


def _cds_dir() -> Path | None:
    if os.environ.get("KAFKA_CLI_NO_CDS"):
        return None
    java = java_binary()
    if not java:
        return None
    h = hashlib.sha256(os.path.realpath(java).encode())
    h.update(f"{BIN_DIR}:{LIB_DIR}".encode())  # the wrapper's classpath: $BIN_DIR/../java/lib/*
    for jar in sorted(LIB_DIR.glob("*.jar")):
        st = jar.stat()
        h.update(f"{jar.name}:{st.st_size}:{st.st_mtime_ns}".encode())
    d = _CDS_ROOT / h.hexdigest()[:16]
    d.mkdir(parents=True, exist_ok=True)
    return d


def cds_opts(name: str) -> tuple[str, Path | None, Path | None]:
    """(JVM flags, archive being written, where it goes when done: finish_cds once the JVM has
    exited, cleanly or by SIGTERM, which both dump the archive)."""
    d = _cds_dir()
    if d is None:
        return "", None, None
    archive = d / f"{name}.jsa"
    # -Xlog:disable: a stale or unusable archive must not print warnings into the tool's output
    if archive.is_file():
        return f"-XX:SharedArchiveFile={archive} -Xshare:auto -Xlog:disable", None, None
    # One JVM per tool dumps its archive (2 s of CPU more than a plain run); the others started
    # meanwhile — four lanes start dozens in their first minute — run without one.
    marker = _dump_marker(archive)
    try:
        fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        with contextlib.suppress(OSError):
            if time.time() - marker.stat().st_mtime > _CDS_DUMP_STALE_S:  # its JVM never finished
                marker.unlink()
        return "", None, None
    os.close(fd)
    tmp = d / f"{name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp"
    return f"-XX:ArchiveClassesAtExit={tmp} -Xlog:disable", tmp, archive


def finish_cds(tmp: Path | None, final: Path | None) -> None:
    """After the JVM cds_opts gave `tmp` exited: its archive goes to `final` (None: dropped)."""
    if tmp is None:
        return
    with contextlib.suppress(OSError):
        if final is not None and tmp.is_file() and tmp.stat().st_size > 0:
            os.replace(tmp, final)
        else:
            tmp.unlink(missing_ok=True)
    with contextlib.suppress(OSError):
        _dump_marker(tmp).unlink()


def _dump_marker(path: Path) -> Path:
    """The file that says a JVM is dumping the archive of a tool, from that archive's path
    (`NAME.jsa`) or its dump's (`NAME.PID.RANDOM.tmp`)."""
    return path.with_name(path.name.split(".", 1)[0] + ".dumping")


def _child_env(heap_opts: str, jvm_opts: str) -> dict[str, str]:
    env = dict(os.environ)
    env["KAFKA_HEAP_OPTS"] = heap_opts
    env["KAFKA_JVM_PERFORMANCE_OPTS"] = jvm_opts
    return env


def _format_storage(config_path: Path, cluster_id: str, log_path: Path,
                    features: dict[str, int] | None = None, scram: list[str] | None = None) -> None:
    """`kafka-storage format --standalone`: this node alone is the initial controller quorum;
    `features` (name -> level, e.g. transaction.version=1) are passed as `--feature`, `scram`
    (e.g. `SCRAM-SHA-256=[name=admin,password=secret]`: users the brokers need before they can
    reach the controller) as `--add-scram`."""
    args = ["format", "--config", str(config_path), f"--cluster-id={cluster_id}", "--standalone"]
    args += [f"--feature={name}={level}" for name, level in (features or {}).items()]
    args += [f"--add-scram={user}" for user in scram or []]
    result = kafka_storage(args, log_path)
    if result.returncode != 0:
        raise RefKafkaError(f"kafka-storage format failed ({result.returncode}):\n"
                            f"{result.stdout}{result.stderr}")


def kafka_storage(args: list[str], log_path: Path) -> subprocess.CompletedProcess[str]:
    """`kafka-storage ARGS` (a short-lived tool: small heap, C1 only, its CDS archive), its
    command line and output appended to `log_path`."""
    cmd = [str(tool("kafka-storage")), *args]  # a cluster id may start with "-": given as --cluster-id=ID
    opts, cds_tmp, cds_final = cds_opts("kafka-storage")
    env = _child_env("-Xmx256m", "-XX:+UseSerialGC -XX:TieredStopAtLevel=1")
    env["KAFKA_OPTS"] = (env.get("KAFKA_OPTS", "") + " " + opts).strip()
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)
    finish_cds(cds_tmp, cds_final if result.returncode == 0 else None)
    with open(log_path, "a") as log:
        log.write(f"=== {' '.join(cmd)}\n{result.stdout}{result.stderr}")
    return result


def _launch(workdir: Path, config_path: Path, log_path: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    cmd = [str(tool("kafka-server-start")), str(config_path)]
    opts, cds_tmp, cds_final = cds_opts("kafka-server-start")
    env = {**env, "KAFKA_OPTS": (env.get("KAFKA_OPTS", "") + " " + opts).strip()}
    with open(log_path, "ab") as log:
        log.write(f"=== start {time.strftime('%Y-%m-%d %H:%M:%S')}: {' '.join(cmd)}\n".encode())
        log.flush()
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                cwd=str(workdir), env=env)
    if cds_tmp is not None:  # the first broker of this jar set: its archive is kept once it stops
        def keep() -> None:
            proc.wait()
            finish_cds(cds_tmp, cds_final if proc.returncode in (0, 143) else None)

        threading.Thread(target=keep, name="kafka-cds", daemon=True).start()
    return proc


def _wait_ready(ref: RefKafka, deadline: float) -> None:
    """Until the broker answers ApiVersions and kafka-python sees it in the cluster metadata."""
    while time.monotonic() < deadline:
        if not ref.alive():
            raise RefKafkaError(f"reference Kafka exited with {ref.proc.returncode} during startup; "
                                f"log {ref.log_path}:\n{ref.log_tail()}")
        if api_versions_ok("127.0.0.1", ref.port):
            if not ref.alive():  # it answered, but another server on our port did
                continue
            break
        time.sleep(0.2)
    else:
        raise RefKafkaError(f"reference Kafka did not answer ApiVersions in time; "
                            f"log {ref.log_path}:\n{ref.log_tail()}")

    from kafka import KafkaAdminClient

    last_error: Exception | None = None
    while time.monotonic() < deadline:
        try:
            admin = KafkaAdminClient(bootstrap_servers=ref.bootstrap, client_id="kafka-ref-ready",
                                     request_timeout_ms=5000)
            try:
                admin.list_topics()
                if admin.describe_cluster().get("brokers"):
                    return
            finally:
                admin.close()
        except Exception as exc:  # noqa: BLE001 - any client error means "not ready yet"
            last_error = exc
        if not ref.alive():
            break
        time.sleep(0.2)
    raise RefKafkaError(f"reference Kafka not serving metadata in time ({last_error!r}); "
                        f"log {ref.log_path}:\n{ref.log_tail()}")


def _bindable(port: int) -> bool:
    """Whether no server listens on `port`. SO_REUSEADDR, as Java's server sockets bind: the
    port of a broker just killed, still in TIME_WAIT, is ours to take again (CI r50)."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _move_client_port(config_path: Path, port: int) -> int:
    """Give a restarted broker's PLAINTEXT listener a new free port (CI r49: another lane's
    server bound the old one while the broker was down, and answered in its place); the
    controller's port, in the voter set, stays."""
    new = free_port()
    text = config_path.read_text()
    config_path.write_text(re.sub(rf"(PLAINTEXT://127\.0\.0\.1:){port}(?!\d)", rf"\g<1>{new}", text))
    return new


def start_reference_kafka(workdir: Path, *, extra_config: dict[str, str] | None = None,
                          extra_listeners: dict[str, str] | None = None,
                          heap_opts: str = HEAP_OPTS, jvm_opts: str = JVM_OPTS,
                          ready_timeout: float = 90.0, features: dict[str, int] | None = None) -> RefKafka:
    """Start (or restart) a one-node KRaft Apache Kafka with its state in `workdir`.

    A fresh workdir gets free loopback ports, a random cluster id and `kafka-storage format`;
    a workdir that was already formatted is started as it is (same ports and data).
    `extra_config` adds/overrides broker properties and `extra_listeners` (name -> security
    protocol) adds listeners on free ports and `features` (name -> level) are the cluster's
    finalized feature levels (both only when the workdir is fresh); the broker's
    `listener_ports` gives every listener's port by name.
    Returns once the broker serves metadata; the caller owns it and must `stop()` it (or
    use it as a context manager).
    """
    if not jars_installed():
        raise RefKafkaError(f"no Kafka jars in {LIB_DIR}; run scripts/install_java.sh")
    workdir = Path(workdir).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    config_path = workdir / CONFIG_NAME
    log_path = workdir / LOG_NAME
    meta = workdir / DATA_NAME / "meta.properties"
    env = _child_env(heap_opts, jvm_opts)
    deadline = time.monotonic() + ready_timeout

    fresh = not (config_path.exists() and meta.exists())
    attempts = 3 if fresh else 1
    for attempt in range(1, attempts + 1):
        if fresh:
            # (Re)create from scratch: a new port pair also means a new initial voter set.
            shutil.rmtree(workdir / DATA_NAME, ignore_errors=True)
            port, controller_port = free_port(), free_port()
            while controller_port == port:
                controller_port = free_port()
            cluster_id = random_cluster_id()
            _write_config(workdir, port, controller_port, extra_config, extra_listeners)
            _format_storage(config_path, cluster_id, log_path, features)
        else:
            props = _read_properties(config_path)
            listeners = dict(item.split("://", 1) for item in props["listeners"].split(","))
            port = _port_of(listeners["PLAINTEXT"])
            controller_port = _port_of(listeners["CONTROLLER"])
            cluster_id = _read_properties(meta).get("cluster.id", "")
            if not _bindable(port):  # another test's server took it while this one was down
                port = _move_client_port(config_path, port)

        ref = RefKafka(workdir, port, controller_port, cluster_id, _launch(workdir, config_path, log_path, env))
        try:
            _wait_ready(ref, deadline)
            return ref
        except RefKafkaError:
            ref.kill()
            # Someone took one of our ports between free_port() and the bind: try new ones.
            if attempt < attempts and "Address already in use" in ref.log_tail(200):
                continue
            raise
    raise AssertionError("unreachable")


def main(argv: list[str] | None = None) -> int:
    import argparse
    import tempfile

    parser = argparse.ArgumentParser(description="Run the reference Apache Kafka broker until Ctrl-C.")
    parser.add_argument("workdir", nargs="?", type=Path, help="state directory (default: a temporary one)")
    args = parser.parse_args(argv)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="kafka-ref-"))
    started = time.monotonic()
    with start_reference_kafka(workdir) as kafka:
        print(f"Apache Kafka {kafka_version()} ready in {time.monotonic() - started:.1f}s: "
              f"bootstrap={kafka.bootstrap} pid={kafka.pid} log={kafka.log_path}", flush=True)
        try:
            kafka.proc.wait()
        except KeyboardInterrupt:
            pass
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
