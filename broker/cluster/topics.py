"""Plain Kafka topics shared by the brokers of a cluster (issue 16, step 1b).

The cluster's catalog of topics and the placement of their partitions live in etcd
(``metadata.view``: ``/tmqgate/topics/<name>``). Rules:

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
- AlterConfigs of a shared topic on any broker sets its configs there and writes them to its
  placement (a compare-and-swap); every broker takes them when it reads that.
- CreatePartitions of a shared topic adds the new partitions' replicas to its placement (a
  compare-and-swap); every broker makes the partitions when it reads that.
- ElectLeaders (``kafka-leader-election``) on any broker decides each partition by Kafka's rule
  (``metadata.view.elect_asked``) on the placement read at that moment and writes it by
  a compare-and-swap; the old and new leaders take their roles when they read it.
- SQL databases and TDengine topics are placed the same way (``metadata.view.KIND``):
  every broker makes them with the cluster's topic id (databases before the topics over them)
  and drops them when they leave etcd; a TDengine topic's partitions are its database's vnodes
  (``TopicRegistry.partition_state``). broker/cluster/sql.py has SQL's rules.
- Topics and databases this node had before it joined the cluster and that etcd does not know
  stay local (served by this node).
"""

from __future__ import annotations

import json
import logging
import random
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tmqgate.broker.cluster.outbox import Outbox
from tmqgate.broker.metadata.view import (
    DEFINITION,
    KIND,
    TMQ_KIND,
    TSDB_KIND,
    PartitionState,
    Placement,
    assign,
    elect_asked,
    reassign,
)
from tmqgate.broker.topics import KAFKA, TMQ, TMQ_AS, TSDB, Results, Topic, TopicError
from tmqgate.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from tmqgate.broker.cluster.membership import Membership
    from tmqgate.broker.topics import TopicRegistry

log = logging.getLogger("tmqgate.cluster")
#: a TDengine topic refused by this broker's catalog is checked again after this many reads of etcd
TMQ_CHECK_READS = 3

#: SQL databases are made before the TDengine topics over them
_APPLY_ORDER = {TSDB_KIND: 0, KAFKA: 1, TMQ_KIND: 2}
#: one partition's change: (partition, its state now) → (its new state, error, message)
Decide = Callable[[int, PartitionState], tuple[PartitionState, ErrorCode, str | None]]


