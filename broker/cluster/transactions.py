"""Transactions whose coordinator, partitions and groups are on different brokers (issue 16, step 4b).

A transactional id's coordinator leads its partition of the transaction-state topic, a group's
its partition of the group-state topic (``broker.cluster.coordinator_state``), a partition's
leader is wherever the controller put it. As Kafka's brokers talk to each other for a
transaction, with Kafka's own requests over a broker-to-broker connection
(``broker.cluster.peer``):

- **Produce** of a transactional batch to a partition led here while the coordinator is
  another broker: the leader asks the coordinator with AddPartitionsToTxn v4+ (KIP-890's
  verification: ``verify_only`` for transaction version 1; an implicit add for a Produce v12+,
  version 2) before it appends, and remembers a verified (producer id, epoch, partition) until
  a marker for the producer is written here. Errors as Kafka's ``AddPartitionsToTxnManager``
  turns them: a fenced producer INVALID_PRODUCER_EPOCH, a partition not in the transaction
  INVALID_TXN_STATE, the coordinator unreachable or moving NOT_ENOUGH_REPLICAS (retriable).
- **TxnOffsetCommit** at a group coordinator that is not the transaction coordinator: version
  1 is not verified (Kafka's group coordinator checks only the producer); a v5 (version 2)
  adds the group with AddOffsetsToTxn at the coordinator first.
- **Markers**: the coordinator writes a marker to each partition it leads itself, and sends
  WriteTxnMarkers to the leader of each other one, and for each group a marker of the group's
  ``__consumer_offsets`` partition to the group's coordinator, which ends the group's pending
  offsets of the producer (Kafka's ``TransactionMarkerChannelManager``). A send is answered
  per partition; the coordinator's machine retries what is not written yet, at once when an
  answer comes (``TxnCoordinatorRuntime.markers_answered``) and otherwise on its retry timer.
- A broker receiving WriteTxnMarkers writes only the partitions it leads
  (NOT_LEADER_OR_FOLLOWER otherwise, and the sender sends again to the new leader), stamping
  its leader epoch in the marker of a replicated partition, whose high watermark then moves as
  for any append.

A coordinator that dies leaves its transactions to the new leader of their partition, which
loads their state and completes the prepared ones (markers sent again: writing one twice ends
nothing twice, the transaction is already closed there).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from tmqgate.broker.cluster.peer import PeerConnection, PeerError
from tmqgate.protocol.errors import ErrorCode, peer_error
from tmqgate.protocol.internal_topics import GROUP_METADATA_TOPIC
from tmqgate.protocol.records import parse_header
from tmqgate.storage.model import StorageIOError

if TYPE_CHECKING:
    from tmqgate.broker.cluster.coordinator_state import CoordinatorState
    from tmqgate.broker.cluster.membership import Membership
    from tmqgate.broker.runtime.txn_coordinator import TxnCoordinatorRuntime
    from tmqgate.broker.runtime.txn_markers import MarkerWriter
    from tmqgate.broker.topics import Topic, TopicRegistry
    from tmqgate.coordinator.runtime import CoordinatorRuntime

log = logging.getLogger("tmqgate.cluster_txns")

ADD_PARTITIONS_TO_TXN, ADD_OFFSETS_TO_TXN, WRITE_TXN_MARKERS = 24, 25, 27
REQUEST_TIMEOUT_S = 10.0
Partition = tuple[str, int]
Verified = tuple[int, int, str, int]  # producer id, epoch, topic, partition
_VERIFY_ERRORS = {ErrorCode.PRODUCER_FENCED: ErrorCode.INVALID_PRODUCER_EPOCH,
                  ErrorCode.TRANSACTION_ABORTABLE: ErrorCode.INVALID_TXN_STATE,
                  ErrorCode.CONCURRENT_TRANSACTIONS: ErrorCode.NOT_ENOUGH_REPLICAS,
                  ErrorCode.NOT_COORDINATOR: ErrorCode.NOT_ENOUGH_REPLICAS,
                  ErrorCode.COORDINATOR_NOT_AVAILABLE: ErrorCode.NOT_ENOUGH_REPLICAS,
                  ErrorCode.COORDINATOR_LOAD_IN_PROGRESS: ErrorCode.NOT_ENOUGH_REPLICAS}


class Peers:
    """Connections to the other brokers (their first listener, as ``Membership.peer_security``
    dials it), one each, made again when a broker's address changes."""

    def __init__(self, membership: Membership, client_id: str) -> None:
        self._membership = membership
        self._client_id = client_id
        self._conns: dict[int, PeerConnection] = {}

    def get(self, node_id: int) -> PeerConnection | None:
        info = self._membership.view.brokers.get(node_id)
        if info is None:
            return None
        conn = self._conns.get(node_id)
        if conn is None or (conn.host, conn.port) != (info.host, info.port):
            if conn is not None:
                conn.close()
            conn = self._conns[node_id] = PeerConnection(info.host, info.port, self._client_id,
                                                         self._membership.peer_security)
        return conn

    def close(self) -> None:
        for conn in self._conns.values():
            conn.close()


