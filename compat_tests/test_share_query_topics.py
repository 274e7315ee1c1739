"""Share groups over TDengine topics (tmqgate only): a query topic's rows — the database's
rows its SELECT keeps — and a database topic's rows handed out to a pool of Java
`KafkaShareConsumer`s as a work queue, each row once, a released row again.

A query topic's offsets are the WAL's versions: the rows its filter drops are offsets with no
record, which the share-partition passes without handing them out (archived as gaps), so the
members get the matching rows only and the group's lag ends at 0."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from .group_helpers import unique_name
from .helpers import wait_until
from .kafka_ref import run_tool
from .share_client import EARLIEST, ShareProcess, client_config, run_share
from .tdengine_helpers import METERS_DDL, TdBroker, make_children, make_rows, produce_lines, td_broker_fixture

pytestmark = pytest.mark.tmqgate_only

TABLES = [f"m{i}" for i in range(8)]


@pytest.fixture(scope="module")
def td(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TdBroker]:
    yield from td_broker_fixture(tmp_path_factory, "share-tdengine")


@pytest.fixture(scope="module")
def loaded(td: TdBroker) -> tuple[str, list]:  # type: ignore[type-arg]
    db = unique_name("sharedb").replace("-", "_")
    td.sql(f"CREATE DATABASE {db} VGROUPS 2")
    td.sql(METERS_DDL.format(db=db))
    rows = make_rows(TABLES, 150, seed=7)
    produce_lines(td.bootstrap, db, rows, make_children(TABLES, seed=7), lines_per_record=20)
    return db, rows


def _lags(bootstrap: str, group: str) -> dict[tuple[str, int], int]:
    """kafka-share-groups --describe --offsets: (topic, partition) -> lag."""
    done = run_tool("kafka-share-groups", "--bootstrap-server", bootstrap, "--describe", "--offsets",
                    "--group", group, check=False, timeout=90)
    assert done.returncode == 0, done.stderr
    rows = [line.split() for line in done.stdout.splitlines() if line.strip()][1:]
    return {(r[1], int(r[2])): int(r[4]) for r in rows if r[0] == group}


def _rows(values: list[str], *columns: str) -> list[tuple[object, ...]]:
    return sorted(tuple(json.loads(v)[c] for c in columns) for v in values)


def test_a_query_topic_as_a_work_queue_each_row_once(td: TdBroker, loaded: tuple[str, list], tmp_path: Path) -> None:  # type: ignore[type-arg]
    db, rows = loaded
    topic, group = unique_name("share_q").replace("-", "_"), unique_name("share-q-group")
    td.sql(f"CREATE TOPIC {topic} AS SELECT ts, voltage FROM {db}.meters WHERE voltage > 230")
    expected = sorted((r.ts, r.voltage) for r in rows if r.voltage > 230)
    assert 100 < len(expected) < len(rows) // 2
    config = client_config(tmp_path, td.bootstrap, max_poll_records="40")
    members = [ShareProcess(config, group, topic, "implicit", EARLIEST) for _ in range(2)]
    try:
        wait_until(lambda: sum(len(m.snapshot().got) for m in members), 90, 0.2, "every matching row",
                   ok=lambda n: n >= len(expected))
        time.sleep(1)  # a row delivered twice would come now
        runs = [m.stop() for m in members]
    finally:
        for m in members:
            m.kill()
    got = [g for run in runs for g in run.got]
    assert _rows([g.value for g in got], "ts", "voltage") == expected
    assert {g.delivery_count for g in got} == {1}
    # nothing left: every matching row acknowledged, every other offset passed
    assert _lags(td.bootstrap, group) == {(topic, 0): 0, (topic, 1): 0}


def test_released_rows_of_a_database_topic_come_again(td: TdBroker, loaded: tuple[str, list], tmp_path: Path) -> None:  # type: ignore[type-arg]
    db, rows = loaded
    topic, group = unique_name("share_db").replace("-", "_"), unique_name("share-db-group")
    td.sql(f"CREATE TOPIC {topic} AS DATABASE {db}")
    config = client_config(tmp_path, td.bootstrap)
    run = run_share(config, group, topic, "explicit", EARLIEST, "release-below:2", f"max:{2 * len(rows)}",
                    "idle:4000", "wait:60000", timeout=180)
    assert run.returncode == 0 and run.closed, run.describe()
    firsts = [g for g in run.got if g.delivery_count == 1]
    seconds = [g for g in run.got if g.delivery_count == 2]
    assert len(run.got) == 2 * len(rows), run.describe()
    assert _rows([g.value for g in firsts], "ts", "voltage") == sorted((r.ts, r.voltage) for r in rows)
    assert sorted((g.partition, g.offset, g.value) for g in firsts) == \
        sorted((g.partition, g.offset, g.value) for g in seconds)