class ClusterTopics:
    """See the module docstring; the registry's ``cluster`` on a cluster (the registry makes it
    over itself), ``apply`` after each read of the placements. What etcd does not place goes
    to the registry's ``local`` (``topics.LocalTopics``), as on one node."""

    alone = False

    def __init__(self, membership: Membership, registry: TopicRegistry) -> None:
        self._membership = membership
        self._registry = registry
        self._seen: set[str] = set()  # names in etcd at the last apply
        self._ids: dict[str, bytes] = {}  # and their topic ids
        self._stables_from: dict[str, str] = {}  # SQL databases: the definition their supertables came from
        #: configs altered here, each (name, topic id, configs), written to the placements
        self._configs: Outbox[tuple[str, bytes, dict[str, str]]] = Outbox(
            self._write_configs, "topic configs", into=membership.outboxes)

    def apply(self) -> None:
        """Bring the local topics in line with etcd's placements (on the event loop): SQL
        databases first, TDengine topics (views over them) last; dropped in the other order."""
        placements = self._membership.placements
        registry = self._registry
        for placement in sorted(placements.values(), key=lambda p: _APPLY_ORDER.get(p.configs.get(KIND, KAFKA), 1)):
            name = placement.name
            kind = placement.configs.get(KIND, KAFKA)
            if kind not in _APPLY_ORDER:
                log.warning("cluster: %s is of a kind this broker does not know (%s); not made here", name, kind)
                continue
            topic = registry.get(name)
            # made again under a new id (a SQL database or view only once seen shared here: a
            # database of this node alone keeps its data)
            if topic is not None and topic.topic_id != placement.topic_id and topic.kind == kind \
                    and (kind == KAFKA or self._ids.get(name) == topic.topic_id):
                log.info("cluster: %s %s was deleted and created again; replacing it", kind, name)
                self._drop(topic)
                topic = None
            try:
                if topic is None:
                    self._make(placement, kind)
                elif kind == TSDB_KIND and topic.kind == TSDB:
                    # the supertables as etcd records them (a replica has them from the vnodes'
                    # meta), taken again only when the definition changed
                    definition = placement.configs[DEFINITION]
                    if self._stables_from.get(name) != definition:
                        parsed = json.loads(definition)
                        if registry.node_id not in placement.partitions[0].replicas:
                            registry.set_stables(name, parsed.get("stables", {}))
                        # its options (ALTER DATABASE's retention), on every broker
                        registry.set_database_options(name, parsed.get("options", {}))
                        self._stables_from[name] = definition
                elif kind == KAFKA and topic.kind == KAFKA:
                    if topic.partitions < len(placement.partitions):
                        registry.add_partitions(topic, len(placement.partitions))
                    if topic.configs != placement.configs and all(name != n for n, *_ in self._configs.pending):
                        # another broker's AlterConfigs
                        registry.set_configs(topic, dict(placement.configs), shared=False)
            except (TopicError, ValueError, KeyError) as exc:  # e.g. a name this node uses for its own database
                log.warning("cluster: cannot make %s %s here: %s", kind, name, getattr(exc, "message", exc))
        gone = [t for t in map(registry.get, self._seen - set(placements)) if t is not None]
        for topic in sorted(gone, key=lambda t: t.kind != TMQ):
            if topic.kind in (KAFKA, TSDB, TMQ) and topic.topic_id == self._ids.get(topic.name):
                log.info("cluster: %s %s was deleted", topic.kind, topic.name)
                self._drop(topic)
        self._seen = set(placements)
        self._stables_from = {n: d for n, d in self._stables_from.items() if n in placements}
        self._ids = {n: p.topic_id for n, p in placements.items()}
        registry.place(placements)
        self._configs.kick()

    def configs_changed(self, topic: Topic, configs: dict[str, str]) -> None:
        """A shared topic's configs altered here: written to its placement (a compare-and-swap,
        at once, in the background); until then ``apply`` leaves this broker's as they are."""
        self._configs.add([(topic.name, topic.topic_id, configs)])

    async def _write_configs(self, changes: list[tuple[str, bytes, dict[str, str]]]) -> None:
        for name, topic_id, configs in changes:

            def change(p: Placement, configs: dict[str, str] = configs) -> Placement:
                return Placement(p.name, p.topic_id, dict(configs), p.partitions)

            await self._membership.change_topic(name, topic_id, change)

    async def change_definition(self, name: str, topic_id: bytes, change: Callable[[dict[str, Any]], None]) -> bool:
        """A SQL database's or TDengine topic's definition in its placement changed by ``change``
        (a compare-and-swap: ``change`` sees the value read at each try)."""

        def on(p: Placement) -> Placement:
            definition = json.loads(p.configs[DEFINITION])
            change(definition)
            return Placement(p.name, p.topic_id, {**p.configs, DEFINITION: json.dumps(definition, sort_keys=True)},
                             p.partitions)

        return await self._membership.change_topic(name, topic_id, on)

    def _make(self, placement: Placement, kind: str) -> None:
        registry = self._registry
        self._stables_from.pop(placement.name, None)  # a database made again takes its supertables again
        if kind == KAFKA:
            registry.create(placement.name, len(placement.partitions), dict(placement.configs),
                            topic_id=placement.topic_id)
            return
        definition = json.loads(placement.configs[DEFINITION])
        if kind == TSDB_KIND:
            registry.make_database(placement.name, len(placement.partitions), dict(definition["options"]),
                                   placement.topic_id)
        elif registry.get(str(definition["db"])) is None:
            raise ValueError(f"its database {definition['db']} is not here")
        else:
            registry.make_view(placement.name, definition, placement.topic_id)

    def _drop(self, topic: Topic) -> None:
        if topic.kind == KAFKA:
            self._registry.delete(topic)
        else:
            self._registry.drop_sql(topic)

    async def create(self, name: str, partitions: int, configs: dict[str, str | None],
                     replicas: list[list[int]] | None = None, replication_factor: int = 1,
                     owner: tuple[str, str] | None = None) -> Topic:
        """CreateTopics on a cluster (see the module docstring); TopicError as one node's. A
        TDengine topic (the tmq.as config, made by ``owner``) over a shared SQL database is
        placed with it, so every broker serves it, as SQL's CREATE TOPIC places it."""
        registry = self._registry
        checked = await self._checked(name, partitions, configs, owner)
        if checked.kind == TMQ:
            assert checked.view is not None
            source = registry.get(checked.db)
            if source is None or registry.partition_state(source, 0) is None:
                return registry.create(name, partitions, configs, owner=owner)  # over a database of this node alone
            return await self.create_placed(name, TMQ_KIND, checked.view.topic.to_json(),
                                            self._membership.placements[source.name].partitions)
        await self._membership.refresh()
        if name in self._membership.placements or registry.get(name) is not None:
            raise TopicError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
        states = _placed(replicas, partitions, replication_factor, sorted(self._membership.view.brokers))
        return await self._put(Placement(name, random.randbytes(16), dict(checked.configs), states))

    async def _checked(self, name: str, partitions: int, configs: dict[str, str | None],
                       owner: tuple[str, str] | None) -> Topic:
        """The topic checked as one node would; a TDengine topic whose database or supertable
        this broker does not know yet is checked again after reading etcd (made through another
        broker a moment ago: its leader records supertables in etcd right after answering), up
        to ``TMQ_CHECK_READS`` times."""
        reads = 0
        while True:
            try:
                return self._registry.create(name, partitions, configs, validate_only=True, owner=owner)
            except TopicError as exc:
                if configs.get(TMQ_AS) is None or exc.code != ErrorCode.INVALID_CONFIG or reads == TMQ_CHECK_READS:
                    raise
            reads += 1
            await self._membership.refresh()

    async def create_placed(self, name: str, kind: str, definition: dict[str, Any],
                            states: tuple[PartitionState, ...]) -> Topic:
        """A SQL database (``TSDB_KIND``: ``definition`` {"options": …}, one state per vnode) or
        a TDengine topic (``TMQ_KIND``: its view's definition, its database's states) put in
        etcd and made here; TopicError TOPIC_ALREADY_EXISTS when the name is taken."""
        await self._membership.refresh()
        if name in self._membership.placements or self._registry.get(name) is not None:
            raise TopicError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
        configs = {KIND: kind, DEFINITION: json.dumps(definition, sort_keys=True)}
        return await self._put(Placement(name, random.randbytes(16), configs, states))

    async def _put(self, placement: Placement) -> Topic:
        name = placement.name
        try:
            created = await self._membership.create_topic(placement)
        except Exception as exc:  # noqa: BLE001 - etcd unreachable: the controller is
            raise TopicError(ErrorCode.REQUEST_TIMED_OUT, f"cannot reach the cluster's etcd: {exc}") from None
        if not created:
            raise TopicError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
        topic = self._registry.get(name)
        if topic is None or topic.topic_id != placement.topic_id:  # apply could not make it here
            raise TopicError(ErrorCode.UNKNOWN_SERVER_ERROR, f"Topic '{name}' was created but not applied here.")
        return topic

    async def delete(self, topic: Topic) -> None:
        """DeleteTopics on a cluster: the placement goes from etcd, then the topic here (the
        other brokers drop it when they read etcd next)."""
        if topic.is_internal:
            raise TopicError(ErrorCode.INVALID_REQUEST,
                             f"Topic '{topic.name}' is an internal topic and cannot be deleted.")
        if topic.kind == TSDB:
            self._registry.delete(topic)  # refused: a database goes by DROP DATABASE
        placement = self._membership.placements.get(topic.name)
        if placement is None or placement.topic_id != topic.topic_id:
            self._registry.delete(topic)  # a topic of this node alone
            return
        await self.delete_placed(topic)

    async def delete_placed(self, topic: Topic) -> None:
        """A shared topic, SQL database or TDengine topic removed from etcd, then here (the
        other brokers drop it when they read etcd next)."""
        try:
            await self._membership.delete_topic(topic.name)
        except Exception as exc:  # noqa: BLE001 - etcd unreachable
            raise TopicError(ErrorCode.REQUEST_TIMED_OUT, f"cannot reach the cluster's etcd: {exc}") from None
        if self._registry.get(topic.name) is topic:
            self._drop(topic)

    async def add_partitions(self, topic: Topic, count: int, assignments: list[list[int]] | None,
                             validate_only: bool) -> None:
        """CreatePartitions of a shared topic: the new partitions' replicas (``assignments``, or
        placed as CreateTopics places them, with the topic's replication factor) added to its
        placement by a compare-and-swap; every broker makes them when it reads that. TopicError
        as one node's, INVALID_REPLICA_ASSIGNMENT for a bad assignment."""
        placement = self._membership.placements.get(topic.name)
        if placement is None:  # a topic of this node alone
            return await self._registry.local.add_partitions(topic, count, assignments, validate_only)
        self._registry.add_partitions(topic, count, validate_only=True)
        assert placement.topic_id == topic.topic_id
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
        """ElectLeaders on a cluster: the result of each partition asked for (``wanted`` None:
        every partition of every topic) by topic; the topics etcd does not place as one node's."""
        registry = self._registry
        shared = registry.placements
        ask = None if wanted is None else {n: ps for n, ps in wanted.items() if n in shared}
        results = await self._elect_shared(election_type, ask) if ask is None or ask else {}
        local = ({t.name: list(range(t.partitions)) for t in registry.all() if t.name not in shared}
                 if wanted is None else {n: ps for n, ps in wanted.items() if n not in results})
        results.update(await registry.local.elect_leaders(election_type, local))
        return results

    async def _elect_shared(self, election_type: int, wanted: dict[str, list[int]] | None) -> Results:
        """(see the module docstring): ``wanted`` None: every partition of every shared topic"""
        await self._membership.refresh()
        live = set(self._membership.view.brokers)
        placements = self._membership.placements
        asked = wanted if wanted is not None else {n: list(range(len(p.partitions))) for n, p in placements.items()
                                                   if KIND not in p.configs}
        how = "preferred" if election_type == 0 else "unclean"

        def decide(_p: int, state: PartitionState) -> tuple[PartitionState, ErrorCode, str | None]:
            return (*elect_asked(state, election_type, live), None)

        out: Results = {}
        for name, partitions in asked.items():
            if _together(placements.get(name)):
                out[name] = [(p, ErrorCode.POLICY_VIOLATION, _TOGETHER) for p in partitions]
                continue
            out[name] = await self._change_partitions(name, {p: None for p in partitions}, decide,
                                                      f"No such topic as {name}", "No such partition as {}-{}",
                                                      f"leader elected ({how} election)")
        return out

    async def reassign(self, wanted: dict[str, dict[int, tuple[int, ...] | None]],
                       allow_factor_change: bool) -> Results:
        """AlterPartitionReassignments on a cluster: each partition's target replicas (None:
        cancel), started or cancelled by Kafka's rules (``metadata.view.reassign``); the
        controller finishes each when its target replicas are in sync. The topics etcd does
        not place as one node's."""
        shared = self._registry.placements
        ask = {n: ps for n, ps in wanted.items() if n in shared}
        results = await self._reassign_shared(ask, allow_factor_change) if ask else {}
        results.update(await self._registry.local.reassign({n: ps for n, ps in wanted.items() if n not in results},
                                                           allow_factor_change))
        return results

    async def _reassign_shared(self, wanted: dict[str, dict[int, tuple[int, ...] | None]],
                               allow_factor_change: bool) -> Results:
        await self._membership.refresh()
        registered = set(self._membership.view.brokers)
        targets: dict[int, tuple[int, ...] | None] = {}

        def decide(p: int, state: PartitionState) -> tuple[PartitionState, ErrorCode, str | None]:
            return reassign(state, targets[p], registered, allow_factor_change)

        out: Results = {}
        for name, asked in wanted.items():
            if _together(self._membership.placements.get(name)):
                out[name] = [(p, ErrorCode.INVALID_REPLICA_ASSIGNMENT, _TOGETHER) for p in asked]
                continue
            targets.clear()
            targets.update(asked)
            out[name] = await self._change_partitions(name, dict(asked), decide,
                                                      f"Unable to find a topic named {name}.",
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


#: why a SQL database's vnodes (and a TDengine topic's, which are its database's) are not
#: elected or reassigned one by one: one broker leads all of them (metadata.view.elect)
_TOGETHER = ("a SQL database's vnodes have one leader, which the controller elects for all of them together; "
             "they are not elected or reassigned one by one")


def _together(placement: Placement | None) -> bool:
    return placement is not None and placement.configs.get(KIND) in (TSDB_KIND, TMQ_KIND)


def _placed(replicas: list[list[int]] | None, partitions: int, factor: int,
            live: list[int]) -> tuple[PartitionState, ...]:
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
