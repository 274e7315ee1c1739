"""Share-partition states on a cluster (issue 30): the partition leader's persister.

As Kafka's share-partition leaders keep each share-partition's state with its share
coordinator (WriteShareGroupState / ReadShareGroupState to the leader of its
``__share_group_state`` partition), a tmqgate partition leader keeps it with the share
group's coordinator: the leader of the group's partition of the replicated group-state
topic, where the state is a group state key (storage/share_state.py) replicated as the
group's offsets are (coordinator_state.py), and taken over with them when that broker dies.

- Coordinated here: the store's persister, each write waited on until the state partition's
  in-sync replicas have it (``StorePersister`` with ``replicated``).
- Elsewhere: ReadShareGroupState (API 84) and WriteShareGroupState (API 85) to the
  coordinator, whose handlers (broker/handlers/share.py) use its store's persister. No
  coordinator now, or none answering: COORDINATOR_NOT_AVAILABLE, and the share-partition
  is not used until one answers (the leader answers the partition with that error).
- A write at an older state epoch than the coordinator keeps is FENCED_STATE_EPOCH: an
  AlterShareGroupOffsets or DeleteShareGroupOffsets at the coordinator changed it, and the
  leader reads it again (broker/runtime/shares.py).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from tmqgate.broker.cluster.peer import PeerError
from tmqgate.protocol.errors import ErrorCode, peer_error
from tmqgate.storage.share_state import Stored

if TYPE_CHECKING:
    from tmqgate.broker.cluster.transactions import Peers
    from tmqgate.broker.runtime.coordination import CoordinatorPlacement
    from tmqgate.broker.runtime.shares import PartitionKey, StorePersister
    from tmqgate.broker.topics import Topic, TopicRegistry
    from tmqgate.storage import Store

log = logging.getLogger("tmqgate.share_state")

LIST_OFFSETS, READ_SHARE_GROUP_STATE, WRITE_SHARE_GROUP_STATE = 2, 84, 85
LATEST = -1  # ListOffsets' timestamp for the high watermark
REQUEST_TIMEOUT_S = 10.0  # a ShareFetch waits on it
ENDS_TIMEOUT_S = 5.0


class ClusterSharePersister:
    """See the module docstring."""

    def __init__(self, node_id: int, group_state: CoordinatorPlacement, peers: Peers, here: StorePersister) -> None:
        self.node_id = node_id
        self._group_state = group_state
        self._peers = peers
        self._here = here

    @property
    def here(self) -> StorePersister:
        return self._here

    async def _ask(self, group: str, api_key: int, body: dict[str, Any]) -> tuple[ErrorCode, dict[str, Any] | None]:
        """The coordinator's answer's one partition, or why there is none."""
        node = self._group_state.coordinator_of(group)
        conn = self._peers.get(node) if node >= 0 else None
        if conn is None:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, None
        try:
            answer = await conn.request(api_key, 0, body, REQUEST_TIMEOUT_S)
        except PeerError as exc:
            log.debug("share state: coordinator %d did not answer: %s", node, exc)
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, None
        try:
            [partition] = [p for t in answer["results"] for p in t["partitions"]]
        except (KeyError, ValueError):
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, None
        return peer_error(partition["error_code"]), partition

    async def read(self, key: PartitionKey) -> tuple[ErrorCode, Stored | None]:
        group, topic_id, index = key
        if self._group_state.coordinator_of(group) == self.node_id:
            return await self._here.read(key)
        code, partition = await self._ask(group, READ_SHARE_GROUP_STATE, {"group_id": group, "topics": [{
            "topic_id": topic_id, "partitions": [{"partition": index, "leader_epoch": -1}]}]})
        if code is not ErrorCode.NONE or partition is None:
            return code, None
        if partition["start_offset"] < 0 and not partition["state_batches"] and partition["state_epoch"] <= 0:
            return ErrorCode.NONE, None  # none kept
        return ErrorCode.NONE, Stored(partition["start_offset"], [
            (b["first_offset"], b["last_offset"], b["delivery_state"], b["delivery_count"])
            for b in partition["state_batches"]], max(0, partition["state_epoch"]))

    async def write(self, key: PartitionKey, state: Stored, fence: bool = True) -> ErrorCode:
        group, topic_id, index = key
        if self._group_state.coordinator_of(group) == self.node_id:
            return await self._here.write(key, state, fence)
        code, _ = await self._ask(group, WRITE_SHARE_GROUP_STATE, {"group_id": group, "topics": [{
            "topic_id": topic_id, "partitions": [{
                "partition": index, "state_epoch": state.epoch, "leader_epoch": -1, "start_offset": state.start,
                "state_batches": [{"first_offset": f, "last_offset": last, "delivery_state": st, "delivery_count": n}
                                  for f, last, st, n in state.batches]}]}]})
        return code


class ClusterEnds:
    """A partition's high watermark from its leader (ListOffsets, latest), or here when this
    broker leads it."""

    def __init__(self, node_id: int, store: Store, topics: TopicRegistry, peers: Peers) -> None:
        self.node_id = node_id
        self._store = store
        self._topics = topics
        self._peers = peers

    async def end(self, topic: Topic, index: int) -> int | None:
        state = self._topics.partition_state(topic, index)
        if state is None or state.leader == self.node_id:
            return topic.high_watermark(self._store, index)
        conn = self._peers.get(state.leader) if state.leader >= 0 else None
        if conn is None:
            return None
        try:
            answer = await conn.request(LIST_OFFSETS, 7, {"replica_id": -1, "isolation_level": 0, "topics": [
                {"name": topic.name, "partitions": [{"partition_index": index, "current_leader_epoch": -1,
                                                     "timestamp": LATEST}]}]}, ENDS_TIMEOUT_S)
            [partition] = [p for t in answer["topics"] for p in t["partitions"]]
        except (PeerError, KeyError, ValueError) as exc:
            log.debug("share state: no end offset of %s-%d from %d: %s", topic.name, index, state.leader, exc)
            return None
        return int(partition["offset"]) if partition["error_code"] == 0 else None
