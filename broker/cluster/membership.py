"""This broker's membership in a cluster coordinated by etcd (issue 16, step 1).

Why etcd3gw: a maintained etcd v3 client (OpenStack's) over etcd's gRPC gateway (plain HTTP
and JSON, ``requests``), so it needs neither grpcio nor generated protobuf code — python-etcd3
is unmaintained and breaks on current protobuf, aetcd pins old grpcio. It is blocking, so
every etcd call runs in a worker thread (``asyncio.to_thread``); the broker's event loop never
waits on the network to etcd.

What it does (the key layout and rules: ``metadata.view``), every third of the session
timeout (``cluster_session_timeout_ms``, Kafka's broker.session.timeout.ms):

- registers the broker under a lease of that TTL and renews it; a lapsed lease (etcd lost
  longer than the TTL, a paused process) is granted again and the broker registers again;
- tries to become the controller (a create-if-absent under its lease); the holder keeps it
  while its lease lives;
- reads the brokers and the controller into ``view`` (what Metadata and DescribeCluster show);
- reads the topics' placements (each partition's replicas, leader, leader epoch and ISR) into
  ``placements``; the controller first re-elects the leaders of partitions whose leader is gone
  (``metadata.view.elect``: a live member of the ISR) and finishes reassignments whose
  target is in sync, and every ``rebalance_interval_s`` gives partitions back to their
  preferred replicas (``rebalance``, Kafka's auto.leader.rebalance.enable), each topic by a
  compare-and-swap of its value, so a stale controller's write fails instead of overwriting a
  newer one;
- on a worker of `serve --workers N` (``siblings``: the workers started with it), the controller
  elects nothing until every sibling has registered, for at most a session timeout from its own
  start: the workers of a restarted `serve` come up within moments of each other, and the first
  one up would otherwise take the leadership of every partition its siblings led (all the load
  on one worker until the next rebalance). A sibling restarted alone finds the others live;
- a broker whose shutdown began (``leaving``) neither takes the controller role nor elects: the
  workers of one `serve` stop together, and the last to revoke its lease would otherwise take
  the partitions of those gone a moment before, and keep them after the restart.

The leaders of replicated partitions (broker/cluster/replication.py) change their ISR through
``alter_isr``: a compare-and-swap of the topic's value that holds only while this broker still
leads the partition at the leader epoch it asked at (Kafka's AlterPartition).

``refresh()`` runs a round now (coalesced: callers during a round share the next one): a broker
asked about a topic it does not know yet, or created or deleted one, reads etcd at once rather
than at its next round.

On a cluster file (``local:PATH``: the workers of one `tmqgate serve`) a round also runs as soon
as the file's revision moves, checked every ``LOCAL_POLL_S`` (one read of a local file), and
``catch_up`` runs one before a request is answered if the file moved since the last round
(broker/apis.py: every API but Produce and Fetch): a topic or database made through one worker
is known to the others for the client's next request, as on one broker — a client that lists
the topics right after creating one, through whichever worker, sees it.

Losing etcd is logged once (and its return); the broker keeps serving with its last view,
except writes to replicated partitions it leads once it has been cut off for a session timeout
(``cut_off``): by then the controller may have elected another leader, and two leaders must
not both take writes (broker/cluster/replication.py).
"""

from __future__ import annotations

import asyncio
import base64
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol

from etcd3gw.client import Etcd3Client
from etcd3gw.lease import Lease

from tmqgate.broker.cluster.local_kv import LocalKv, LocalLease, local_path
from tmqgate.broker.cluster.outbox import Outboxes
from tmqgate.broker.metadata.view import (
    ACLS,
    BROKERS,
    CLUSTER_ID,
    CONFIGS,
    CONTROLLER,
    QUOTAS,
    TOPICS,
    USERS,
    ClusterView,
    Placement,
    broker_key,
    broker_value,
    controller_value,
    elect,
    parse_cluster,
    placement_from,
    placement_value,
    placements_from,
    rebalance,
    topic_key,
    view_from,
)
from tmqgate.protocol import clock

if TYPE_CHECKING:
    from tmqgate.broker.cluster.peer import PeerSecurity

log = logging.getLogger("tmqgate.cluster")
#: How long ``start`` keeps trying etcd before the broker refuses to start (every endpoint
#: tried at least once): an etcd starting beside the broker has this long to answer, and a
#: stopped etcd or a mistyped address is said within seconds.
START_WAIT_S = 3.0
#: on a cluster file, how often its revision is compared with the last round's
LOCAL_POLL_S = 0.05


