"""What a broker knows of its cluster: the live brokers and the controller (issue 16, step 1).

Sans-IO: ``broker.cluster.membership`` reads etcd and hands the key-values here; this module
turns them into a ``ClusterView``. Rules (the etcd key layout, all under ``/tmqgate/``):

- ``brokers/<node id>`` → JSON {"host", "port"}: a live broker's registration, put under the
  broker's lease, so it goes when the broker stops renewing it (killed, cut off from etcd).
- ``controller`` → JSON {"node_id"}: put under the holder's lease by an etcd transaction that
  succeeds only while the key is absent, so at most one broker holds it; its create revision
  is the controller epoch (it grows with every election, as KRaft's epoch does).
- ``cluster_id`` → the cluster's id, created once by the first broker (the same transaction
  rule), so every broker tells clients the same one.
- A key that does not parse is ignored (logged by the caller), never fatal.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from urllib.parse import urlsplit

ROOT = "/tmqgate/"
BROKERS = ROOT + "brokers/"
CONTROLLER = ROOT + "controller"
CLUSTER_ID = ROOT + "cluster_id"


@dataclass(frozen=True)
class BrokerInfo:
    node_id: int
    host: str
    port: int


@dataclass(frozen=True)
class ClusterView:
    """The live brokers by node id, the controller (-1: none now) and its epoch."""

    brokers: dict[int, BrokerInfo] = field(default_factory=dict)
    controller_id: int = -1
    controller_epoch: int = -1

    def live(self) -> list[BrokerInfo]:
        return [self.brokers[n] for n in sorted(self.brokers)]


def broker_key(node_id: int) -> str:
    return f"{BROKERS}{node_id}"


def broker_value(host: str, port: int) -> str:
    return json.dumps({"host": host, "port": port})


def controller_value(node_id: int) -> str:
    return json.dumps({"node_id": node_id})


def view_from(brokers: Iterable[tuple[str, str]], controller: tuple[str, int] | None) -> tuple[ClusterView, list[str]]:
    """The view from the brokers' (key, value) pairs and the controller's (value, create
    revision); also the keys that did not parse."""
    found: dict[int, BrokerInfo] = {}
    bad: list[str] = []
    for key, value in brokers:
        try:
            node = int(key[len(BROKERS):])
            data = json.loads(value)
            found[node] = BrokerInfo(node, str(data["host"]), int(data["port"]))
        except (ValueError, KeyError, TypeError):
            bad.append(key)
    controller_id = epoch = -1
    if controller is not None:
        try:
            controller_id = int(json.loads(controller[0])["node_id"])
            epoch = controller[1]
        except (ValueError, KeyError, TypeError):
            bad.append(CONTROLLER)
    return ClusterView(found, controller_id, epoch), bad


def parse_cluster(url: str) -> list[tuple[str, int]]:
    """``etcd://HOST:PORT[,HOST:PORT…]`` → the endpoints (ValueError when malformed)."""
    if not url.startswith("etcd://"):
        raise ValueError(f"--cluster must be etcd://HOST:PORT[,HOST:PORT…], not {url!r}")
    out = []
    for part in url[len("etcd://"):].split(","):
        split = urlsplit("//" + part)
        if not split.hostname or split.port is None:
            raise ValueError(f"--cluster: {part!r} is not HOST:PORT")
        out.append((split.hostname, split.port))
    return out
