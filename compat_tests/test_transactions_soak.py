"""Exactly-once consume-transform-produce under kill -9 (confluent-kafka).

`compat_tests/txn_ctp_app.py` reads an input topic in a group, writes each value upper-cased to
an output topic and commits the group's offsets in the same transaction.  Killed with SIGKILL
again and again (KILLS) at random points (while it initialises, inside transactions, between
them) and then left to finish, the output read with read_committed must hold every input value upper-cased
exactly once and in order, and the group's committed offset must be the input's end.  The same
must hold when the broker itself is killed -9 at random points of the run and restarted on its
data (see BROKER_KILLS; both brokers restart on their data: `compat_tests/brokers.py`).
scripts/soak.sh runs both with the full cycle counts, the suite with counts sized for CI.
"""

from __future__ import annotations

import os
import random
import selectors
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from .conftest import Broker
from .helpers import soak_cycles, unique_topic
from .txn_helpers import (
    committed_offset,
    create_topic,
    read_partition,
    txn_broker_process,
    txn_id,
    values,
)

# kills brokers, runs a soak or starts a cluster: one such module at a time (compat_tests/serial.py)
pytestmark = pytest.mark.serial

N = 600
#: app kills (scripts/soak.sh: 20)
KILLS = soak_cycles(6, 20)


class App:
    """One run of txn_ctp_app as a child process; its stdout lines read with a timeout.
    Every run is kept in `App.runs`, so a failed check can show what each run did."""

    runs: list[App] = []

    def __init__(self, bootstrap: str, src: str, dst: str, group: str, tid: str) -> None:
        App.runs.append(self)
        self.proc = subprocess.Popen([sys.executable, "-m", "compat_tests.txn_ctp_app", bootstrap, src, dst,
                                      group, tid, str(N)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     cwd=str(Path(__file__).resolve().parent.parent), env=dict(os.environ))
        assert self.proc.stdout is not None
        os.set_blocking(self.proc.stdout.fileno(), False)
        self.sel = selectors.DefaultSelector()
        self.sel.register(self.proc.stdout, selectors.EVENT_READ)
        self.buf = b""
        self.lines: list[str] = []

    def wait_line(self, prefix: str, timeout: float) -> bool:
        """Until a line starting with `prefix` (True), the app's exit or the timeout (False)."""
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any(line.startswith(prefix) for line in self.lines):
                return True
            if self.sel.select(timeout=0.2):
                chunk = self.proc.stdout.read() or b""
                if not chunk and self.proc.poll() is not None:
                    return any(line.startswith(prefix) for line in self.lines)
                self.buf += chunk
                *done, self.buf = self.buf.split(b"\n")
                self.lines += [d.decode() for d in done]
            elif self.proc.poll() is not None:
                return any(line.startswith(prefix) for line in self.lines)
        return False

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)
        self.sel.close()


def _produce_input(bootstrap: str, topic: str) -> list[bytes]:
    from confluent_kafka import Producer

    vals = [f"rec-{i:05d}-abc".encode() for i in range(N)]
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    for i, v in enumerate(vals):
        p.produce(topic, key=f"k{i}".encode(), value=v, partition=0)
    assert p.flush(30) == 0
    return vals


def _setup(bootstrap: str) -> tuple[str, str, str, str, list[bytes]]:
    src, dst = unique_topic("ctp-in"), unique_topic("ctp-out")
    create_topic(bootstrap, src)
    create_topic(bootstrap, dst)
    return src, dst, "ctp-" + src, txn_id("ctp"), _produce_input(bootstrap, src)