class ClusterMarkers:
    """The transaction coordinator's ``MarkerWriter`` and ``TxnGroups`` on a cluster (see the
    module docstring): markers of the partitions led here written by ``local_markers``, the
    others' sent to their leaders; a group's end done here if it is coordinated here, else sent
    to its coordinator. ``on_answered``: told when another broker answered markers (the
    transaction coordinator retries what is unfinished at once)."""

    def __init__(self, node_id: int, topics: TopicRegistry, group_state: CoordinatorState,
                 local_markers: MarkerWriter, groups: CoordinatorRuntime, peers: Peers) -> None:
        self.node_id = node_id
        self._topics = topics
        self._group_state = group_state
        self._local = local_markers
        self._groups = groups
        self._peers = peers
        self._answers: dict[tuple[int, int, bool, str, int], ErrorCode] = {}  # sent markers' answers
        self._sending: dict[tuple[int, int, bool, int], asyncio.Task[None]] = {}
        self.on_answered: list[Callable[[], None]] = []

    # ---- markers (MarkerWriter) and groups (TxnGroups) of the coordinator -------------------

    def write(self, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int,
              partitions: Iterable[Partition]) -> Mapping[Partition, ErrorCode]:
        out: dict[Partition, ErrorCode] = {}
        local: list[Partition] = []
        remote: dict[int, list[Partition]] = {}
        for name, partition in partitions:
            topic = self._topics.get(name)
            state = None if topic is None else self._topics.partition_state(topic, partition)
            if state is None or state.leader == self.node_id:
                local.append((name, partition))
            else:
                remote.setdefault(state.leader, []).append((name, partition))
        out.update(self._local.write(producer_id, producer_epoch, commit, coordinator_epoch, local))
        for leader, parts in remote.items():
            out.update(self._sent(producer_id, producer_epoch, commit, coordinator_epoch, leader, parts))
        return out

    def complete_transaction(self, group_id: str, producer_id: int, producer_epoch: int, commit: bool) -> None:
        """The group's end of the transaction, done here or sent to its coordinator. With no
        group-state topic yet no group has offsets to end: done (Kafka skips a marker whose
        partition does not exist; one whose leader is not known now is retried)."""
        if not self._group_state.placed():
            return
        coordinator = self._group_state.coordinator_of(group_id)
        if coordinator == self.node_id:
            self._groups.complete_transaction(group_id, producer_id, producer_epoch, commit)
            return
        partition = (GROUP_METADATA_TOPIC, self._group_state.partition_of(group_id))
        code = ErrorCode.COORDINATOR_NOT_AVAILABLE
        if coordinator >= 0:
            code = self._sent(producer_id, producer_epoch, commit, 0, coordinator, [partition])[partition]
        if code is not ErrorCode.NONE:
            raise StorageIOError(f"group {group_id}'s coordinator has not taken the marker yet ({code.name})")

    def _sent(self, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int, leader: int,
              parts: list[Partition]) -> dict[Partition, ErrorCode]:
        """Each partition's answer from its leader if one came (taken), else NOT_LEADER_OR_FOLLOWER
        with a send under way (started here if none is)."""
        out: dict[Partition, ErrorCode] = {}
        unsent: list[Partition] = []
        for p in parts:
            answer = self._answers.pop((producer_id, producer_epoch, commit, *p), None)
            if answer in (ErrorCode.NONE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION):
                out[p] = answer
            else:
                out[p] = ErrorCode.NOT_LEADER_OR_FOLLOWER
                unsent.append(p)
        key = (producer_id, producer_epoch, commit, leader)
        task = self._sending.get(key)
        if unsent and (task is None or task.done()):
            self._sending[key] = asyncio.get_running_loop().create_task(
                self._send(producer_id, producer_epoch, commit, coordinator_epoch, leader, unsent))
        return out

    async def _send(self, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int, leader: int,
                    parts: list[Partition]) -> None:
        by_topic: dict[str, list[int]] = {}
        for name, partition in parts:
            by_topic.setdefault(name, []).append(partition)
        body = {"markers": [{"producer_id": producer_id, "producer_epoch": producer_epoch,
                             "transaction_result": commit, "coordinator_epoch": coordinator_epoch,
                             "topics": [{"name": n, "partition_indexes": ps} for n, ps in by_topic.items()]}]}
        conn = self._peers.get(leader)
        try:
            if conn is None:
                return
            answer = await conn.request(WRITE_TXN_MARKERS, 1, body, REQUEST_TIMEOUT_S)
            for marker in answer["markers"]:
                for t in marker["topics"]:
                    for p in t["partitions"]:
                        self._answers[(producer_id, producer_epoch, commit, t["name"], p["partition_index"])] = \
                            peer_error(p["error_code"])
        except PeerError as exc:
            log.debug("transactions: markers to broker %d: %s", leader, exc)
        finally:
            self._sending.pop((producer_id, producer_epoch, commit, leader), None)
            for answered in self.on_answered:
                answered()

    # ---- markers received (WriteTxnMarkers) ------------------------------------------------

    async def end_group_offsets(self, producer_id: int, producer_epoch: int, commit: bool,
                                partition: int) -> ErrorCode:
        """A marker of ``__consumer_offsets``' ``partition``: the groups of that partition end
        the producer's pending offsets here, answered once the group-state partition's in-sync
        replicas have it (NOT_COORDINATOR if this broker does not coordinate them; a refused
        write is retried by the sender)."""
        machine = self._groups.machine
        if machine.owned is not None and partition not in machine.owned:
            return ErrorCode.NOT_COORDINATOR
        ended = machine.offsets.pending_groups(producer_id, partition)
        try:
            for group_id in ended:
                self._groups.complete_transaction(group_id, producer_id, producer_epoch, commit)
        except StorageIOError:
            return ErrorCode.NOT_COORDINATOR
        for group_id in ended[-1:]:  # one partition: waiting for the last change waits for all
            error = await self._group_state.replicated(group_id)
            if error is not None:
                return error
        return ErrorCode.NONE

    def stop(self) -> None:
        for task in self._sending.values():
            task.cancel()


