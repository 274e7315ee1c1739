"""What a broker knows of its cluster: the live brokers and the controller (issue 16, step 1).

Sans-IO: ``broker.cluster.membership`` reads etcd and hands the key-values here; this module
turns them into a ``ClusterView``. Rules (the etcd key layout, all under ``/tmqgate/``):

- ``brokers/<node id>`` → JSON {"host", "port", DNODE_FACTS…, "http"}: a live broker's
  registration (its Kafka address, what SHOW DNODES shows, its HTTP SQL front), put under the
  broker's lease, so it goes when the broker stops renewing it (killed, cut off from etcd).
- ``controller`` → JSON {"node_id"}: put under the holder's lease by an etcd transaction that
  succeeds only while the key is absent, so at most one broker holds it; its create revision
  is the controller epoch (it grows with every election, as KRaft's epoch does).
- ``cluster_id`` → the cluster's id, created once by the first broker (the same transaction
  rule), so every broker tells clients the same one.
- A key that does not parse is ignored (logged by the caller), never fatal.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from urllib.parse import urlsplit

from tmqgate.protocol.errors import ErrorCode
from tmqgate.protocol.internal_topics import partition_for

ROOT = "/tmqgate/"
BROKERS = ROOT + "brokers/"
CONTROLLER = ROOT + "controller"
CLUSTER_ID = ROOT + "cluster_id"
#: The internal topic holding the groups' state on a cluster (broker/cluster/coordinator_state.py):
#: a group's coordinator is the leader of its partition, as with Kafka's __consumer_offsets.
GROUP_STATE_TOPIC = "__tmqgate_group_state"
#: Transactional ids' state on a cluster: a transactional id's coordinator leads its partition.
TXN_STATE_TOPIC = "__tmqgate_txn_state"


def state_partitioner(partitions: int) -> Callable[[str], int]:
    """A group's or a transactional id's partition of its state topic (Kafka's hash of the key,
    as for ``__consumer_offsets``), remembered: Java's hashCode in Python costs ~10 µs a key."""
    return functools.lru_cache(maxsize=100_000)(lambda key: partition_for(key, partitions))


@dataclass(frozen=True)
class BrokerInfo:
    node_id: int
    host: str
    port: int
    #: what SHOW DNODES shows of it (-1: its registration does not say): when it started, when
    #: its data directory was made, how many vnodes it takes (its max_partitions)
    started_ms: int = -1
    created_ms: int = -1
    support_vnodes: int = -1
    #: its HTTP SQL front (HOST:PORT; "": not registered): where SQL about a database it leads
    #: is sent (broker/cluster/sql.py)
    http: str = ""


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


#: the registration's fields beside the address (``BrokerInfo``)
DNODE_FACTS = ("started_ms", "created_ms", "support_vnodes")


def broker_value(host: str, port: int, facts: Mapping[str, int] | None = None, http: str = "") -> str:
    """A broker's registration: its address, ``DNODE_FACTS`` and its HTTP SQL front."""
    return json.dumps({"host": host, "port": port, **{k: int(v) for k, v in (facts or {}).items() if k in DNODE_FACTS},
                       **({"http": http} if http else {})})


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
            facts = {k: int(data.get(k, -1)) for k in DNODE_FACTS}
            found[node] = BrokerInfo(node, str(data["host"]), int(data["port"]), **facts,
                                     http=str(data.get("http", "")))
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
    """``etcd://HOST:PORT[,HOST:PORT…]`` → the endpoints (ValueError when malformed);
    ``local:PATH`` (the brokers of one machine sharing a file, broker/cluster/local_kv.py) →
    one endpoint, (PATH, 0), that names it in messages."""
    if url.startswith("local:") and len(url) > len("local:"):
        return [(url[len("local:"):], 0)]
    if not url.startswith("etcd://"):
        raise ValueError(f"--cluster must be etcd://HOST:PORT[,HOST:PORT…] or local:PATH, not {url!r}")
    out = []
    for part in url[len("etcd://"):].split(","):
        split = urlsplit("//" + part)
        if not split.hostname or split.port is None:
            raise ValueError(f"--cluster: {part!r} is not HOST:PORT")
        out.append((split.hostname, split.port))
    return out


