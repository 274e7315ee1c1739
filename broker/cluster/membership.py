"""This broker's membership in a cluster coordinated by etcd (issue 16, step 1).

Why etcd3gw: a maintained etcd v3 client (OpenStack's) over etcd's gRPC gateway (plain HTTP
and JSON, ``requests``), so it needs neither grpcio nor generated protobuf code — python-etcd3
is unmaintained and breaks on current protobuf, aetcd pins old grpcio. It is blocking, so
every etcd call runs in a worker thread (``asyncio.to_thread``); the broker's event loop never
waits on the network to etcd.

What it does (the key layout and rules: ``coordinator.cluster``), every third of the session
timeout (``cluster_session_timeout_ms``, Kafka's broker.session.timeout.ms):

- registers the broker under a lease of that TTL and renews it; a lapsed lease (etcd lost
  longer than the TTL, a paused process) is granted again and the broker registers again;
- tries to become the controller (a create-if-absent under its lease); the holder keeps it
  while its lease lives;
- reads the brokers and the controller into ``view`` (what Metadata and DescribeCluster show).

Losing etcd is logged once (and its return); the broker keeps serving with its last view.
Partition leadership is still this node's for every partition: replication is the next step.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import uuid
from dataclasses import dataclass
from typing import Any

from etcd3gw.client import Etcd3Client
from etcd3gw.lease import Lease

from tmqgate.coordinator.cluster import (
    BROKERS,
    CLUSTER_ID,
    CONTROLLER,
    ClusterView,
    broker_key,
    broker_value,
    controller_value,
    parse_cluster,
    view_from,
)

log = logging.getLogger("tmqgate.cluster")


@dataclass
class _Session:
    client: Etcd3Client
    lease: Lease | None = None


class Membership:
    """See the module docstring. ``start`` before serving, ``stop`` at shutdown."""

    def __init__(self, url: str, node_id: int, advertised: tuple[str, int], session_timeout_ms: int) -> None:
        self.endpoints = parse_cluster(url)
        self.node_id = node_id
        self.advertised = advertised
        self.ttl = max(1, round(session_timeout_ms / 1000))
        self.interval = session_timeout_ms / 3000
        self.view = ClusterView()
        self.cluster_id: str | None = None
        self.connected = False
        self._endpoint = 0
        self._session: _Session | None = None
        self._task: asyncio.Task[None] | None = None

    # ---- in the worker thread ------------------------------------------------------------

    def _client(self) -> Etcd3Client:
        host, port = self.endpoints[self._endpoint % len(self.endpoints)]
        return Etcd3Client(host=host, port=port, timeout=max(1.0, self.interval), api_path="/v3/")

    def _round(self) -> None:
        """One round: lease, registration, election, view (raises on an etcd failure)."""
        if self._session is None:
            self._session = _Session(self._client())
        s = self._session
        if s.lease is None or s.lease.refresh() <= 0:
            s.lease = s.client.lease(self.ttl)
            s.client.put(broker_key(self.node_id), broker_value(*self.advertised), lease=s.lease)
        if self.cluster_id is None:
            s.client.create(CLUSTER_ID, base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode())
            [value] = s.client.get(CLUSTER_ID)
            self.cluster_id = value.decode() if isinstance(value, bytes) else str(value)
        s.client.create(CONTROLLER, controller_value(self.node_id), lease=s.lease)
        brokers = [(_text(meta["key"]), _text(value)) for value, meta in s.client.get_prefix(BROKERS)]
        controller = s.client.get(CONTROLLER, metadata=True)
        held = None
        if controller:
            value, meta = controller[0]
            held = (_text(value), int(meta["create_revision"]))
        view, bad = view_from(brokers, held)
        for key in bad:
            log.warning("cluster: ignoring the unreadable etcd key %s", key)
        self.view = view

    def _round_or_failover(self) -> bool:
        try:
            self._round()
            return True
        except Exception as exc:  # noqa: BLE001 - etcd unreachable or answering errors
            if self.connected:
                log.warning("cluster: lost etcd at %s:%d (%s); serving with the last view",
                            *self.endpoints[self._endpoint % len(self.endpoints)], exc)
            self._endpoint += 1
            self._session = None
            return False

    # ---- on the event loop ---------------------------------------------------------------

    async def start(self) -> None:
        """Register (waiting up to the session timeout for etcd), then keep it up in a task."""
        deadline = asyncio.get_running_loop().time() + 3 * self.interval * 3
        while not await asyncio.to_thread(self._round_or_failover):
            if asyncio.get_running_loop().time() > deadline:
                raise ConnectionError(f"cannot reach etcd at {self.endpoints}")
            await asyncio.sleep(self.interval / 3)
        self.connected = True
        log.info("cluster: node %d registered; brokers %s, controller %d", self.node_id,
                 sorted(self.view.brokers), self.view.controller_id)
        self._task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            ok = await asyncio.to_thread(self._round_or_failover)
            if ok and not self.connected:
                log.warning("cluster: etcd is back; node %d registered again", self.node_id)
            self.connected = ok

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


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