class ClusterTransactions:
    """See the module docstring. Produce's ``TxnGate``, the TxnOffsetCommit gate and the
    handlers' ``TxnRouting`` (broker/runtime/coordination.py) on a cluster: what this broker
    coordinates is asked of ``txns``, the rest of the id's coordinator."""

    over_brokers = True

    def __init__(self, node_id: int, txn_state: CoordinatorState, txns: TxnCoordinatorRuntime,
                 markers: ClusterMarkers, peers: Peers) -> None:
        self.node_id = node_id
        self._txn_state = txn_state
        self._txns = txns
        self._markers = markers
        self._peers = peers
        self._verified: set[Verified] = set()
        self._refused: dict[Verified, ErrorCode] = {}

    def _coordinates(self, transactional_id: str | None) -> bool:
        """This broker coordinates the id (an id-less batch is judged here, as on one node)."""
        return not transactional_id or self._txn_state.coordinator_of(transactional_id) == self.node_id

    async def _ask_coordinator(self, transactional_id: str, api_key: int, version: int,
                               body: dict[str, Any]) -> dict[str, Any] | None:
        conn = self._peers.get(self._txn_state.coordinator_of(transactional_id))
        if conn is None:
            return None
        try:
            return await conn.request(api_key, version, body, REQUEST_TIMEOUT_S)
        except PeerError as exc:
            log.debug("transactions: the coordinator did not answer: %s", exc)
            return None

    # ---- Produce (TxnGate) and TxnOffsetCommit ----------------------------------------------

    async def verify_batch(self, transactional_id: str | None, topic: Topic, index: int, records: bytes | None,
                           add: bool) -> None:
        """A transactional batch is verified with its coordinator on another broker before
        Produce's ``append_records`` asks (``check_produce``); an unreadable batch is left to
        the validation."""
        if not records or len(records) < 61:
            return
        try:
            header = parse_header(records)
        except Exception:  # noqa: BLE001 - refused by the validation, with Kafka's answer
            return
        if header.is_transactional and header.producer_id >= 0 and not header.is_control:
            await self.verify(transactional_id, header.producer_id, header.producer_epoch, topic.name, index, add)

    async def verify(self, transactional_id: str | None, producer_id: int, producer_epoch: int,
                     topic: str, partition: int, add: bool) -> None:
        """Before a transactional batch is appended here: ask the coordinator (elsewhere) once."""
        key = (producer_id, producer_epoch, topic, partition)
        if not transactional_id or self._coordinates(transactional_id) or key in self._verified:
            return
        asked = {"transactions": [{
            "transactional_id": transactional_id, "producer_id": producer_id, "producer_epoch": producer_epoch,
            "verify_only": not add, "topics": [{"name": topic, "partitions": [partition]}]}]}
        answer = await self._ask_coordinator(transactional_id, ADD_PARTITIONS_TO_TXN, 5 if add else 4, asked)
        code = ErrorCode.COORDINATOR_NOT_AVAILABLE
        if answer is not None:
            code = peer_error(answer.get("error_code", 0))
            for txn in answer.get("results_by_transaction") or []:
                for t in txn["topic_results"]:
                    for p in t["results_by_partition"]:
                        code = peer_error(p["partition_error_code"])
        if code is ErrorCode.NONE:
            self._verified.add(key)
            self._refused.pop(key, None)
        else:
            self._refused[key] = _VERIFY_ERRORS.get(code, code)

    def check_produce(self, transactional_id: str | None, producer_id: int, producer_epoch: int,
                      topic: str, partition: int, add: bool = False) -> ErrorCode:
        if self._coordinates(transactional_id):
            return self._txns.check_produce(transactional_id, producer_id, producer_epoch, topic, partition, add)
        key = (producer_id, producer_epoch, topic, partition)
        if key in self._verified:
            return ErrorCode.NONE
        return self._refused.pop(key, ErrorCode.NOT_ENOUGH_REPLICAS)

    async def add_group(self, transactional_id: str, producer_id: int, producer_epoch: int, group_id: str) -> None:
        """A TxnOffsetCommit v5 (transaction version 2) here, the coordinator elsewhere: the
        group joins the transaction there first (AddOffsetsToTxn)."""
        if self._coordinates(transactional_id):
            return
        await self._ask_coordinator(transactional_id, ADD_OFFSETS_TO_TXN, 4, {
            "transactional_id": transactional_id, "producer_id": producer_id, "producer_epoch": producer_epoch,
            "group_id": group_id})

    def check_txn_offset_commit(self, transactional_id: str, producer_id: int, producer_epoch: int,
                                group_id: str, add: bool = False) -> ErrorCode:
        if self._coordinates(transactional_id):
            return self._txns.check_txn_offset_commit(transactional_id, producer_id, producer_epoch, group_id, add)
        return ErrorCode.NONE  # added at the coordinator (v5) or not verified (v1), as Kafka

    def marker_written(self, topic: Topic, partition: int, producer_id: int) -> None:
        """A marker of the producer written here (MarkerWriter.on_written): its partitions are
        verified again for its next transaction."""
        self._verified = {v for v in self._verified if v[0] != producer_id}

    async def end_group_offsets(self, producer_id: int, producer_epoch: int, commit: bool,
                                partition: int) -> ErrorCode:
        """WriteTxnMarkers' marker of ``__consumer_offsets``' ``partition`` (ClusterMarkers)."""
        return await self._markers.end_group_offsets(producer_id, producer_epoch, commit, partition)

    def stop(self) -> None:
        self._markers.stop()
        self._peers.close()