class EtcdUnreachable(ConnectionError):
    """No endpoint of ``cluster`` answered at start; the text names each endpoint and why
    (the one line a refused start prints)."""


class KvClient(Protocol):
    """What the membership asks of etcd: etcd3gw's `Etcd3Client`, or `local_kv.LocalKv` (the
    brokers of one machine sharing a SQLite file, ``local:PATH``). Leases are each one's own."""

    def lease(self, ttl: int) -> Any: ...

    def put(self, key: str, value: str, lease: Any = None) -> bool: ...

    def create(self, key: str, value: str, lease: Any = None) -> bool: ...

    def replace(self, key: str, initial_value: str, new_value: str) -> bool: ...

    def delete(self, key: str) -> bool: ...

    def get(self, key: str, metadata: bool = False) -> list[Any]: ...

    def get_prefix(self, key_prefix: str) -> list[Any]: ...


@dataclass
class _Session:
    client: KvClient
    lease: Lease | LocalLease | None = None


class Membership:
    """See the module docstring. ``start`` before serving, ``stop`` at shutdown."""

    def __init__(self, url: str, node_id: int, session_timeout_ms: int, rebalance_interval_s: float | None = None,
                 http: str = "", peer_security: PeerSecurity | None = None, siblings: tuple[int, ...] = ()) -> None:
        self.endpoints = parse_cluster(url)
        #: ``local:PATH``: the SQLite file the brokers of this machine share (local_kv.py), not etcd
        self.local = local_path(url)
        self._kv_revision = -1  # the cluster file's revision as the last round began
        self.node_id = node_id
        #: its address (its first listener's) and what it registers beside it
        #: (metadata.view.DNODE_FACTS), given by ``start`` once it listens
        self.advertised: tuple[str, int] = ("", 0)
        self.facts: dict[str, int] = {}
        self.http = http  # and its HTTP SQL front, where other brokers send SQL it leads
        self.ttl = max(1, round(session_timeout_ms / 1000))
        self.interval = session_timeout_ms / 3000
        self.view = ClusterView()
        self.placements: dict[str, Placement] = {}
        #: the cluster's ACLs and SCRAM users as etcd had them at the last round (key → value)
        #: how this broker dials the others (TLS, SASL: broker/network/listeners.py peer_security)
        self.peer_security = peer_security
        #: the newest etcd revision among the keys it read, and when (wall clock ms) it last read
        self.revision = 0
        self.read_ms = -1
        self.acls: dict[str, str] = {}
        self.users: dict[str, str] = {}
        #: and its dynamic configs and client quotas
        self.configs: dict[str, str] = {}
        self.quotas: dict[str, str] = {}
        self._refreshing: asyncio.Future[bool] | None = None  # the round in flight
        self._started = 0  # rounds started
        self.cluster_id: str | None = None
        self.connected = False
        self.session_s = session_timeout_ms / 1000
        self._last_ok = 0.0  # monotonic time of the last round that reached etcd
        self._endpoint = 0
        #: why each endpoint (its index) last failed, for the start's refusal
        self._failures: dict[int, str] = {}
        self._session: _Session | None = None
        self._task: asyncio.Task[None] | None = None
        #: called in order on the event loop after each round that read etcd (the broker
        #: applies the placements to its topics, then to its replicas)
        self.on_change: list[Callable[[], None]] = []
        #: the changes made here that etcd must take (outbox.py); a request is answered once it has them
        self.outboxes = Outboxes()
        #: the controller's automatic preferred-leader rebalance every so many seconds (None: off)
        self.rebalance_interval_s = rebalance_interval_s
        self._rebalanced = time.monotonic()
        #: the workers started with this one that the controller waits for before electing (see
        #: the module docstring); emptied once all registered or a session timeout passed
        self._awaited = frozenset(siblings)
        self._born = time.monotonic()
        self._leaving = False  # the broker's shutdown began (``leaving``)

    # ---- in the worker thread ------------------------------------------------------------

    def _new_client(self) -> KvClient:
        if self.local is not None:
            return LocalKv(self.local)
        host, port = self.endpoints[self._endpoint % len(self.endpoints)]
        return Etcd3Client(host=host, port=port, timeout=max(1.0, self.interval), api_path="/v3/")  # type: ignore[return-value]

    def _round(self) -> None:
        """One round: lease, registration, election, view (raises on an etcd failure)."""
        if self._session is None:
            self._session = _Session(self._new_client())
        s = self._session
        if isinstance(s.client, LocalKv):
            self._kv_revision = s.client.revision()
        if s.lease is None or s.lease.refresh() <= 0:
            s.lease = s.client.lease(self.ttl)
            s.client.put(broker_key(self.node_id), broker_value(*self.advertised, self.facts, self.http), lease=s.lease)
        if self.cluster_id is None:
            s.client.create(CLUSTER_ID, base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode())
            [value] = s.client.get(CLUSTER_ID)
            self.cluster_id = value.decode() if isinstance(value, bytes) else str(value)
        if not self._leaving:
            s.client.create(CONTROLLER, controller_value(self.node_id), lease=s.lease)
        read = s.client.get_prefix(BROKERS)
        brokers = [(_text(meta["key"]), _text(value)) for value, meta in read]
        revision = max((int(meta.get("mod_revision", 0)) for _, meta in read), default=0)
        controller = s.client.get(CONTROLLER, metadata=True)
        held = None
        if controller:
            value, meta = controller[0]
            held = (_text(value), int(meta["create_revision"]))
        view, bad = view_from(brokers, held)
        self.acls = {_text(meta["key"]): _text(value) for value, meta in s.client.get_prefix(ACLS)}
        self.users = {_text(meta["key"]): _text(value) for value, meta in s.client.get_prefix(USERS)}
        self.configs = {_text(meta["key"]): _text(value) for value, meta in s.client.get_prefix(CONFIGS)}
        self.quotas = {_text(meta["key"]): _text(value) for value, meta in s.client.get_prefix(QUOTAS)}
        read = s.client.get_prefix(TOPICS)
        pairs = [(_text(meta["key"]), _text(value)) for value, meta in read]
        revision = max([revision, *(int(meta.get("mod_revision", 0)) for _, meta in read)])
        placements, bad_topics = placements_from(pairs)
        for key in bad + bad_topics:
            log.warning("cluster: ignoring the unreadable etcd key %s", key)
        holding = self._awaiting(set(view.brokers))
        if view.controller_id == self.node_id and not holding and not self._leaving:
            live = set(view.brokers)
            balance = self.rebalance_interval_s is not None and \
                time.monotonic() - self._rebalanced >= self.rebalance_interval_s
            if balance:
                self._rebalanced = time.monotonic()
            for name, placement in list(placements.items()):
                elected = elect(placement, live)
                if balance:
                    elected = rebalance(elected, live)
                if elected is not placement and s.client.replace(
                        topic_key(name), placement_value(placement), placement_value(elected)):
                    log.info("cluster: topic %s: leaders %s (were %s)", name,
                             [st.leader for st in elected.partitions], [st.leader for st in placement.partitions])
                    placements[name] = elected
        self.view = view
        self.placements = placements
        self.revision = max(self.revision, revision)  # what kafka-metadata-quorum shows (handlers/quorum.py)
        self.read_ms = clock.now_ms()

    def _awaiting(self, live: set[int]) -> bool:
        """Whether the controller still waits for sibling workers to register before electing."""
        if not self._awaited:
            return False
        missing = self._awaited - live
        if missing and time.monotonic() - self._born < self.session_s:
            return True
        if missing:
            log.info("cluster: workers %s did not register within %.0f s of this one's start: electing "
                     "without them", sorted(missing), self.session_s)
        self._awaited = frozenset()
        return False

    def _round_or_failover(self) -> bool:
        try:
            self._round()
            return True
        except Exception as exc:  # noqa: BLE001 - etcd unreachable or answering errors
            if self.connected:
                log.warning("cluster: lost etcd at %s:%d (%s); serving with the last view",
                            *self.endpoints[self._endpoint % len(self.endpoints)], exc)
            self._failures[self._endpoint % len(self.endpoints)] = _why(exc)
            self._endpoint += 1
            self._session = None
            return False

    def _client(self) -> KvClient:
        """The current session's client; ConnectionError between sessions (etcd lost)."""
        s = self._session
        if s is None:
            raise ConnectionError("not connected to etcd")
        return s.client

    def _create_topic(self, placement: Placement) -> bool:
        return bool(self._client().create(topic_key(placement.name), placement_value(placement)))

    def _delete_topic(self, name: str) -> bool:
        return bool(self._client().delete(topic_key(name)))

    def _change_topic(self, name: str, topic_id: bytes, change: Callable[[Placement], Placement | None]) -> bool:
        """Compare-and-swap a topic's placement to ``change`` of its value read now (None:
        refused); on a concurrent change ``change`` sees the new value and decides again.
        False when the topic is gone or was made again (another id), or ``change`` refused."""
        client = self._client()
        for _ in range(5):
            found = client.get(topic_key(name))
            if not found:
                return False
            old = _text(found[0])
            placement = placement_from(topic_key(name), old)
            if placement.topic_id != topic_id:
                return False
            new = change(placement)
            if new is None:
                return False
            if new == placement or client.replace(topic_key(name), old, placement_value(new)):
                return True
        return False

    # ---- on the event loop ---------------------------------------------------------------

    def _write(self, changes: list[tuple[str, str | None]]) -> None:
        client = self._client()
        for key, value in changes:
            if value is None:
                client.delete(key)
            else:
                client.put(key, value)

    async def write(self, changes: list[tuple[str, str | None]]) -> None:
        """Put (value) or delete (None) keys in etcd, in order; raises when etcd cannot be
        reached (some may be written: each is idempotent, so the caller writes them again)."""
        await asyncio.to_thread(self._write, changes)

    async def alter_isr(self, name: str, topic_id: bytes, partition: int, epoch: int, isr: list[int]) -> bool:
        """Set a partition's ISR, only while this broker leads it at ``epoch`` (Kafka's
        AlterPartition): a compare-and-swap of the topic's value; False when refused."""

        def change(p: Placement) -> Placement | None:
            if partition >= len(p.partitions):
                return None
            state = p.partitions[partition]
            if state.leader != self.node_id or state.epoch != epoch:
                return None
            states = list(p.partitions)
            states[partition] = replace(state, isr=tuple(isr))
            return Placement(p.name, p.topic_id, p.configs, tuple(states))

        return await self.change_topic(name, topic_id, change)

    async def change_topic(self, name: str, topic_id: bytes, change: Callable[[Placement], Placement | None]) -> bool:
        """``_change_topic`` in a worker thread, then the placements read again. Raises when
        etcd cannot be reached."""
        changed = await asyncio.to_thread(self._change_topic, name, topic_id, change)
        await self.refresh()
        return changed

    async def create_topic(self, placement: Placement) -> bool:
        """Put a new topic's placement in etcd unless the name is taken (False then); the
        placements are read again either way. Raises when etcd cannot be reached."""
        created = await asyncio.to_thread(self._create_topic, placement)
        await self.refresh()
        return created

    async def delete_topic(self, name: str) -> bool:
        """Remove a topic's placement (False: there was none); every broker drops the topic
        when it reads the placements next."""
        deleted = await asyncio.to_thread(self._delete_topic, name)
        await self.refresh()
        return deleted

    async def refresh(self) -> bool:
        """Read etcd in a round that starts after this call (see the module docstring); False
        when etcd could not be reached."""
        target = self._started + 1  # a round in flight now may have read etcd before the caller's change
        while True:
            pending = self._refreshing
            # A round whose thread is done counts as over even before its done-callback ran:
            # awaiting a finished future does not yield, so waiting on it again would spin.
            if pending is None or pending.done():
                self._started += 1
                pending = self._refreshing = asyncio.ensure_future(asyncio.to_thread(self._round_or_failover))
                pending.add_done_callback(self._refreshed)
            round_index = self._started
            ok = await asyncio.shield(pending)
            if round_index >= target:
                return ok

    def _refreshed(self, done: asyncio.Future[bool]) -> None:
        if self._refreshing is done:
            self._refreshing = None
        if not done.cancelled() and done.exception() is None:
            self.connected = done.result()
            if self.connected:
                self._last_ok = time.monotonic()
            for call in self.on_change:
                call()

    async def start(self, advertised: tuple[str, int], facts: dict[str, int]) -> None:
        """Register ``advertised`` and ``facts`` (trying etcd for START_WAIT_S, each endpoint at
        least once), then keep it up in a task; EtcdUnreachable when no endpoint answered."""
        self.advertised, self.facts = advertised, facts
        loop = asyncio.get_running_loop()
        deadline = loop.time() + START_WAIT_S
        tried: set[int] = set()
        while True:
            endpoint = self._endpoint % len(self.endpoints)
            if await asyncio.to_thread(self._round_or_failover):
                break
            tried.add(endpoint)
            if loop.time() > deadline and len(tried) == len(self.endpoints):
                if self.local is not None:
                    raise EtcdUnreachable(f"cannot use the cluster file {self.local}: "
                                          f"{self._failures.get(0, 'no answer')}")
                reasons = [f"{host}:{port}: {self._failures.get(i, 'no answer')}"
                           for i, (host, port) in enumerate(self.endpoints)]
                raise EtcdUnreachable(f"cannot reach etcd at {'; at '.join(reasons)}: start etcd there, or give "
                                      "--cluster (cluster) the address of a running one")
            await asyncio.sleep(min(self.interval / 3, 0.5))
        self.connected = True
        self._last_ok = time.monotonic()
        for call in self.on_change:
            call()
        log.info("cluster: node %d registered; brokers %s, controller %d", self.node_id,
                 sorted(self.view.brokers), self.view.controller_id)
        self._task = asyncio.create_task(self._run())

    def _moved(self) -> bool:
        """The cluster file changed since the last round began (or cannot be read)."""
        s = self._session
        try:
            return s is None or not isinstance(s.client, LocalKv) or s.client.revision() != self._kv_revision
        except Exception:  # noqa: BLE001 - the round says what is wrong
            return True

    async def catch_up(self) -> None:
        """On a cluster file: a round now if the file moved since the last round began (the
        check is one read of the file's revision counter), else the end of a round in flight
        (it began after the file moved: what it read is not applied yet); on etcd nothing."""
        if self.local is None or not self.connected:
            return
        if self._moved():
            await self.refresh()
            return
        pending = self._refreshing
        while pending is not None and self._refreshing is pending:  # until its done-callback applied it
            if pending.done():
                await asyncio.sleep(0)
            else:
                await asyncio.shield(pending)

    def mark(self) -> tuple[int, ...]:
        """How many cluster-wide changes this broker ever queued for etcd (before a request)."""
        return self.outboxes.mark()

    async def settle(self, mark: tuple[int, ...]) -> bool:
        """After a request: once it queued changes, wait until etcd has them (False: it did not
        take them in time; they stay queued)."""
        return await self.outboxes.settle(mark)

    async def _run(self) -> None:
        due = time.monotonic() + self.interval
        while True:
            await asyncio.sleep(self.interval if self.local is None else LOCAL_POLL_S)
            if self.local is not None and time.monotonic() < due and not self._moved():
                continue
            due = time.monotonic() + self.interval
            was = self.connected
            ok = await self.refresh()
            if ok and not was:
                log.warning("cluster: etcd is back; node %d registered again", self.node_id)

    def cut_off(self) -> bool:
        """True when no round has reached etcd for a session timeout: this broker's lease has
        lapsed (or is about to), so the controller may have given its partitions to others."""
        return time.monotonic() - self._last_ok > self.session_s

    def leaving(self) -> None:
        """The broker's shutdown began: from now on it takes no controller role and elects
        nothing (see the module docstring); it stays registered until ``stop``."""
        self._leaving = True

    async def stop(self) -> None:
        """Leave the cluster at once: the lease revoked takes the registration (and the
        controller role, if held) with it."""
        if self._task is not None:
            self._task.cancel()
        session = self._session
        if session is not None and session.lease is not None:
            try:
                await asyncio.to_thread(session.lease.revoke)
            except Exception as exc:  # noqa: BLE001 - best effort: the lease lapses anyway
                log.info("cluster: could not revoke the lease at shutdown: %s", exc)


def _why(exc: BaseException) -> str:
    """What an etcd call's failure comes down to, in a few words: "connection refused", "timed
    out", the host's name not resolving (etcd3gw wraps requests' errors, which wrap urllib3's,
    which wrap the socket's); else the exception itself."""
    import socket

    todo, seen = [exc], set()
    while todo:
        e = todo.pop(0)
        if id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, ConnectionRefusedError):
            return "connection refused"
        if isinstance(e, socket.gaierror):
            return f"the name does not resolve ({e.strerror})"
        if isinstance(e, TimeoutError) or "Timeout" in type(e).__name__:
            return "timed out"
        todo += [x for x in (e.__cause__, e.__context__, getattr(e, "reason", None), *e.args)
                 if isinstance(x, BaseException)]
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
