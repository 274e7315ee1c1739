"""Plain Kafka topics shared by the brokers of a cluster (issue 16, step 1b).

The cluster's catalog of topics and the placement of their partitions live in etcd
(``coordinator.cluster``: ``/tmqgate/topics/<name>``). Rules:

- CreateTopics (or a Metadata auto-creation) on any broker checks the topic as one node would
  (``TopicRegistry.create(validate_only=True)``), then puts its placement in etcd with a create
  that succeeds only while the name is free — two brokers creating one name at once: one
  wins, the other answers TOPIC_ALREADY_EXISTS — and then makes the topic locally.
- Every broker applies the placements it reads (``apply``, after each etcd round): a topic it
  lacks is created with the cluster's topic id (the same id on every broker, as clients
  expect), a topic whose id changed (deleted and created again) is replaced, a topic that
  left etcd since the last round is deleted. Every broker holds every partition's log; only
  the leader serves it (``TopicRegistry.partition_error``); with a replication factor above 1
  the other replicas fetch from it (``broker.cluster.replication``).
- DeleteTopics removes the placement; every broker deletes the topic when it reads that.
- CreatePartitions of a shared topic adds the new partitions' replicas to its placement (a
  compare-and-swap); every broker makes the partitions when it reads that.
- ElectLeaders (``kafka-leader-election``) on any broker decides each partition by Kafka's rule
  (``coordinator.cluster.elect_asked``) on the placement read at that moment and writes it by
  a compare-and-swap; the old and new leaders take their roles when they read it.
- Topics this node had before it joined the cluster and that etcd does not know stay local
  (served by this node); SQL databases and TDengine topics are not shared yet (step 5).
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tmqgate.broker.topics import KAFKA, Topic, TopicError
from tmqgate.coordinator.cluster import PartitionState, Placement, assign, elect_asked, reassign
from tmqgate.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from tmqgate.broker.cluster.membership import Membership
    from tmqgate.broker.topics import TopicRegistry

log = logging.getLogger("tmqgate.cluster")

#: ElectLeaders' and AlterPartitionReassignments' answers: by topic, (partition, error,
#: message) of each partition asked for
Results = dict[str, list[tuple[int, ErrorCode, str | None]]]
#: one partition's change: (partition, its state now) → (its new state, error, message)
Decide = Callable[[int, PartitionState], tuple[PartitionState, ErrorCode, str | None]]


class ClusterTopics:
    """See the module docstring; the registry's ``cluster`` on a cluster."""

    def __init__(self, membership: Membership, registry: TopicRegistry) -> None:
        self._membership = membership
        self._registry = registry
        self._seen: set[str] = set()  # names in etcd at the last apply
        registry.node_id = membership.node_id
        registry.cluster = self
        membership.on_change.append(self.apply)

    def apply(self) -> None:
        """Bring the local topics in line with etcd's placements (on the event loop)."""
        placements = self._membership.placements
        registry = self._registry
        for name, placement in placements.items():
            topic = registry.get(name)
            if topic is not None and topic.topic_id != placement.topic_id and topic.kind == KAFKA:
                log.info("cluster: topic %s was deleted and created again; replacing it", name)
                registry.delete(topic)
                topic = None
            try:
                if topic is None:
                    registry.create(name, len(placement.partitions), dict(placement.configs),
                                    topic_id=placement.topic_id)
                elif topic.kind == KAFKA and topic.partitions < len(placement.partitions):
                    registry.add_partitions(topic, len(placement.partitions))
            except TopicError as exc:  # e.g. a name this node uses for a database: not shared
                log.warning("cluster: cannot make topic %s here: %s", name, exc.message)
        for name in self._seen - set(placements):
            topic = registry.get(name)
            if topic is not None and topic.kind == KAFKA:
                log.info("cluster: topic %s was deleted", name)
                registry.delete(topic)
        self._seen = set(placements)
        registry.placements = placements

    async def create(self, name: str, partitions: int, configs: dict[str, str | None],
                     replicas: list[list[int]] | None = None, replication_factor: int = 1) -> Topic:
        """CreateTopics on a cluster (see the module docstring); TopicError as one node's."""
        registry = self._registry
        checked = registry.create(name, partitions, configs, validate_only=True)
        await self._membership.refresh()
        if name in self._membership.placements or registry.get(name) is not None:
            raise TopicError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
        states = _placed(replicas, partitions, replication_factor, sorted(self._membership.view.brokers))
        topic_id = random.randbytes(16)
        placement = Placement(name, topic_id, dict(checked.configs), states)
        try:
            created = await self._membership.create_topic(placement)
        except Exception as exc:  # noqa: BLE001 - etcd unreachable: the controller is
            raise TopicError(ErrorCode.REQUEST_TIMED_OUT, f"cannot reach the cluster's etcd: {exc}") from None
        if not created:
            raise TopicError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
        topic = registry.get(name)
        if topic is None or topic.topic_id != topic_id:  # apply could not make it here
            raise TopicError(ErrorCode.UNKNOWN_SERVER_ERROR, f"Topic '{name}' was created but not applied here.")
        return topic

    async def delete(self, topic: Topic) -> None:
        """DeleteTopics on a cluster: the placement goes from etcd, then the topic here (the
        other brokers drop it when they read etcd next)."""
        if topic.is_internal:
            raise TopicError(ErrorCode.INVALID_REQUEST, f"Topic '{topic.name}' is an internal topic and cannot be deleted.")
        placement = self._membership.placements.get(topic.name)
        if placement is None or placement.topic_id != topic.topic_id:
            self._registry.delete(topic)  # a topic of this node alone
            return
        try:
            await self._membership.delete_topic(topic.name)
        except Exception as exc:  # noqa: BLE001 - etcd unreachable
            raise TopicError(ErrorCode.REQUEST_TIMED_OUT, f"cannot reach the cluster's etcd: {exc}") from None
        if self._registry.get(topic.name) is topic:
            self._registry.delete(topic)

    async def add_partitions(self, topic: Topic, count: int, assignments: list[list[int]] | None,
                             validate_only: bool) -> None:
        """CreatePartitions of a shared topic: the new partitions' replicas (``assignments``, or
        placed as CreateTopics places them, with the topic's replication factor) added to its
        placement by a compare-and-swap; every broker makes them when it reads that. TopicError
        as one node's, INVALID_REPLICA_ASSIGNMENT for a bad assignment."""
        self._registry.add_partitions(topic, count, validate_only=True)
        placement = self._membership.placements.get(topic.name)
        assert placement is not None and placement.topic_id == topic.topic_id
        current = len(placement.partitions)
        factor = len(placement.partitions[0].replicas)
        if assignments is not None:
            if len(assignments) != count - current:
                raise TopicError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                 f"Attempted to add {count - current} additional partition(s), but only "
                                 f"{len(assignments)} assignment(s) were specified.")
            for replicas in assignments:
                if len(replicas) != factor or len(set(replicas)) != len(replicas):
                    raise TopicError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                     f"The manual partition assignment {replicas} does not name {factor} distinct "
                                     "brokers, the topic's replication factor.")
        new = _placed(assignments, count - current, factor, sorted(self._membership.view.brokers))
        if validate_only:
            return

        def change(p: Placement) -> Placement | None:
            if len(p.partitions) != current:
                return None  # another broker added partitions meanwhile
            return Placement(p.name, p.topic_id, p.configs, p.partitions + new)

        try:
            written = await self._membership.change_topic(topic.name, topic.topic_id, change)
        except Exception as exc:  # noqa: BLE001 - etcd unreachable
            raise TopicError(ErrorCode.REQUEST_TIMED_OUT, f"cannot reach the cluster's etcd: {exc}") from None
        if not written:
            raise TopicError(ErrorCode.INVALID_PARTITIONS,
                             f"Topic '{topic.name}' changed while adding partitions; describe it and try again.")

    async def elect_leaders(self, election_type: int, wanted: dict[str, list[int]] | None) -> Results:
        """ElectLeaders on a cluster (see the module docstring): the result of each partition
        asked for (``wanted`` None: every partition of every shared topic) by topic."""
        await self._membership.refresh()
        live = set(self._membership.view.brokers)
        placements = self._membership.placements
        asked = wanted if wanted is not None else {n: list(range(len(p.partitions))) for n, p in placements.items()}
        how = "preferred" if election_type == 0 else "unclean"

        def decide(_p: int, state: PartitionState) -> tuple[PartitionState, ErrorCode, str | None]:
            return (*elect_asked(state, election_type, live), None)

        out: Results = {}
        for name, partitions in asked.items():
            out[name] = await self._change_partitions(name, {p: None for p in partitions}, decide,
                                                      f"No such topic as {name}", "No such partition as {}-{}",
                                                      f"leader elected ({how} election)")
        return out

    async def reassign(self, wanted: dict[str, dict[int, tuple[int, ...] | None]], allow_factor_change: bool) -> Results:
        """AlterPartitionReassignments on a cluster: each partition's target replicas (None:
        cancel), started or cancelled by Kafka's rules (``coordinator.cluster.reassign``); the
        controller finishes each when its target replicas are in sync."""
        await self._membership.refresh()
        registered = set(self._membership.view.brokers)
        targets: dict[int, tuple[int, ...] | None] = {}

        def decide(p: int, state: PartitionState) -> tuple[PartitionState, ErrorCode, str | None]:
            return reassign(state, targets[p], registered, allow_factor_change)

        out: Results = {}
        for name, asked in wanted.items():
            targets.clear()
            targets.update(asked)
            out[name] = await self._change_partitions(name, dict(asked), decide, f"Unable to find a topic named {name}.",
                                                      "Unable to find partition {}:{}.", "reassignment changed")
        return out

    async def reassignments(self, wanted: dict[str, list[int]] | None) -> dict[str, list[tuple[int, PartitionState]]]:
        """ListPartitionReassignments: the partitions asked for (None: all) whose reassignment
        is running, with their replicas, those being added and those to be removed."""
        await self._membership.refresh()
        out: dict[str, list[tuple[int, PartitionState]]] = {}
        for name, placement in self._membership.placements.items():
            if wanted is not None and name not in wanted:
                continue
            asked = set(wanted[name]) if wanted is not None else None
            running = [(p, s) for p, s in enumerate(placement.partitions)
                       if (s.adding or s.removing) and (asked is None or p in asked)]
            if running:
                out[name] = running
        return out

    async def _change_partitions(self, name: str, asked: dict[int, Any], decide: Decide, no_topic: str,
                                 no_partition: str, done: str) -> list[tuple[int, ErrorCode, str | None]]:
        """``decide`` each partition of ``asked`` on the topic's placement read now and write
        the result by a compare-and-swap; each partition's (error, message)."""
        placement = self._membership.placements.get(name)
        if placement is None:
            return [(p, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, no_topic) for p in asked]
        results: dict[int, tuple[ErrorCode, str | None]] = {}

        def change(current: Placement) -> Placement:  # again at every try of the compare-and-swap
            states = list(current.partitions)
            for p in asked:
                if not 0 <= p < len(states):
                    results[p] = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, no_partition.format(name, p))
                    continue
                states[p], error, message = decide(p, states[p])
                results[p] = (error, message)
            return Placement(current.name, current.topic_id, current.configs, tuple(states))

        try:
            written = await self._membership.change_topic(name, placement.topic_id, change)
        except Exception as exc:  # noqa: BLE001 - etcd unreachable
            written, why = False, f"cannot reach the cluster's etcd: {exc}"
        else:
            why = f"Topic '{name}' changed meanwhile; try again."
        if not written:
            gone = self._membership.placements.get(name) is None
            return [(p, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, no_topic) if gone
                    else (p, ErrorCode.REQUEST_TIMED_OUT, why) for p in asked]
        for p, (error, _) in results.items():
            if error == ErrorCode.NONE:
                log.info("cluster: %s-%d: %s", name, p, done)
        return [(p, *results[p]) for p in asked]


def _placed(replicas: list[list[int]] | None, partitions: int, factor: int, live: list[int]) -> tuple[PartitionState, ...]:
    """New partitions' states: the replicas asked for (every broker named registered, else
    INVALID_REPLICA_ASSIGNMENT), or ``partitions`` placed as Kafka places them — its round-robin
    from a random broker (INVALID_REPLICATION_FACTOR with fewer live brokers than ``factor``)."""
    if replicas is not None:
        unknown = sorted({r for rs in replicas for r in rs} - set(live))
        if unknown:
            raise TopicError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                             f"The manual partition assignment includes broker(s) {unknown} that are not registered.")
        return tuple(PartitionState(tuple(rs), rs[0], 0, tuple(rs)) for rs in replicas)
    try:
        return assign(partitions, factor, live, random.randrange(len(live) or 1))
    except ValueError as exc:
        raise TopicError(ErrorCode.INVALID_REPLICATION_FACTOR, str(exc)) from None
