"""Untrusted strings in the broker's log (issue 25, point 6): a group id or a transactional id
carrying a newline and ANSI escapes reached the log raw, so a client could forge a whole line
("... INFO tmqgate.auth: authenticated User:admin") or recolour an operator's terminal. The
broker writes the control characters of such values escaped (`\\n`, `\\x1b`), in text and JSON
logs alike. A real `tmqgate serve`; the log is what an operator reads. tmqgate only: Kafka's
log is not its protocol."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from .brokers import TmqgateProcess
from .helpers import unique_topic, wait_until
from .raw import RawConn

pytestmark = pytest.mark.tmqgate_only

FORGED = "\n2026-01-01 00:00:00,000 INFO tmqgate.auth: authenticated User:admin\x1b[31m"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TmqgateProcess]:
    proc = TmqgateProcess(tmp_path_factory.mktemp("log-escaping"),
                          config={"transaction_abort_timed_out_transaction_cleanup_interval_ms": 200})
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()


def _join(c: RawConn, group: str, member_id: str = "") -> dict:
    return c.request(11, 5, {"group_id": group, "session_timeout_ms": 10_000, "rebalance_timeout_ms": 10_000,
                             "member_id": member_id, "group_instance_id": None, "protocol_type": "consumer",
                             "protocols": [{"name": "range", "metadata": b""}]})


def _log_since(path: Path, offset: int) -> str:
    with open(path, "rb") as fh:
        fh.seek(offset)
        return fh.read().decode(errors="replace")


def _assert_escaped(text: str, value: str) -> None:
    assert "\x1b" not in text, text[-2000:]
    assert not any(line.startswith("2026-01-01") for line in text.splitlines()), text[-2000:]
    assert value.replace("\n", "\\n").replace("\x1b", "\\x1b") in text, text[-2000:]


def test_group_id_with_a_newline_and_ansi_is_logged_escaped(broker: TmqgateProcess) -> None:
    group = unique_topic("g") + FORGED
    start = broker.log_path.stat().st_size
    with RawConn(broker.bootstrap) as c:
        first = _join(c, group)
        member = first["member_id"]
        if first["error_code"] == 79:  # MEMBER_ID_REQUIRED: join again with it
            assert _join(c, group, member)["error_code"] == 0
    text = wait_until(lambda: _log_since(broker.log_path, start), 10, 0.1, "the group's log line",
                      ok=lambda t: "(classic)" in t)
    _assert_escaped(text, group)


def test_transactional_id_with_a_newline_and_ansi_is_logged_escaped(broker: TmqgateProcess) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = unique_topic("txn-log")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, 1)])[topic].result(30)
    txn_id = unique_topic("t") + FORGED
    start = broker.log_path.stat().st_size
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": txn_id,
                         "transaction.timeout.ms": 1000})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, b"v")
    producer.flush(30)
    # not committed: the broker aborts it when it times out, and says so with its id
    text = wait_until(lambda: _log_since(broker.log_path, start), 15, 0.2, "the abort's log line",
                      ok=lambda t: "aborting transaction" in t)
    _assert_escaped(text, txn_id)
    del producer


def test_json_log_escapes_too(tmp_path: Path) -> None:
    """Under --log-format json a line is one JSON object whose message holds the id escaped."""
    import subprocess

    from .brokers import _tmqgate_cmd

    err = tmp_path / "stderr.log"
    proc = subprocess.Popen([*_tmqgate_cmd(), "serve", "--listen", "127.0.0.1:0", "--http", "127.0.0.1:0",
                             "--data-dir", str(tmp_path / "data"), "--log-format", "json"],
                            stdout=subprocess.PIPE, stderr=err.open("w"), text=True)
    try:
        assert proc.stdout is not None
        ready = json.loads(proc.stdout.readline())
        bootstrap = ready["kafka"][0].split("://")[1]
        group = unique_topic("gj") + FORGED
        with RawConn(bootstrap) as c:
            first = _join(c, group)
            if first["error_code"] == 79:
                _join(c, group, first["member_id"])
        deadline = time.monotonic() + 10
        while "(classic)" not in err.read_text() and time.monotonic() < deadline:
            time.sleep(0.1)
        lines = [json.loads(line) for line in err.read_text().splitlines()]
        messages = [m["message"] for m in lines if "(classic)" in m["message"]]
        assert messages and all("\n" not in m and "\x1b" not in m for m in messages), messages
        assert group.replace("\n", "\\n").replace("\x1b", "\\x1b") in messages[0]
    finally:
        proc.terminate()
        proc.wait(30)
