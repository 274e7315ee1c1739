"""Group writes on a full disk (issue 11): a real `tmqgate serve` keeps its data directory on a
small filesystem the test mounts (a tmpfs, unmounted after), with no reserve file, and the test
fills it.

Apache Kafka's group coordinator answers a group operation whose append to `__consumer_offsets`
fails with KAFKA_STORAGE_ERROR with NOT_COORDINATOR (CoordinatorOperationExceptionHelper
.handleOperationException, GroupMetadataManager.appendGroupMetadataErrorToResponseError), and
the failed operation leaves nothing behind in memory. So here, on the full disk:

* OffsetCommit answers NOT_COORDINATOR on every partition, and OffsetFetch afterwards shows the
  last offset that was written, never the refused one;
* JoinGroup that completes a rebalance (a generation to persist) answers NOT_COORDINATOR and
  the group is as before: a new group is not created;
* LeaveGroup answers NOT_COORDINATOR (v3+: top-level code, no member entries) and the member is
  still in the Stable group; DeleteGroups answers NOT_COORDINATOR for the group and its offsets
  stay; ConsumerGroupHeartbeat of a new member answers NOT_COORDINATOR and no group is made;
* Heartbeat and OffsetFetch, which write nothing, answer as usual.

Once the file is removed the same group commits, leaves and is deleted, and a kafka-python
consumer joins it, resumes from the committed offset and commits.

tmqgate only: the reference Kafka would need its log dirs on the small filesystem, and a
Kafka broker whose only log dir fails halts.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

from .brokers import TmqgateProcess
from .helpers import wait_until
from .raw import RawConn, one_record_batch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from diskfull import fill, small_fs  # noqa: E402

pytestmark = pytest.mark.tmqgate_only

NOT_COORDINATOR = 16
MEMBER_ID_REQUIRED = 79
CONFIG = {
    "disk_reserve_bytes": 0,  # nothing released on ENOSPC: the disk stays full until the test frees it
    "leveldb_write_buffer_bytes": 1 << 20,
    "disk_check_interval_ms": 200,
    "group_initial_rebalance_delay_ms": 0,
}
META = "m" * 3000  # each commit takes most of a page of the LevelDB log


def subscription(*topics: str) -> bytes:
    out = (0).to_bytes(2, "big") + len(topics).to_bytes(4, "big")
    for t in topics:
        out += len(t).to_bytes(2, "big") + t.encode()
    return out + (-1).to_bytes(4, "big", signed=True)


def join(conn: RawConn, group: str, member_id: str = "") -> dict[str, Any]:
    return conn.request(11, 5, {"group_id": group, "session_timeout_ms": 30_000, "rebalance_timeout_ms": 30_000,
                                "member_id": member_id, "group_instance_id": None, "protocol_type": "consumer",
                                "protocols": [{"name": "range", "metadata": subscription("t")}]})


def commit(conn: RawConn, group: str, offset: int, member_id: str = "", generation: int = -1,
           metadata: str = META) -> list[int]:
    body = conn.request(8, 8, {"group_id": group, "generation_id_or_member_epoch": generation,
                               "member_id": member_id, "group_instance_id": None,
                               "topics": [{"name": "t", "partitions": [
                                   {"partition_index": 0, "committed_offset": offset, "committed_leader_epoch": -1,
                                    "committed_metadata": metadata}]}]})
    return [p["error_code"] for t in body["topics"] for p in t["partitions"]]


def committed(conn: RawConn, group: str) -> int:
    body = conn.request(9, 7, {"group_id": group, "topics": [{"name": "t", "partition_indexes": [0]}],
                               "require_stable": False})
    assert body["error_code"] == 0, body
    return int(body["topics"][0]["partitions"][0]["committed_offset"])


def describe(conn: RawConn, group: str) -> tuple[str, list[str]]:
    g = conn.request(15, 5, {"groups": [group], "include_authorized_operations": False})["groups"][0]
    return g["group_state"], [m["member_id"] for m in g["members"]]


def leave(conn: RawConn, group: str, member_id: str) -> dict[str, Any]:
    return conn.request(13, 3, {"group_id": group, "members": [{"member_id": member_id, "group_instance_id": None}]})


def test_group_writes_on_a_full_disk(tmp_path: Path) -> None:
    with small_fs(24) as fs:
        proc = TmqgateProcess(tmp_path / "broker", config=CONFIG)
        proc.data_dir = Path(fs) / "data"
        proc.start()
        try:
            with RawConn(proc.bootstrap) as conn:
                created = conn.request(19, 7, {"topics": [{"name": "t", "num_partitions": 1, "replication_factor": 1,
                                                           "assignments": [], "configs": []}],
                                               "timeout_ms": 10_000, "validate_only": False})
                assert created["topics"][0]["error_code"] == 0
                for i in range(10):
                    assert conn.produce("t", 0, one_record_batch(f"v{i}".encode()))["error_code"] == 0
                # Group g: one member, Stable, generation 1, offset 1 committed.
                first = join(conn, "g")
                assert first["error_code"] == MEMBER_ID_REQUIRED
                member = first["member_id"]
                joined = join(conn, "g", member)
                assert (joined["error_code"], joined["generation_id"], joined["leader"]) == (0, 1, member)
                synced = conn.request(14, 3, {"group_id": "g", "generation_id": 1, "member_id": member,
                                              "group_instance_id": None,
                                              "assignments": [{"member_id": member, "assignment": b""}]})
                assert synced["error_code"] == 0
                assert commit(conn, "g", 1, member, 1) == [0]
                assert commit(conn, "simple", 4) == [0]  # a group with offsets only

                filler = fill(fs)
                # The first commits may still fit in the last page of LevelDB's log file.
                landed, refused = 1, None
                for offset in range(2, 40):
                    codes = commit(conn, "g", offset, member, 1)
                    if codes != [0]:
                        refused = (offset, codes)
                        break
                    landed = offset
                assert refused is not None, "the disk never refused a commit"
                assert refused[1] == [NOT_COORDINATOR]
                assert committed(conn, "g") == landed  # the refused commit is not visible
                # Writes nothing: answered as usual.
                hb = conn.request(12, 3, {"group_id": "g", "generation_id": 1, "member_id": member,
                                          "group_instance_id": None})
                assert hb["error_code"] == 0
                # A new group's completed join must be persisted: refused, and no group is left.
                new = join(conn, "fresh")
                assert new["error_code"] == MEMBER_ID_REQUIRED
                refused_join = join(conn, "fresh", new["member_id"])
                assert (refused_join["error_code"], refused_join["generation_id"]) == (NOT_COORDINATOR, -1)
                assert describe(conn, "fresh") == ("Empty", [])
                # Leaving empties g (a new generation to persist): refused, the member stays.
                left = leave(conn, "g", member)
                assert (left["error_code"], left["members"]) == (NOT_COORDINATOR, [])
                assert describe(conn, "g") == ("Stable", [member])
                deleted = conn.request(42, 2, {"groups_names": ["simple"]})
                assert [(r["group_id"], r["error_code"]) for r in deleted["results"]] == [("simple", NOT_COORDINATOR)]
                assert committed(conn, "simple") == 4
                cgh = conn.request(68, 0, {"group_id": "kip", "member_id": "m-1", "member_epoch": 0,
                                           "instance_id": None, "rack_id": None, "rebalance_timeout_ms": 30_000,
                                           "subscribed_topic_names": ["t"], "server_assignor": None,
                                           "topic_partitions": []})
                assert (cgh["error_code"], cgh["member_id"], cgh["assignment"]) == (NOT_COORDINATOR, None, None)
                described = conn.request(69, 0, {"group_ids": ["kip"], "include_authorized_operations": False})
                assert described["groups"][0]["error_code"] == 69  # GROUP_ID_NOT_FOUND: nothing was made

                # Room again: the same group commits, leaves, and the other is deleted.
                os.unlink(filler)

                def commits() -> bool:
                    codes = commit(conn, "g", 7, member, 1)
                    assert codes in ([0], [NOT_COORDINATOR])
                    return codes == [0]

                wait_until(commits, 15, 0.2, "commits to land once the disk has room")
                assert committed(conn, "g") == 7
                left = leave(conn, "g", member)
                assert (left["error_code"], [m["error_code"] for m in left["members"]]) == (0, [0])
                assert describe(conn, "g") == ("Empty", [])
                deleted = conn.request(42, 2, {"groups_names": ["simple"]})
                assert [r["error_code"] for r in deleted["results"]] == [0]
                assert committed(conn, "simple") == -1

            # A real client resumes the group from its committed offset and commits.
            from kafka import KafkaConsumer

            consumer = KafkaConsumer("t", bootstrap_servers=proc.bootstrap, group_id="g",
                                     enable_auto_commit=False, auto_offset_reset="earliest",
                                     consumer_timeout_ms=15_000)
            try:
                values = []
                for record in consumer:
                    values.append(record.value)
                    if len(values) == 3:
                        break
                assert values == [b"v7", b"v8", b"v9"]
                consumer.commit()
            finally:
                consumer.close()
            with RawConn(proc.bootstrap) as conn:
                assert committed(conn, "g") == 10
        finally:
            proc.stop()