# ---- ACLs and SCRAM users: the cluster's, as Kafka keeps them in its metadata -------------
#
# ``acls/<hash>`` → JSON [resource type, resource name, pattern type, principal, host,
# operation, permission] (Kafka's wire codes; the key a hash of the value, so a binding is one
# key) and ``users/<user, hex>/<mechanism>`` → JSON {"salt", "iterations", "stored_key",
# "server_key"} (bytes as base64): written by the broker that took the change, applied by
# every broker to its own store (broker/cluster/catalog.py).

ACLS = ROOT + "acls/"
USERS = ROOT + "users/"
AclTuple = tuple[int, str, int, str, str, int, int]


def acl_entry(acl: AclTuple) -> tuple[str, str]:
    """An ACL binding's etcd key and value."""
    value = json.dumps(list(acl), separators=(",", ":"))
    return ACLS + hashlib.sha256(value.encode()).hexdigest()[:32], value


def acl_from(value: str) -> AclTuple:
    """The binding of an ``acls/`` value (ValueError, TypeError when it does not parse)."""
    rt, name, pt, principal, host, op, perm = json.loads(value)
    return int(rt), str(name), int(pt), str(principal), str(host), int(op), int(perm)


def user_key(user: str, mechanism: str) -> str:
    return f"{USERS}{user.encode().hex()}/{mechanism}"


def user_value(salt: bytes, iterations: int, stored_key: bytes, server_key: bytes) -> str:
    b64 = base64.b64encode
    return json.dumps({"salt": b64(salt).decode(), "iterations": iterations, "stored_key": b64(stored_key).decode(),
                       "server_key": b64(server_key).decode()}, sort_keys=True)


def user_from(key: str, value: str) -> tuple[str, str, bytes, int, bytes, bytes]:
    """(user, mechanism, salt, iterations, stored key, server key) of a ``users/`` key-value
    (ValueError, KeyError, TypeError when it does not parse)."""
    user_hex, mechanism = key[len(USERS):].split("/", 1)
    data = json.loads(value)
    b64 = base64.b64decode
    return (bytes.fromhex(user_hex).decode(), mechanism, b64(data["salt"]), int(data["iterations"]),
            b64(data["stored_key"]), b64(data["server_key"]))


# ``configs/<resource type>/<resource name, hex>`` → JSON {name: value}: the dynamic configs of
# a BROKER (a node id, or "" the cluster default) or GROUP resource; ``quotas/<hash>`` → JSON
# {"entity": [[type, name or null], …], "values": {key: value}}: a client quota entity's values.

CONFIGS = ROOT + "configs/"
QUOTAS = ROOT + "quotas/"
QuotaEntity = tuple[tuple[str, str | None], ...]


def config_entry(resource: tuple[int, str], values: Mapping[str, str]) -> tuple[str, str]:
    return f"{CONFIGS}{resource[0]}/{resource[1].encode().hex()}", json.dumps(dict(values), sort_keys=True)


def config_from(key: str, value: str) -> tuple[tuple[int, str], dict[str, str]]:
    """The resource and values of a ``configs/`` key-value (ValueError, TypeError)."""
    rtype, name_hex = key[len(CONFIGS):].split("/", 1)
    return (int(rtype), bytes.fromhex(name_hex).decode()), {str(k): str(v) for k, v in json.loads(value).items()}


def quota_entry(entity: QuotaEntity, values: Mapping[str, float]) -> tuple[str, str]:
    named = json.dumps([list(e) for e in entity], separators=(",", ":"))
    value = json.dumps({"entity": [list(e) for e in entity], "values": dict(values)}, sort_keys=True)
    return QUOTAS + hashlib.sha256(named.encode()).hexdigest()[:32], value