def _finish(bootstrap: str, src: str, dst: str, group: str, tid: str, timeout: float = 180.0) -> None:
    """Run the application (again and again if it exits) until it reports `done`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        app = App(bootstrap, src, dst, group, tid)
        try:
            if app.wait_line("done", deadline - time.monotonic()):
                return
        finally:
            app.kill()
    raise AssertionError(f"the application did not finish in {timeout}s")


def _trace(bootstrap: str, dst: str, dups: set[bytes]) -> str:
    """What went wrong, for the failure message: each application run's log (its transactions'
    input ranges, failures, aborts, rewinds) and the output partition's batches (producer id and
    epoch, transactional/control) holding a duplicated value, read uncommitted."""
    from tmqgate.protocol.records import decode_records, iter_batches

    from .raw import RawConn

    lines = []
    for i, run in enumerate(App.runs):
        lines.append(f"--- run {i} (exit {run.proc.poll()})")
        lines += run.lines
    offset, end = 0, None
    with RawConn(bootstrap) as conn:
        while end is None or offset < end:
            part = conn.fetch(dst, 0, offset)
            end = part["high_watermark"]
            data = part["records"] or b""
            if not data:
                break
            for h in iter_batches(data):
                batch = data[h.offset:h.offset + h.size]
                vals = [r.value for r in decode_records(batch)]
                if h.is_control or dups.intersection(vals):
                    lines.append(f"batch {h.base_offset}+{h.last_offset_delta} pid {h.producer_id} "
                                 f"epoch {h.producer_epoch} seq {h.base_sequence} txn {h.is_transactional} "
                                 f"control {h.is_control} values {vals[:1]}..{vals[-1:]}")
                offset = h.base_offset + h.last_offset_delta + 1
    return "\n".join(lines)


def _check_exactly_once(bootstrap: str, src: str, dst: str, group: str,
                        inputs: list[bytes]) -> tuple[int, int]:
    """Asserts the output is the inputs upper-cased, once each and in order, and the group's
    offset the input's end; returns (lost, duplicated) for the report."""
    from .txn_helpers import high_watermark

    out = read_partition(bootstrap, dst, "read_committed", high_watermark(bootstrap, dst), timeout=120)
    got = values(out)
    want = [v.upper() for v in inputs]
    lost, duplicated = len(set(want) - set(got)), len(got) - len(set(got))
    if (lost, duplicated) != (0, 0):
        dups = {v for v in got if got.count(v) > 1 and v is not None}
        print(_trace(bootstrap, dst, dups))
    assert (lost, duplicated) == (0, 0), f"{lost} inputs lost, {duplicated} output records duplicated"
    assert got == want
    assert committed_offset(bootstrap, group, src) == N
    return lost, duplicated


def test_app_killed_again_and_again_outputs_each_input_once(txn_broker: Broker, figures: Callable[[str], None]) -> None:
    bootstrap = txn_broker.bootstrap
    src, dst, group, tid, inputs = _setup(bootstrap)
    rnd = random.Random(1414)
    progress = False
    for _ in range(KILLS):
        app = App(bootstrap, src, dst, group, tid)
        try:
            # kill before `ready` now and then (inside init_transactions), otherwise at a random
            # moment of the processing loop — once a first transaction has committed: a broker
            # slow to resolve the last run's transaction (the reference Kafka under CI's load once
            # took every run's 0.6 s) would otherwise see every kill before any progress
            if rnd.random() < 0.15:
                time.sleep(rnd.uniform(0.2, 0.6))
            elif app.wait_line("ready", 60) and (progress or app.wait_line("committed", 60)):
                progress = True
                time.sleep(rnd.uniform(0.0, 0.6))
        finally:
            app.kill()
    progressed = committed_offset(bootstrap, group, src, timeout=120)
    assert 0 < progressed < N, f"the kills came before the start or after the end of the processing: {progressed}"
    _finish(bootstrap, src, dst, group, tid)
    lost, duplicated = _check_exactly_once(bootstrap, src, dst, group, inputs)
    figures(f"app kill soak on {txn_broker.target}: cycles={KILLS} records={N} lost={lost} duplicated={duplicated}")


# Broker kill -9 cycles, under scripts/soak.sh: 20 on tmqgate (it is back in about a second), 5 on
# the reference Kafka, whose every restart (JVM start, KRaft controller election, loading the
# offsets and transaction-state logs) takes ~10-15 s on the CI's two cores; in the suite 6 and 3,
# which still hit the loop at random points (inside transactions, between them, during
# init_transactions and the group's offset fetch).
BROKER_KILLS = {"tmqgate": soak_cycles(4, 20), "kafka": soak_cycles(3, 5)}


