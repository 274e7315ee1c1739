"""`tmqgate serve --workers N` (issue 28, second step): the machine's cores as the workers of
one `tmqgate serve` — N broker processes, each a broker of a cluster on this machine, so each
partition's reads and writes run on the core of the worker that leads it.

Rules:
- **One command, one data directory.** Worker i keeps its data in `DATA/worker-i` and is node
  `node_id + i`; the workers coordinate through `DATA/cluster.db` (`--cluster local:…`,
  broker/cluster/local_kv.py: no other server) or, with `--cluster etcd://…`, through that etcd,
  where every worker of every machine is a broker of its own (give machines node ids N apart).
- **Each worker is advertised as a broker of its own**, the cluster's routing: a client's
  Metadata lists every worker, and it sends each partition's requests to the worker leading it
  (no hand-off between workers). Worker i listens on every configured port plus i (Kafka
  listeners, their advertised ports, the HTTP front): worker 0 on the ports as configured, the
  bootstrap address; a port 0 stays 0 (the system picks one).
- **The state topics fit the workers**: the group and transaction state topics' replication
  factor (and the transaction log's min ISR) is at most the number of workers, so N < 3
  workers coordinate groups and transactions at once (Kafka's defaults need three brokers).
- **A worker that dies is started again** on its data (SIGKILL included: LevelDB's lock goes
  with the process, acknowledged records are in its WAL), after `RESTART_DELAY_S`. SIGTERM or
  SIGINT to the supervisor stops every worker (SIGTERM, then SIGKILL after `STOP_WAIT_S`); a
  worker stops with the supervisor (Linux's parent-death signal: SIGTERM) if that is killed, and
  a worker's start waits (at most `LOCK_WAIT_S`) for its data's lock to be free: a worker of a
  killed supervisor may still be stopping when `tmqgate serve` is started again.
- **How many** (`workers`, `serve --workers`; `resolve`): one per core this process may run on
  by default (0), so `tmqgate serve` uses the machine. A data directory keeps the shape it was
  made with: one that holds a single broker's data (LevelDB's CURRENT in DATA itself) runs one
  broker, one with k workers' folders at least k (fewer would leave the others' partitions with
  no broker) — asked for explicitly, a shape that does not fit is refused at start (exit 2).
  With `cluster` set the default is one: node ids of a cluster are the operator's to plan.
- One worker is the single broker, with no supervisor, its data in DATA itself.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import re
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from multiprocessing.process import BaseProcess
from typing import Any

from tmqgate.broker.configs.config import BrokerConfig
from tmqgate.broker.configs.values import ConfigError

log = logging.getLogger("tmqgate.workers")

RESTART_DELAY_S = 1.0
#: how long a worker's start waits for a killed predecessor to let go of its data
LOCK_WAIT_S = 30.0
STOP_WAIT_S = 30.0
#: A worker whose supervisor died gives its own stop this long, then ends (`_exit_when_orphaned`);
#: within LOCK_WAIT_S, so a supervisor started again meanwhile gets its data.
ORPHAN_GRACE_S = 15.0
_PORT = re.compile(r":(\d+)$")


def _shift(address: str, by: int) -> str:
    """``…:PORT`` with PORT + by (a port 0 stays 0; an address without a port stays as it is)."""
    match = _PORT.search(address)
    if match is None or int(match.group(1)) == 0:
        return address
    return f"{address[:match.start()]}:{int(match.group(1)) + by}"


def cores() -> int:
    """The cores this process may run on (its CPU affinity: taskset, a container's cpuset)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def _worker_dirs(data_dir: str) -> int:
    """How many workers' folders (worker-0 … worker-(k-1)) the data directory holds."""
    count = 0
    while os.path.isdir(os.path.join(data_dir, f"worker-{count}")):
        count += 1
    return count


def resolve(config: BrokerConfig, machine_cores: int | None = None) -> int:
    """How many workers `tmqgate serve` runs (see the module docstring); ConfigError for an
    explicit number the data directory cannot take."""
    single = os.path.exists(os.path.join(config.data_dir, "CURRENT"))
    made = _worker_dirs(config.data_dir)
    if config.workers == 0:
        if single or config.cluster is not None:
            return 1
        return max(made, machine_cores or cores(), 1)
    if config.workers > 1 and single:
        raise ConfigError(f"workers = {config.workers}: the data directory {config.data_dir} holds one broker's data; "
                          "run it with --workers 1, or give the workers a new data directory", "workers")
    if made > config.workers:
        raise ConfigError(f"workers = {config.workers}: the data directory {config.data_dir} holds the data of "
                          f"{made} workers; fewer would leave the partitions of the others with no broker "
                          f"(give --workers {made} or more)", "workers")
    return config.workers


def worker_config(config: BrokerConfig, index: int, workers: int) -> BrokerConfig:
    """Worker ``index``'s settings (see the module docstring)."""
    cluster = config.cluster or f"local:{os.path.join(config.data_dir, 'cluster.db')}"
    state_rf = min(config.offsets_topic_replication_factor, workers)
    txn_rf = min(config.transaction_state_log_replication_factor, workers)
    worker = replace(
        config, node_id=config.node_id + index, data_dir=os.path.join(config.data_dir, f"worker-{index}"),
        cluster=cluster, workers=1, listen=_shift(config.listen, index), http=_shift(config.http, index),
        listeners=[_shift(li, index) for li in config.listeners],
        advertised_listeners=[_shift(li, index) for li in config.advertised_listeners],
        advertised_listener=None if config.advertised_listener is None else _shift(config.advertised_listener, index),
        offsets_topic_replication_factor=state_rf, transaction_state_log_replication_factor=txn_rf,
        transaction_state_log_min_isr=min(config.transaction_state_log_min_isr, txn_rf))
    worker.check()
    return worker


def _die_with_parent() -> None:
    """Linux: SIGTERM to this process when the supervisor goes (PR_SET_PDEATHSIG): a worker
    stops as on `serve`'s own stop, handing what it made to the cluster file first (a
    `tmqgate serve` started again meanwhile waits for its data: ``_wait_unlocked``)."""
    try:
        import ctypes

        ctypes.CDLL(None).prctl(1, signal.SIGTERM)
    except (OSError, AttributeError):  # not Linux: the supervisor's own stop still ends it
        pass


def _wait_unlocked(data_dir: str, timeout: float = LOCK_WAIT_S) -> None:
    """Until no process holds the LevelDB lock of a worker's data (a worker of a supervisor
    killed a moment ago is still being torn down by the kernel), at most `timeout` seconds;
    then the worker's own start says what holds it."""
    import fcntl

    path = os.path.join(data_dir, "LOCK")
    deadline = time.monotonic() + timeout
    while True:
        try:
            with open(path, "a+b") as f:
                fcntl.lockf(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                fcntl.lockf(f, fcntl.LOCK_UN)
            return
        except FileNotFoundError:  # a new data directory
            return
        except OSError:
            if time.monotonic() >= deadline:
                return
            time.sleep(0.05)


def _exit_when_orphaned(parent: int, grace_s: float = ORPHAN_GRACE_S) -> None:
    """A daemon thread's loop: once the supervisor `parent` is gone (this process handed to
    another parent), the worker's own stop (SIGTERM, `_die_with_parent`) has `grace_s` to
    finish; then the process ends at once. A stop that waits on siblings which died with the
    supervisor must not keep the worker's port and data locked for ever (CI found one left
    running 50 minutes after its supervisor's kill -9); ending it so is a kill -9, which
    loses nothing acknowledged."""
    while os.getppid() == parent:
        time.sleep(0.5)
    time.sleep(grace_s)
    os._exit(1)


def _run_worker(serve: Callable[..., Any], args: tuple[Any, ...]) -> None:
    _die_with_parent()
    threading.Thread(target=_exit_when_orphaned, args=(os.getppid(),), name="tmqgate-orphan-guard",
                     daemon=True).start()
    serve(*args)


class Supervisor:
    """Runs `serve(worker_config, siblings, *args)` in one spawned process per worker (``serve``
    a module-level function: it is pickled into each process; ``siblings`` the other workers'
    node ids, whose `/metrics` it merges with its own) and keeps them running."""

    def __init__(self, config: BrokerConfig, workers: int, serve: Callable[..., Any], *args: Any) -> None:
        self.configs = [worker_config(config, i, workers) for i in range(workers)]
        self._serve = serve
        self._args = args
        self._context = multiprocessing.get_context("spawn")
        self._procs: list[BaseProcess | None] = [None] * workers
        self._stopping = threading.Event()

    def _start(self, index: int) -> None:
        _wait_unlocked(self.configs[index].data_dir)
        siblings = tuple(c.node_id for i, c in enumerate(self.configs) if i != index)
        proc = self._context.Process(target=_run_worker,
                                     args=(self._serve, (self.configs[index], siblings, *self._args)),
                                     name=f"tmqgate-worker-{index}", daemon=False)
        proc.start()
        self._procs[index] = proc
        log.info("worker %d (node %d) started, pid %s", index, self.configs[index].node_id, proc.pid)

    def run(self) -> int:
        """Until SIGTERM or SIGINT: the workers' exit status then (0: all stopped cleanly)."""
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: self._stopping.set())
        log.info("serving as %d workers (nodes %d-%d)", len(self.configs), self.configs[0].node_id,
                 self.configs[-1].node_id)
        for i in range(len(self.configs)):
            self._start(i)
        while not self._stopping.wait(0.2):
            for i, proc in enumerate(self._procs):
                if proc is not None and proc.exitcode == 2:  # its start refused (a setting, a port in use)
                    log.error("worker %d (node %d) could not start; stopping the others", i,
                              self.configs[i].node_id)
                    self._stop()
                    return 2
                if proc is not None and proc.exitcode is not None:
                    log.warning("worker %d (node %d) exited with %s; starting it again in %.0f s", i,
                                self.configs[i].node_id, proc.exitcode, RESTART_DELAY_S)
                    if self._stopping.wait(RESTART_DELAY_S):
                        break
                    self._start(i)
        return self._stop()

    def _stop(self) -> int:
        live = [p for p in self._procs if p is not None and p.exitcode is None]
        for p in live:
            if p.pid is not None:
                os.kill(p.pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_WAIT_S
        for p in live:
            p.join(max(0.0, deadline - time.monotonic()))
            if p.exitcode is None:
                p.kill()
                p.join()
        return max((abs(p.exitcode or 0) for p in self._procs if p is not None), default=0)