def quota_from(value: str) -> tuple[QuotaEntity, dict[str, float]]:
    """The entity and values of a ``quotas/`` value (ValueError, KeyError, TypeError)."""
    data = json.loads(value)
    entity = tuple((str(t), None if n is None else str(n)) for t, n in data["entity"])
    return entity, {str(k): float(v) for k, v in data["values"].items()}


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

# SQL databases and TDengine topics are placed the same way (issue 16, step 5): their
# placement's configs hold only ``KIND`` and ``DEFINITION``, which every broker applies:
# ``tsdb`` — a SQL database, DEFINITION = {"options": {…}} (CREATE DATABASE's options; its
# vnodes are the placement's partitions); ``tmq`` — a TDengine topic, DEFINITION = its view's
# definition (broker/sql/views.py ``TopicDef.to_json``), its partitions those of its database,
# which lead them. A placement without KIND is a plain Kafka topic's (configs = topic configs).
KIND = "tmqgate.kind"
DEFINITION = "tmqgate.definition"
TSDB_KIND, TMQ_KIND = "tsdb", "tmq"


@dataclass(frozen=True)
class PartitionState:
    """One partition's replicas (the first is the preferred leader), leader (-1: offline),
    leader epoch (grows with every change of leader) and in-sync replicas; while a reassignment
    runs, the replicas being added and those to be removed (``replicas`` holds both)."""

    replicas: tuple[int, ...]
    leader: int
    epoch: int
    isr: tuple[int, ...]
    adding: tuple[int, ...] = ()
    removing: tuple[int, ...] = ()


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
        "partitions": [{"replicas": list(s.replicas), "leader": s.leader, "epoch": s.epoch, "isr": list(s.isr),
                        **({"adding": list(s.adding), "removing": list(s.removing)} if s.adding or s.removing else {})}
                       for s in p.partitions],
    }, sort_keys=True)


def placement_from(key: str, value: str) -> Placement:
    """The placement under ``key`` (ValueError, KeyError or TypeError when it does not parse)."""
    data = json.loads(value)
    parts = tuple(PartitionState(tuple(int(r) for r in s["replicas"]), int(s["leader"]), int(s["epoch"]),
                                 tuple(int(r) for r in s["isr"]), tuple(int(r) for r in s.get("adding", ())),
                                 tuple(int(r) for r in s.get("removing", ()))) for s in data["partitions"])
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

    - a reassignment whose target replicas are all in the ISR is finished first (``complete``);
    - a live leader stays, and the dead members leave its ISR (Kafka's controller removes a
      fenced broker from every ISR at once, not after replica.lag.time.max.ms: the high
      watermark, acks=all and the group offsets no longer wait for it);
    - a dead leader is replaced by the first live replica in the ISR (preference order), the
      ISR shrinking to the live members; with none, the partition goes offline (leader -1)
      keeping its last ISR, so only one of those replicas can lead it again;
    - an offline partition takes the first of its ISR that is live again.

    Each change of leader bumps the leader epoch. Returns ``p`` itself when nothing changes.
    A SQL database's vnodes are elected together (``_elect_together``); a TDengine topic's
    states are its database's, not its own."""
    kind = p.configs.get(KIND)
    if kind == TMQ_KIND:
        return p
    if kind == TSDB_KIND:
        return _elect_together(p, live)
    states = []
    for s in p.partitions:
        s = complete(s, live)
        if s.leader in live:
            isr = tuple(r for r in s.isr if r in live)
            states.append(s if isr == s.isr else replace(s, isr=isr))
            continue
        candidates = [r for r in s.replicas if r in s.isr and r in live]
        if candidates:
            isr = tuple(r for r in s.isr if r in live)
            states.append(replace(s, leader=candidates[0], epoch=s.epoch + 1, isr=isr))
        elif s.leader != -1:
            states.append(replace(s, leader=-1, epoch=s.epoch + 1))
        else:
            states.append(s)
    new = tuple(states)
    return p if new == p.partitions else Placement(p.name, p.topic_id, p.configs, new)


