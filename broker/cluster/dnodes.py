"""What SHOW DNODES and SHOW VGROUPS show (issue 16, step 5): the brokers — TDengine's dnodes —
and which broker holds each replica of a vnode, in what role.

Rules:
- One node: itself, ``ready``, leading every vnode it holds.
- On a cluster, as this broker's last read of etcd has it: every live broker (``ready``), and
  every broker that a placement names or that this broker saw live before but that is not live
  now (``offline``; its endpoint the last one seen, blank if never).
- A vnode of a shared topic (``metadata.view.Placement``): its replicas in the placement's
  order (the preferred leader first), each ``leader``, ``follower`` (in the ISR), ``learner``
  (out of the ISR: catching up, or being added by a reassignment), ``candidate`` (the vnode has
  no leader now: unclean election is off) or ``offline`` (its broker is not live).
- A database that is not shared (made on this node before it joined a cluster) is this
  node's alone: one replica, here, the leader. A TDengine topic's vnodes are its database's.
- A dnode's ``vnodes`` counts the replicas the placements give it, and for this node its
  unshared databases' vnodes too (another node's unshared databases are not known here).
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

from tmqgate.broker.metadata.view import DNODE_FACTS, KIND, TMQ_KIND, BrokerInfo, PartitionState
from tmqgate.broker.tdengine import PlacementQueries

if TYPE_CHECKING:
    from tmqgate.broker.metadata.membership import Members
    from tmqgate.broker.topics import TopicRegistry
    from tmqgate.storage import Store

_SMALLINT_MAX = 32767


def role(replica: int, state: PartitionState, live: set[int]) -> str:
    """A replica's status in SHOW VGROUPS (the module docstring's rules)."""
    if replica not in live:
        return "offline"
    if replica == state.leader:
        return "leader"
    if state.leader < 0:
        return "candidate"
    return "follower" if replica in state.isr else "learner"


class Dnodes:
    """See the module docstring; ``queries()`` is the executor's ``PlacementQueries``."""

    def __init__(self, node_id: int, store: Store, topics: TopicRegistry, support_vnodes: int,
                 started_ms: int, membership: Members) -> None:
        self.node_id = node_id
        self._store = store
        self._topics = topics
        self.support_vnodes = min(support_vnodes, _SMALLINT_MAX)
        self.started_ms = started_ms
        self.membership = membership  # this one alone, or the cluster's (its `advertised`: this broker's address)
        self._seen: dict[int, BrokerInfo] = {}  # every broker seen live, as last seen

    def queries(self) -> PlacementQueries:
        return PlacementQueries(dnodes=self.dnodes, replicas=self.replicas)

    def _me(self) -> BrokerInfo:
        host, port = self.membership.advertised
        return BrokerInfo(self.node_id, host, port, self.started_ms,
                          self._store.created_ms, self.support_vnodes)

    def facts(self) -> dict[str, int]:
        """What this broker registers beside its address (``metadata.view.DNODE_FACTS``)."""
        me = self._me()
        return {name: getattr(me, name) for name in DNODE_FACTS}

    def _live(self) -> dict[int, BrokerInfo]:
        live = dict(self.membership.view.brokers)
        live[self.node_id] = self._me()
        self._seen.update(live)
        return live

    def replicas(self, db: str, vnode: int) -> list[tuple[int, str]]:
        topic = self._topics.get(db)
        state = None if topic is None else self._topics.partition_state(topic, vnode)
        if state is None:
            return [(self.node_id, "leader")]
        live = set(self._live())
        return [(r, role(r, state, live)) for r in state.replicas]

    def dnodes(self) -> list[list[Any]]:
        live = self._live()
        placements = self._topics.placements
        held: Counter[int] = Counter()
        for placement in placements.values():
            if placement.configs.get(KIND) == TMQ_KIND:  # a view over a database's vnodes: no replicas of its own
                continue
            for state in placement.partitions:
                held.update(state.replicas)
        for info in self._store.databases():
            shared = placements.get(info.name)
            if shared is None or shared.topic_id != info.topic_id:
                held[self.node_id] += info.vgroups
        rows = []
        for node in sorted(set(live) | set(held) | set(self._seen)):
            b = self._seen.get(node)
            status = "ready" if node in live else "offline"
            rows.append([node, f"{b.host}:{b.port}" if b is not None else "", held[node],
                         b.support_vnodes if b is not None and b.support_vnodes >= 0 else None, status,
                         _ms(b.created_ms if b else -1), _ms(b.started_ms if b else -1),
                         "" if status == "ready" else "no live registration in etcd"])
        return rows


def _ms(value: int) -> int | None:
    return value if value >= 0 else None
