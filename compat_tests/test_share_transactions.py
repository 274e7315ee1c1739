"""Share groups over transactional records (the Java `KafkaShareConsumer`, compat_tests/
share_client.py): with `share.isolation.level=read_committed` a group gets the committed
records only — an aborted transaction's are archived, never delivered — and with the default
(read_uncommitted) every record; the transaction markers are never records."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .group_helpers import create_topic, unique_name
from .share_client import EARLIEST, client_config, run_share


def _transactions(bootstrap: str, topic: str) -> tuple[list[str], list[str]]:
    """Three transactions of five records each on partition 0 — committed, aborted, committed —
    and two records outside any; (committed values in order, aborted values)."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": unique_name("share-txn"),
                         "client.id": "compat-share-txn"})
    producer.init_transactions(60)
    committed, aborted = [], []
    for n, commit in enumerate((True, False, True)):
        producer.begin_transaction()
        values = [f"t{n}-{i}" for i in range(5)]
        for v in values:
            producer.produce(topic, value=v.encode(), partition=0)
        if commit:
            producer.commit_transaction(60)
            committed += values
        else:
            producer.flush(60)
            producer.abort_transaction(60)
            aborted += values
    plain = Producer({"bootstrap.servers": bootstrap, "client.id": "compat-share-plain"})
    for v in ("after-0", "after-1"):
        plain.produce(topic, value=v.encode(), partition=0)
    assert plain.flush(60) == 0
    return committed + ["after-0", "after-1"], aborted


def test_read_committed_share_group_gets_committed_records_only(broker: Any, tmp_path: Path) -> None:
    topic = unique_name("share-txn-topic")
    create_topic(broker.bootstrap, topic, 1)
    committed, aborted = _transactions(broker.bootstrap, topic)
    config = client_config(tmp_path, broker.bootstrap)
    both = run_share(config, unique_name("share-txn-rc"), topic, "explicit", EARLIEST,
                     "group:share.isolation.level=read_committed", "idle:3000", "wait:60000")
    assert both.returncode == 0 and both.closed, both.describe()
    assert both.values() == committed, both.describe()
    assert {g.delivery_count for g in both.got} == {1}
    every = run_share(config, unique_name("share-txn-ru"), topic, "explicit", EARLIEST, "idle:3000", "wait:60000")
    assert every.returncode == 0 and every.closed, every.describe()
    assert sorted(every.values()) == sorted(committed + aborted), every.describe()