def _elect_together(p: Placement, live: set[int]) -> Placement:
    """A SQL database's election: one broker leads all its vnodes (it runs the database's DDL
    and SQL, broker/cluster/sql.py). A live leader of every vnode stays (dead members leave
    the ISRs); otherwise every vnode goes to the first replica (in vnode 0's order) that is
    live and in every vnode's ISR — so it holds everything any vnode acknowledged — each
    vnode's epoch bumped where its leader changes; with none, every vnode is offline."""
    states = p.partitions
    leader = states[0].leader
    if leader in live and all(s.leader == leader for s in states):
        new = tuple(replace(s, isr=tuple(r for r in s.isr if r in live)) for s in states)
    else:
        eligible = [r for r in states[0].replicas if r in live and all(r in s.isr for s in states)]
        chosen = eligible[0] if eligible else -1
        new = tuple(s if s.leader == chosen else
                    replace(s, leader=chosen, epoch=s.epoch + 1,
                            isr=tuple(r for r in s.isr if r in live) if chosen >= 0 else s.isr)
                    for s in states)
        new = tuple(s if s.leader < 0 else replace(s, isr=tuple(r for r in s.isr if r in live)) for s in new)
    return p if new == states else Placement(p.name, p.topic_id, p.configs, new)


# ---- reassignment (AlterPartitionReassignments, ``kafka-reassign-partitions``) --------------
#
# As Kafka's controller runs one: the partition's replicas become the target followed by the
# original replicas that are not in it; ``adding`` (target - original) fetch from the leader
# like any follower and join the ISR when caught up; once every target replica is in the ISR
# the controller finishes it (``complete``): the replicas become the target, the ISR keeps
# only target replicas, a leader that is not one hands over to the first in-sync target replica
# — and the leader epoch grows, so the removed replicas' fetches are fenced and no ISR change
# asked at the old replica set can land.


def reassign(s: PartitionState, target: tuple[int, ...] | None, registered: set[int],
             allow_factor_change: bool = True) -> tuple[PartitionState, ErrorCode, str | None]:
    """Start (``target``) or cancel (None) a partition's reassignment; the new state, the
    error and its message. A new target replaces one in progress (computed from the replicas
    the partition had before it). ``allow_factor_change`` False (KIP-860): a target of another
    length than the replicas is INVALID_REPLICATION_FACTOR."""
    original = tuple(r for r in s.replicas if r not in s.adding)
    if target is not None and not allow_factor_change and len(target) != len(original):
        return s, ErrorCode.INVALID_REPLICATION_FACTOR, \
            f"The replication factor is changed from {len(original)} to {len(target)}"
    if target is None:
        if not s.adding and not s.removing:
            return s, ErrorCode.NO_REASSIGNMENT_IN_PROGRESS, None
        isr = tuple(r for r in s.isr if r in original)
        if not isr:
            return s, ErrorCode.INVALID_REPLICA_ASSIGNMENT, "None of the original replicas is in sync."
        if s.leader in original:
            return PartitionState(original, s.leader, s.epoch + 1, isr), ErrorCode.NONE, None
        return PartitionState(original, isr[0], s.epoch + 1, isr), ErrorCode.NONE, None
    if not target:
        return (s, ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                "The manual partition assignment includes an empty replica list.")
    for r in target:
        if target.count(r) > 1:
            return s, ErrorCode.INVALID_REPLICA_ASSIGNMENT, \
                f"The manual partition assignment includes broker ID {r} more than once."
        if r not in registered:
            return s, ErrorCode.INVALID_REPLICA_ASSIGNMENT, \
                f"The manual partition assignment includes broker {r}, but no such broker is registered."
    adding = tuple(r for r in target if r not in original)
    removing = tuple(r for r in original if r not in target)
    if not adding and not removing:  # the same set, perhaps in another order: at once
        return PartitionState(target, s.leader, s.epoch, s.isr), ErrorCode.NONE, None
    started = PartitionState(target + removing, s.leader, s.epoch, s.isr, adding, removing)
    return complete(started, registered), ErrorCode.NONE, None


