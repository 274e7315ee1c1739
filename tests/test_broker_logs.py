"""The broker's log as an operator reads it (issue 13, point 1): a real `tmqgate serve` with
`--log-format json --log-level DEBUG`, driven by kafka-python; every line is one JSON object,
and topic create/delete, group state changes with their members and assignment, a rejected
batch with its reason, a slow request and connections each have their line."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from compat_tests.helpers import require_module


@pytest.fixture(autouse=True)
def _kafka_python() -> None:
    require_module("kafka")


def _start(tmp_path: Path, *args: str) -> tuple[subprocess.Popen[str], int, Path]:
    config = tmp_path / "broker.toml"
    # slow_request_ms = 1: creating a topic of 500 partitions (500 vnodes) takes longer than that
    config.write_text("group_initial_rebalance_delay_ms = 0\nslow_request_ms = 1\n")
    err = tmp_path / "stderr.log"
    proc = subprocess.Popen([sys.executable, "-m", "tmqgate.broker.cli", "serve", "--listen", "127.0.0.1:0",
                             "--http", "127.0.0.1:0", "--data-dir", str(tmp_path / "data"), "--config", str(config),
                             *args], stdout=subprocess.PIPE, stderr=err.open("w"), text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    match = re.search(r"kafka PLAINTEXT://127\.0\.0\.1:(\d+)", line)
    assert match, (line, err.read_text())
    return proc, int(match.group(1)), err


def _stop(proc: subprocess.Popen[str]) -> None:
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 0


def test_json_log_of_a_session(tmp_path: Path) -> None:
    from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
    from kafka.admin import NewTopic
    from kafka.errors import MessageSizeTooLargeError

    proc, port, err = _start(tmp_path, "--log-format", "json", "--log-level", "DEBUG")
    try:
        bootstrap = f"127.0.0.1:{port}"
        admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="ops-admin")
        admin.create_topics([NewTopic("small", 2, 1, topic_configs={"max.message.bytes": "200"}),
                             NewTopic("wide", 500, 1)])
        producer = KafkaProducer(bootstrap_servers=bootstrap, client_id="ops-producer", retries=0)
        producer.send("small", b"fits", partition=0).get(timeout=30)
        with pytest.raises(MessageSizeTooLargeError):
            producer.send("small", b"x" * 1000, partition=1).get(timeout=30)
        producer.close()
        consumer = KafkaConsumer("small", bootstrap_servers=bootstrap, group_id="ops-group",
                                 client_id="ops-consumer", auto_offset_reset="earliest")
        consumer.topics()
        records: list[Any] = []
        while not records:
            records = [r for batch in consumer.poll(timeout_ms=1000).values() for r in batch]
        assert [r.value for r in records] == [b"fits"]
        member = consumer._coordinator._generation.member_id
        consumer.close()
        admin.delete_topics(["small"])
        admin.close()
    finally:
        _stop(proc)
    lines = [json.loads(line) for line in err.read_text().splitlines()]  # every line is JSON
    assert all({"time", "level", "logger", "message"} <= set(line) for line in lines)
    events = [line for line in lines if "event" in line]

    def one(**want: Any) -> dict[str, Any]:
        found = [e for e in events if all(e.get(k) == v for k, v in want.items())]
        assert found, (want, events)
        return found[0]

    created = one(event="topic_created", topic="small")
    assert created["partitions"] == 2 and created["level"] == "INFO" and created["logger"] == "tmqgate.storage"
    assert created["message"] == "created topic small with 2 partition(s)"
    assert one(event="topic_deleted", topic="small")["message"] == "deleted topic small"
    rebalance = one(event="group_state", group="ops-group", to_state="PreparingRebalance")
    assert rebalance["from_state"] == "Empty" and rebalance["protocol"] == "classic"
    completing = one(event="group_state", group="ops-group", to_state="CompletingRebalance")
    assert completing["members"] == [member] and completing["generation"] == 1
    assignment = one(event="group_assignment", group="ops-group")
    assert assignment["assignment"] == {member: {"small": [0, 1]}}
    one(event="group_state", group="ops-group", from_state="Stable", to_state="PreparingRebalance")
    one(event="group_state", group="ops-group", from_state="PreparingRebalance", to_state="Empty")
    rejected = [line for line in lines if line["message"].startswith("rejected a batch for small-1")]
    assert len(rejected) == 1 and rejected[0]["level"] == "INFO"
    assert rejected[0]["message"].startswith("rejected a batch for small-1 from client id 'ops-producer' "
                                             "(User:ANONYMOUS, 127.0.0.1): MESSAGE_TOO_LARGE")
    slow = [line for line in lines if line["message"].startswith("slow request: CREATE_TOPICS")]
    assert slow and slow[0]["level"] == "WARNING" and "client id 'ops-admin'" in slow[0]["message"]
    # each slow line's time is the request's own (this whole test takes seconds, not hours)
    took = [int(re.search(r" took (\d+) ms", line["message"]).group(1))  # type: ignore[union-attr]
            for line in lines if line["message"].startswith("slow request: ")]
    assert took and max(took) < 60_000, took
    assert any(line["level"] == "DEBUG" and line["message"].startswith("connection from ('127.0.0.1'")
               for line in lines)
    assert any(line["logger"] == "tmqgate.request" and line["message"].startswith("completed PRODUCE v")
               for line in lines)


def test_info_is_the_default_and_text(tmp_path: Path) -> None:
    """At the default level (INFO, text) a session's lifecycle lines are there, DEBUG ones are not."""
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic

    proc, port, err = _start(tmp_path)
    try:
        admin = KafkaAdminClient(bootstrap_servers=f"127.0.0.1:{port}")
        admin.create_topics([NewTopic("t1", 3, 1)])
        admin.close()
    finally:
        _stop(proc)
    text = err.read_text()
    assert re.search(r"^\S+ \S+ INFO tmqgate\.storage: created topic t1 with 3 partition\(s\)$", text, re.M), text
    assert "connection from" not in text and "DEBUG" not in text
