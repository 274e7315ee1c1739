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


# ---- topics and their placement (issue 16, step 1b) ---------------------------------------
#
# ``topics/<name>`` → JSON {"id": hex topic id, "configs": {…}, "partitions": [{"replicas": [..],
# "leader": n, "epoch": e, "isr": [..]}, …]}: the cluster's catalog of plain Kafka topics and
# where each partition lives. Created by whichever broker took the CreateTopics (an etcd create
# that succeeds only while the key is absent: at most one topic of a name), changed afterwards
# only by the controller's compare-and-swap on the value (``elect``), deleted by DeleteTopics.
# Every broker reads the prefix each round and applies it: the topic exists on every broker,
# each partition is served by its leader alone (NOT_LEADER_OR_FOLLOWER elsewhere).

TOPICS = ROOT + "topics/"


@dataclass(frozen=True)
class PartitionState:
    """One partition's replicas (the first is the preferred leader), leader (-1: offline),
    leader epoch (grows with every change of leader) and in-sync replicas."""

    replicas: tuple[int, ...]
    leader: int
    epoch: int
    isr: tuple[int, ...]


@dataclass(frozen=True)
class Placement:
    name: str
    topic_id: bytes
    configs: dict[str, str]
    partitions: tuple[PartitionState, ...]


def topic_key(name: str) -> str:
    return TOPICS + name


def placement_value(p: Placement) -> str:
    return json.dumps({
        "id": p.topic_id.hex(), "configs": p.configs,
        "partitions": [{"replicas": list(s.replicas), "leader": s.leader, "epoch": s.epoch, "isr": list(s.isr)}
                       for s in p.partitions],
    }, sort_keys=True)


def placement_from(key: str, value: str) -> Placement:
    """The placement under ``key`` (ValueError, KeyError or TypeError when it does not parse)."""
    data = json.loads(value)
    parts = tuple(PartitionState(tuple(int(r) for r in s["replicas"]), int(s["leader"]), int(s["epoch"]),
                                 tuple(int(r) for r in s["isr"])) for s in data["partitions"])
    topic_id = bytes.fromhex(data["id"])
    if len(topic_id) != 16 or not parts:
        raise ValueError("a topic id is 16 bytes and a topic has partitions")
    return Placement(key[len(TOPICS):], topic_id, {str(k): str(v) for k, v in data["configs"].items()}, parts)


def assign(partitions: int, replication_factor: int, live: list[int], start: int) -> tuple[PartitionState, ...]:
    """Replicas for a new topic as Kafka's rack-unaware assignment spreads them: partition p's
    replicas are the live brokers from (start + p) on, in node-id order, so leaders (the first
    replica) fall evenly on the brokers. ValueError when there are fewer live brokers than the
    replication factor (Kafka's INVALID_REPLICATION_FACTOR)."""
    nodes = sorted(live)
    if replication_factor < 1 or replication_factor > len(nodes):
        raise ValueError(f"Unable to replicate the partition {replication_factor} time(s): The target replication "
                         f"factor of {replication_factor} cannot be reached because only {len(nodes)} broker(s) "
                         "are registered.")
    out = []
    for p in range(partitions):
        first = (start + p) % len(nodes)
        replicas = tuple(nodes[(first + j) % len(nodes)] for j in range(replication_factor))
        out.append(PartitionState(replicas, replicas[0], 0, replicas))
    return tuple(out)


def elect(p: Placement, live: set[int]) -> Placement:
    """The controller's rule for each partition, given the live brokers (unclean election off):

    - a live leader stays;
    - a dead leader is replaced by the first live replica in the ISR (preference order), the
      ISR shrinking to the live members; with none, the partition goes offline (leader -1)
      keeping its last ISR, so only one of those replicas can lead it again;
    - an offline partition takes the first of its ISR that is live again.

    Each change of leader bumps the leader epoch. Returns ``p`` itself when nothing changes."""
    states = []
    for s in p.partitions:
        if s.leader in live:
            states.append(s)
            continue
        candidates = [r for r in s.replicas if r in s.isr and r in live]
        if candidates:
            isr = tuple(r for r in s.isr if r in live)
            states.append(PartitionState(s.replicas, candidates[0], s.epoch + 1, isr))
        elif s.leader != -1:
            states.append(PartitionState(s.replicas, -1, s.epoch + 1, s.isr))
        else:
            states.append(s)
    new = tuple(states)
    return p if new == p.partitions else Placement(p.name, p.topic_id, p.configs, new)


def placements_from(pairs: Iterable[tuple[str, str]]) -> tuple[dict[str, Placement], list[str]]:
    """Every readable placement by topic name, and the keys that did not parse."""
    found: dict[str, Placement] = {}
    bad: list[str] = []
    for key, value in pairs:
        try:
            placement = placement_from(key, value)
            found[placement.name] = placement
        except (ValueError, KeyError, TypeError, AttributeError):
            bad.append(key)
    return found, bad