def complete(s: PartitionState, live: set[int]) -> PartitionState:
    """A reassignment whose target replicas are all in the ISR, finished (see above); ``s``
    itself otherwise (none running, a target replica still catching up, or no live in-sync
    target replica to lead)."""
    if not s.adding and not s.removing:
        return s
    target = tuple(r for r in s.replicas if r not in s.removing)
    if any(r not in s.isr for r in target):
        return s
    isr = tuple(r for r in s.isr if r in target)
    leader = s.leader if s.leader in target else next((r for r in target if r in live), -1)
    if leader < 0:
        return s
    return PartitionState(target, leader, s.epoch + 1, isr)


PREFERRED, UNCLEAN = 0, 1  # ElectLeaders' election types


def elect_asked(s: PartitionState, election_type: int, live: set[int]) -> tuple[PartitionState, ErrorCode]:
    """An election an operator asked for (ElectLeaders, ``kafka-leader-election``), as Kafka's
    controller decides it for one partition:

    - PREFERRED: the first replica leads when it is live and in the ISR (NONE, epoch + 1);
      ELECTION_NOT_NEEDED when it leads already; PREFERRED_LEADER_NOT_AVAILABLE otherwise
      (never an unclean election).
    - UNCLEAN: only an offline partition (no live leader) is elected — the first live replica
      in the ISR, else the first live replica at all, the ISR becoming that replica alone
      (what it lacks is lost, as the operator asked); ELECTION_NOT_NEEDED when a live replica
      leads; ELIGIBLE_LEADERS_NOT_AVAILABLE when no replica is live.

    Returns the partition's new state (``s`` itself when nothing changes) and the error."""
    if election_type == PREFERRED:
        preferred = s.replicas[0]
        if s.leader == preferred:
            return s, ErrorCode.ELECTION_NOT_NEEDED
        if preferred not in live or preferred not in s.isr:
            return s, ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE
        return replace(s, leader=preferred, epoch=s.epoch + 1), ErrorCode.NONE
    if s.leader in live:
        return s, ErrorCode.ELECTION_NOT_NEEDED
    in_sync = [r for r in s.replicas if r in s.isr and r in live]
    if in_sync:
        isr = tuple(r for r in s.isr if r in live)
        return replace(s, leader=in_sync[0], epoch=s.epoch + 1, isr=isr), ErrorCode.NONE
    alive = [r for r in s.replicas if r in live]
    if not alive:
        return s, ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE
    return replace(s, leader=alive[0], epoch=s.epoch + 1, isr=(alive[0],)), ErrorCode.NONE


def rebalance(p: Placement, live: set[int]) -> Placement:
    """Kafka's automatic leader rebalance (auto.leader.rebalance.enable), for one topic: each
    partition whose preferred replica is live and in sync but not leading gets it back (a
    preferred election, ``elect_asked``); ``p`` itself when none needs it. A SQL database's
    vnodes move together: all of them once their preferred replica is in every ISR."""
    kind = p.configs.get(KIND)
    if kind == TMQ_KIND:
        return p
    if kind == TSDB_KIND:
        preferred = p.partitions[0].replicas[0]
        if preferred not in live or any(preferred not in s.isr for s in p.partitions):
            return p
    states = tuple(elect_asked(s, PREFERRED, live)[0] for s in p.partitions)
    return p if states == p.partitions else Placement(p.name, p.topic_id, p.configs, states)


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