# Apache Kafka (4.3.1, one combined KRaft node) restarted after kill -9 can load its transaction
# log before its metadata knows the leaders of the transaction's partitions; its marker sender
# then takes those partitions for deleted topics and completes the transaction WITHOUT writing
# the markers (TransactionMarkerChannelManager.addTxnMarkersToBrokerQueue, logged as below).
# A committed transaction's offset commit then stays pending in the group coordinator (so the
# group's committed offset hangs, or falls back to the previous one when a later abort marker
# lands, and the application processes those inputs again: the 4 duplicates of an earlier CI),
# and an aborted one's records stay open in the output.  When that happened the guarantee is
# lost by the reference broker itself; the test then expects a failure there (xfail) and
# still asserts everything on every run where Kafka wrote its markers.
KAFKA_SKIPPED_MARKERS = "these partitions are likely deleted already and hence can be skipped"


def _kafka_skipped_markers(proc: object) -> str | None:
    """The reference broker's log line saying it skipped a transaction's markers, if any."""
    ref = getattr(proc, "ref", None)
    log_path = getattr(ref, "log_path", None)
    if log_path is None or not Path(log_path).exists():
        return None
    for line in Path(log_path).read_text(errors="replace").splitlines():
        if KAFKA_SKIPPED_MARKERS in line:
            return line.strip()
    return None


@pytest.mark.slow
def test_broker_killed_mid_run_outputs_each_input_once(pytestconfig: pytest.Config, tmp_path: Path,
                                                       target: str, figures: Callable[[str], None]) -> None:
    """The broker killed -9 at random points of a running consume-transform-produce loop and
    restarted on its data, BROKER_KILLS times; the application is started again whenever it
    gave up (exit 3, e.g. its abort failed while the broker was away).  The output then holds
    every input exactly once, in order, and the group's committed offset is the input's end."""
    if pytestconfig.getoption("--bootstrap"):
        pytest.skip("--bootstrap given: cannot kill and restart an external broker")
    which = str(pytestconfig.getoption("--target"))
    kills = BROKER_KILLS["kafka" if which.startswith("kafka") else "tmqgate"]
    proc = txn_broker_process(which, tmp_path / "broker")
    proc.start()
    rnd = random.Random(1415)
    App.runs = []
    try:
        bootstrap = proc.bootstrap
        src, dst, group, tid, inputs = _setup(bootstrap)
        app = App(bootstrap, src, dst, group, tid)
        try:
            assert app.wait_line("ready", 60)
            for cycle in range(kills):
                if app.proc.poll() is not None:  # it gave up while the broker was away
                    app.kill()
                    app = App(bootstrap, src, dst, group, tid)
                # let the loop run for a random while (the first time: into the processing)
                app.wait_line("done", rnd.uniform(0.3, 2.0) if cycle else 3.0)
                proc.kill()
                time.sleep(rnd.uniform(0.0, 1.0))
                proc.restart()
                assert proc.bootstrap == bootstrap
            # When the reference broker has already logged that it skipped a transaction's
            # markers (see KAFKA_SKIPPED_MARKERS), its pending offset commit can hang the reads
            # below until they time out; the checks stay the same, only the waits are shorter.
            wait = 20.0 if _kafka_skipped_markers(proc) else 120.0
            progressed = committed_offset(bootstrap, group, src, timeout=wait)
            print(f"\nbroker kill soak on {which}: {kills} kills; group offset {progressed}/{N} after them")
            app.wait_line("done", wait)
        finally:
            app.kill()
        _finish(bootstrap, src, dst, group, tid, timeout=wait + 60)
        lost, duplicated = _check_exactly_once(bootstrap, src, dst, group, inputs)
        figures(f"broker kill soak on {which}: cycles={kills} records={N} lost={lost} duplicated={duplicated}")
    except Exception:
        print("\n".join(f"run {i} (exit {r.proc.poll()}): " + " | ".join(r.lines) for i, r in enumerate(App.runs)))
        skipped = _kafka_skipped_markers(proc)
        if skipped:
            pytest.xfail("the reference Kafka completed a transaction without writing its markers after a "
                         f"restart (its log: {skipped!r}), so its committed offsets and output disagree: "
                         "a defect of the reference broker, not of the test")
        raise
    finally:
        try:
            proc.stop()
        except Exception:  # noqa: BLE001 - best effort
            proc.kill()
