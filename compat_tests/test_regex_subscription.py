"""KIP-848 regex subscriptions (SubscriptionPattern, resolved by the group coordinator) with the
Java consumer 4.x.

Kafka resolves a new regex asynchronously (GroupMetadataManager.maybeUpdateRegularExpressions):
the heartbeat that brings it changes nothing, the resolution bumps the group epoch, and the
member's assignment with the matched topics comes on a later heartbeat. Topics created after
subscribing are found by a re-resolution (at most every 10 s, on a heartbeat once the topic
list changed). What a user sees: the consumer reads every record of the matching topics —
also of one created after it subscribed — and never of a topic the regex does not match.

The Java client learns a regex's topics only from its assignment: it looks their ids up with
a Metadata request by topic id whose names are "" (MetadataRequest.Builder.forTopicIds) and
logs "Topic Ids [...] received in target assignment were not found in metadata ... Requesting
a metadata update" meanwhile (on both brokers). tmqgate answered such a request by name (""),
so the ids were never found and the consumer never read anything. The raw test shows the
coordinator's side: the subscribing heartbeat assigns nothing from an unresolved regex.
"""

from __future__ import annotations

import base64
import subprocess
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from .group_helpers import consumer_heartbeat, create_topic, produce_values, unique_name
from .helpers import wait_until
from .java_client import program_cmd
from .kafka_ref import LIB_DIR
from .raw import RawConn, coordinator_address

PROGRAM = Path(__file__).resolve().parent / "java" / "RegexConsumer.java"


class JavaRegexConsumer:
    """RegexConsumer.java as a child process; its stdout lines collected by a thread."""

    def __init__(self, bootstrap: str, group: str, regex: str) -> None:
        self.proc = subprocess.Popen(
            program_cmd(PROGRAM, f"{LIB_DIR}/*", bootstrap, group, regex),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.lines: list[str] = []
        self.errors: list[str] = []
        self.lock = threading.Lock()
        threading.Thread(target=self._read, args=(self.proc.stdout, self.lines), daemon=True).start()
        threading.Thread(target=self._read, args=(self.proc.stderr, self.errors), daemon=True).start()

    def _read(self, stream: Any, into: list[str]) -> None:
        for line in stream:
            with self.lock:
                into.append(line.rstrip("\n"))

    def got(self) -> dict[str, set[str]]:
        """topic -> values read."""
        out: dict[str, set[str]] = {}
        with self.lock:
            for line in self.lines:
                if line.startswith("got "):
                    _, topic, _part, _offset, value = line.split(" ", 4)
                    out.setdefault(topic, set()).add(value)
        return out

    def has_read(self, topic: str, values: set[str]) -> bool:
        """Every one of `values` read from `topic` (fails at once if the consumer exited)."""
        assert self.proc.poll() is None, f"consumer exited {self.proc.returncode}: {self.errors[-20:]}"
        return values <= self.got().get(topic, set())

    def progress(self, topic: str, values: set[str]) -> str:
        return (f"{topic}: read {len(self.got().get(topic, set()))} of {len(values)}; "
                f"stdout {self.lines[-5:]}, stderr {self.errors[-10:]}")

    def stop(self) -> int:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write("stop\n")
            self.proc.stdin.close()
        except BrokenPipeError:
            pass
        try:
            return self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise


def _values(prefix: str, n: int) -> set[str]:
    return {f"{prefix}-0-{i}" for i in range(n)}


def test_java_consumer_regex_subscription(broker: Any) -> None:
    base = unique_name("rx")
    first, later, other = f"{base}-a", f"{base}-b", f"{base}x-c"  # `other` does not match
    create_topic(broker.bootstrap, first, 1)
    create_topic(broker.bootstrap, other, 1)
    produce_values(broker.bootstrap, first, {0: 20}, prefix=first)
    produce_values(broker.bootstrap, other, {0: 5}, prefix=other)
    consumer = JavaRegexConsumer(broker.bootstrap, unique_name("rx-group"), f"{base}-.*")
    try:
        wait_until(lambda: consumer.has_read(first, _values(first, 20)), 120, 0.2,
                   lambda: consumer.progress(first, _values(first, 20)))
        # A topic created after the subscription: found by a later resolution and consumed.
        create_topic(broker.bootstrap, later, 1)
        produce_values(broker.bootstrap, later, {0: 10}, prefix=later)
        wait_until(lambda: consumer.has_read(later, _values(later, 10)), 120, 0.2,
                   lambda: consumer.progress(later, _values(later, 10)))
        with consumer.lock:
            assignments = [line for line in consumer.lines if line.startswith("assigned ")]
    finally:
        code = consumer.stop()
    assert code == 0, consumer.errors[-20:]
    got = consumer.got()
    assert set(got) == {first, later}
    assert got[first] == _values(first, 20) and got[later] == _values(later, 10)
    assert assignments[-1] == f"assigned {first}-0 {later}-0", assignments


def test_new_regex_is_assigned_after_its_resolution(broker: Any) -> None:
    base = unique_name("rxraw")
    topic = f"{base}-a"
    create_topic(broker.bootstrap, topic, 2)
    group = unique_name("rxraw-group")
    # the heartbeats go to the group's coordinator (one of several brokers on --target tmqgate-workers)
    with RawConn(coordinator_address(broker.bootstrap, group)) as conn:
        # ConsumerGroupHeartbeat v1 (KIP-1082): the client makes its member id (a Kafka Uuid).
        member_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        first = consumer_heartbeat(conn, {"group_id": group, "member_id": member_id, "member_epoch": 0,
                                          "rebalance_timeout_ms": 30_000, "subscribed_topic_names": [],
                                          "subscribed_topic_regex": f"{base}-.*", "topic_partitions": []})
        assert first["error_code"] == 0, first
        # Kafka resolves the regex asynchronously: the subscribing heartbeat assigns nothing.
        assert first["assignment"] == {"topic_partitions": []}, first
        member, epoch = first["member_id"], first["member_epoch"]
        deadline = time.monotonic() + 60
        while True:
            beat = consumer_heartbeat(conn, {"group_id": group, "member_id": member, "member_epoch": epoch,
                                     "topic_partitions": []})
            assert beat["error_code"] == 0, beat
            epoch = beat["member_epoch"]
            if beat["assignment"] and beat["assignment"]["topic_partitions"]:
                break
            assert time.monotonic() < deadline, beat
            time.sleep(0.2)
        assert epoch > first["member_epoch"]
        [assigned] = beat["assignment"]["topic_partitions"]
        assert sorted(assigned["partitions"]) == [0, 1]
        consumer_heartbeat(conn, {"group_id": group, "member_id": member, "member_epoch": -1})

